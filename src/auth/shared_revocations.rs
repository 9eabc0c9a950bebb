//! Revoked tokens shared with upstream's argocd-server through Argo CD's Redis (`--redis`), as
//! upstream's userStateStorage (util/session/state.go) keeps them: a logout sets
//! `revoked-token|<jti>` (empty, expiring with the token) and publishes the id on
//! `new-revoked-token`; every server holds the set of revoked ids in memory, adds what the
//! channel announces, and lists the keys again every 15 s. So a logout on either server refuses
//! the token on both.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::AsyncCommands as _;

use crate::error::AppError;

const PREFIX: &str = "revoked-token|";
const CHANNEL: &str = "new-revoked-token";
/// How often the whole set is listed again (upstream's resync period).
const RESYNC: Duration = Duration::from_secs(15);
/// Pause before the channel is subscribed to again after it failed.
const RESUBSCRIBE: Duration = Duration::from_secs(1);
/// How long one Redis call may take.
const CALL: Duration = Duration::from_secs(5);

pub struct SharedRevocations {
    client: redis::Client,
    conn: redis::aio::ConnectionManager,
    /// `host:port`, as messages name it.
    addr: String,
    revoked: RwLock<HashSet<String>>,
    /// Ids learnt since the last listing began: kept when it replaces the set.
    recent: Mutex<HashSet<String>>,
}

impl SharedRevocations {
    /// Connects to Redis at `addr` (`host:port`), lists the revoked ids and follows them until
    /// the returned value is dropped. An unreachable Redis stops the start, naming it.
    pub async fn connect(addr: &str) -> anyhow::Result<Arc<Self>> {
        let client = redis::Client::open(format!("redis://{addr}/"))
            .map_err(|e| anyhow::anyhow!("--redis {addr}: {e}"))?;
        let conn = tokio::time::timeout(CALL, client.get_connection_manager())
            .await
            .map_err(|_| anyhow::anyhow!("Redis at {addr} did not answer within {CALL:?}"))?
            .map_err(|e| anyhow::anyhow!("cannot reach Redis at {addr}: {e}"))?;
        let shared = Arc::new(Self {
            client,
            conn,
            addr: addr.to_owned(),
            revoked: RwLock::new(HashSet::new()),
            recent: Mutex::new(HashSet::new()),
        });
        shared
            .relist()
            .await
            .map_err(|e| anyhow::anyhow!("cannot list the revoked tokens in Redis at {addr}: {e}"))?;
        tokio::spawn(follow(Arc::downgrade(&shared)));
        tokio::spawn(resync(Arc::downgrade(&shared)));
        Ok(shared)
    }

    /// Whether token id `jti` is revoked, as this server last heard.
    pub fn is_revoked(&self, jti: &str) -> bool {
        self.revoked
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(jti)
    }

    /// Revokes token id `jti` for `ttl` (`None`: a token that never expires) and tells the
    /// other servers.
    pub async fn revoke(&self, jti: &str, ttl: Option<Duration>) -> Result<(), AppError> {
        self.learn(jti.to_owned());
        let mut conn = self.conn.clone();
        let key = format!("{PREFIX}{jti}");
        let unavailable = |e: redis::RedisError| {
            AppError::Unavailable(format!("cannot record the logout in Redis at {}: {e}", self.addr))
        };
        let call = async {
            match ttl {
                Some(ttl) => conn.set_ex::<_, _, ()>(&key, "", ttl.as_secs().max(1)).await,
                None => conn.set::<_, _, ()>(&key, "").await,
            }?;
            conn.publish::<_, _, ()>(CHANNEL, jti).await
        };
        tokio::time::timeout(CALL, call)
            .await
            .map_err(|_| {
                AppError::Unavailable(format!("Redis at {} did not answer within {CALL:?}", self.addr))
            })?
            .map_err(unavailable)
    }

    fn learn(&self, jti: String) {
        self.recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(jti.clone());
        self.revoked
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(jti);
    }

    /// Lists `revoked-token|*` and makes it the set (with what was learnt meanwhile).
    async fn relist(&self) -> redis::RedisResult<()> {
        let recent = std::mem::take(&mut *self.recent.lock().unwrap_or_else(PoisonError::into_inner));
        let mut conn = self.conn.clone();
        let mut listed = HashSet::new();
        {
            let mut keys = conn.scan_match::<_, String>(format!("{PREFIX}*")).await?;
            while let Some(key) = keys.next_item().await {
                match key?.strip_prefix(PREFIX) {
                    Some(jti) if !jti.contains('|') => {
                        listed.insert(jti.to_owned());
                    }
                    _ => {}
                }
            }
        }
        listed.extend(recent);
        listed.extend(
            self.recent
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned(),
        );
        *self.revoked.write().unwrap_or_else(PoisonError::into_inner) = listed;
        Ok(())
    }
}

/// Adds the ids published on the channel, subscribing again when it fails; ends with `shared`.
async fn follow(shared: Weak<SharedRevocations>) {
    loop {
        let Some(client) = shared.upgrade().map(|s| s.client.clone()) else {
            return;
        };
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => {
                if pubsub.subscribe(CHANNEL).await.is_ok() {
                    let mut messages = pubsub.on_message();
                    while let Some(msg) = messages.next().await {
                        let Some(this) = shared.upgrade() else {
                            return;
                        };
                        if let Ok(jti) = msg.get_payload::<String>() {
                            this.learn(jti);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!("cannot follow revoked tokens in Redis (trying again): {e}"),
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}

/// Lists the revoked ids again every [`RESYNC`]; ends with `shared`.
async fn resync(shared: Weak<SharedRevocations>) {
    loop {
        tokio::time::sleep(RESYNC).await;
        let Some(this) = shared.upgrade() else {
            return;
        };
        if let Err(e) = this.relist().await {
            tracing::warn!(
                "cannot list the revoked tokens in Redis at {} (trying again): {e}",
                this.addr
            );
        }
    }
}
