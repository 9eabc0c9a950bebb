//! Dashboard sessions started through single sign-on. The browser holds only a short token
//! naming the session (`sub: sso:<id>`, `jti: <id>`), however many groups the user has; the
//! verified ID token's claims stay on the server, in the store, so a session survives a
//! restart. A session ends at the ID token's expiry (or after `users.session.duration`, if
//! sooner), at logout, or when its provider (recorded with it) is no longer configured. On a
//! shared store each check reads the session's record, so a logout on one replica ends the
//! session on every replica at its next request; on a store this process alone writes, the
//! mirror of its own writes answers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::jwt::Claims;
use super::keys::TokenKeys;
use super::mirror::Mirror;
use crate::clock::Clock;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::principal::{LOCAL_ISSUER, Principal, SsoPrincipal};
use crate::store::{self, Expect, Op, Store, StoreError};

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
    /// The name of the provider the user logged in with (its logout ends the session there);
    /// "" in sessions recorded before there could be several: the default provider's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
}

pub struct SsoSessions {
    clock: Clock,
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    keys: Arc<TokenKeys>,
    /// The sessions by id (on an exclusive store).
    mirror: Mirror<SsoSession>,
}

impl SsoSessions {
    /// Forgets the sessions that have expired. `exclusive`: this process is the store's only
    /// writer, and checks answer from what it wrote.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        keys: Arc<TokenKeys>,
        exclusive: bool,
        clock: Clock,
    ) -> anyhow::Result<Self> {
        let mut sessions = Self {
            clock,
            store,
            config,
            keys,
            mirror: Mirror::off(),
        };
        sessions.purge().await?;
        // Only on an exclusive store: on a shared one, no session is answered while it cannot
        // be reached.
        if exclusive {
            // What does not read is left out, as [`Self::get`] does.
            let held = sessions.store.list(PREFIX).await?.into_iter().filter_map(|e| {
                let session = serde_json::from_slice::<SsoSession>(&e.value).ok()?;
                Some((e.key[PREFIX.len()..].to_owned(), e.mod_revision, session))
            });
            sessions.mirror = Mirror::load(true, held);
        }
        Ok(sessions)
    }

    /// Starts a session for a verified ID token; returns the small token that names it (the
    /// session cookie).
    pub async fn start(
        &self,
        claims: serde_json::Map<String, serde_json::Value>,
        id_token: String,
        provider: &str,
    ) -> Result<String, AppError> {
        let now = self.clock.now_s();
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
            provider: provider.to_owned(),
        };
        let op = store::put_json(&format!("{PREFIX}{sid}"), &session, Expect::Absent)
            .map_err(|e| AppError::Internal(e.into()))?;
        let revision = self
            .store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        self.mirror.note_written(&sid, revision, Some(session));
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

    /// Session `sid`, while it lasts (a record that does not read is no session).
    pub async fn get(&self, sid: &str) -> Result<Option<Arc<SsoSession>>, StoreError> {
        if let Some(held) = self.mirror.get(sid) {
            return Ok(held);
        }
        match store::get_json::<SsoSession>(self.store.as_ref(), &format!("{PREFIX}{sid}")).await {
            Ok(found) => Ok(found.map(|(s, _)| Arc::new(s))),
            Err(StoreError::Corrupt(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The caller of a verified session token: valid while its session is.
    pub async fn authenticate(&self, sid: &str, now: i64) -> Result<Principal, String> {
        let session = self
            .get(sid)
            .await
            .map_err(|e| format!("cannot check the session now: {e}"))?
            .ok_or_else(|| "the single sign-on session has ended, please log in again".to_owned())?;
        if now >= session.exp {
            return Err("token is expired".to_owned());
        }
        // The session is only as good as the configuration that let it in: SSO turned off,
        // its provider removed, or another issuer configured for it, ends it.
        let settings = self.config.peek();
        let provider = match session.provider.as_str() {
            "" => settings.oidc_providers.first(),
            name => settings.oidc_providers.iter().find(|p| p.id == name),
        };
        let stored = session.claims.get("iss").and_then(serde_json::Value::as_str);
        let Some(provider) = provider.filter(|p| Some(p.issuer.as_str()) == stored) else {
            return Err(
                "the single sign-on session's provider is no longer configured, please log in again"
                    .to_owned(),
            );
        };
        let principal = SsoPrincipal::from_claims(
            Arc::new(session.claims.clone()),
            session.iat,
            Some(session.exp),
            Some(sid.to_owned()),
        );
        Ok(Principal::Sso(crate::oidc::of_provider(principal, provider)))
    }

    /// Ends session `sid` at once (logout). Durable before it returns. A session id is never
    /// reused, so deleting whatever is there loses nothing.
    pub async fn end(&self, sid: &str) -> Result<(), AppError> {
        let op = Op::Delete {
            key: format!("{PREFIX}{sid}"),
            expect: Expect::Any,
        };
        let revision = self
            .store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        self.mirror.note_written(sid, revision, None);
        Ok(())
    }

    /// Forgets sessions that have expired (and records that do not read).
    pub async fn purge(&self) -> Result<(), AppError> {
        let now = self.clock.now_s();
        let entries = self
            .store
            .list(PREFIX)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        let gone = entries
            .into_iter()
            .filter(|e| {
                serde_json::from_slice::<SsoSession>(&e.value)
                    .ok()
                    .is_none_or(|s| s.exp < now)
            })
            .map(|e| Op::Delete {
                key: e.key,
                expect: Expect::ModRevision(e.mod_revision),
            })
            .collect();
        let purged = super::revocations::delete_in_batches(self.store.as_ref(), gone)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        for (key, revision) in &purged {
            self.mirror.note_written(&key[PREFIX.len()..], *revision, None);
        }
        Ok(())
    }
}
