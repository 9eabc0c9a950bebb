//! HS256 JSON Web Tokens, the format of every token tiphys issues.
//!
//! Only what tiphys needs, written out so that nothing is left to a library's
//! defaults: the header must say `HS256` (never `none`, never another HMAC,
//! never an asymmetric algorithm whose public key could be abused as an HMAC
//! key), the signature is compared in constant time, and claims are only read
//! after the signature has been verified.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Issuer of every locally issued token (Argo CD's value, so tokens and tools carry over).
pub const ISSUER: &str = "argocd";

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
}

/// `{"alg":"HS256","typ":"JWT"}`, base64url: the header of every token `sign` makes.
const OUR_HEADER: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";

#[derive(Serialize, Deserialize)]
struct Header {
    alg: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    typ: Option<String>,
}

/// Signs `claims` with `key` (the literal bytes of the server key).
pub fn sign(claims: &Claims, key: &[u8]) -> String {
    let header = Header {
        alg: "HS256".to_owned(),
        typ: Some("JWT".to_owned()),
    };
    // Serialising these plain structs cannot fail.
    let header = serde_json::to_vec(&header).unwrap_or_default();
    let claims = serde_json::to_vec(claims).unwrap_or_default();
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let signature = mac(key, signing_input.as_bytes()).finalize().into_bytes();
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// The parts of a token, split and decoded but NOT verified.
pub struct Unverified<'a> {
    signing_input: &'a str,
    header: Header,
    payload: Vec<u8>,
    signature: Vec<u8>,
}

/// Splits and decodes a token without trusting anything in it.
pub fn decode(token: &str) -> Result<Unverified<'_>, JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::TooLarge);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(JwtError::Malformed);
    };
    // Fast path: the header every token this server signs has.
    let header = if h == OUR_HEADER {
        Header {
            alg: "HS256".to_owned(),
            typ: None,
        }
    } else {
        let header = URL_SAFE_NO_PAD.decode(h).map_err(|_| JwtError::Malformed)?;
        serde_json::from_slice(&header).map_err(|_| JwtError::BadHeader)?
    };
    let payload = URL_SAFE_NO_PAD.decode(p).map_err(|_| JwtError::Malformed)?;
    let signature = URL_SAFE_NO_PAD.decode(s).map_err(|_| JwtError::Malformed)?;
    Ok(Unverified {
        signing_input: &token[..h.len() + 1 + p.len()],
        header,
        payload,
        signature,
    })
}

impl Unverified<'_> {
    /// The header's algorithm: HS256 means a token of this server's; others
    /// can only come from an identity provider.
    pub fn algorithm(&self) -> &str {
        &self.header.alg
    }

    /// The issuer the token claims, used only to choose how to verify it.
    pub fn claimed_issuer(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Iss {
            iss: Option<String>,
        }
        serde_json::from_slice::<Iss>(&self.payload)
            .ok()
            .and_then(|c| c.iss)
    }

    /// Checks the algorithm and signature, then parses the claims.
    pub fn verify_hs256(self, key: &[u8]) -> Result<Claims, JwtError> {
        if self.header.alg != "HS256" {
            return Err(JwtError::Algorithm(self.header.alg));
        }
        mac(key, self.signing_input.as_bytes())
            .verify_slice(&self.signature)
            .map_err(|_| JwtError::Signature)?;
        serde_json::from_slice(&self.payload).map_err(|_| JwtError::BadClaims)
    }
}

fn mac(key: &[u8], data: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    mac.update(data);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            iss: ISSUER.into(),
            sub: "admin:login".into(),
            jti: "id".into(),
            iat: 100,
            nbf: 100,
            exp: Some(200),
            iat_ms: Some(100_123),
        }
    }

    #[test]
    fn our_header_constant_matches_what_sign_writes() {
        let token = sign(&claims(), b"key");
        assert!(token.starts_with(&format!("{OUR_HEADER}.")));
    }

    #[test]
    fn round_trip() {
        let token = sign(&claims(), b"key");
        assert_eq!(decode(&token).unwrap().verify_hs256(b"key").unwrap(), claims());
    }

    #[test]
    fn wrong_key_is_rejected() {
        let token = sign(&claims(), b"key");
        assert_eq!(
            decode(&token).unwrap().verify_hs256(b"other").unwrap_err(),
            JwtError::Signature
        );
    }

    #[test]
    fn alg_none_and_other_hmacs_are_rejected() {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims()).unwrap());
        for alg in ["none", "HS384", "HS512", "RS256", "hs256"] {
            let header = URL_SAFE_NO_PAD.encode(format!(r#"{{"alg":"{alg}"}}"#));
            let token = format!("{header}.{payload}.");
            assert_eq!(
                decode(&token).unwrap().verify_hs256(b"key").unwrap_err(),
                JwtError::Algorithm(alg.into()),
            );
        }
    }

    #[test]
    fn tampered_claims_are_rejected() {
        let token = sign(&claims(), b"key");
        let mut parts: Vec<&str> = token.split('.').collect();
        let mut forged = claims();
        forged.sub = "root:login".into();
        let forged = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        parts[1] = &forged;
        let token = parts.join(".");
        assert_eq!(
            decode(&token).unwrap().verify_hs256(b"key").unwrap_err(),
            JwtError::Signature
        );
    }

    #[test]
    fn garbage_is_malformed() {
        for bad in ["", "a.b", "a.b.c.d", "!!.e30.", "e30.e30"] {
            assert!(decode(bad).is_err(), "{bad}");
        }
        assert_eq!(
            decode(&"a".repeat(MAX_TOKEN_BYTES + 1)).err(),
            Some(JwtError::TooLarge)
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
