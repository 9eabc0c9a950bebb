//! The key every local token is signed with, and the two things done with it: signing a
//! token's claims, and checking a presented token up to its standard claims.
//!
//! The key is `server.secretkey` from `argocd-secret` when set (its literal text, as Argo CD
//! uses it, so Argo CD's tokens stay valid), else a random key the server generated on its
//! first start and keeps in its store. Editing the secret takes effect on the next reload.
//!
//! Other secrets derived from it ([`TokenKeys::sealing_key`]) come through HKDF with a purpose
//! label: the signing key itself only ever signs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use base64::Engine as _;

use super::jwt::{self, Claims};
use crate::config::Settings;
use crate::principal::LOCAL_ISSUER;
use crate::seal::SealKey;
use crate::store::{self, Expect, Store, StoreError};

/// Where the generated key is kept.
const SERVER_KEY: &str = "server/secretkey";
/// At most this many checked tokens are remembered (about 0.5 MB).
const VERIFIED_CAPACITY: usize = 1024;

pub struct TokenKeys {
    generated: String,
    current: ArcSwap<Current>,
}

/// The key in force, and the tokens whose signature it has checked.
struct Current {
    key: Vec<u8>,
    /// Checked tokens, by their exact text. The CLI and the dashboard send one token with every
    /// request, and checking a JWT (base64, HMAC, JSON parses) was a third of an authenticated
    /// request's instructions (BENCHMARKS.md, "Token checks"). Only the signature and the
    /// claims are remembered: expiry and not-before are checked on every use here, revocation and
    /// the account's state by the caller. A new key starts with an empty set, so a token
    /// signed with a replaced key is never accepted from it.
    verified: Mutex<HashMap<Box<str>, Claims, foldhash::fast::RandomState>>,
}

impl Current {
    fn new(key: &[u8]) -> Self {
        Self {
            key: key.to_vec(),
            verified: Mutex::new(HashMap::default()),
        }
    }
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKeys").finish_non_exhaustive()
    }
}

/// The generated server key, if a server has made one.
pub async fn stored_generated_key(store: &dyn Store) -> Result<Option<String>, StoreError> {
    Ok(store::get_json::<String>(store, SERVER_KEY)
        .await?
        .map(|(key, _)| key))
}

/// The generated server key, read from the store or made on the first start.
pub async fn generated_key(store: &dyn Store) -> anyhow::Result<String> {
    if let Some(key) = stored_generated_key(store).await? {
        return Ok(key);
    }
    let key = base64::engine::general_purpose::STANDARD.encode(crate::random::bytes(32));
    match store
        .commit(vec![store::put_json(SERVER_KEY, &key, Expect::Absent)?])
        .await
    {
        Ok(_) => Ok(key),
        Err(StoreError::Conflict { .. }) => store::get_json::<String>(store, SERVER_KEY)
            .await?
            .map(|(key, _)| key)
            .ok_or_else(|| anyhow::anyhow!("the server key was written and then deleted")),
        Err(e) => Err(e.into()),
    }
}

/// The server key in force under `settings`: `server.secretkey`, else the generated one.
pub fn server_key<'a>(settings: &'a Settings, generated: &'a str) -> &'a str {
    settings.server_secret_key.as_deref().unwrap_or(generated)
}

impl TokenKeys {
    /// Reads the generated key from the store, making it on the first start. Replicas starting
    /// at once on one store agree: the first write wins (`Expect::Absent`), the others find it.
    /// The key is written once and never changed, so this process's copy cannot go stale.
    pub async fn open(store: &dyn Store, settings: &Settings) -> anyhow::Result<Self> {
        let keys = Self {
            current: ArcSwap::from_pointee(Current::new(&[])),
            generated: generated_key(store).await?,
        };
        keys.reload(settings);
        Ok(keys)
    }

    /// The server key in force under `settings`.
    pub fn server_key_of<'a>(&'a self, settings: &'a Settings) -> &'a str {
        server_key(settings, &self.generated)
    }

    /// Takes `server.secretkey` of new settings into effect.
    pub fn reload(&self, settings: &Settings) {
        let key = server_key(settings, &self.generated);
        if self.current.load().key != key.as_bytes() {
            self.current.store(Arc::new(Current::new(key.as_bytes())));
        }
    }

    /// The key that seals values for `purpose` (see [`crate::seal`]), derived from the
    /// server key in force: every server with the same server key derives the same one.
    pub fn sealing_key(&self, purpose: &'static str, id: u8) -> SealKey {
        SealKey::derive(&self.current.load().key, purpose, id)
    }

    /// Signs `claims` (HS256).
    pub fn sign(&self, claims: &Claims) -> String {
        jwt::sign(claims, &self.current.load().key)
    }

    /// The claims of a token this server signed, once its signature, issuer, expiry and
    /// not-before time check out (`now_s`: Unix seconds); else why not, for the caller.
    pub fn verify(&self, token: &str, now_s: i64) -> Result<Claims, String> {
        let current = self.current.load();
        let known = current
            .verified
            .lock()
            .ok()
            .and_then(|verified| verified.get(token).cloned());
        let claims = match known {
            Some(claims) => claims,
            None => {
                let claims = Self::check_signature(&current.key, token, now_s)?;
                if let Ok(mut verified) = current.verified.lock() {
                    if verified.len() >= VERIFIED_CAPACITY {
                        verified.retain(|_, c| c.exp.is_none_or(|exp| now_s < exp));
                        if verified.len() >= VERIFIED_CAPACITY {
                            verified.clear();
                        }
                    }
                    verified.insert(token.into(), claims.clone());
                }
                claims
            }
        };
        if claims.exp.is_some_and(|exp| now_s >= exp) {
            return Err("token is expired".to_owned());
        }
        if claims.nbf > now_s {
            return Err("token is not valid yet".to_owned());
        }
        Ok(claims)
    }

    /// The claims of `token` once its algorithm, signature, issuer and times (at `now_s`)
    /// check out.
    fn check_signature(key: &[u8], token: &str, now_s: i64) -> Result<Claims, String> {
        let unverified = jwt::decode(token).map_err(|e| e.to_string())?;
        // Only this server signs HS256 tokens; anything else would be an identity
        // provider's token, which is not trusted here.
        if unverified.algorithm() != "HS256" {
            return match unverified.claimed_issuer().as_deref() {
                Some(LOCAL_ISSUER) => Err(format!(
                    "token algorithm {:?} is not accepted (only HS256)",
                    unverified.algorithm()
                )),
                Some(_) => Err("token issuer is not trusted".to_owned()),
                None => Err("token has no issuer".to_owned()),
            };
        }
        let claims = unverified.verify_hs256(key, now_s).map_err(|e| e.to_string())?;
        if claims.iss != LOCAL_ISSUER {
            return Err("token issuer is not trusted".to_owned());
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;

    fn claims(exp: i64) -> Claims {
        Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: "alice:login".to_owned(),
            jti: "j".to_owned(),
            iat: 100,
            nbf: 100,
            exp: Some(exp),
            iat_ms: None,
        }
    }

    fn settings(key: &str) -> Settings {
        Settings {
            server_secret_key: Some(key.to_owned()),
            ..Settings::default()
        }
    }

    #[tokio::test]
    async fn a_remembered_token_is_still_checked_for_expiry_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let keys = TokenKeys::open(&store, &settings("first")).await.unwrap();
        // Far in the future, so that jsonwebtoken's own clock accepts it too.
        let exp = 4_000_000_000;
        let token = keys.sign(&claims(exp));
        assert_eq!(keys.verify(&token, 200).unwrap().sub, "alice:login");
        // Remembered now: the second check is answered from the set, with the same result.
        assert_eq!(keys.verify(&token, 200).unwrap().sub, "alice:login");
        assert_eq!(keys.verify(&token, exp).unwrap_err(), "token is expired");
        assert_eq!(keys.verify(&token, 99).unwrap_err(), "token is not valid yet");
        // Only the exact text: a changed signature is checked, and refused.
        let mut forged = token.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == 'A' { 'B' } else { 'A' });
        assert!(keys.verify(&forged, 200).is_err());
        // A new key forgets what the old one checked.
        keys.reload(&settings("second"));
        assert!(keys.verify(&token, 200).is_err());
        keys.reload(&settings("first"));
        assert!(keys.verify(&token, 200).is_ok());
    }

    #[tokio::test]
    async fn the_set_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        let keys = TokenKeys::open(&store, &settings("k")).await.unwrap();
        for i in 0..(VERIFIED_CAPACITY + 10) {
            let mut c = claims(4_000_000_000);
            c.jti = i.to_string();
            let token = keys.sign(&c);
            assert!(keys.verify(&token, 200).is_ok());
        }
        let held = keys.current.load().verified.lock().unwrap().len();
        assert!(held <= VERIFIED_CAPACITY, "{held} tokens held");
    }
}
