//! Verification of an identity provider's ID tokens against its JSON Web Key
//! Set: the one path for ID tokens presented as bearer tokens and for those a
//! dashboard or CLI login receives (which also carry the login's nonce).
//!
//! `jsonwebtoken` (RustCrypto backend, see `auth::jwt`) does the JWS work:
//! splitting, base64url, the RSA PKCS#1 / PSS, ECDSA and Ed25519 signatures
//! with keys built from the JWKS, and the registered claims it knows (`exp`
//! required, `exp` and `nbf` with a 30 s leeway, `iss` exact), parsing the
//! claims only after the signature holds.
//!
//! tiphys adds what the library leaves to its caller: the algorithm comes from
//! an allowlist of asymmetric ones, checked before any key is looked at (never
//! `none`, never an HMAC whose "key" could be the provider's public key);
//! `crit` is refused; keys are chosen from the JWKS by `kid`, `use`, `alg`,
//! type and curve (RSA keys of 2048 to 4096 bits); the audience rules
//! (`allowedAudiences`, `skipAudienceCheckWhenTokenHasNoAudience`, `azp` when
//! there are several audiences, and an error naming both sides); `sub`
//! required; `iat` not in the future; the nonce; a size cap; and clipped
//! echoes of the token's own values in the errors.
//!
//! `openidconnect`'s own ID token verifier is not used: it accepts one client
//! id as audience, has no leeway and no `nbf` check, requires `iat`, does not
//! check `azp`, and its error texts are not the ones tiphys's callers see.

use std::str::FromStr as _;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Longest ID token accepted (bytes); anything longer is refused unparsed.
pub const MAX_TOKEN_BYTES: usize = 64 * 1024;
/// Clock skew tolerated on `exp`, `nbf` and `iat` (seconds).
pub const LEEWAY_SECONDS: u64 = 30;
/// Sizes of RSA moduli accepted, in bytes: at least 2048 bits, and at most
/// the 4096 bits the RustCrypto RSA backend works with.
const RSA_MODULUS_BYTES: std::ops::RangeInclusive<usize> = 256..=512;

/// The signature algorithms an ID token may use.
pub const ALGORITHMS: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

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
    #[error("token claim {0} is not a valid time")]
    BadTime(&'static str),
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
    /// Unix seconds, for `iat` (`jsonwebtoken` reads the clock itself for `exp` and `nbf`).
    pub now: i64,
}

/// A provider's signing keys (its JWKS). A key `jsonwebtoken` cannot read (an
/// unknown type, a malformed member) is left out rather than spoiling the set.
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

impl<'de> Deserialize<'de> for Jwks {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            keys: Vec<Value>,
        }
        let raw = Raw::deserialize(deserializer)?;
        let keys = raw
            .keys
            .into_iter()
            .filter_map(|k| serde_json::from_value(k).ok())
            .collect();
        Ok(Self { keys })
    }
}

/// A token whose header passed the checks that need no key; nothing verified.
#[derive(Debug)]
pub struct Parsed<'a> {
    token: &'a str,
    alg: Algorithm,
    kid: Option<String>,
}

/// The `alg` a JWT header names when `jsonwebtoken` cannot read the header because it does not
/// know that algorithm (`none`, `hs256`, …): only to say so. `None` when the algorithm is a known
/// one (the header is wrong elsewhere) or the header is no JSON object with a text `alg`. Local
/// tokens (`auth::jwt`) use it too.
pub fn named_algorithm(token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Alg {
        alg: String,
    }
    let header = URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?;
    let alg = serde_json::from_slice::<Alg>(&header).ok()?.alg;
    Algorithm::from_str(&alg).is_err().then_some(alg)
}

/// Reads a token's header: the algorithm must be allowed, no `crit`.
pub fn parse(token: &str) -> Result<Parsed<'_>, VerifyError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(VerifyError::TooLarge);
    }
    let header = jsonwebtoken::decode_header(token).map_err(|err| match err.kind() {
        // An algorithm jsonwebtoken does not know (`none`) fails the header.
        ErrorKind::Json(_) => {
            named_algorithm(token).map_or(VerifyError::Malformed, |alg| VerifyError::Algorithm(clip(&alg)))
        }
        _ => VerifyError::Malformed,
    })?;
    if header.crit.is_some() {
        return Err(VerifyError::Critical);
    }
    if !ALGORITHMS.contains(&header.alg) {
        return Err(VerifyError::Algorithm(format!("{:?}", header.alg)));
    }
    // No key could verify an empty signature: refuse before fetching keys.
    if token.ends_with('.') {
        return Err(VerifyError::Signature);
    }
    Ok(Parsed {
        token,
        alg: header.alg,
        kid: header.kid,
    })
}

impl Parsed<'_> {
    /// The issuer the token claims (unverified): only to refuse a foreign
    /// token before any network call.
    pub fn claimed_issuer(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct Iss {
            iss: Option<Value>,
        }
        let claims = jsonwebtoken::dangerous::insecure_decode_claims::<Iss>(self.token).ok()?;
        claims.iss?.as_str().map(str::to_owned)
    }

    /// Verifies the signature with the provider's keys, then the claims
    /// against `expect`. `UnknownKey` when no key fits, `Signature` when none
    /// verifies: both may mean the provider rotated its keys.
    pub fn verify(&self, jwks: &Jwks, expect: &Expect<'_>) -> Result<Claims, VerifyError> {
        let candidates: Vec<&Jwk> = jwks.keys.iter().filter(|k| self.fits(k)).collect();
        if candidates.is_empty() {
            return Err(VerifyError::UnknownKey(clip(
                self.kid.as_deref().unwrap_or_default(),
            )));
        }
        let mut validation = Validation::new(self.alg);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp"]);
        validation.set_issuer(&[expect.issuer]);
        // The audience rules are tiphys's (see `check_audience`).
        validation.validate_aud = false;
        for key in candidates {
            // A key the library cannot use verifies nothing.
            let Ok(key) = DecodingKey::from_jwk(key) else {
                continue;
            };
            match jsonwebtoken::decode::<Claims>(self.token, &key, &validation) {
                Ok(data) => {
                    check_claims(&data.claims, expect)?;
                    return Ok(data.claims);
                }
                Err(err) => match err.kind() {
                    ErrorKind::InvalidSignature
                    | ErrorKind::InvalidRsaKey(_)
                    | ErrorKind::InvalidEcdsaKey
                    | ErrorKind::InvalidEddsaKey
                    | ErrorKind::InvalidKeyFormat => continue,
                    _ => return Err(self.refusal(&err, expect)),
                },
            }
        }
        Err(VerifyError::Signature)
    }

    /// Whether `key` may have signed this token.
    fn fits(&self, key: &Jwk) -> bool {
        let common = &key.common;
        let for_signatures = matches!(common.public_key_use, None | Some(PublicKeyUse::Signature));
        let same_alg = common
            .key_algorithm
            .is_none_or(|a| Algorithm::from_str(&a.to_string()).is_ok_and(|a| a == self.alg));
        let same_kid = self.kid.is_none() || common.key_id == self.kid;
        let right_type = match (&key.algorithm, self.alg) {
            (
                AlgorithmParameters::RSA(rsa),
                Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512,
            ) => RSA_MODULUS_BYTES.contains(&rsa_modulus_bytes(&rsa.n)),
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES256) => ec.curve == EllipticCurve::P256,
            (AlgorithmParameters::EllipticCurve(ec), Algorithm::ES384) => ec.curve == EllipticCurve::P384,
            (AlgorithmParameters::OctetKeyPair(okp), Algorithm::EdDSA) => okp.curve == EllipticCurve::Ed25519,
            _ => false,
        };
        for_signatures && same_alg && same_kid && right_type
    }

    /// What a verified token's claims failed, from `jsonwebtoken`'s error.
    fn refusal(&self, err: &jsonwebtoken::errors::Error, expect: &Expect<'_>) -> VerifyError {
        match err.kind() {
            ErrorKind::ExpiredSignature => VerifyError::Expired,
            ErrorKind::ImmatureSignature => VerifyError::NotYetValid,
            ErrorKind::MissingRequiredClaim(_) => VerifyError::NoExpiry,
            ErrorKind::InvalidClaimFormat(name) if name == "nbf" => VerifyError::BadTime("nbf"),
            ErrorKind::InvalidClaimFormat(_) => VerifyError::BadTime("exp"),
            ErrorKind::InvalidIssuer => VerifyError::Issuer {
                want: expect.issuer.to_owned(),
                got: clip(&self.claimed_issuer().unwrap_or_default()),
            },
            ErrorKind::Json(_) => VerifyError::BadClaims,
            ErrorKind::InvalidAlgorithm => VerifyError::Algorithm(format!("{:?}", self.alg)),
            ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Utf8(_) => VerifyError::Malformed,
            _ => VerifyError::Signature,
        }
    }
}

/// The length of an RSA modulus (base64url, big-endian), in bytes.
fn rsa_modulus_bytes(n: &str) -> usize {
    URL_SAFE_NO_PAD
        .decode(n.trim_end_matches('='))
        .map(|n| n.iter().skip_while(|b| **b == 0).count())
        .unwrap_or(0)
}

/// What tiphys checks on top of `jsonwebtoken`, on verified claims: issuer
/// present, subject, audience and authorized party, issue time, nonce.
pub fn check_claims(claims: &Claims, expect: &Expect<'_>) -> Result<(), VerifyError> {
    // jsonwebtoken compares `iss` only when there is one.
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
    check_audience(claims, expect)?;
    let iat = claims.get("iat").and_then(Value::as_f64).map(|t| t as i64);
    if iat.is_some_and(|iat| iat > expect.now.saturating_add(LEEWAY_SECONDS as i64)) {
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

/// The audience: one of the accepted ones (a token without any only with
/// `skipAudienceCheckWhenTokenHasNoAudience`), and with several audiences, an
/// authorized party that is one of ours (OIDC Core 3.1.3.7). `jsonwebtoken`'s
/// own check cannot report what it got, nor treat `"aud": []` as absent.
fn check_audience(claims: &Claims, expect: &Expect<'_>) -> Result<(), VerifyError> {
    let aud: Vec<&str> = match claims.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if aud.is_empty() {
        return if expect.skip_audience_when_absent {
            Ok(())
        } else {
            Err(VerifyError::NoAudience)
        };
    }
    if !aud.iter().any(|a| expect.audiences.iter().any(|ok| ok == a)) {
        return Err(VerifyError::Audience {
            got: aud.iter().take(10).map(|a| clip(a)).collect(),
            accepted: expect.audiences.to_vec(),
        });
    }
    if aud.len() > 1 {
        let azp = claims.get("azp").and_then(Value::as_str);
        if !azp.is_some_and(|azp| expect.audiences.iter().any(|a| a == azp)) {
            return Err(VerifyError::AuthorizedParty {
                got: azp.map(clip),
                accepted: expect.audiences.to_vec(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::{SecureRandom as _, SystemRandom};
    use ring::signature::{self, EcdsaKeyPair};

    use super::*;

    /// A 2048-bit RSA key (PKCS#1 DER), for tests only.
    const RSA_2048: &str = "MIIEowIBAAKCAQEArRi9tVSrbpyF+4f6D4XqXUgNa51IoIdmTvVKt7x2XlvlU24+SxntT7fZB1qCZcV1NA/S6TP836ZrxxaTXz7X7ZOJRLteXllXDGrrvk/x2mC8+5rsKzHXKEjdL52u9wwjIkvufD4FV+wAD9ubSdLLmutdW31LqDM/typ2VnNKVIZAwemVnKhqDW0CvCuczI84gBAFAkgliMRotwxOJ9ljh90sJ7gRgxAXjAIys0rH6CUNgfA4ScF7nQJSKweFI1gT3Bhbx6iwL0lgKHhnmr9sARiaIqGDi7+qxyFB0zWmuJlJEaTrgPf0u1lnergk2XsjFVDZVZQ8bkJFu0k72cQwzwIDAQABAoIBAAYXiVGw7amia5q7IeNa+LEYwJQpgG1Z5pFf06XcxaOzg0Io7ptRCceU9lfqaQ1w4huXdPpNIJi0cDWdB0nCWfIcD6gyGfOjHEutFafog2AGqJAIV0h75BEgY1xyJb6/GBt0ZavMuP5rqWLlfTUfbJgCsZHvOnLsftEQ9wI644JO+la1ua3HgRnlotg7fyqzO+uLOeUOTX2O7JUIZ7L1ZEgiS1TBlqK1EZwUteDwT2sNW+fm/LXf6PyF8ExZeFbQwYzqk7Uf9XYlrNuVVkXzEf/zjKhnAtc0eOvcezAj11UYz9jK6MsCRwEckNzhctzu4mlOR1JrYNy0QPQogMWaRQECgYEA73XnEJgeQ6L2nhj8xewMG2tmhY86PrpN3kASks76t+XTWl2zzGKGcua+Sffq0mAwYlZpwYJaAF/PC+eUC7kSrqaryeJbipoxySFg+wnxCietCFa7RqiEBERb6nSePfMDbSgq5oNwQzv51W4xGNB3rY3EO1OAiQbt8P4YhrwllwECgYEAuQ1nbCfCROTNqRPpXtGYTKo0r92VXE45CVT1UmusMtEXCACiDidlewHoLgdwH8c+wnL1qgQ2t2dGKabCCOT18N8PKFI4Ych3NTdZz/tDe6b4Lr4eJnGLN3uto6mBxOalA/fSTZZbPXgYe9tS9yBns3DxDLMHhBzJTDPYFtTOF88CgYBF8fN/dl+ItCZDQds72NokfDejFZYW0oaCP8btGQZFBx24TJyDO9g34cx9gKwXrT8UylbzziaJ63Jn8Mnerr2VRFvziWnhz25xaI2SZnIA3Fv/jo3/cqO1N1592niKcdxzWwNE9+mnyfIM9LXkoKgEit9h0N8/p0WDWkVBvd1hAQKBgGxhJFRcyNOuqaC/z6s/2BH2kZr6jNKd4ZvMjU1zUEwG15VRQZhGjJHJYSEsLAgAmoop6CVmCGHL83TLfNLWvhAPpAH6fZkPXnnlbA16XGCcPripkmDzmRSqs9yplx4p8zVqvFnCmLdckgJgRqwD55hZqmPEqr8+WMrvhjyA8B9TAoGBAI/GkTEzP+N87dP2sNdUfLWHzVl58ON6R+FoApk86fh1d4A0sK7XnRCL53yCmgh7PVrrq2nQIJaj0/Xie6OQwMJHhdh7CEQx2zbXf5uxYpw2wGxTZC3e+0VDqkWkO5OW6ieuceY+O4em/+13lr3xZrhT7ZV87K6YzL37nspoPPzN";
    /// A 1024-bit RSA key (PKCS#1 DER), too weak to be accepted.
    const RSA_1024: &str = "MIICXgIBAAKBgQDPiVlkPG31Oc6NLJIBP0g4w6X5Vm00tRMN4rKnd3MK+O9AMLFo6bd0Q2HX6ZZ7EhTcc1ThGyQJNM31pOCAXu6bcZy7moXcqX4ETYg6gytJgZn/IR4f8cVBLHLIw2GuxJf1HEnc1ynTuQPhtsIsQL9NHAfn1T9Pi8aasY6KYBgHswIDAQABAoGAf5idaiAxJpUM5gUiGzwyBhxb3gmCCObPOTlIx+eLxpI4XonReYRAM23+KQZHa5E5XDRYWjIanMJnYoClOqejILlOn4JH2menTLYSEnXI0AkU33ncEJKUoI8ZReMkFh3OW8O4QMDDvt8bpkKDsAJcCtPxtU181Qa8Y9hE9D4bb2kCQQDtzfpQbTy19iczsOt621pYE2n87ayvXTTTh+OaUTkrlXwQphe1cQQaHrpHS/Yu+8ge78Bpb3c8qGfNPG8uKjvvAkEA32p+A2R/9VmE6z1i63JdYfoPPm6VluMbhwnUiyFQPxLKj1Pqr9oeQIYcO7NQwo4I7Ll0PvZC1XwS54SOSZ98fQJBAOjczWPaRBvuqZ6dfUl16Lbcc+oAFxw1yhflNkQTi0cZfz6SVh8PRzQIqOJOCQki9mkM3r6gLwOP6O15Y2myY7MCQQCcGS3edPOqm1dxfTyGQSvZ7vuDpYRDHn73RPkKFMaaqyh4KCvLnlyQvKMxW0JMDS1TKOh9rVZZDw2uUUGRUyuJAkEArG9jDBCdBFOaon/6R8Se9dZBbJ4vAO+fMGXGww+e35ZG5t3oPYZrmnvOpxFqY8AdMb1eT0f7JWvfk1rQjJHvCw==";

    fn b64(data: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(data)
    }

    fn now() -> i64 {
        jsonwebtoken::get_current_timestamp() as i64
    }

    fn expect(aud: &[String]) -> Expect<'_> {
        Expect {
            issuer: "https://idp",
            audiences: aud,
            skip_audience_when_absent: false,
            nonce: None,
            now: now(),
        }
    }

    /// Valid claims, with `extra` merged in (`null` removes a claim).
    fn claims(extra: Value) -> Value {
        let now = now();
        let mut c = serde_json::json!({"iss": "https://idp", "aud": "cd", "exp": now + 100, "iat": now - 10, "sub": "u"});
        if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
            for (k, v) in extra {
                if v.is_null() {
                    c.remove(&k);
                } else {
                    c.insert(k, v);
                }
            }
        }
        c
    }

    /// A signing key and the JWKS holding its public half (kid `k1`).
    struct Signer {
        alg: Algorithm,
        key: EncodingKey,
        jwks: Jwks,
    }

    impl Signer {
        fn new(alg: Algorithm, key: EncodingKey) -> Self {
            let mut jwk = Jwk::from_encoding_key(&key, alg).unwrap();
            jwk.common.key_id = Some("k1".into());
            jwk.common.public_key_use = Some(PublicKeyUse::Signature);
            Self {
                alg,
                key,
                jwks: Jwks { keys: vec![jwk] },
            }
        }

        fn rsa(alg: Algorithm) -> Self {
            Self::new(
                alg,
                EncodingKey::from_rsa_der(&STANDARD.decode(RSA_2048).unwrap()),
            )
        }

        fn ec(alg: Algorithm) -> Self {
            let rng = SystemRandom::new();
            let scheme = if alg == Algorithm::ES256 {
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING
            } else {
                &signature::ECDSA_P384_SHA384_FIXED_SIGNING
            };
            let pkcs8 = EcdsaKeyPair::generate_pkcs8(scheme, &rng).unwrap();
            Self::new(alg, EncodingKey::from_ec_der(pkcs8.as_ref()))
        }

        fn ed() -> Self {
            // RFC 8410 PKCS#8 v1 around a random seed (ring writes v2, which
            // the RustCrypto backend does not read).
            let mut seed = [0u8; 32];
            SystemRandom::new().fill(&mut seed).unwrap();
            let mut pkcs8 = vec![
                0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
                0x20,
            ];
            pkcs8.extend_from_slice(&seed);
            Self::new(Algorithm::EdDSA, EncodingKey::from_ed_der(&pkcs8))
        }

        fn sign(&self, claims: &Value) -> String {
            let mut header = Header::new(self.alg);
            header.kid = Some("k1".into());
            jsonwebtoken::encode(&header, claims, &self.key).unwrap()
        }

        fn verify(&self, token: &str, aud: &[String]) -> Result<Claims, VerifyError> {
            parse(token)?.verify(&self.jwks, &expect(aud))
        }
    }

    fn cd() -> Vec<String> {
        vec!["cd".to_owned()]
    }

    #[test]
    fn every_allowed_algorithm_verifies() {
        for signer in [
            Signer::rsa(Algorithm::RS256),
            Signer::rsa(Algorithm::RS384),
            Signer::rsa(Algorithm::RS512),
            Signer::rsa(Algorithm::PS256),
            Signer::rsa(Algorithm::PS384),
            Signer::rsa(Algorithm::PS512),
            Signer::ec(Algorithm::ES256),
            Signer::ec(Algorithm::ES384),
            Signer::ed(),
        ] {
            let token = signer.sign(&claims(Value::Null));
            let verified = signer.verify(&token, &cd());
            assert_eq!(
                verified.map(|c| c["sub"].clone()),
                Ok("u".into()),
                "{:?}",
                signer.alg
            );
        }
    }

    #[test]
    fn forged_and_foreign_tokens_fail_the_signature_or_the_key_lookup() {
        let signer = Signer::ec(Algorithm::ES256);
        let token = signer.sign(&claims(Value::Null));
        // A tampered payload fails the signature.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = b64(claims(serde_json::json!({"sub": "admin"})).to_string().as_bytes());
        parts[1] = &forged;
        assert_eq!(
            signer.verify(&parts.join("."), &cd()),
            Err(VerifyError::Signature)
        );
        // Signed by another key with the same kid: the signature fails (a rotation, maybe).
        let other = Signer::ec(Algorithm::ES256);
        assert_eq!(
            parse(&other.sign(&claims(Value::Null)))
                .unwrap()
                .verify(&signer.jwks, &expect(&cd())),
            Err(VerifyError::Signature)
        );
        // Another kid is an unknown key, and so is a key for another use or algorithm.
        let mut rotated = signer.jwks.clone();
        rotated.keys[0].common.key_id = Some("k2".into());
        assert_eq!(
            parse(&token).unwrap().verify(&rotated, &expect(&cd())),
            Err(VerifyError::UnknownKey("k1".into()))
        );
        let mut encryption = signer.jwks.clone();
        encryption.keys[0].common.public_key_use = Some(PublicKeyUse::Encryption);
        assert!(matches!(
            parse(&token).unwrap().verify(&encryption, &expect(&cd())),
            Err(VerifyError::UnknownKey(_))
        ));
        let es384 = Signer::ec(Algorithm::ES384);
        assert!(matches!(
            parse(&token).unwrap().verify(&es384.jwks, &expect(&cd())),
            Err(VerifyError::UnknownKey(_))
        ));
    }

    #[test]
    fn rsa_keys_outside_2048_to_4096_bits_are_not_used() {
        let weak = Signer::new(
            Algorithm::RS256,
            EncodingKey::from_rsa_der(&STANDARD.decode(RSA_1024).unwrap()),
        );
        let token = weak.sign(&claims(Value::Null));
        assert!(matches!(
            weak.verify(&token, &cd()),
            Err(VerifyError::UnknownKey(_))
        ));
        // Nor moduli over 4096 bits, which the RustCrypto backend cannot use.
        let mut huge = Signer::rsa(Algorithm::RS256);
        let token = huge.sign(&claims(Value::Null));
        if let AlgorithmParameters::RSA(rsa) = &mut huge.jwks.keys[0].algorithm {
            rsa.n = b64(&[0xc5; 513]);
        }
        assert!(matches!(
            huge.verify(&token, &cd()),
            Err(VerifyError::UnknownKey(_))
        ));
    }

    #[test]
    fn a_key_set_with_keys_the_library_cannot_read_still_works() {
        let signer = Signer::ed();
        let good = serde_json::to_value(&signer.jwks.keys[0]).unwrap();
        let jwks: Jwks = serde_json::from_value(serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-256", "x": 5},
            {"kty": "whatever"},
            good,
        ]}))
        .unwrap();
        let token = signer.sign(&claims(Value::Null));
        assert!(parse(&token).unwrap().verify(&jwks, &expect(&cd())).is_ok());
    }

    #[test]
    fn forbidden_algorithms_are_refused_before_any_key_is_looked_at() {
        let c = claims(Value::Null);
        let unsigned = |header: &str| format!("{}.{}", b64(header.as_bytes()), b64(c.to_string().as_bytes()));
        for alg in ["none", "HS256", "HS384", "HS512", "RS1", "", "rs256"] {
            let token = format!("{}.sig", unsigned(&format!(r#"{{"alg":"{alg}"}}"#)));
            assert_eq!(
                parse(&token).err(),
                Some(VerifyError::Algorithm(alg.into())),
                "{alg}"
            );
        }
        let token = format!("{}.", unsigned(r#"{"alg":"RS256"}"#));
        assert_eq!(parse(&token).err(), Some(VerifyError::Signature));
        let token = format!("{}.sig", unsigned(r#"{"alg":"RS256","crit":["exp"]}"#));
        assert_eq!(parse(&token).err(), Some(VerifyError::Critical));
        for bad in ["a.b", "", "!!.e30.sig", "e30.e30.sig"] {
            assert_eq!(parse(bad).err(), Some(VerifyError::Malformed), "{bad}");
        }
        assert_eq!(
            parse(&"a".repeat(MAX_TOKEN_BYTES + 1)).err(),
            Some(VerifyError::TooLarge)
        );
    }

    #[test]
    fn an_hmac_keyed_with_the_providers_public_key_is_refused() {
        let signer = Signer::rsa(Algorithm::RS256);
        let AlgorithmParameters::RSA(rsa) = &signer.jwks.keys[0].algorithm else {
            panic!("an RSA key");
        };
        for secret in [rsa.n.as_bytes().to_vec(), URL_SAFE_NO_PAD.decode(&rsa.n).unwrap()] {
            let token = jsonwebtoken::encode(
                &Header::new(Algorithm::HS256),
                &claims(Value::Null),
                &EncodingKey::from_secret(&secret),
            )
            .unwrap();
            assert_eq!(parse(&token).err(), Some(VerifyError::Algorithm("HS256".into())));
        }
    }

    #[test]
    fn echoed_token_values_are_capped() {
        let long = "x".repeat(5000);
        let signer = Signer::ed();
        let err = signer
            .verify(&signer.sign(&claims(serde_json::json!({"iss": long}))), &cd())
            .unwrap_err();
        assert!(matches!(err, VerifyError::Issuer { .. }), "{err}");
        assert!(err.to_string().len() < 250, "{err}");
        let token = format!("{}.e30.sig", b64(format!(r#"{{"alg":"{long}"}}"#).as_bytes()));
        let err = parse(&token).err().unwrap();
        assert!(err.to_string().len() < 250, "{err}");
        assert_eq!(clip("é".repeat(150).as_str()).chars().count(), 101);
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn claim_rules() {
        let signer = Signer::ec(Algorithm::ES256);
        let aud = vec!["cd".to_owned(), "cd-cli".to_owned()];
        let now = now();
        let check = |extra: Value| signer.verify(&signer.sign(&claims(extra)), &aud).map(|_| ());
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
        assert_eq!(
            check(serde_json::json!({"aud": "other"}))
                .unwrap_err()
                .to_string(),
            r#"token aud=["other"]; accepted=["cd", "cd-cli"]"#
        );
        // A subject is required.
        assert_eq!(check(serde_json::json!({"sub": ""})), Err(VerifyError::NoSubject));
        assert_eq!(check(serde_json::json!({"sub": 7})), Err(VerifyError::NoSubject));
        assert_eq!(
            check(serde_json::json!({"sub": null})),
            Err(VerifyError::NoSubject)
        );
        assert_eq!(
            VerifyError::NoSubject.to_string(),
            "token has no subject (sub claim)"
        );
        // The issuer must be exactly the configured one, and be there.
        for iss in [
            serde_json::json!("https://idp/"),
            Value::Null,
            serde_json::json!(5),
        ] {
            assert!(
                matches!(
                    check(serde_json::json!({ "iss": iss })),
                    Err(VerifyError::Issuer { .. })
                ),
                "{iss}"
            );
        }
        // Times, with 30 s of leeway.
        assert_eq!(
            check(serde_json::json!({"exp": now - 100})),
            Err(VerifyError::Expired)
        );
        assert_eq!(
            check(serde_json::json!({"exp": now - 20})),
            Ok(()),
            "within the leeway"
        );
        assert_eq!(
            check(serde_json::json!({"exp": null})),
            Err(VerifyError::NoExpiry)
        );
        assert_eq!(
            check(serde_json::json!({"exp": "soon"})),
            Err(VerifyError::NoExpiry)
        );
        assert_eq!(
            check(serde_json::json!({"nbf": now + 500})),
            Err(VerifyError::NotYetValid)
        );
        assert_eq!(
            check(serde_json::json!({"nbf": now + 20})),
            Ok(()),
            "within the leeway"
        );
        assert_eq!(
            check(serde_json::json!({"nbf": "later"})),
            Err(VerifyError::BadTime("nbf"))
        );
        assert_eq!(
            check(serde_json::json!({"iat": now + 500})),
            Err(VerifyError::NotYetValid)
        );
        assert_eq!(check(serde_json::json!({"iat": null})), Ok(()), "iat is optional");
        // No audience: refused unless the configuration says otherwise.
        for none in [Value::Null, serde_json::json!([])] {
            let token = signer.sign(&claims(serde_json::json!({ "aud": none })));
            assert_eq!(signer.verify(&token, &aud).err(), Some(VerifyError::NoAudience));
            let lenient = Expect {
                skip_audience_when_absent: true,
                ..expect(&aud)
            };
            assert!(parse(&token).unwrap().verify(&signer.jwks, &lenient).is_ok());
        }
        // The nonce of a login.
        let with_nonce = Expect {
            nonce: Some("n1"),
            ..expect(&aud)
        };
        for (nonce, ok) in [
            (serde_json::json!("n1"), true),
            (serde_json::json!("n2"), false),
            (Value::Null, false),
        ] {
            let token = signer.sign(&claims(serde_json::json!({ "nonce": nonce })));
            let got = parse(&token).unwrap().verify(&signer.jwks, &with_nonce);
            assert_eq!(got.is_ok(), ok, "{nonce}");
            if !ok {
                assert_eq!(got.err(), Some(VerifyError::Nonce));
            }
        }
        // Claims that are no object.
        let token = signer.sign(&serde_json::json!([1, 2]));
        assert_eq!(signer.verify(&token, &aud).err(), Some(VerifyError::BadClaims));
    }
}
