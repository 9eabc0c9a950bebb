//! The persistent store: a small key-value interface shaped like etcd's (one store-wide revision,
//! per-key create/mod revisions, atomic multi-op commits with per-op preconditions), so that the
//! embedded [`FileStore`] and [`EtcdStore`] (several replicas on one etcd) are interchangeable.

pub mod etcd;
pub mod file;
mod outage;
pub mod shared_read;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use self::etcd::{Change, Changes, EtcdOptions, EtcdStore};
pub use self::file::FileStore;
pub use self::outage::Outage;

/// Which store a server (or a tool) opens.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The embedded redb file in this data directory (one process at a time).
    File(PathBuf),
    /// A prefix of an etcd cluster, shared by every replica.
    Etcd(EtcdOptions),
}

impl Backend {
    /// Opens the store. [`FileStore::open`] blocks, so it runs on the blocking pool.
    pub async fn open(&self) -> Result<Arc<dyn Store>, StoreError> {
        Ok(match self {
            Backend::File(dir) => {
                let dir = dir.clone();
                let store = tokio::task::spawn_blocking(move || FileStore::open(&dir))
                    .await
                    .map_err(|e| StoreError::Unavailable(format!("cannot open the store: {e}")))??;
                Arc::new(store)
            }
            Backend::Etcd(options) => Arc::new(EtcdStore::connect(options.clone()).await?),
        })
    }

    /// Whether this process is the store's only user (redb's exclusive lock): what it wrote
    /// is all there is, so nothing changes behind its back.
    pub fn is_exclusive(&self) -> bool {
        matches!(self, Backend::File(_))
    }
}

/// The store-wide revision: 0 for an empty store, +1 per successful commit.
pub type Revision = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Vec<u8>,
    /// The revision of the commit that created the key (since it was last absent).
    pub create_revision: Revision,
    /// The revision of the commit that last wrote the key.
    pub mod_revision: Revision,
}

/// A precondition on one key, checked against the state before the commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Any,
    Absent,
    /// The key exists and was last written at this revision.
    ModRevision(Revision),
    /// The key is absent or was last written at or before this revision (of a prefix: every
    /// key under it; deleted keys are not seen).
    NotAfter(Revision),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Put {
        key: String,
        value: Vec<u8>,
        expect: Expect,
    },
    Delete {
        key: String,
        expect: Expect,
    },
    /// Writes nothing: the commit takes place only if `key` is as expected.
    Check {
        key: String,
        expect: Expect,
    },
    /// Writes nothing: the commit takes place only if no key under `prefix` was written after
    /// revision `since` (a condition on a range, as etcd's compares allow).
    Unchanged {
        prefix: String,
        since: Revision,
    },
}

impl Op {
    /// The key written or checked (the prefix of an [`Op::Unchanged`]).
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key, .. } | Op::Check { key, .. } => key,
            Op::Unchanged { prefix, .. } => prefix,
        }
    }

    pub fn expect(&self) -> Expect {
        match self {
            Op::Put { expect, .. } | Op::Delete { expect, .. } | Op::Check { expect, .. } => *expect,
            Op::Unchanged { since, .. } => Expect::NotAfter(*since),
        }
    }

    /// Whether this op writes (puts or deletes) rather than only checks.
    pub fn writes(&self) -> bool {
        matches!(self, Op::Put { .. } | Op::Delete { .. })
    }
}

#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError>;
    /// Several keys read at one consistent point, in the order given.
    async fn get_many(&self, keys: Vec<String>) -> Result<Vec<Option<Entry>>, StoreError>;
    /// Every entry whose key starts with `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<Entry>, StoreError>;
    /// Applies all ops atomically and durably (acknowledged = survives kill -9 and power loss) or
    /// none. Every successful commit advances the one store-wide revision by exactly 1; returns it.
    /// Deleting an absent key with [`Expect::Any`] is a no-op; a key may appear only once per batch
    /// (as in an etcd transaction), so every precondition sees the state before the commit.
    async fn commit(&self, ops: Vec<Op>) -> Result<Revision, StoreError>;
    /// Several independent commits, in order: each is checked against the state its
    /// predecessors left, takes its own revision and has its own outcome (one whose
    /// preconditions fail does not stop the others). The embedded store makes them durable
    /// together, with one fsync (group commit); by default they are committed one by one.
    async fn commit_each(&self, batches: Vec<Vec<Op>>) -> Vec<Result<Revision, StoreError>> {
        let mut out = Vec::with_capacity(batches.len());
        for ops in batches {
            out.push(self.commit(ops).await);
        }
        out
    }
    async fn revision(&self) -> Result<Revision, StoreError>;
    /// Every entry under each of `prefixes` (in key order, one list per prefix), all read at one
    /// revision, and that revision: the start of a view that then follows [`Store::feed`].
    async fn snapshot(&self, prefixes: &[&str]) -> Result<(Vec<Vec<Entry>>, Revision), StoreError>;
    /// The store's changes from `revision` on (inclusive), when others may write it too (etcd);
    /// `None` for a store this process owns alone, where its own writes are all there is.
    fn feed(&self, _revision: Revision) -> Option<Box<dyn Feed>> {
        None
    }
    /// Whether others may write the store too (then [`Store::feed`] gives their changes).
    fn is_shared(&self) -> bool {
        false
    }
}

/// Every commit to a shared store, in revision order and without gaps (see [`Store::feed`]).
#[async_trait::async_trait]
pub trait Feed: Send + 'static {
    /// The next commit's changes. [`StoreError::Compacted`]: the store no longer has them (take
    /// a new snapshot); `Unavailable`: no member answered for a while (calling again goes on
    /// from where it stopped).
    async fn next(&mut self) -> Result<Changes, StoreError>;
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("conflict on {key}: expected {expected}, found {}", Found(*.actual))]
    Conflict {
        key: String,
        expected: Expect,
        actual: Option<Revision>,
    },
    /// The store cannot be reached or used right now (in use, I/O error); retrying may help.
    #[error("{0}")]
    Unavailable(String),
    /// Stored data cannot be read back; never repaired by overwriting.
    #[error("{0}")]
    Corrupt(String),
    /// The request itself is wrong (a key twice in one batch, a value that cannot be encoded).
    #[error("{0}")]
    Invalid(String),
    /// The backend refuses this server's identity the request (the Kubernetes API server's
    /// RBAC): retrying does not help until someone grants it.
    #[error("{0}")]
    Forbidden(String),
    /// A watch asked for revisions the store no longer keeps (etcd compacted them): list again.
    #[error("revision {requested} has been compacted (the oldest kept is {oldest}): list again")]
    Compacted { requested: Revision, oldest: Revision },
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Any => f.write_str("any state"),
            Expect::Absent => f.write_str("absent"),
            Expect::ModRevision(r) => write!(f, "mod revision {r}"),
            Expect::NotAfter(r) => write!(f, "no write after revision {r}"),
        }
    }
}

struct Found(Option<Revision>);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("absent"),
            Some(r) => write!(f, "mod revision {r}"),
        }
    }
}

/// Refuses a batch that names a key twice (as etcd does): every precondition must see the
/// state before the commit.
pub(crate) fn keys_once(ops: &[Op]) -> Result<(), StoreError> {
    let mut seen = std::collections::HashSet::new();
    match ops.iter().find(|op| !seen.insert(op.key())) {
        Some(op) => Err(StoreError::Invalid(format!(
            "key {} appears twice in one commit",
            op.key()
        ))),
        None => Ok(()),
    }
}

/// Checks one precondition; `actual` is the key's current mod revision, if it exists.
pub(crate) fn check(key: &str, expected: Expect, actual: Option<Revision>) -> Result<(), StoreError> {
    let ok = match expected {
        Expect::Any => true,
        Expect::Absent => actual.is_none(),
        Expect::ModRevision(r) => actual == Some(r),
        Expect::NotAfter(r) => actual.is_none_or(|a| a <= r),
    };
    if ok {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            key: key.to_owned(),
            expected,
            actual,
        })
    }
}

/// Reads `key` as JSON; returns the value and its mod revision (for an [`Expect::ModRevision`]).
pub async fn get_json<T: DeserializeOwned>(
    store: &dyn Store,
    key: &str,
) -> Result<Option<(T, Revision)>, StoreError> {
    let Some(entry) = store.get(key).await? else {
        return Ok(None);
    };
    let value = serde_json::from_slice(&entry.value)
        .map_err(|e| StoreError::Corrupt(format!("stored value of {key} is not the expected JSON: {e}")))?;
    Ok(Some((value, entry.mod_revision)))
}

/// A put of `value` encoded as JSON.
pub fn put_json<T: Serialize>(key: &str, value: &T, expect: Expect) -> Result<Op, StoreError> {
    let value = serde_json::to_vec(value)
        .map_err(|e| StoreError::Invalid(format!("cannot encode the value of {key} as JSON: {e}")))?;
    Ok(Op::Put {
        key: key.to_owned(),
        value,
        expect,
    })
}

/// The JSON records under `prefix` that `keep` accepts, by key; the others, and records that do
/// not parse, are deleted (in one commit). For state whose entries expire and may be lost.
pub async fn load_live<T: DeserializeOwned>(
    store: &dyn Store,
    prefix: &str,
    keep: impl Fn(&T) -> bool,
) -> Result<Vec<(String, T)>, StoreError> {
    let mut live = Vec::new();
    let mut gone = Vec::new();
    for entry in store.list(prefix).await? {
        match serde_json::from_slice::<T>(&entry.value) {
            Ok(record) if keep(&record) => {
                live.push((entry.key, record));
            }
            _ => gone.push(Op::Delete {
                key: entry.key,
                expect: Expect::Any,
            }),
        }
    }
    if !gone.is_empty() {
        store.commit(gone).await?;
    }
    Ok(live)
}
