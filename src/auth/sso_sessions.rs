//! Dashboard sessions started through single sign-on. The browser holds only a short token
//! naming the session (`sub: sso:<id>`, `jti: <id>`), however many groups the user has; the
//! verified ID token's claims stay on the server, in the store, so a session survives a
//! restart. A session ends at the ID token's expiry (or after `users.session.duration`, if
//! sooner), at logout, or when its provider is no longer the one configured.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use super::jwt::Claims;
use super::keys::TokenKeys;
use crate::clock::now_s;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::principal::{LOCAL_ISSUER, Principal, SsoPrincipal};
use crate::store::{self, Expect, Op, Store};

/// Sessions in the store, by session id.
const PREFIX: &str = "sso/";
/// The subject of a session's token is `sso:<session id>`: it cannot be an account's
/// `<name>:login` token.
pub const SUBJECT_PREFIX: &str = "sso:";

/// One session.
#[derive(Clone, Serialize, Deserialize)]
pub struct SsoSession {
    /// The verified ID token's claims.
    pub claims: serde_json::Map<String, serde_json::Value>,
    /// The ID token itself, for the provider's logout (`id_token_hint`, `{{token}}`).
    pub id_token: String,
    /// Unix seconds.
    pub iat: i64,
    pub exp: i64,
}

pub struct SsoSessions {
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    keys: Arc<TokenKeys>,
    sessions: RwLock<HashMap<String, Arc<SsoSession>>>,
}

impl SsoSessions {
    /// Loads the sessions that have not expired.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        keys: Arc<TokenKeys>,
    ) -> anyhow::Result<Self> {
        let now = now_s();
        let sessions = store::load_live(store.as_ref(), PREFIX, |s: &SsoSession| s.exp >= now)
            .await?
            .into_iter()
            .map(|(key, session)| (key[PREFIX.len()..].to_owned(), Arc::new(session)))
            .collect();
        Ok(Self {
            store,
            config,
            keys,
            sessions: RwLock::new(sessions),
        })
    }

    /// Starts a session for a verified ID token; returns the small token that names it (the
    /// session cookie).
    pub async fn start(
        &self,
        claims: serde_json::Map<String, serde_json::Value>,
        id_token: String,
    ) -> Result<String, AppError> {
        let now = now_s();
        let duration = i64::try_from(self.config.peek().session_duration.as_secs()).unwrap_or(i64::MAX);
        let token_exp = claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .map_or(i64::MAX, |e| e as i64);
        let exp = token_exp.min(now.saturating_add(duration));
        let sid = crate::random::token(32);
        let session = SsoSession {
            claims,
            id_token,
            iat: now,
            exp,
        };
        let op = store::put_json(&format!("{PREFIX}{sid}"), &session, Expect::Absent)
            .map_err(|e| AppError::Internal(e.into()))?;
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut sessions) = self.sessions.write() {
            sessions.insert(sid.clone(), Arc::new(session));
        }
        Ok(self.keys.sign(&Claims {
            iss: LOCAL_ISSUER.to_owned(),
            sub: format!("{SUBJECT_PREFIX}{sid}"),
            jti: sid,
            iat: now,
            nbf: now,
            exp: Some(exp),
            iat_ms: None,
        }))
    }

    /// Session `sid`, while it lasts.
    pub fn get(&self, sid: &str) -> Option<Arc<SsoSession>> {
        self.sessions.read().ok()?.get(sid).cloned()
    }

    /// The caller of a verified session token: valid while its session is.
    pub fn authenticate(&self, sid: &str, now: i64) -> Result<Principal, String> {
        let session = self
            .get(sid)
            .ok_or_else(|| "the single sign-on session has ended, please log in again".to_owned())?;
        if now >= session.exp {
            return Err("token is expired".to_owned());
        }
        // The session is only as good as the configuration that let it in: SSO turned off,
        // or another provider configured, ends it.
        let settings = self.config.peek();
        let configured = settings.oidc.as_ref().map(|o| o.issuer.as_str());
        let stored = session.claims.get("iss").and_then(serde_json::Value::as_str);
        if configured.is_none() || configured != stored {
            return Err(
                "the single sign-on session's provider is no longer configured, please log in again"
                    .to_owned(),
            );
        }
        Ok(Principal::Sso(SsoPrincipal::from_claims(
            Arc::new(session.claims.clone()),
            session.iat,
            Some(session.exp),
            Some(sid.to_owned()),
        )))
    }

    /// Ends session `sid` at once (logout). Durable before it returns.
    pub async fn end(&self, sid: &str) -> Result<(), AppError> {
        let op = Op::Delete {
            key: format!("{PREFIX}{sid}"),
            expect: Expect::Any,
        };
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut sessions) = self.sessions.write() {
            sessions.remove(sid);
        }
        Ok(())
    }

    /// Forgets sessions that have expired.
    pub async fn purge(&self) -> Result<(), AppError> {
        let now = now_s();
        let gone: Vec<String> = match self.sessions.read() {
            Ok(m) => m
                .iter()
                .filter(|(_, s)| s.exp < now)
                .map(|(sid, _)| sid.clone())
                .collect(),
            Err(_) => return Ok(()),
        };
        for sid in gone {
            self.end(&sid).await?;
        }
        Ok(())
    }
}
