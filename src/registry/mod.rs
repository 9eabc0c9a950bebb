//! The registry: every Application, AppProject, Cluster, Repository and credential template,
//! as documents keyed by kind, namespace and name, with one monotonically increasing
//! `resourceVersion` (the registry revision) shared by all kinds.
//!
//! The [`Store`] holds the durable copy: each write batch is one atomic, durable commit that
//! also records the new revision, so an acknowledged write survives `kill -9`. An in-memory
//! view answers reads (holding each object's JSON; protobuf encodings are read from the store,
//! see `proto.rs`), and a bounded history of events lets watches resume. Optimistic
//! concurrency compares the caller's `resourceVersion` with the stored one, so a stale write is
//! refused and nothing is overwritten.
//!
//! Every commit compares the registry revision's key with the version the view last saw, so
//! all registry writes form one sequence even when several replicas share the store (etcd): a
//! replica whose view is behind loses the compare, catches up and plans again (bounded). On a
//! shared store the view follows the store's changes (`follow.rs`), as the Kubernetes watch
//! cache does, and a read first waits for the view to reach the registry's latest revision
//! (read your writes on every replica).

mod combine;
mod doc;
mod follow;
mod kind;
mod load;
pub mod projects;
mod proto;
mod record;
mod reseal;
pub mod sealing;
#[cfg(test)]
mod tests;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};

pub use self::doc::{Doc, DocRef, Summary};
pub use self::kind::{Key, Kind};
pub use self::reseal::Sealed;
pub use self::sealing::SecretsKeys;
use self::watch::History;
pub use self::watch::{Event, EventType, Subscription, WatchError};
use crate::schema::{Schema, SchemaError};
use crate::store::{Expect, Op, Outage, Revision, Store, StoreError};

/// The store key of the registry revision (outside [`kind::PREFIX`]). Every registry commit
/// writes it, comparing its store mod revision with the one the writer's view holds.
const REVISION_KEY: &str = "/registry-revision";
/// How long a write whose view was behind other replicas' writes goes on planning again.
const WRITE_RETRY_FOR: Duration = Duration::from_secs(10);
/// The longest random pause between such attempts.
const MAX_WRITE_PAUSE: Duration = Duration::from_millis(8);
/// How long a read waits for the view to reach the registry's latest revision.
const FRESH_WAIT: Duration = Duration::from_secs(5);
/// How long a read waits for etcd to say what the latest revision is: longer than an election,
/// and than one attempt on a connection that hangs plus a retry on another member (the etcd
/// store gives an attempt a quarter of its 10 s request timeout). Past it (etcd unreachable) the
/// view answers as it is.
const FENCE_READ: Duration = Duration::from_secs(6);
/// After a fence read failed, reads answer from the view without trying again for this long.
const FENCE_PAUSE: Duration = Duration::from_secs(2);

pub struct Registry {
    /// This registry, for the commits that must finish even when their caller goes away.
    this: std::sync::Weak<Registry>,
    store: Arc<dyn Store>,
    /// Seal and open the records of kinds that hold credentials (see [`Registry::server_key_changed`]).
    keys: arc_swap::ArcSwap<SecretsKeys>,
    /// Others write the store too (etcd): the view follows its changes, reads wait for it.
    shared: bool,
    /// Serializes this process's commits: each reads the view, commits, then publishes.
    writer: tokio::sync::Mutex<()>,
    /// Application writes waiting for the next commit (`combine.rs`).
    queue: Mutex<std::collections::VecDeque<combine::Pending>>,
    state: RwLock<State>,
    /// The store mod revision of [`REVISION_KEY`] the view has reached (0: none yet).
    seen: tokio::sync::watch::Sender<Revision>,
    /// False while the shared store's changes cannot be followed; see [`Registry::degraded`].
    following: AtomicBool,
    /// A commit's outcome was not published; see [`Registry::recover`].
    unpublished: AtomicBool,
    /// When the last fence read failed: reads skip the fence for [`FENCE_PAUSE`] after, so an
    /// unreachable etcd does not slow every read down.
    fence_failed: Outage,
    /// The follower's tasks (`follow.rs`), ended with the registry.
    follower: Mutex<Vec<tokio::task::AbortHandle>>,
}

struct State {
    rv: u64,
    /// The store mod revision of [`REVISION_KEY`] at `rv` (`None` before the first write).
    counter_at: Option<Revision>,
    /// The store revision the view was loaded at.
    loaded_at: Revision,
    /// Per kind, the revision of the last write that touched it.
    kind_rv: HashMap<Kind, u64>,
    /// The revision of the last write to anything but applications, or of the last reload:
    /// what application writes' checks read (`combine.rs`).
    others_rv: u64,
    docs: HashMap<Kind, BTreeMap<(String, String), DocRef>>,
    history: History,
}

/// One change in a write batch.
#[derive(Debug, Clone)]
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

impl Drop for Registry {
    fn drop(&mut self) {
        let tasks = self
            .follower
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for task in tasks.drain(..) {
            task.abort();
        }
    }
}

impl Change {
    pub fn key(&self) -> &Key {
        match self {
            Change::Create { key, .. } | Change::Update { key, .. } | Change::Delete { key, .. } => key,
        }
    }
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
    /// Loads every object from the store. On a shared store, [`Registry::follow`] then keeps
    /// the view current.
    pub async fn open(store: Arc<dyn Store>, keys: Arc<SecretsKeys>) -> Result<Arc<Self>, RegistryError> {
        let state = load::state(&*store, &keys).await?;
        let shared = store.is_shared();
        let seen = tokio::sync::watch::Sender::new(state.counter_at.unwrap_or(0));
        Ok(Arc::new_cyclic(|this| Self {
            this: std::sync::Weak::clone(this),
            store,
            keys: arc_swap::ArcSwap::new(keys),
            shared,
            writer: tokio::sync::Mutex::new(()),
            queue: Mutex::new(std::collections::VecDeque::new()),
            state: RwLock::new(state),
            seen,
            following: AtomicBool::new(true),
            unpublished: AtomicBool::new(false),
            fence_failed: Outage::new(FENCE_PAUSE),
            follower: Mutex::new(Vec::new()),
        }))
    }

    /// What is wrong with the view, if anything: on a shared store, that it cannot follow the
    /// store's changes (reads are answered from the view as it is, writes fail).
    pub fn degraded(&self) -> Option<&'static str> {
        (self.shared && !self.following.load(Ordering::Acquire))
            .then_some("the registry cannot follow etcd: reads may be stale and writes fail until it is back")
    }

    /// Waits until the view holds every registry write acknowledged before this call, on any
    /// replica (a quorum read of the registry revision's version, then a bounded wait for the
    /// view). Immediate on a store this process owns alone. While the store cannot be reached
    /// the view answers as it is, and [`Registry::degraded`] says so.
    pub async fn fresh(&self) -> Result<(), RegistryError> {
        if !self.shared {
            return Ok(());
        }
        if self.fence_failed.pausing() {
            return Ok(());
        }
        let target = match tokio::time::timeout(FENCE_READ, self.store.get(REVISION_KEY)).await {
            Ok(Ok(Some(entry))) => entry.mod_revision,
            Ok(Ok(None)) => return Ok(()),
            unreachable => {
                let why = match unreachable {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {FENCE_READ:?}"),
                };
                tracing::debug!("reading from the view without a fence: {why}");
                self.fence_failed.failed();
                return Ok(());
            }
        };
        let mut seen = self.seen.subscribe();
        let reached = tokio::time::timeout(FRESH_WAIT, seen.wait_for(|at| *at >= target)).await;
        if matches!(reached, Ok(Ok(_))) {
            return Ok(());
        }
        Err(StoreError::Unavailable(format!(
            "this replica's view of the registry has not reached etcd's revision {target} (it is at {}) \
             within {FRESH_WAIT:?}; try again",
            *self.seen.borrow()
        ))
        .into())
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

    /// `apply`, after `check` passed on the view the commit is conditional on: for conditions
    /// that span objects (a project may only be deleted while no application uses it; an
    /// application may only be written while its project exists). Application writes share
    /// commits with each other (`combine.rs`); when what `check` read changed meanwhile, or
    /// another replica wrote first, the view catches up and `check` and the plan run again
    /// (bounded in time).
    pub async fn apply_if<E: From<RegistryError>>(
        &self,
        check: impl Fn(&Self) -> Result<(), E>,
        changes: Vec<Change>,
    ) -> Result<Vec<Option<DocRef>>, E> {
        let combined = changes.iter().all(|c| c.key().kind == Kind::Application);
        let deadline = tokio::time::Instant::now() + WRITE_RETRY_FOR;
        let mut backoff = Duration::from_millis(1);
        let mut lost = 0u32;
        loop {
            let outcome = if combined {
                let checked_at = self.revision();
                check(self)?;
                self.apply_combined(&changes, checked_at).await
            } else {
                let _writer = self.writer.lock().await;
                self.recover().await?;
                // Queued application writes were checked against the state before this one.
                self.drain().await;
                check(self)?;
                match self.apply_locked(&changes).await {
                    Err(RegistryError::Store(StoreError::Conflict { key, .. }))
                        if self.shared && key == REVISION_KEY =>
                    {
                        combine::Outcome::Again
                    }
                    done => combine::Outcome::Done(done),
                }
            };
            if let combine::Outcome::Done(done) = outcome {
                return Ok(done?);
            }
            lost += 1;
            if tokio::time::Instant::now() >= deadline {
                return Err(RegistryError::from(StoreError::Unavailable(format!(
                    "other writes came first {lost} times in a row for {WRITE_RETRY_FOR:?}; try again"
                )))
                .into());
            }
            if self.shared {
                // Another replica's write came first: wait until the view has it, after a short
                // random pause so that replicas racing each other spread out. Some replica wins
                // every round, so the pause stays short: a long one only idles the writers
                // (100 ms at most gave a third of the writes per second with three replicas).
                let jitter = u64::from(crate::random::bytes(1)[0]);
                tokio::time::sleep(backoff.mul_f64(0.5 + jitter as f64 / 255.0)).await;
                backoff = (backoff * 2).min(MAX_WRITE_PAUSE);
                self.fresh().await?;
            }
        }
    }

    /// One change after `check` (see [`Registry::apply_if`]); the object's new state, `None`
    /// after a deletion.
    pub async fn apply_one_if<E: From<RegistryError>>(
        &self,
        check: impl Fn(&Self) -> Result<(), E>,
        change: Change,
    ) -> Result<Option<DocRef>, E> {
        Ok(self.apply_if(check, vec![change]).await?.pop().flatten())
    }

    /// One change; the object's new state, `None` after a deletion.
    pub async fn apply_one(&self, change: Change) -> Result<Option<DocRef>, RegistryError> {
        self.apply_one_if(|_| Ok::<_, RegistryError>(()), change).await
    }

    async fn apply_locked(&self, changes: &[Change]) -> Result<Vec<Option<DocRef>>, RegistryError> {
        distinct(changes)?;
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let (base, counter_at) = {
            let state = self.read();
            (state.rv, state.counter_at)
        };
        let planned = self.plan_all(changes, base + 1)?;
        let results = planned.iter().map(|p| p.new.clone()).collect();
        self.commit_planned(planned, base, counter_at).await?;
        Ok(results)
    }

    /// Checks `changes` against the view and prepares them, at revisions from `first` on.
    fn plan_all(&self, changes: &[Change], first: u64) -> Result<Vec<Planned>, RegistryError> {
        (first..)
            .zip(changes)
            .map(|(rv, change)| self.plan(change, rv))
            .collect()
    }

    /// Commits planned changes (revisions `base + 1` on) on the condition that the registry
    /// revision is still where the view had it, then publishes them.
    async fn commit_planned(
        &self,
        planned: Vec<Planned>,
        base: u64,
        counter_at: Option<Revision>,
    ) -> Result<(), RegistryError> {
        let mut ops = Vec::with_capacity(2 * planned.len() + 1);
        for plan in &planned {
            let (record, proto) = (plan.key.store_key(), plan.key.proto_store_key());
            match &plan.new {
                // Credentials are sealed, and their encoding (which holds them too) is not
                // stored: a reply encodes the few such objects from the JSON.
                Some(doc) if plan.key.kind.holds_credentials() => {
                    let sealed =
                        record::encode_sealed_record(plan.rv, plan.proto.len(), &doc.json, |plain| {
                            self.keys.load().seal(&record, plan.rv, plain)
                        });
                    ops.push(put(record, sealed));
                    ops.push(delete(proto));
                }
                Some(doc) => {
                    ops.push(put(
                        record,
                        record::encode_record(plan.rv, plan.proto.len(), &doc.json),
                    ));
                    ops.push(put(proto, record::encode_proto_entry(plan.rv, &plan.proto)));
                }
                None => {
                    ops.push(delete(record));
                    ops.push(delete(proto));
                }
            }
        }
        let last = base + planned.len() as u64;
        ops.push(Op::Put {
            key: REVISION_KEY.to_owned(),
            value: last.to_string().into_bytes(),
            expect: counter_at.map_or(Expect::Absent, Expect::ModRevision),
        });
        // Until published: a caller that goes away mid-commit must not leave the view behind
        // a write the store may have made.
        self.unpublished.store(true, Ordering::Release);
        let at = self.store.commit(ops).await;
        self.unpublished.store(false, Ordering::Release);
        let at = at?;
        let mut state = self.write_state();
        // The follower may have published this commit already (it comes back through the feed).
        if state.rv < last {
            self.publish(&mut state, planned, at);
        }
        Ok(())
    }

    /// Makes a committed batch visible: the view, the history and its watchers, and the
    /// version reads wait for. `at` is the commit's store revision.
    fn publish(&self, state: &mut State, planned: Vec<Planned>, at: Revision) {
        for plan in planned {
            let Planned {
                key,
                rv,
                new,
                event,
                proto,
            } = plan;
            state.rv = rv;
            state.kind_rv.insert(key.kind, rv);
            if key.kind != Kind::Application {
                state.others_rv = rv;
            }
            let slot = (key.namespace, key.name);
            match &new {
                Some(doc) => {
                    state
                        .docs
                        .entry(key.kind)
                        .or_default()
                        .insert(slot, Arc::clone(doc));
                }
                None => {
                    if let Some(map) = state.docs.get_mut(&key.kind) {
                        map.remove(&slot);
                    }
                }
            }
            let (kind, doc) = event;
            state.history.push(Arc::new(Event { rv, kind, doc, proto }));
        }
        self.saw_counter(state, at);
    }

    /// Loads the view afresh from the store when a commit's outcome was not published (its
    /// caller went away while the store wrote it): the view must not miss a committed write.
    /// Called with the writer lock held.
    async fn recover(&self) -> Result<(), RegistryError> {
        if self.unpublished.load(Ordering::Acquire) {
            self.reload_locked().await?;
            self.unpublished.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Records that the view holds the registry revision written at store revision `at`.
    fn saw_counter(&self, state: &mut State, at: Revision) {
        if state.counter_at.is_none_or(|c| c < at) {
            state.counter_at = Some(at);
            self.seen.send_replace(at);
        }
    }

    /// Checks one change against the index and prepares the new document.
    fn plan(&self, change: &Change, rv: u64) -> Result<Planned, RegistryError> {
        let check = |key: &Key, expect: &Option<u64>| -> Result<DocRef, RegistryError> {
            let current = self
                .get(key)
                .ok_or_else(|| RegistryError::NotFound(key.clone()))?;
            match *expect {
                Some(expected) if expected != current.rv => Err(RegistryError::Conflict {
                    key: key.clone(),
                    expected,
                    actual: current.rv,
                }),
                _ => Ok(current),
            }
        };
        let written = |key: Key, doc: DocRef, proto, kind| Planned {
            key,
            rv,
            new: Some(Arc::clone(&doc)),
            event: (kind, doc),
            proto,
        };
        match change {
            Change::Create { key, value } => {
                if self.get(key).is_some() {
                    return Err(RegistryError::AlreadyExists(key.clone()));
                }
                let (doc, proto) = build(key, value, rv, None)?;
                Ok(written(key.clone(), doc, proto, EventType::Added))
            }
            Change::Update { key, value, expect } => {
                let current = check(key, expect)?;
                let (doc, proto) = build(key, value, rv, Some(&current))?;
                Ok(written(key.clone(), doc, proto, EventType::Modified))
            }
            Change::Delete { key, expect } => {
                let current = check(key, expect)?;
                let (last, proto) = tombstone(&current, rv)?;
                Ok(Planned {
                    key: key.clone(),
                    rv,
                    new: None,
                    event: (EventType::Deleted, last),
                    proto,
                })
            }
        }
    }
}

/// One change of a batch, checked and ready to commit.
struct Planned {
    key: Key,
    rv: u64,
    /// The object's new state; `None` after a deletion.
    new: Option<DocRef>,
    /// What the change's event carries: the new state, or the deleted object's last state.
    event: (EventType, DocRef),
    /// The protobuf encoding of the event's document.
    proto: Bytes,
}

/// Refuses a write that names one object twice: each change is checked against the view as it
/// was before the write (as the store requires too).
fn distinct(changes: &[Change]) -> Result<(), RegistryError> {
    let mut keys = std::collections::HashSet::new();
    match changes.iter().map(Change::key).find(|key| !keys.insert(*key)) {
        Some(key) => Err(RegistryError::Invalid {
            key: key.clone(),
            err: SchemaError::new("", "the same object appears twice in one write"),
        }),
        None => Ok(()),
    }
}

fn put(key: String, value: Vec<u8>) -> Op {
    Op::Put {
        key,
        value,
        expect: Expect::Any,
    }
}

fn delete(key: String) -> Op {
    Op::Delete {
        key,
        expect: Expect::Any,
    }
}

/// The canonical document for `value` stored as `key` at revision `rv`: unknown fields dropped
/// and types checked by the schema, and for objects with metadata the server-owned fields set
/// (name, namespace, resourceVersion, uid, creationTimestamp, generation).
fn build(
    key: &Key,
    value: &Value,
    rv: u64,
    previous: Option<&DocRef>,
) -> Result<(DocRef, Bytes), RegistryError> {
    let invalid = |err| RegistryError::Invalid {
        key: key.clone(),
        err,
    };
    let schema = Schema::get();
    let desc = schema.message(key.kind.message()).map_err(invalid)?;
    let mut value = schema.to_json(&schema.from_json(&desc, value).map_err(invalid)?);
    if key.kind.has_metadata() {
        stamp_metadata(key, &mut value, rv, previous.map(|p| p.value()).as_ref());
    }
    finish(key, rv, &value)
}

/// The document and protobuf encoding of `value`, the final state of `key` at revision `rv`.
fn finish(key: &Key, rv: u64, value: &Value) -> Result<(DocRef, Bytes), RegistryError> {
    let invalid = |err| RegistryError::Invalid {
        key: key.clone(),
        err,
    };
    let proto = doc::encode_proto(key.kind, value).map_err(invalid)?;
    let json = serde_json::to_vec(value).map_err(|e| invalid(SchemaError::new("", e.to_string())))?;
    let doc = Doc::new(key.clone(), rv, Bytes::from(json), proto.len()).map_err(invalid)?;
    Ok((Arc::new(doc), proto))
}

/// The last state of a deleted object as its DELETED event carries it: at the deletion's
/// revision, so a watch resumed from that event's version does not see it again.
fn tombstone(current: &DocRef, rv: u64) -> Result<(DocRef, Bytes), RegistryError> {
    let mut value = current.value();
    if current.key.kind.has_metadata()
        && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.insert("resourceVersion".to_owned(), Value::String(rv.to_string()));
    }
    finish(&current.key, rv, &value)
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
