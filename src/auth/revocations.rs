//! Revoked token ids (logouts), kept until the token would have expired anyway. Written to
//! the store before a logout is answered, so a revocation survives a restart.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::clock::now_s;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::store::{self, Expect, Op, Store};

const PREFIX: &str = "revoked/";

#[derive(Serialize, Deserialize)]
struct Revoked {
    /// Unix seconds the revoked token expires at; `None` never.
    exp: Option<i64>,
}

pub struct Revocations {
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    /// Token id → when the revocation may be forgotten.
    revoked: RwLock<HashMap<String, Option<i64>>>,
}

impl Revocations {
    /// Loads the revocations in force, forgetting the expired ones. A record that does not
    /// read is an error, not dropped (`store::load_live` drops it): that would bring a
    /// logged-out token back.
    pub async fn open(store: Arc<dyn Store>, config: Arc<ConfigWatch>) -> anyhow::Result<Self> {
        let now = now_s();
        let mut revoked = HashMap::new();
        let mut expired = Vec::new();
        for entry in store.list(PREFIX).await? {
            let jti = entry.key.trim_start_matches(PREFIX).to_owned();
            let r: Revoked = serde_json::from_slice(&entry.value)?;
            if r.exp.is_some_and(|exp| exp < now) {
                expired.push(Op::Delete {
                    key: entry.key,
                    expect: Expect::Any,
                });
            } else {
                revoked.insert(jti, r.exp);
            }
        }
        if !expired.is_empty() {
            store.commit(expired).await?;
        }
        Ok(Self {
            store,
            config,
            revoked: RwLock::new(revoked),
        })
    }

    /// Whether token id `jti` is revoked (a poisoned lock reads as revoked).
    pub fn is_revoked(&self, jti: &str) -> bool {
        self.revoked.read().map(|r| r.contains_key(jti)).unwrap_or(true)
    }

    /// Revokes token id `jti` of a token expiring at `exp` until then. Durable before it
    /// returns.
    pub async fn revoke(&self, jti: &str, exp: Option<i64>) -> Result<(), AppError> {
        if jti.is_empty() {
            return Ok(());
        }
        // A token renewed from this session right now would expire one session duration
        // from now: the revocation must outlive it.
        let duration = i64::try_from(self.config.peek().session_duration.as_secs()).unwrap_or(i64::MAX);
        let horizon = now_s().saturating_add(duration);
        let exp = exp.map(|e| e.max(horizon));
        let op = store::put_json(&format!("{PREFIX}{jti}"), &Revoked { exp }, Expect::Any)
            .map_err(|e| AppError::Internal(e.into()))?;
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut revoked) = self.revoked.write() {
            revoked.insert(jti.to_owned(), exp);
        }
        Ok(())
    }

    /// Forgets revocations of tokens that have expired anyway; how many.
    pub async fn purge(&self) -> Result<usize, AppError> {
        let now = now_s();
        let gone: Vec<String> = match self.revoked.read() {
            Ok(r) => r
                .iter()
                .filter(|(_, exp)| exp.is_some_and(|e| e < now))
                .map(|(jti, _)| jti.clone())
                .collect(),
            Err(_) => return Ok(0),
        };
        if gone.is_empty() {
            return Ok(0);
        }
        let ops = gone
            .iter()
            .map(|jti| Op::Delete {
                key: format!("{PREFIX}{jti}"),
                expect: Expect::Any,
            })
            .collect();
        self.store
            .commit(ops)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut revoked) = self.revoked.write() {
            for jti in &gone {
                revoked.remove(jti);
            }
        }
        Ok(gone.len())
    }

    /// Revocations held (a metric).
    pub fn len(&self) -> usize {
        self.revoked.read().map(|r| r.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
