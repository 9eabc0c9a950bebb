//! The key every local token is signed with, and the two things done with it: signing a
//! token's claims, and checking a presented token up to its standard claims.
//!
//! The key is `server.secretkey` from `argocd-secret` when set (its literal text, as Argo CD
//! uses it, so Argo CD's tokens stay valid), else a random key the server generated on its
//! first start and keeps in its store. Editing the secret takes effect on the next reload.
//!
//! Other secrets derived from it ([`TokenKeys::sealing_key`]) come through HKDF with a purpose
//! label: the signing key itself only ever signs.

use std::sync::Arc;

use arc_swap::ArcSwap;
use base64::Engine as _;

use super::jwt::{self, Claims};
use crate::config::Settings;
use crate::principal::LOCAL_ISSUER;
use crate::seal::SealKey;
use crate::store::{self, Expect, Store};

/// Where the generated key is kept.
const SERVER_KEY: &str = "server/secretkey";

pub struct TokenKeys {
    generated: String,
    key: ArcSwap<Vec<u8>>,
}

impl std::fmt::Debug for TokenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenKeys").finish_non_exhaustive()
    }
}

impl TokenKeys {
    /// Reads the generated key from the store, making it on the first start.
    pub async fn open(store: &dyn Store, settings: &Settings) -> anyhow::Result<Self> {
        let generated = match store::get_json::<String>(store, SERVER_KEY).await? {
            Some((key, _)) => key,
            None => {
                let key = base64::engine::general_purpose::STANDARD.encode(crate::random::bytes(32));
                store
                    .commit(vec![store::put_json(SERVER_KEY, &key, Expect::Absent)?])
                    .await?;
                key
            }
        };
        let keys = Self {
            key: ArcSwap::from_pointee(Vec::new()),
            generated,
        };
        keys.reload(settings);
        Ok(keys)
    }

    /// Takes `server.secretkey` of new settings into effect.
    pub fn reload(&self, settings: &Settings) {
        let key = settings.server_secret_key.as_deref().unwrap_or(&self.generated);
        if **self.key.load() != key.as_bytes() {
            self.key.store(Arc::new(key.as_bytes().to_vec()));
        }
    }

    /// The key that seals values for `purpose` (see [`crate::seal`]), derived from the
    /// server key in force: every server with the same server key derives the same one.
    pub fn sealing_key(&self, purpose: &'static str, id: u8) -> SealKey {
        SealKey::derive(&self.key.load(), purpose, id)
    }

    /// Signs `claims` (HS256).
    pub fn sign(&self, claims: &Claims) -> String {
        jwt::sign(claims, &self.key.load())
    }

    /// The claims of a token this server signed, once its signature, issuer, expiry and
    /// not-before time check out (`now_s`: Unix seconds); else why not, for the caller.
    pub fn verify(&self, token: &str, now_s: i64) -> Result<Claims, String> {
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
        let claims = unverified
            .verify_hs256(&self.key.load())
            .map_err(|e| e.to_string())?;
        if claims.iss != LOCAL_ISSUER {
            return Err("token issuer is not trusted".to_owned());
        }
        if claims.exp.is_some_and(|exp| now_s >= exp) {
            return Err("token is expired".to_owned());
        }
        if claims.nbf > now_s {
            return Err("token is not valid yet".to_owned());
        }
        Ok(claims)
    }
}
