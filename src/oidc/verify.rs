//! Verification of an identity provider's ID tokens (JWS compact form)
//! against its JSON Web Key Set.
//!
//! Nothing in a token is trusted before its signature is checked, and the
//! algorithm comes from an allowlist of asymmetric ones: never `none`, never
//! an HMAC (whose "key" could be the provider's public key).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Longest ID token accepted (bytes); anything longer is refused unparsed.
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// Clock skew tolerated on `exp`, `nbf` and `iat` (seconds).
pub const LEEWAY_SECONDS: i64 = 30;

pub type Claims = Map<String, Value>;

/// Longest part of a token's own value (issuer, algorithm, key id, audience)
/// echoed in an error, in characters.
pub const MAX_ECHO_CHARS: usize = 100;

/// `value` cut to [`MAX_ECHO_CHARS`] (marked with `…` when cut), for echoing
/// an unverified token's value back without letting it flood the message.
pub fn clip(value: &str) -> String {
    match value.char_indices().nth(MAX_ECHO_CHARS) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}

/// Why a token was refused. The text goes to the caller: it names the
/// mismatch, never a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("token is not a JWT (expected three base64url parts)")]
    Malformed,
    #[error("token is too large")]
    TooLarge,
    #[error(
        "token algorithm {0:?} is not accepted (RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA)"
    )]
    Algorithm(String),
    #[error("token header has critical extensions, which are not supported")]
    Critical,
    #[error("no signing key of the provider matches the token (kid {0:?})")]
    UnknownKey(String),
    #[error("token signature is invalid")]
    Signature,
    #[error("token claims are not a JSON object")]
    BadClaims,
    #[error("token issuer {got:?} is not the configured issuer {want:?}")]
    Issuer { want: String, got: String },
    #[error("token aud={got:?}; accepted={accepted:?}")]
    Audience { got: Vec<String>, accepted: Vec<String> },
    #[error("token has no audience (set skipAudienceCheckWhenTokenHasNoAudience to accept such tokens)")]
    NoAudience,
    #[error("token has no expiry")]
    NoExpiry,
    #[error("token is expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token nonce does not match the login")]
    Nonce,
    #[error("token has no subject (sub claim)")]
    NoSubject,
    #[error(
        "token has several audiences but its authorized party (azp) {got:?} is not one of accepted={accepted:?}"
    )]
    AuthorizedParty {
        got: Option<String>,
        accepted: Vec<String>,
    },
}

/// What a token must satisfy besides its signature.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    pub issuer: &'a str,
    pub audiences: &'a [String],
    pub skip_audience_when_absent: bool,
    /// The nonce of the login that asked for this token (web and CLI logins).
    pub nonce: Option<&'a str>,
    /// Unix seconds.
    pub now: i64,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    crit: Option<Value>,
}

/// One key of a JWKS; unknown members are ignored.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Jwk {
    pub kty: String,
    #[serde(default)]
    pub kid: Option<String>,
    #[serde(default)]
    pub alg: Option<String>,
    #[serde(default, rename = "use")]
    pub use_: Option<String>,
    #[serde(default)]
    pub n: Option<String>,
    #[serde(default)]
    pub e: Option<String>,
    #[serde(default)]
    pub crv: Option<String>,
    #[serde(default)]
    pub x: Option<String>,
    #[serde(default)]
    pub y: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct Jwks {
    #[serde(default)]
    pub keys: Vec<Jwk>,
}

/// A token split and its header read, signature not yet checked.
pub struct Parsed<'a> {
    signing_input: &'a str,
    alg: String,
    kid: Option<String>,
    payload: Vec<u8>,
    signature: Vec<u8>,
}

/// Splits a token and checks the header: the algorithm must be allowed.
pub fn parse(token: &str) -> Result<Parsed<'_>, VerifyError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(VerifyError::TooLarge);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(VerifyError::Malformed);
    };
    let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|_| VerifyError::Malformed);
    let header: Header = serde_json::from_slice(&decode(h)?).map_err(|_| VerifyError::Malformed)?;
    if header.crit.is_some() {
        return Err(VerifyError::Critical);
    }
    if scheme(&header.alg).is_none() {
        return Err(VerifyError::Algorithm(clip(&header.alg)));
    }
    let signature = decode(s)?;
    if signature.is_empty() {
        return Err(VerifyError::Signature);
    }
    Ok(Parsed {
        signing_input: &token[..h.len() + 1 + p.len()],
        alg: header.alg,
        kid: header.kid,
        payload: decode(p)?,
        signature,
    })
}

impl Parsed<'_> {
    /// The issuer the token claims (unverified): only to refuse a foreign
    /// token before any network call.
    pub fn claimed_issuer(&self) -> Option<String> {
        serde_json::from_slice::<Claims>(&self.payload)
            .ok()?
            .get("iss")?
            .as_str()
            .map(str::to_owned)
    }

    /// Checks the signature against the keys; `UnknownKey` when none fits.
    pub fn verify_signature(&self, jwks: &Jwks) -> Result<(), VerifyError> {
        let Some(scheme) = scheme(&self.alg) else {
            return Err(VerifyError::Algorithm(clip(&self.alg)));
        };
        let candidates: Vec<&Jwk> = jwks
            .keys
            .iter()
            .filter(|k| k.use_.as_deref().is_none_or(|u| u == "sig"))
            .filter(|k| k.alg.as_deref().is_none_or(|a| a == self.alg))
            .filter(|k| self.kid.is_none() || k.kid == self.kid)
            .filter(|k| scheme.fits(k))
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::UnknownKey(clip(
                self.kid.as_deref().unwrap_or_default(),
            )));
        }
        let message = self.signing_input.as_bytes();
        if candidates
            .iter()
            .any(|k| scheme.verify(k, message, &self.signature))
        {
            Ok(())
        } else {
            Err(VerifyError::Signature)
        }
    }

    /// The claims, after the signature was checked, held to `expect`.
    pub fn claims(&self, expect: &Expect<'_>) -> Result<Claims, VerifyError> {
        let claims: Claims = serde_json::from_slice(&self.payload).map_err(|_| VerifyError::BadClaims)?;
        check_claims(&claims, expect)?;
        Ok(claims)
    }
}

/// Issuer, audience, times and nonce.
pub fn check_claims(claims: &Claims, expect: &Expect<'_>) -> Result<(), VerifyError> {
    let iss = claims.get("iss").and_then(Value::as_str).unwrap_or_default();
    if iss != expect.issuer {
        return Err(VerifyError::Issuer {
            want: expect.issuer.to_owned(),
            got: clip(iss),
        });
    }
    if claims
        .get("sub")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(VerifyError::NoSubject);
    }
    let aud: Vec<String> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    };
    if aud.is_empty() {
        if !expect.skip_audience_when_absent {
            return Err(VerifyError::NoAudience);
        }
    } else if !aud.iter().any(|a| expect.audiences.contains(a)) {
        return Err(VerifyError::Audience {
            got: aud.iter().take(10).map(|a| clip(a)).collect(),
            accepted: expect.audiences.to_vec(),
        });
    }
    // OIDC Core 3.1.3.7: with several audiences, the party the token was
    // issued to must be named, and be one of ours.
    if aud.len() > 1 {
        let azp = claims.get("azp").and_then(Value::as_str);
        if !azp.is_some_and(|azp| expect.audiences.iter().any(|a| a == azp)) {
            return Err(VerifyError::AuthorizedParty {
                got: azp.map(clip),
                accepted: expect.audiences.to_vec(),
            });
        }
    }
    let time = |name: &str| claims.get(name).and_then(Value::as_f64).map(|t| t as i64);
    let exp = time("exp").ok_or(VerifyError::NoExpiry)?;
    if expect.now > exp + LEEWAY_SECONDS {
        return Err(VerifyError::Expired);
    }
    if time("nbf").is_some_and(|nbf| nbf > expect.now + LEEWAY_SECONDS)
        || time("iat").is_some_and(|iat| iat > expect.now + LEEWAY_SECONDS)
    {
        return Err(VerifyError::NotYetValid);
    }
    if let Some(nonce) = expect.nonce {
        let got = claims.get("nonce").and_then(Value::as_str).unwrap_or_default();
        // Both sides are ours or the provider's echo of ours: no secret to time.
        if got != nonce {
            return Err(VerifyError::Nonce);
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Scheme {
    Rsa(&'static signature::RsaParameters),
    Ec(
        &'static signature::EcdsaVerificationAlgorithm,
        &'static str,
        usize,
    ),
    Ed25519,
}

fn scheme(alg: &str) -> Option<Scheme> {
    Some(match alg {
        "RS256" => Scheme::Rsa(&signature::RSA_PKCS1_2048_8192_SHA256),
        "RS384" => Scheme::Rsa(&signature::RSA_PKCS1_2048_8192_SHA384),
        "RS512" => Scheme::Rsa(&signature::RSA_PKCS1_2048_8192_SHA512),
        "PS256" => Scheme::Rsa(&signature::RSA_PSS_2048_8192_SHA256),
        "PS384" => Scheme::Rsa(&signature::RSA_PSS_2048_8192_SHA384),
        "PS512" => Scheme::Rsa(&signature::RSA_PSS_2048_8192_SHA512),
        "ES256" => Scheme::Ec(&signature::ECDSA_P256_SHA256_FIXED, "P-256", 32),
        "ES384" => Scheme::Ec(&signature::ECDSA_P384_SHA384_FIXED, "P-384", 48),
        "EdDSA" => Scheme::Ed25519,
        _ => return None,
    })
}

impl Scheme {
    fn fits(self, key: &Jwk) -> bool {
        match self {
            Self::Rsa(_) => key.kty == "RSA",
            Self::Ec(_, crv, _) => key.kty == "EC" && key.crv.as_deref() == Some(crv),
            Self::Ed25519 => key.kty == "OKP" && key.crv.as_deref() == Some("Ed25519"),
        }
    }

    fn verify(self, key: &Jwk, message: &[u8], sig: &[u8]) -> bool {
        let b = |v: &Option<String>| v.as_deref().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
        match self {
            Self::Rsa(params) => {
                let (Some(n), Some(e)) = (b(&key.n), b(&key.e)) else {
                    return false;
                };
                RsaPublicKeyComponents { n: &n, e: &e }
                    .verify(params, message, sig)
                    .is_ok()
            }
            Self::Ec(alg, _, len) => {
                let (Some(x), Some(y)) = (b(&key.x), b(&key.y)) else {
                    return false;
                };
                if x.len() != len || y.len() != len {
                    return false;
                }
                let mut point = Vec::with_capacity(1 + 2 * len);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                UnparsedPublicKey::new(alg, point).verify(message, sig).is_ok()
            }
            Self::Ed25519 => {
                let Some(x) = b(&key.x) else { return false };
                UnparsedPublicKey::new(&signature::ED25519, x)
                    .verify(message, sig)
                    .is_ok()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};

    fn b64(data: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(data)
    }

    fn unsigned(header: &str, claims: &Value) -> String {
        format!(
            "{}.{}",
            b64(header.as_bytes()),
            b64(claims.to_string().as_bytes())
        )
    }

    fn expect<'a>(aud: &'a [String]) -> Expect<'a> {
        Expect {
            issuer: "https://idp",
            audiences: aud,
            skip_audience_when_absent: false,
            nonce: None,
            now: 1_000_000,
        }
    }

    fn claims(extra: Value) -> Value {
        let mut c = serde_json::json!({"iss": "https://idp", "aud": "cd", "exp": 1_000_100, "iat": 999_000, "sub": "u"});
        if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
            c.extend(extra);
        }
        c
    }

    fn es256() -> (String, Jwks) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
                .unwrap();
        let public = pair.public_key().as_ref();
        let jwk = Jwk {
            kty: "EC".into(),
            kid: Some("k1".into()),
            alg: None,
            use_: Some("sig".into()),
            n: None,
            e: None,
            crv: Some("P-256".into()),
            x: Some(b64(&public[1..33])),
            y: Some(b64(&public[33..])),
        };
        let input = unsigned(r#"{"alg":"ES256","kid":"k1"}"#, &claims(Value::Null));
        let sig = pair.sign(&rng, input.as_bytes()).unwrap();
        (format!("{input}.{}", b64(sig.as_ref())), Jwks { keys: vec![jwk] })
    }

    #[test]
    fn es256_token_verifies_and_claims_are_checked() {
        let (token, jwks) = es256();
        let parsed = parse(&token).unwrap();
        parsed.verify_signature(&jwks).unwrap();
        let aud = vec!["cd".to_owned()];
        assert_eq!(parsed.claims(&expect(&aud)).unwrap()["sub"], "u");
        let other = vec!["other".to_owned()];
        assert!(matches!(
            parsed.claims(&expect(&other)),
            Err(VerifyError::Audience { .. })
        ));
        // A tampered payload fails the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = b64(claims(serde_json::json!({"sub": "admin"})).to_string().as_bytes());
        parts[1] = &forged;
        let forged = parts.join(".");
        assert_eq!(
            parse(&forged).unwrap().verify_signature(&jwks),
            Err(VerifyError::Signature)
        );
        // Another kid is an unknown key.
        let mut rotated = jwks.clone();
        rotated.keys[0].kid = Some("k2".into());
        assert!(matches!(
            parse(&token).unwrap().verify_signature(&rotated),
            Err(VerifyError::UnknownKey(_))
        ));
    }

    #[test]
    fn eddsa_token_verifies() {
        let rng = SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let input = unsigned(r#"{"alg":"EdDSA"}"#, &claims(Value::Null));
        let token = format!("{input}.{}", b64(pair.sign(input.as_bytes()).as_ref()));
        let jwks = Jwks {
            keys: vec![Jwk {
                kty: "OKP".into(),
                kid: None,
                alg: None,
                use_: None,
                n: None,
                e: None,
                crv: Some("Ed25519".into()),
                x: Some(b64(pair.public_key().as_ref())),
                y: None,
            }],
        };
        parse(&token).unwrap().verify_signature(&jwks).unwrap();
    }

    #[test]
    fn forbidden_algorithms_are_refused_before_anything_else() {
        for alg in ["none", "HS256", "HS512", "RS1", ""] {
            let token = format!(
                "{}.sig",
                unsigned(&format!(r#"{{"alg":"{alg}"}}"#), &claims(Value::Null))
            );
            assert_eq!(
                parse(&token).err(),
                Some(VerifyError::Algorithm(alg.into())),
                "{alg}"
            );
        }
        let token = format!("{}.", unsigned(r#"{"alg":"RS256"}"#, &claims(Value::Null)));
        assert_eq!(parse(&token).err(), Some(VerifyError::Signature));
        assert_eq!(parse("a.b").err(), Some(VerifyError::Malformed));
    }

    #[test]
    fn echoed_token_values_are_capped() {
        let long = "x".repeat(5000);
        let aud = vec!["cd".to_owned()];
        let err = check_claims(
            claims(serde_json::json!({"iss": long})).as_object().unwrap(),
            &expect(&aud),
        )
        .unwrap_err();
        assert!(err.to_string().len() < 250, "{err}");
        let token = format!(
            "{}.sig",
            unsigned(&format!(r#"{{"alg":"{long}"}}"#), &claims(Value::Null))
        );
        let err = parse(&token).err().unwrap();
        assert!(err.to_string().len() < 250, "{err}");
        assert_eq!(clip("é".repeat(150).as_str()).chars().count(), 101);
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn claim_rules() {
        let aud = vec!["cd".to_owned(), "cd-cli".to_owned()];
        let check = |extra: Value| check_claims(claims(extra).as_object().unwrap(), &expect(&aud));
        assert_eq!(check(Value::Null), Ok(()));
        assert_eq!(
            check(serde_json::json!({"aud": ["x", "cd-cli"], "azp": "cd-cli"})),
            Ok(())
        );
        assert_eq!(
            check(serde_json::json!({"aud": ["cd"], "azp": "whoever"})),
            Ok(()),
            "azp is not required with one audience"
        );
        assert!(matches!(
            check(serde_json::json!({"aud": ["x", "cd-cli"]})),
            Err(VerifyError::AuthorizedParty { got: None, .. })
        ));
        assert!(matches!(
            check(serde_json::json!({"aud": ["cd", "cd-cli"], "azp": "x"})),
            Err(VerifyError::AuthorizedParty { got: Some(_), .. })
        ));
        // A subject is required.
        assert_eq!(check(serde_json::json!({"sub": ""})), Err(VerifyError::NoSubject));
        assert_eq!(check(serde_json::json!({"sub": 7})), Err(VerifyError::NoSubject));
        let mut no_sub = claims(Value::Null);
        no_sub.as_object_mut().unwrap().remove("sub");
        assert_eq!(
            check_claims(no_sub.as_object().unwrap(), &expect(&aud)),
            Err(VerifyError::NoSubject)
        );
        assert_eq!(
            VerifyError::NoSubject.to_string(),
            "token has no subject (sub claim)"
        );
        assert!(matches!(
            check(serde_json::json!({"iss": "https://idp/"})),
            Err(VerifyError::Issuer { .. })
        ));
        assert_eq!(
            check(serde_json::json!({"exp": 999_900})),
            Err(VerifyError::Expired)
        );
        assert_eq!(
            check(serde_json::json!({"exp": 999_980})),
            Ok(()),
            "within the leeway"
        );
        assert_eq!(
            check(serde_json::json!({"nbf": 1_000_500})),
            Err(VerifyError::NotYetValid)
        );
        assert_eq!(
            check(serde_json::json!({"iat": 1_000_500})),
            Err(VerifyError::NotYetValid)
        );
        let mut no_aud = claims(Value::Null);
        no_aud.as_object_mut().unwrap().remove("aud");
        assert_eq!(
            check_claims(no_aud.as_object().unwrap(), &expect(&aud)),
            Err(VerifyError::NoAudience)
        );
        let lenient = Expect {
            skip_audience_when_absent: true,
            ..expect(&aud)
        };
        assert_eq!(check_claims(no_aud.as_object().unwrap(), &lenient), Ok(()));
        let with_nonce = Expect {
            nonce: Some("n1"),
            ..expect(&aud)
        };
        let c = claims(serde_json::json!({"nonce": "n2"}));
        assert_eq!(
            check_claims(c.as_object().unwrap(), &with_nonce),
            Err(VerifyError::Nonce)
        );
        let c = claims(Value::Null);
        assert_eq!(
            check_claims(c.as_object().unwrap(), &with_nonce),
            Err(VerifyError::Nonce)
        );
    }
}
