//! Credentials as requests carry them: the session cookie (in chunks), `Authorization:
//! Bearer` and the `token` metadata; and the tokens themselves (HS256 JWTs).

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::auth::authenticator::{Channel, find_token};
use crate::auth::cookie::{self, CookieScope, MAX_CHUNKS};
use crate::auth::jwt::{self, Claims, JwtError};
use crate::principal::{Carrier, ClientScheme};

/// Lines of the input are request headers (`name: value`).
///
/// - However many `argocd.token*` cookies are sent, at most [`MAX_CHUNKS`] are counted.
/// - A token read from the headers is not empty (an empty cookie is no cookie), and gRPC
///   never reads it from the cookie.
/// - A token that `Set-Cookie` stores (in as many chunks as it needs) is read back whole
///   from the `Cookie` header a browser would send.
pub fn cookie(data: &[u8]) {
    let mut headers = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(line[..colon].trim_ascii()),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let sent = cookie::read(&headers);
    assert!(sent.chunks <= MAX_CHUNKS, "{} chunks counted", sent.chunks);
    for channel in [Channel::Grpc, Channel::Http] {
        if let Ok((Some((carrier, Ok(token))), chunks)) = find_token(&headers, channel) {
            assert!(!token.is_empty(), "an empty token from {carrier:?}");
            assert_eq!(chunks, sent.chunks);
            assert!(
                channel == Channel::Http || carrier != Carrier::Cookie,
                "gRPC read the cookie"
            );
        }
    }
    if let Some(Ok(token)) = sent.token
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        round_trip(&token, sent.chunks);
    }
}

/// `token` stored with `Set-Cookie` (replacing `previous` chunks), then sent back.
fn round_trip(token: &str, previous: usize) {
    let scope = CookieScope::new("/", ClientScheme::Https);
    let lines = match scope.set(token, previous) {
        Ok(lines) => lines,
        Err(err) => {
            assert!(
                token.len() > 4000 * 15,
                "a {} byte token refused: {err}",
                token.len()
            );
            return;
        }
    };
    // What the browser sends: each cookie's `name=value`, those with a value (the others
    // are deleted by `Max-Age=0`).
    let pairs: Vec<&str> = lines
        .iter()
        .filter_map(|line| line.split(';').next())
        .filter(|pair| !pair.ends_with('='))
        .collect();
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&pairs.join("; "))
        .unwrap_or_else(|e| panic!("Set-Cookie values make no Cookie header: {e}"));
    headers.insert(http::header::COOKIE, value);
    let back = cookie::read(&headers);
    assert_eq!(
        back.token,
        Some(Ok(token.to_owned())),
        "the token changed in the cookie"
    );
}

/// The key tokens are checked against.
const KEY: &[u8] = b"fuzzing-server-secret-key";
/// The time tokens are judged at: fixed, so that a run is repeatable.
const NOW: i64 = 1_800_000_000;

/// The input is a token (or, when it is a JSON object, a token's claims).
///
/// - Reading a token never panics; one that verifies, signed again, verifies to the same
///   claims.
/// - Claims that serialise sign to a token that verifies to the same claims, unless they
///   say it is expired, not valid yet or from another issuer (or hold a negative time), and
///   then it says so.
pub fn token(data: &[u8]) {
    let Some(text) = super::text(data) else { return };
    let _ = crate::oidc::verify::named_algorithm(text);
    if let Ok(unverified) = jwt::decode(text) {
        let alg = unverified.algorithm().to_owned();
        let _ = unverified.claimed_issuer();
        match unverified.verify_hs256(KEY, NOW) {
            Ok(claims) => {
                assert_eq!(alg, "HS256");
                assert_eq!(
                    sign_and_verify(&claims),
                    Ok(claims.clone()),
                    "re-signed {claims:?}"
                );
            }
            Err(JwtError::Algorithm(named)) => assert_ne!(named, "HS256"),
            Err(_) => {}
        }
    }
    if let Ok(claims) = serde_json::from_str::<Claims>(text) {
        match sign_and_verify(&claims) {
            Ok(back) => assert_eq!(back, claims, "claims changed in a token"),
            Err(JwtError::Issuer) => assert_ne!(claims.iss, jwt::ISSUER),
            Err(JwtError::Expired) => assert!(claims.exp.is_some()),
            Err(JwtError::NotYetValid) => assert_ne!(claims.nbf, 0),
            Err(JwtError::TooLarge) => assert!(text.len() > jwt::MAX_TOKEN_BYTES / 2),
            // `jsonwebtoken` reads `exp` and `nbf` as unsigned: a negative one is a claim it
            // cannot check, which is refused as such.
            Err(JwtError::BadClaims) => assert!(
                claims.exp.is_some_and(|e| e < 0) || claims.nbf < 0,
                "claims {claims:?} refused as invalid"
            ),
            Err(other) => panic!("claims {claims:?} signed to a token refused as {other}"),
        }
    }
}

fn sign_and_verify(claims: &Claims) -> Result<Claims, JwtError> {
    let token = jwt::sign(claims, KEY);
    jwt::decode(&token)?.verify_hs256(KEY, NOW)
}
