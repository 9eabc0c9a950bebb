//! HS256 JSON Web Tokens, the format of every token tiphys issues.
//!
//! `jsonwebtoken` does the token work: splitting and base64url, the HMAC
//! (compared in constant time), the claims (`iss` must be `argocd`, `exp` and
//! `nbf` with no leeway, as Argo CD's jwt/v5 checks them) and their parsing,
//! which only happens after the signature has been verified. Its backend is
//! RustCrypto (`rust_crypto`): pure Rust, so the binary stays static and free
//! of aws-lc or OpenSSL, and the same crates `openidconnect` already brings in.
//! `jsonwebtoken` has no `ring` backend, and a hand-made one would put our own
//! crypto glue back and need a process-wide provider installed before first use.
//!
//! What tiphys adds: only `HS256` is accepted (never `none`, another HMAC, or
//! an asymmetric algorithm whose public key could be abused as an HMAC key),
//! a size cap before any parsing, and the wire format of tokens signed before
//! this library was used (and of Argo CD's): the header is written byte for
//! byte as `{"alg":"HS256","typ":"JWT"}`, which `jsonwebtoken::encode` would
//! write in another order, so `sign` hands only the HMAC to the library.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};
use serde::{Deserialize, Serialize};

/// Issuer of every locally issued token.
pub use crate::principal::LOCAL_ISSUER as ISSUER;

/// Longest token accepted; anything longer is refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The claims of a local token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jti: String,
    #[serde(default)]
    pub iat: i64,
    #[serde(default)]
    pub nbf: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// The issue time in milliseconds. `iat` has whole seconds only, which
    /// cannot tell a token issued just before a password change from one
    /// issued just after it within the same second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat_ms: Option<i64>,
}

impl Claims {
    /// Issue time in milliseconds: the precise claim when present, else `iat`.
    pub fn issued_at_ms(&self) -> i64 {
        self.iat_ms.unwrap_or(self.iat.saturating_mul(1000))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("token is too large")]
    TooLarge,
    #[error("token is not a JWT (expected three base64url parts)")]
    Malformed,
    #[error("token header is invalid")]
    BadHeader,
    #[error("token algorithm {0:?} is not accepted (only HS256)")]
    Algorithm(String),
    #[error("token signature is invalid")]
    Signature,
    #[error("token claims are invalid")]
    BadClaims,
    // The texts of these three are the ones `auth::keys` uses for the same checks.
    #[error("token issuer is not trusted")]
    Issuer,
    #[error("token is expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
}

/// `{"alg":"HS256","typ":"JWT"}`, base64url: the header of every token `sign`
/// makes, as earlier tiphys versions and Argo CD (golang-jwt) write it.
const OUR_HEADER: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";

/// Signs `claims` with `key` (the literal bytes of the server key).
pub fn sign(claims: &Claims, key: &[u8]) -> String {
    // Serialising this plain struct cannot fail.
    let claims = serde_json::to_vec(claims).unwrap_or_default();
    let signing_input = format!("{OUR_HEADER}.{}", URL_SAFE_NO_PAD.encode(claims));
    // An HMAC takes a key of any length, so this cannot fail either; if it
    // ever did, the empty signature would make a token nobody accepts.
    let signature = jsonwebtoken::crypto::sign(
        signing_input.as_bytes(),
        &EncodingKey::from_secret(key),
        Algorithm::HS256,
    )
    .unwrap_or_default();
    format!("{signing_input}.{signature}")
}

/// A token whose header has been read, nothing verified.
#[derive(Debug)]
pub struct Unverified<'a> {
    token: &'a str,
    alg: String,
}

/// Reads a token's header without trusting anything in it.
pub fn decode(token: &str) -> Result<Unverified<'_>, JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::TooLarge);
    }
    // Fast path: the header every token this server signs has (the rest of
    // the token is checked by `verify_hs256`).
    let ours = token
        .strip_prefix(OUR_HEADER)
        .is_some_and(|rest| rest.starts_with('.'));
    let alg = if ours {
        "HS256".to_owned()
    } else {
        match jsonwebtoken::decode_header(token) {
            Ok(header) => format!("{:?}", header.alg),
            Err(err) => match err.kind() {
                ErrorKind::Json(_) => {
                    crate::oidc::verify::named_algorithm(token).ok_or(JwtError::BadHeader)?
                }
                _ => return Err(JwtError::Malformed),
            },
        }
    };
    Ok(Unverified { token, alg })
}

impl Unverified<'_> {
    /// The header's algorithm: HS256 means a token of this server's; others
    /// can only come from an identity provider.
    pub fn algorithm(&self) -> &str {
        &self.alg
    }

    /// The issuer the token claims, used only to choose how to verify it.
    pub fn claimed_issuer(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Iss {
            iss: Option<String>,
        }
        jsonwebtoken::dangerous::insecure_decode_claims::<Iss>(self.token)
            .ok()
            .and_then(|c| c.iss)
    }

    /// Checks the algorithm, the signature and the registered claims, then
    /// returns the claims. `exp` and `nbf` are judged at `now_s` (Unix seconds, the
    /// state's clock), not by `jsonwebtoken`, which would read the system clock.
    pub fn verify_hs256(self, key: &[u8], now_s: i64) -> Result<Claims, JwtError> {
        if self.alg != "HS256" {
            return Err(JwtError::Algorithm(self.alg));
        }
        let mut validation = Validation::new(Algorithm::HS256);
        // API keys may have no expiry; Argo CD's tokens have no audience.
        validation.required_spec_claims.clear();
        validation.validate_aud = false;
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.set_issuer(&[ISSUER]);
        match jsonwebtoken::decode::<Claims>(self.token, &DecodingKey::from_secret(key), &validation) {
            // No leeway, as Argo CD's jwt/v5 checks: expired at `exp`, valid from `nbf`.
            Ok(data) if data.claims.exp.is_some_and(|exp| now_s >= exp) => Err(JwtError::Expired),
            Ok(data) if data.claims.nbf > now_s => Err(JwtError::NotYetValid),
            Ok(data) => Ok(data.claims),
            Err(err) => Err(match err.kind() {
                // The signature is checked before the payload is decoded: say
                // "malformed" for a token that could not have been signed.
                ErrorKind::InvalidSignature if readable_payload(self.token) => JwtError::Signature,
                ErrorKind::InvalidSignature
                | ErrorKind::InvalidToken
                | ErrorKind::Base64(_)
                | ErrorKind::Utf8(_) => JwtError::Malformed,
                ErrorKind::ExpiredSignature => JwtError::Expired,
                ErrorKind::ImmatureSignature => JwtError::NotYetValid,
                ErrorKind::InvalidIssuer => JwtError::Issuer,
                ErrorKind::InvalidAlgorithm => JwtError::Algorithm(self.alg),
                _ => JwtError::BadClaims,
            }),
        }
    }
}

/// Whether the payload of a token decodes to JSON at all (to tell a forged
/// token from garbage).
fn readable_payload(token: &str) -> bool {
    jsonwebtoken::dangerous::insecure_decode_claims::<serde::de::IgnoredAny>(token).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAR: i64 = 4_000_000_000; // 2096

    fn claims() -> Claims {
        Claims {
            iss: ISSUER.into(),
            sub: "admin:login".into(),
            jti: "id".into(),
            iat: 100,
            nbf: 100,
            exp: Some(FAR),
            iat_ms: Some(100_123),
        }
    }

    fn b64(data: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(data)
    }

    fn verify(token: &str, key: &[u8]) -> Result<Claims, JwtError> {
        decode(token)?.verify_hs256(key, jsonwebtoken::get_current_timestamp() as i64)
    }

    #[test]
    fn our_header_constant_matches_what_sign_writes() {
        let token = sign(&claims(), b"key");
        assert!(token.starts_with(&format!("{OUR_HEADER}.")));
        assert_eq!(
            URL_SAFE_NO_PAD.decode(OUR_HEADER).unwrap(),
            br#"{"alg":"HS256","typ":"JWT"}"#
        );
    }

    #[test]
    fn round_trip() {
        let token = sign(&claims(), b"key");
        assert_eq!(verify(&token, b"key").unwrap(), claims());
        assert_eq!(decode(&token).unwrap().claimed_issuer().as_deref(), Some(ISSUER));
    }

    /// Signed by the hand-written HMAC code this module had before
    /// `jsonwebtoken` (claims as in `claims()` but `exp` 4102444800, key
    /// `pre-change-key`). Tokens already handed out must keep working, and
    /// `sign` must still write them byte for byte.
    const PRE_CHANGE_TOKEN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
        eyJpc3MiOiJhcmdvY2QiLCJzdWIiOiJhZG1pbjpsb2dpbiIsImp0aSI6ImlkIiwiaWF0IjoxMDAsIm5iZiI6MTAwLCJleHAiOjQxMDI0NDQ4MDAsImlhdF9tcyI6MTAwMTIzfQ.\
        XYs31fCdw8XME7LNEj7wXnKwHiV8ylc_atkRq8GHMKU";

    #[test]
    fn tokens_signed_before_the_change_stay_valid() {
        let expected = Claims {
            exp: Some(4_102_444_800),
            ..claims()
        };
        assert_eq!(verify(PRE_CHANGE_TOKEN, b"pre-change-key").unwrap(), expected);
        assert_eq!(sign(&expected, b"pre-change-key"), PRE_CHANGE_TOKEN);
        assert_eq!(
            verify(PRE_CHANGE_TOKEN, b"another-key").unwrap_err(),
            JwtError::Signature
        );
    }

    #[test]
    fn api_keys_without_expiry_verify() {
        let forever = Claims {
            sub: "ci:apiKey".into(),
            exp: None,
            ..claims()
        };
        assert_eq!(verify(&sign(&forever, b"k"), b"k").unwrap(), forever);
    }

    #[test]
    fn wrong_key_is_rejected() {
        let token = sign(&claims(), b"key");
        assert_eq!(verify(&token, b"other").unwrap_err(), JwtError::Signature);
    }

    #[test]
    fn alg_none_and_other_hmacs_are_rejected() {
        let payload = b64(&serde_json::to_vec(&claims()).unwrap());
        for alg in ["none", "HS384", "HS512", "RS256", "ES256", "hs256"] {
            let header = b64(format!(r#"{{"alg":"{alg}"}}"#).as_bytes());
            for signature in ["", "c2ln"] {
                let token = format!("{header}.{payload}.{signature}");
                assert_eq!(decode(&token).unwrap().algorithm(), alg);
                assert_eq!(
                    verify(&token, b"key").unwrap_err(),
                    JwtError::Algorithm(alg.into())
                );
            }
        }
    }

    #[test]
    fn another_hmac_signed_with_the_right_key_is_still_refused() {
        let mut header = jsonwebtoken::Header::new(Algorithm::HS512);
        header.typ = None;
        let token = jsonwebtoken::encode(&header, &claims(), &EncodingKey::from_secret(b"key")).unwrap();
        assert_eq!(
            verify(&token, b"key").unwrap_err(),
            JwtError::Algorithm("HS512".into())
        );
    }

    #[test]
    fn rs256_header_with_an_hmac_over_a_public_key_is_refused() {
        // Key confusion: "RS256" whose signature is an HMAC keyed with what
        // the attacker believes is our key material.
        let payload = b64(&serde_json::to_vec(&claims()).unwrap());
        let header = b64(br#"{"alg":"RS256","typ":"JWT"}"#);
        let input = format!("{header}.{payload}");
        let mac = jsonwebtoken::crypto::sign(
            input.as_bytes(),
            &EncodingKey::from_secret(b"key"),
            Algorithm::HS256,
        )
        .unwrap();
        let token = format!("{input}.{mac}");
        assert_eq!(
            verify(&token, b"key").unwrap_err(),
            JwtError::Algorithm("RS256".into())
        );
    }

    #[test]
    fn tampered_claims_are_rejected() {
        let token = sign(&claims(), b"key");
        let mut parts: Vec<&str> = token.split('.').collect();
        let mut forged = claims();
        forged.sub = "root:login".into();
        let forged = b64(&serde_json::to_vec(&forged).unwrap());
        parts[1] = &forged;
        assert_eq!(verify(&parts.join("."), b"key").unwrap_err(), JwtError::Signature);
    }

    #[test]
    fn registered_claims_are_checked() {
        let now = jsonwebtoken::get_current_timestamp() as i64;
        let expired = Claims {
            exp: Some(now - 5),
            ..claims()
        };
        assert_eq!(
            verify(&sign(&expired, b"k"), b"k").unwrap_err(),
            JwtError::Expired
        );
        let early = Claims {
            nbf: now + 60,
            ..claims()
        };
        assert_eq!(
            verify(&sign(&early, b"k"), b"k").unwrap_err(),
            JwtError::NotYetValid
        );
        let foreign = Claims {
            iss: "https://idp.example".into(),
            ..claims()
        };
        assert_eq!(verify(&sign(&foreign, b"k"), b"k").unwrap_err(), JwtError::Issuer);
        // Claims that are no JSON object, or lack a subject, are refused after the signature.
        for payload in [&b"[1]"[..], br#"{"iss":"argocd"}"#] {
            let input = format!("{OUR_HEADER}.{}", b64(payload));
            let mac = jsonwebtoken::crypto::sign(
                input.as_bytes(),
                &EncodingKey::from_secret(b"k"),
                Algorithm::HS256,
            )
            .unwrap();
            assert_eq!(
                verify(&format!("{input}.{mac}"), b"k").unwrap_err(),
                JwtError::BadClaims
            );
        }
    }

    #[test]
    fn garbage_is_malformed() {
        for bad in [
            "",
            "not-a-jwt",
            "a.b",
            "a.b.c.d",
            "!!.e30.",
            "e30.e30",
            "eyJhbGciOiJIUzI1NiJ9.e30",
            "eyJhbGciOiJIUzI1NiJ9.!!!.sig",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.!!!.c2ln",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.!!",
        ] {
            assert_eq!(verify(bad, b"key").unwrap_err(), JwtError::Malformed, "{bad:?}");
        }
        // A header that is JSON but says nothing usable.
        let token = format!("{}.e30.", b64(b"{}"));
        assert_eq!(verify(&token, b"key").unwrap_err(), JwtError::BadHeader);
        assert_eq!(
            decode(&"a".repeat(MAX_TOKEN_BYTES + 1)).unwrap_err(),
            JwtError::TooLarge
        );
    }

    #[test]
    fn precise_issue_time_falls_back_to_iat() {
        let mut c = claims();
        assert_eq!(c.issued_at_ms(), 100_123);
        c.iat_ms = None;
        assert_eq!(c.issued_at_ms(), 100_000);
    }
}
