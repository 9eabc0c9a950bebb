//! Revoked token ids (logouts), kept in the store until the token would have expired anyway.
//! On a shared store a token check reads its id's record (with the account's, in one read,
//! see [`super::tokens`]), so a logout on one replica refuses the token on every replica at
//! its next request; on a store this process alone writes, the mirror of its own revocations
//! answers. Either way a revocation is durable before the logout is answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::{Deserialize, Serialize};

use super::mirror::Mirror;
use super::shared_revocations::SharedRevocations;
use crate::clock::Clock;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::store::{self, Entry, Expect, Op, Revision, Store, StoreError};

const PREFIX: &str = "revoked/";
/// Conflicting writers of one revocation before giving up.
const ATTEMPTS: usize = 16;
/// etcd's limit of operations in one transaction.
pub const MAX_BATCH: usize = 128;

#[derive(Serialize, Deserialize)]
struct Revoked {
    /// Unix seconds the revoked token expires at; `None` never.
    exp: Option<i64>,
}

pub struct Revocations {
    clock: Clock,
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    /// Revocations held at the last purge (a metric only; never consulted).
    held: AtomicUsize,
    /// Token id → when its revocation may be forgotten.
    mirror: Mirror<Option<i64>>,
    /// Argo CD's Redis, where upstream's argocd-server keeps its revocations too.
    shared: Option<Arc<SharedRevocations>>,
}

/// The store key of token id `jti`'s revocation.
pub fn key(jti: &str) -> String {
    format!("{PREFIX}{jti}")
}

/// Whether a stored revocation record means "revoked". A record that does not read counts as
/// one: dropping it would bring a logged-out token back.
pub fn is_revocation(entry: Option<&Entry>) -> bool {
    entry.is_some()
}

impl Revocations {
    /// Forgets the revocations of tokens expired anyway. `exclusive`: this process is the
    /// store's only writer, and checks answer from what it wrote.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        exclusive: bool,
        clock: Clock,
    ) -> anyhow::Result<Self> {
        let mut revocations = Self {
            clock,
            store,
            config,
            held: AtomicUsize::new(0),
            mirror: Mirror::off(),
            shared: None,
        };
        revocations.purge().await?;
        // A record that does not read is still a revocation, never forgotten.
        let held = revocations
            .store
            .list(PREFIX)
            .await?
            .into_iter()
            .map(|e| (e.key[PREFIX.len()..].to_owned(), e.mod_revision, expiry(&e)));
        revocations.mirror = Mirror::load(exclusive, held);
        Ok(revocations)
    }

    /// These revocations, shared through `shared` (Argo CD's Redis) when given.
    #[must_use]
    pub fn sharing(mut self, shared: Option<Arc<SharedRevocations>>) -> Self {
        self.shared = shared;
        self
    }

    /// Whether token id `jti` was revoked by another server of the installation (upstream's
    /// argocd-server, through Redis).
    pub fn revoked_elsewhere(&self, jti: &str) -> bool {
        self.shared.as_ref().is_some_and(|s| s.is_revoked(jti))
    }

    /// Whether token id `jti` is revoked, as the store says now.
    pub async fn is_revoked(&self, jti: &str) -> Result<bool, StoreError> {
        match self.held(jti) {
            Some(revoked) => Ok(revoked),
            None => Ok(is_revocation(self.store.get(&key(jti)).await?.as_ref())),
        }
    }

    /// Whether token id `jti` is revoked, from the mirror: `None` when the store must be read
    /// (it is shared).
    pub fn held(&self, jti: &str) -> Option<bool> {
        self.mirror.get(jti).map(|held| held.is_some())
    }

    /// Whether token id `jti` was revoked as last written or read here, for a shared store that
    /// cannot be reached.
    pub fn last_known(&self, jti: &str) -> bool {
        self.mirror.last_known(jti).is_some()
    }

    /// Token id `jti`'s revocation record as read from the store.
    pub fn note_read(&self, jti: &str, entry: &Entry) {
        self.mirror
            .note_written(jti, entry.mod_revision, Some(expiry(entry)));
    }

    /// Revokes token id `jti` of a token expiring at `exp` until then. Durable before it
    /// returns. Two replicas revoking one id keep the later expiry.
    pub async fn revoke(&self, jti: &str, exp: Option<i64>) -> Result<(), AppError> {
        if jti.is_empty() {
            return Ok(());
        }
        self.revoke_stored(jti, exp).await?;
        if let Some(shared) = &self.shared {
            let ttl = exp
                .map(|e| std::time::Duration::from_secs(u64::try_from(e - self.clock.now_s()).unwrap_or(0)));
            shared.revoke(jti, ttl).await?;
        }
        Ok(())
    }

    /// [`Revocations::revoke`] in the store.
    async fn revoke_stored(&self, jti: &str, exp: Option<i64>) -> Result<(), AppError> {
        // A token renewed from this session right now would expire one session duration
        // from now: the revocation must outlive it.
        let duration = i64::try_from(self.config.peek().session_duration.as_secs()).unwrap_or(i64::MAX);
        let horizon = self.clock.now_s().saturating_add(duration);
        let exp = exp.map(|e| e.max(horizon));
        let key = key(jti);
        for _ in 0..ATTEMPTS {
            let stored = store::get_json::<Revoked>(self.store.as_ref(), &key).await;
            let expect = match stored {
                Ok(Some((held, _))) if covers(held.exp, exp) => return Ok(()),
                Ok(Some((_, rev))) => Expect::ModRevision(rev),
                Ok(None) => Expect::Absent,
                // Unreadable: replaced by a good record (still a revocation either way).
                Err(StoreError::Corrupt(_)) => match self.store.get(&key).await.map_err(internal)? {
                    Some(entry) => Expect::ModRevision(entry.mod_revision),
                    None => Expect::Absent,
                },
                Err(e) => return Err(internal(e)),
            };
            let op = store::put_json(&key, &Revoked { exp }, expect).map_err(internal)?;
            match self.store.commit(vec![op]).await {
                Ok(revision) => {
                    self.mirror.note_written(jti, revision, Some(exp));
                    if expect == Expect::Absent {
                        self.held.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(internal(e)),
            }
        }
        Err(AppError::Unavailable(format!(
            "the revocation of token {jti} kept changing: try again"
        )))
    }

    /// Forgets revocations of tokens that have expired anyway; how many.
    pub async fn purge(&self) -> Result<usize, AppError> {
        let now = self.clock.now_s();
        let entries = self.store.list(PREFIX).await.map_err(internal)?;
        let held = entries.len();
        let gone: Vec<Op> = entries
            .into_iter()
            .filter(|e| {
                serde_json::from_slice::<Revoked>(&e.value).is_ok_and(|r| r.exp.is_some_and(|x| x < now))
            })
            .map(|e| Op::Delete {
                key: e.key,
                // Extended meanwhile (a second logout of a renewed token): kept.
                expect: Expect::ModRevision(e.mod_revision),
            })
            .collect();
        let purged = delete_in_batches(self.store.as_ref(), gone)
            .await
            .map_err(internal)?;
        for (key, revision) in &purged {
            self.mirror.note_written(&key[PREFIX.len()..], *revision, None);
        }
        // Also those another replica purged.
        self.mirror.retain(|exp| exp.is_none_or(|x| x >= now));
        self.held.store(held - purged.len(), Ordering::Relaxed);
        Ok(purged.len())
    }

    /// Revocations held (a metric: counted at each purge, plus this process's since).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// When a stored revocation may be forgotten; never for a record that does not read.
fn expiry(entry: &Entry) -> Option<i64> {
    serde_json::from_slice::<Revoked>(&entry.value)
        .ok()
        .and_then(|r| r.exp)
}

/// Whether a held revocation lasting until `held` already covers one until `wanted`.
fn covers(held: Option<i64>, wanted: Option<i64>) -> bool {
    match (held, wanted) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(h), Some(w)) => h >= w,
    }
}

/// Conditional deletes, in transactions of at most [`MAX_BATCH`] ops. A batch that conflicts
/// (a record changed since it was listed) is retried without the records that changed, so
/// nothing written meanwhile is deleted. Returns the keys deleted, each with the revision of
/// the commit that deleted it.
pub async fn delete_in_batches(
    store: &dyn Store,
    deletes: Vec<Op>,
) -> Result<Vec<(String, Revision)>, StoreError> {
    let mut deleted = Vec::new();
    for chunk in deletes.chunks(MAX_BATCH) {
        let mut batch = chunk.to_vec();
        // Each conflict removes one op, so this ends.
        while !batch.is_empty() {
            match store.commit(batch.clone()).await {
                Ok(revision) => {
                    deleted.extend(batch.into_iter().map(|op| (op.key().to_owned(), revision)));
                    break;
                }
                Err(StoreError::Conflict { key, .. }) => batch.retain(|op| op.key() != key),
                Err(e) => return Err(e),
            }
        }
    }
    Ok(deleted)
}

fn internal(e: impl Into<anyhow::Error>) -> AppError {
    AppError::Internal(e.into())
}
