//! The registry: every Application, AppProject, Cluster, Repository and credential template,
//! as documents keyed by kind, namespace and name, with one monotonically increasing
//! `resourceVersion` (the registry revision) shared by all kinds.
//!
//! The [`Store`] holds the durable copy: each write batch is one atomic, fsynced commit that
//! also records the new revision, so an acknowledged write survives `kill -9`. An in-memory
//! index answers reads, and a bounded history of events lets watches resume. Writes are
//! serialized; optimistic concurrency compares the caller's `resourceVersion` with the stored
//! one, so a stale write is refused and nothing is overwritten.

mod doc;
mod kind;
mod projects;
#[cfg(test)]
mod tests;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use serde_json::{Map, Value};

pub use self::doc::{Doc, DocRef, Summary};
pub use self::kind::{Key, Kind};
pub use self::projects::RegistryProjects;
use self::watch::History;
pub use self::watch::{Event, EventType, Subscription, WatchError};
use crate::schema::{Schema, SchemaError};
use crate::store::{Expect, Op, Store, StoreError};

/// The store key of the registry revision (outside [`kind::PREFIX`]).
const REVISION_KEY: &str = "/registry-revision";

pub struct Registry {
    store: Arc<dyn Store>,
    /// Serializes writers: each reads the index, commits, then publishes.
    writer: tokio::sync::Mutex<()>,
    state: RwLock<State>,
}

struct State {
    rv: u64,
    /// Per kind, the revision of the last write that touched it.
    kind_rv: HashMap<Kind, u64>,
    docs: HashMap<Kind, BTreeMap<(String, String), DocRef>>,
    history: History,
}

/// One change in a write batch.
#[derive(Debug)]
pub enum Change {
    /// Fails with [`RegistryError::AlreadyExists`] when the key exists.
    Create {
        key: Key,
        value: Value,
    },
    /// Fails with [`RegistryError::NotFound`] when the key is absent, and with
    /// [`RegistryError::Conflict`] when `expect` is given and differs from the stored revision.
    Update {
        key: Key,
        value: Value,
        expect: Option<u64>,
    },
    Delete {
        key: Key,
        expect: Option<u64>,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{0} not found")]
    NotFound(Key),
    #[error("{0} already exists")]
    AlreadyExists(Key),
    #[error(
        "{key} was changed by someone else (resourceVersion {actual}, not {expected}): \
         get the latest version and apply the change again"
    )]
    Conflict { key: Key, expected: u64, actual: u64 },
    #[error("invalid {}: {err}", key.kind)]
    Invalid { key: Key, err: SchemaError },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Registry {
    /// Loads every object from the store.
    pub async fn open(store: Arc<dyn Store>) -> Result<Self, RegistryError> {
        let rv = match store.get(REVISION_KEY).await? {
            Some(entry) => std::str::from_utf8(&entry.value)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| StoreError::Corrupt(format!("{REVISION_KEY} is not a number")))?,
            None => 0,
        };
        let entries = store.list(kind::PREFIX).await?;
        let mut docs: HashMap<Kind, BTreeMap<(String, String), DocRef>> = HashMap::new();
        for doc in load_docs(entries).await? {
            let key = doc.key.clone();
            docs.entry(key.kind)
                .or_default()
                .insert((key.namespace, key.name), doc);
        }
        Ok(Self {
            store,
            writer: tokio::sync::Mutex::new(()),
            state: RwLock::new(State {
                rv,
                kind_rv: HashMap::new(),
                docs,
                history: History::new(rv),
            }),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A panic while holding the lock cannot leave the index half-written (updates are
        // plain inserts after the commit), so a poisoned lock is still usable.
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.read().rv
    }

    /// Changes whenever an object of `kind` is written (0 until the first write after start).
    pub fn kind_revision(&self, kind: Kind) -> u64 {
        self.read().kind_rv.get(&kind).copied().unwrap_or(0)
    }

    pub fn get(&self, key: &Key) -> Option<DocRef> {
        self.read()
            .docs
            .get(&key.kind)?
            .get(&(key.namespace.clone(), key.name.clone()))
            .cloned()
    }

    /// Every object of `kind`, in namespace/name order, with the revision they are current at.
    pub fn list(&self, kind: Kind) -> (u64, Vec<DocRef>) {
        let state = self.read();
        let docs = state
            .docs
            .get(&kind)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        (state.rv, docs)
    }

    /// A consistent list of `kind` and a subscription to every change after it.
    pub fn list_and_watch(&self, kind: Kind) -> Result<(Vec<DocRef>, Subscription), WatchError> {
        let state = self.read();
        let docs = state
            .docs
            .get(&kind)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let sub = state.history.subscribe(kind, state.rv, state.rv)?;
        Ok((docs, sub))
    }

    /// Changes of `kind` after revision `since`.
    pub fn watch(&self, kind: Kind, since: u64) -> Result<Subscription, WatchError> {
        let state = self.read();
        state.history.subscribe(kind, since, state.rv)
    }

    /// Applies `changes` atomically: all are durable when this returns `Ok`, or none took effect.
    /// Returns each object's new state (`None` for a deletion).
    pub async fn apply(&self, changes: Vec<Change>) -> Result<Vec<Option<DocRef>>, RegistryError> {
        self.apply_if(|_| Ok::<_, RegistryError>(()), changes).await
    }

    /// `apply`, after `check` passed while no other write can happen: for conditions that span
    /// objects (a project may only be deleted while no application uses it; an application may
    /// only be written while its project exists).
    pub async fn apply_if<E: From<RegistryError>>(
        &self,
        check: impl FnOnce(&Self) -> Result<(), E>,
        changes: Vec<Change>,
    ) -> Result<Vec<Option<DocRef>>, E> {
        let _writer = self.writer.lock().await;
        check(self)?;
        Ok(self.apply_locked(changes).await?)
    }

    /// One change after `check` (see [`Registry::apply_if`]); the object's new state, `None`
    /// after a deletion.
    pub async fn apply_one_if<E: From<RegistryError>>(
        &self,
        check: impl FnOnce(&Self) -> Result<(), E>,
        change: Change,
    ) -> Result<Option<DocRef>, E> {
        Ok(self.apply_if(check, vec![change]).await?.pop().flatten())
    }

    /// One change; the object's new state, `None` after a deletion.
    pub async fn apply_one(&self, change: Change) -> Result<Option<DocRef>, RegistryError> {
        self.apply_one_if(|_| Ok::<_, RegistryError>(()), change).await
    }

    async fn apply_locked(&self, changes: Vec<Change>) -> Result<Vec<Option<DocRef>>, RegistryError> {
        // Each change is checked against the index as it was before the batch, so a key may
        // appear once per batch (as the store requires too).
        let mut keys = std::collections::HashSet::new();
        for change in &changes {
            let key = match change {
                Change::Create { key, .. } | Change::Update { key, .. } | Change::Delete { key, .. } => key,
            };
            if !keys.insert(key) {
                return Err(RegistryError::Invalid {
                    key: key.clone(),
                    err: SchemaError::new("", "the same object appears twice in one write"),
                });
            }
        }
        let base = self.revision();
        let mut planned = Vec::with_capacity(changes.len());
        let mut ops = Vec::with_capacity(changes.len() + 1);
        for (offset, change) in changes.into_iter().enumerate() {
            let rv = base + 1 + offset as u64;
            let (key, new, previous) = self.plan(change, rv)?;
            match &new {
                Some(doc) => ops.push(Op::Put {
                    key: key.store_key(),
                    value: join_stored(rv, &doc.json),
                    expect: Expect::Any,
                }),
                None => ops.push(Op::Delete {
                    key: key.store_key(),
                    expect: Expect::Any,
                }),
            }
            planned.push((key, new, previous, rv));
        }
        let last = base + planned.len() as u64;
        if planned.is_empty() {
            return Ok(Vec::new());
        }
        ops.push(Op::Put {
            key: REVISION_KEY.to_owned(),
            value: last.to_string().into_bytes(),
            expect: Expect::Any,
        });
        self.store.commit(ops).await?;

        let mut state = self.write_state();
        state.rv = last;
        let mut results = Vec::with_capacity(planned.len());
        for (key, new, previous, rv) in planned {
            state.kind_rv.insert(key.kind, rv);
            let slot = (key.namespace.clone(), key.name.clone());
            let event = match (&new, previous) {
                (Some(doc), previous) => {
                    state
                        .docs
                        .entry(key.kind)
                        .or_default()
                        .insert(slot, Arc::clone(doc));
                    let kind = if previous.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    };
                    Event {
                        rv,
                        kind,
                        doc: Arc::clone(doc),
                    }
                }
                (None, Some(previous)) => {
                    if let Some(map) = state.docs.get_mut(&key.kind) {
                        map.remove(&slot);
                    }
                    Event {
                        rv,
                        kind: EventType::Deleted,
                        doc: previous,
                    }
                }
                (None, None) => continue,
            };
            state.history.push(Arc::new(event));
            results.push(new);
        }
        Ok(results)
    }

    /// Checks one change against the index and prepares the new document.
    #[allow(clippy::type_complexity)]
    fn plan(&self, change: Change, rv: u64) -> Result<(Key, Option<DocRef>, Option<DocRef>), RegistryError> {
        let check = |key: &Key, expect: Option<u64>| -> Result<DocRef, RegistryError> {
            let current = self
                .get(key)
                .ok_or_else(|| RegistryError::NotFound(key.clone()))?;
            match expect {
                Some(expected) if expected != current.rv => Err(RegistryError::Conflict {
                    key: key.clone(),
                    expected,
                    actual: current.rv,
                }),
                _ => Ok(current),
            }
        };
        match change {
            Change::Create { key, value } => {
                if self.get(&key).is_some() {
                    return Err(RegistryError::AlreadyExists(key));
                }
                let doc = build(&key, value, rv, None)?;
                Ok((key, Some(doc), None))
            }
            Change::Update { key, value, expect } => {
                let current = check(&key, expect)?;
                let doc = build(&key, value, rv, Some(&current))?;
                Ok((key, Some(doc), Some(current)))
            }
            Change::Delete { key, expect } => {
                let current = check(&key, expect)?;
                Ok((key, None, Some(tombstone(&current, rv)?)))
            }
        }
    }
}

/// The canonical document for `value` stored as `key` at revision `rv`: unknown fields dropped
/// and types checked by the schema, and for objects with metadata the server-owned fields set
/// (name, namespace, resourceVersion, uid, creationTimestamp, generation).
fn build(key: &Key, value: Value, rv: u64, previous: Option<&DocRef>) -> Result<DocRef, RegistryError> {
    let invalid = |err| RegistryError::Invalid {
        key: key.clone(),
        err,
    };
    let schema = Schema::get();
    let desc = schema.message(key.kind.message()).map_err(invalid)?;
    let mut value = schema.to_json(&schema.from_json(&desc, &value).map_err(invalid)?);
    if key.kind.has_metadata() {
        stamp_metadata(key, &mut value, rv, previous.map(|p| p.value()).as_ref());
    }
    let json = serde_json::to_vec(&value).map_err(|e| invalid(SchemaError::new("", e.to_string())))?;
    Doc::new(key.clone(), rv, Bytes::from(json))
        .map(Arc::new)
        .map_err(invalid)
}

/// The last state of a deleted object as its DELETED event carries it: at the deletion's
/// revision, so a watch resumed from that event's version does not see it again.
fn tombstone(current: &DocRef, rv: u64) -> Result<DocRef, RegistryError> {
    let mut value = current.value();
    if current.key.kind.has_metadata()
        && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
    }
    let invalid = |err| RegistryError::Invalid {
        key: current.key.clone(),
        err,
    };
    let json = serde_json::to_vec(&value).map_err(|e| invalid(SchemaError::new("", e.to_string())))?;
    Doc::new(current.key.clone(), rv, Bytes::from(json))
        .map(Arc::new)
        .map_err(invalid)
}

fn stamp_metadata(key: &Key, value: &mut Value, rv: u64, previous: Option<&Value>) {
    let Some(object) = value.as_object_mut() else {
        return;
    };
    let spec_changed = previous.is_none_or(|p| p.get("spec") != object.get("spec"));
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    meta.insert("name".to_owned(), Value::String(key.name.clone()));
    if key.namespace.is_empty() {
        meta.remove("namespace");
    } else {
        meta.insert("namespace".to_owned(), Value::String(key.namespace.clone()));
    }
    meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
    let old_meta = previous.and_then(|p| p.get("metadata"));
    let kept = |field: &str| old_meta.and_then(|m| m.get(field)).cloned();
    let uid = kept("uid").unwrap_or_else(|| Value::String(uuid::Uuid::new_v4().to_string()));
    meta.insert("uid".to_owned(), uid);
    let created =
        kept("creationTimestamp").unwrap_or_else(|| Value::String(crate::schema::time::now_string()));
    meta.insert("creationTimestamp".to_owned(), created);
    let generation = kept("generation").and_then(|g| g.as_i64()).unwrap_or(0);
    let generation = if spec_changed {
        generation + 1
    } else {
        generation.max(1)
    };
    meta.insert("generation".to_owned(), Value::from(generation));
}

/// Parses stored entries into documents, on every core (a restart reads every object).
async fn load_docs(entries: Vec<crate::store::Entry>) -> Result<Vec<DocRef>, RegistryError> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let per_thread = entries.len().div_ceil(threads).max(1);
    let mut chunks = Vec::new();
    let mut rest = entries;
    while rest.len() > per_thread {
        let tail = rest.split_off(per_thread);
        chunks.push(rest);
        rest = tail;
    }
    chunks.push(rest);
    let parsed = tokio::task::spawn_blocking(move || {
        std::thread::scope(|scope| {
            // Every thread is started before the first is joined.
            #[allow(clippy::needless_collect)]
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|chunk| {
                    scope.spawn(move || chunk.into_iter().map(load_doc).collect::<Result<Vec<_>, _>>())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(StoreError::Corrupt("a loader thread panicked".to_owned())))
                })
                .collect::<Result<Vec<_>, _>>()
        })
    })
    .await
    .map_err(|e| StoreError::Unavailable(format!("loading the registry failed: {e}")))??;
    Ok(parsed.into_iter().flatten().collect())
}

fn load_doc(entry: crate::store::Entry) -> Result<DocRef, StoreError> {
    let key = Key::from_store_key(&entry.key)
        .ok_or_else(|| StoreError::Corrupt(format!("unexpected key {:?}", entry.key)))?;
    let doc_rv = split_stored(&entry.value)
        .map(|(rv, _)| rv)
        .ok_or_else(|| StoreError::Corrupt(format!("{key}: unreadable stored record")))?;
    let json = Bytes::from(entry.value).slice(8..);
    let doc = Doc::new(key.clone(), doc_rv, json).map_err(|e| StoreError::Corrupt(format!("{key}: {e}")))?;
    Ok(Arc::new(doc))
}

/// Stored record: the document's revision as 8 bytes (LE), then its JSON.
fn join_stored(rv: u64, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + json.len());
    out.extend_from_slice(&rv.to_le_bytes());
    out.extend_from_slice(json);
    out
}

fn split_stored(value: &[u8]) -> Option<(u64, &[u8])> {
    let (head, json) = value.split_at_checked(8)?;
    Some((u64::from_le_bytes(head.try_into().ok()?), json))
}
