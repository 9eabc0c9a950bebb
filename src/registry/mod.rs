//! The registry: every Application, AppProject, Cluster, Repository and credential template,
//! as documents keyed by kind, namespace and name. An object's `resourceVersion` is the store
//! revision of the commit that last wrote it (etcd's mod revision); a list's is the revision the
//! view had reached.
//!
//! The [`Store`] holds the durable copy: each write is one atomic, durable commit, so an
//! acknowledged write survives `kill -9`. An in-memory view answers reads (holding each object's
//! JSON; protobuf encodings are read from the store, see `proto.rs`), and a bounded history of
//! events lets watches resume.
//!
//! Nothing is overwritten blindly: a write is planned against the view and commits only if
//! every object it replaces is still at the revision the view had (a caller's stale
//! `resourceVersion` is a conflict). A write that also depends on other objects (an
//! application's project and cluster; the applications of a project that changes) compares
//! them too, coarsely (`ops`), so that writes of different applications never wait for one
//! another, on one replica or several. A write whose view was behind the store's loses its
//! compare, catches up and plans again (bounded). On a shared store the view follows the store's
//! changes (`follow.rs`), as the Kubernetes watch cache does, and a read first waits for the view
//! to reach the registry's latest revision (read your writes on every replica).

pub mod argocd_secrets;
pub mod certificates;
mod combine;
mod doc;
mod fence;
mod follow;
mod kind;
mod kube_configmaps;
mod kube_secrets;
mod kube_view;
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

use self::doc::Draft;
pub use self::doc::{Doc, DocRef, Summary};
pub use self::kind::{Key, Kind};
pub use self::reseal::Sealed;
pub use self::sealing::SecretsKeys;
use self::watch::History;
pub use self::watch::{Event, EventType, Subscription, WatchError};
use crate::schema::{Schema, SchemaError};
use crate::store::{Expect, Op, Revision, Store, StoreError};

/// Every registry commit puts this key (outside [`kind::PREFIX`]), so its mod revision is the
/// revision of the last registry write: what a read waits for the view to reach.
const HEAD_KEY: &str = "/registry-revision";
/// Every write of anything but applications puts this key, on the condition that it is where
/// the writer's view had it; an application write only compares it. An application's check
/// reads its project and cluster, so an application write planned before such a change fails
/// and plans again, while application writes never compare anything another application write
/// changes.
const OTHERS_KEY: &str = "/registry-others";
/// How long a write whose view was behind the store goes on planning again.
const WRITE_RETRY_FOR: Duration = Duration::from_secs(10);
/// The longest random pause between such attempts.
const MAX_WRITE_PAUSE: Duration = Duration::from_millis(8);
/// How long a read waits for the view to reach the registry's latest revision.
const FRESH_WAIT: Duration = Duration::from_secs(5);
/// The largest object stored, as its canonical JSON: etcd's default request limit (1.5 MiB),
/// which bounds every Kubernetes object. Upstream's Applications and AppProjects are custom
/// resources, which Kubernetes keeps in etcd as JSON, so the JSON is what meets the limit there.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;
/// The largest object (JSON and encoding together) whose encoding is stored beside it: one etcd
/// transaction carries both, and etcd refuses requests above 1.5 MiB by default.
const STORED_ENCODING_LIMIT: usize = 1 << 20;

pub struct Registry {
    /// This registry, for the commits that must finish even when their caller goes away.
    this: std::sync::Weak<Registry>,
    store: Arc<dyn Store>,
    /// Seal and open the records of kinds that hold credentials (see [`Registry::server_key_changed`]).
    keys: arc_swap::ArcSwap<SecretsKeys>,
    /// Others write the store too (etcd): the view follows its changes, reads wait for it.
    shared: bool,
    /// Held by whoever commits queued writes to a store this process owns (`combine.rs`), and
    /// by a reload of the view.
    writer: tokio::sync::Mutex<()>,
    /// Writes waiting for the next commit (`combine.rs`).
    queue: Mutex<std::collections::VecDeque<combine::Pending>>,
    state: RwLock<State>,
    /// The store revision the view has reached.
    seen: tokio::sync::watch::Sender<Revision>,
    /// False while the shared store's changes cannot be followed; see [`Registry::degraded`].
    following: AtomicBool,
    /// A commit's outcome was not published; see [`Registry::recover`].
    unpublished: AtomicBool,
    /// Read your writes: the reads that bring the view up to the store (`fence.rs`).
    fences: fence::Fences,
    /// The follower's tasks (`follow.rs`, `kube_view.rs`), ended with the registry.
    follower: Mutex<Vec<tokio::task::AbortHandle>>,
    /// The kinds Kubernetes holds, when the server runs on an installation (`kube_view.rs`).
    kube: Option<kube_view::KubeSide>,
    /// False while a watch of the Kubernetes API server is failing.
    kube_following: AtomicBool,
}

struct State {
    /// The store revision the view has reached.
    rv: Revision,
    /// The mod revision of [`OTHERS_KEY`] in the view (`None`: never written).
    others_at: Option<Revision>,
    /// The store revision the view was loaded at.
    loaded_at: Revision,
    /// Per kind, the revision of the last write that touched it.
    kind_rv: HashMap<Kind, u64>,
    docs: HashMap<Kind, BTreeMap<(String, String), DocRef>>,
    history: History,
    /// The kinds Kubernetes holds: each with its own revision and history (`kube_view.rs`).
    kube: HashMap<Kind, kube_view::KubeKind>,
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
    /// Loads every object from the store. On a shared store the view then follows the store's
    /// changes (`follow.rs`) until the registry is dropped; a write returns once its commit is
    /// in the view.
    pub async fn open(store: Arc<dyn Store>, keys: Arc<SecretsKeys>) -> Result<Arc<Self>, RegistryError> {
        Self::open_with(store, keys, None).await
    }

    /// [`Registry::open`], with the kinds Kubernetes holds taken from `kube` when given.
    async fn open_with(
        store: Arc<dyn Store>,
        keys: Arc<SecretsKeys>,
        kube: Option<kube_view::KubeSide>,
    ) -> Result<Arc<Self>, RegistryError> {
        let mut state = load::state(&*store, &keys).await?;
        if kube.is_some() {
            state.hand_to_kube();
        }
        let shared = store.is_shared();
        let seen = tokio::sync::watch::Sender::new(state.rv);
        let registry = Arc::new_cyclic(|this| Self {
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
            fences: fence::Fences::default(),
            follower: Mutex::new(Vec::new()),
            kube,
            kube_following: AtomicBool::new(true),
        });
        registry.follow();
        Ok(registry)
    }

    /// What is wrong with the view, if anything: on a shared store, that it cannot follow the
    /// store's changes (reads are answered from the view as it is, writes fail).
    pub fn degraded(&self) -> Option<&'static str> {
        if self.kube.is_some() && !self.kube_following.load(Ordering::Acquire) {
            return Some(
                "the registry cannot follow the Kubernetes API server: reads may be stale and writes fail \
                 until it is back",
            );
        }
        (self.shared && !self.following.load(Ordering::Acquire))
            .then_some("the registry cannot follow etcd: reads may be stale and writes fail until it is back")
    }

    /// Whether Argo CD's application-controller works on these objects (they are Kubernetes's):
    /// a deletion then waits for the object's finalizers, and a refresh for the controller.
    pub fn beside_controller(&self) -> bool {
        self.kube.is_some()
    }

    fn set_kube_following(&self, following: bool) {
        self.kube_following.store(following, Ordering::Release);
    }

    /// Ends `task` with the registry.
    fn adopt(&self, task: tokio::task::AbortHandle) {
        self.follower
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task);
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

    /// The revision lists of `kind` are current at (what a watch of it from now starts after).
    pub fn revision_of(&self, kind: Kind) -> u64 {
        self.read().rv_of(kind)
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
        (state.rv_of(kind), docs)
    }

    /// A consistent list of `kind` and a subscription to every change after it.
    pub fn list_and_watch(&self, kind: Kind) -> Result<(Vec<DocRef>, Subscription), WatchError> {
        let state = self.read();
        let docs = state
            .docs
            .get(&kind)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let rv = state.rv_of(kind);
        let sub = state.history_of(kind).subscribe(kind, rv, rv)?;
        Ok((docs, sub))
    }

    /// Changes of `kind` after revision `since`. On a shared store, a version another replica
    /// handed out that this view has not reached yet is waited for (bounded).
    pub async fn watch(&self, kind: Kind, since: u64) -> Result<Subscription, WatchError> {
        if kube_view::KubeSide::holds(kind) && self.kube.is_some() {
            self.wait_for_kube(kind, since).await;
        } else if self.shared && since > self.read().rv {
            let mut seen = self.seen.subscribe();
            let _ = tokio::time::timeout(FRESH_WAIT, seen.wait_for(|at| *at >= since)).await;
        }
        let state = self.read();
        state.history_of(kind).subscribe(kind, since, state.rv_of(kind))
    }

    /// Applies `changes` atomically: all are durable when this returns `Ok`, or none took effect.
    /// Returns each object's new state (`None` for a deletion).
    pub async fn apply(&self, changes: Vec<Change>) -> Result<Vec<Option<DocRef>>, RegistryError> {
        self.write(|_| Ok::<_, RegistryError>(()), changes, false).await
    }

    /// `apply`, after `check` passed on the view the commit is conditional on: for conditions
    /// that span objects (a project may only be deleted while no application uses it; an
    /// application may only be written while its project exists). An application write's check
    /// may read anything but applications; any other write's check may read applications too.
    /// When what `check` read changed before the commit, the view catches up and `check` and
    /// the plan run again (bounded in time).
    pub async fn apply_if<E: From<RegistryError>>(
        &self,
        check: impl Fn(&Self) -> Result<(), E>,
        changes: Vec<Change>,
    ) -> Result<Vec<Option<DocRef>>, E> {
        self.write(check, changes, true).await
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

    /// Checks, plans and commits `changes`, again while the view turns out to be behind.
    async fn write<E: From<RegistryError>>(
        &self,
        check: impl Fn(&Self) -> Result<(), E>,
        changes: Vec<Change>,
        checked: bool,
    ) -> Result<Vec<Option<DocRef>>, E> {
        distinct(&changes)?;
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = tokio::time::Instant::now() + WRITE_RETRY_FOR;
        let mut backoff = Duration::from_millis(1);
        let mut lost = 0u32;
        loop {
            // What the check reads is compared as of before it ran.
            let (view_rv, others_at) = {
                let state = self.read();
                (state.rv, state.others_at)
            };
            check(self)?;
            let planned = changes
                .iter()
                .map(|change| self.plan(change))
                .collect::<Result<Vec<_>, _>>()?;
            let on_kube =
                self.kube.is_some() && planned.iter().any(|p| kube_view::KubeSide::holds(p.key.kind));
            let outcome = if on_kube {
                self.commit_kube(planned).await
            } else if self.shared {
                let ops = self.ops(&planned, checked.then_some(view_rv), others_at);
                self.commit_shared(ops, planned).await
            } else {
                let ops = self.ops(&planned, checked.then_some(view_rv), others_at);
                self.commit_local(ops, planned).await
            };
            match outcome {
                Err(RegistryError::Store(StoreError::Conflict { .. })) => {}
                done => return Ok(done?),
            }
            lost += 1;
            if tokio::time::Instant::now() >= deadline {
                return Err(RegistryError::from(StoreError::Unavailable(format!(
                    "other writes came first {lost} times in a row for {WRITE_RETRY_FOR:?}; try again"
                )))
                .into());
            }
            if on_kube {
                self.kube_catch_up().await;
            } else if self.shared {
                // Another replica's write came first: wait until the view has it, after a short
                // random pause so that writers racing each other spread out.
                let jitter = u64::from(crate::random::bytes(1)[0]);
                tokio::time::sleep(backoff.mul_f64(0.5 + jitter as f64 / 255.0)).await;
                backoff = (backoff * 2).min(MAX_WRITE_PAUSE);
                self.fresh().await?;
            }
        }
    }

    /// The store operations of a planned write. Each object is compared with the revision the
    /// view had; an application-only write compares [`OTHERS_KEY`], any other write puts it
    /// (and, when checked, compares every application with `apps_since`: its check may have
    /// read them).
    fn ops(&self, planned: &[Planned], apps_since: Option<Revision>, others_at: Option<Revision>) -> Vec<Op> {
        let mut ops = Vec::with_capacity(2 * planned.len() + 3);
        for plan in planned {
            let (record, proto) = (plan.key.store_key(), plan.key.proto_store_key());
            let expect = plan
                .current
                .as_ref()
                .map_or(Expect::Absent, |current| Expect::ModRevision(current.rv));
            match &plan.draft {
                // Credentials are sealed, and their encoding (which holds them too) is not
                // stored: a reply encodes the few such objects from the JSON.
                Some(draft) if plan.key.kind.holds_credentials() => {
                    let sealed =
                        record::encode_sealed_draft(draft, |plain| self.keys.load().seal(&record, 0, plain));
                    ops.push(Op::Put {
                        key: record,
                        value: sealed,
                        expect,
                    });
                    ops.push(delete(proto));
                }
                Some(draft) => {
                    ops.push(Op::Put {
                        key: record,
                        value: record::encode_draft(draft),
                        expect,
                    });
                    // A large object's encoding is made from its JSON when read, so that the
                    // object alone meets etcd's request limit.
                    if draft.json.len() + draft.proto.len() <= STORED_ENCODING_LIMIT {
                        ops.push(put(
                            proto,
                            record::encode_proto_entry(plan.key.kind, &draft.proto),
                        ));
                    } else {
                        ops.push(delete(proto));
                    }
                }
                None => {
                    ops.push(Op::Delete { key: record, expect });
                    ops.push(delete(proto));
                }
            }
        }
        let others = others_at.map_or(Expect::Absent, Expect::ModRevision);
        if planned.iter().all(|p| p.key.kind == Kind::Application) {
            ops.push(Op::Check {
                key: OTHERS_KEY.to_owned(),
                expect: others,
            });
        } else {
            ops.push(Op::Put {
                key: OTHERS_KEY.to_owned(),
                // Unique, so that a commit retried after a lost answer recognises itself.
                value: crate::random::token(16).into_bytes(),
                expect: others,
            });
            if let Some(since) = apps_since {
                ops.push(Op::Unchanged {
                    prefix: Kind::Application.store_prefix(),
                    since,
                });
            }
        }
        ops.push(put(HEAD_KEY.to_owned(), Vec::new()));
        ops
    }

    /// Commits to a shared store, then waits (bounded) until the view has the commit from the
    /// store's feed, so that this replica's next read sees it.
    async fn commit_shared(
        &self,
        ops: Vec<Op>,
        planned: Vec<Planned>,
    ) -> Result<Vec<Option<DocRef>>, RegistryError> {
        let at = self.store.commit(ops).await?;
        let mut seen = self.seen.subscribe();
        if tokio::time::timeout(FRESH_WAIT, seen.wait_for(|rv| *rv >= at))
            .await
            .is_err()
        {
            tracing::warn!(
                "the registry view has not reached its own write at revision {at} within {FRESH_WAIT:?}"
            );
        }
        planned
            .iter()
            .map(|plan| plan.draft.as_ref().map(|draft| plan.doc(draft, at)).transpose())
            .collect()
    }

    /// Makes committed writes visible: the view, the history and its watchers, and the
    /// revision reads wait for. `at` is the commit's store revision.
    fn publish(&self, state: &mut State, applied: Vec<Applied>, at: Revision, others_changed: bool) {
        state.apply(applied, at);
        if others_changed {
            state.others_at = Some(at);
        }
        self.reached(state, at);
    }

    /// Records that the view holds every commit up to store revision `at`.
    fn reached(&self, state: &mut State, at: Revision) {
        if state.rv < at {
            state.rv = at;
            self.seen.send_replace(at);
        }
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

    /// Checks one change against the view and prepares the object's new state.
    fn plan(&self, change: &Change) -> Result<Planned, RegistryError> {
        let current = |key: &Key, expect: &Option<u64>| -> Result<DocRef, RegistryError> {
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
        let (key, current, draft) = match change {
            Change::Create { key, value } => {
                if self.get(key).is_some() {
                    return Err(RegistryError::AlreadyExists(key.clone()));
                }
                (key, None, Some(build(key, value, None)?))
            }
            Change::Update { key, value, expect } => {
                let current = current(key, expect)?;
                let draft = build(key, value, Some(&current))?;
                (key, Some(current), Some(draft))
            }
            Change::Delete { key, expect } => (key, Some(current(key, expect)?), None),
        };
        Ok(Planned {
            key: key.clone(),
            current,
            draft,
        })
    }
}

impl State {
    /// Puts changes committed at revision `at` into the view, and their events into the
    /// history of their kind.
    fn apply(&mut self, applied: Vec<Applied>, at: Revision) {
        for Applied {
            key,
            new,
            event,
            proto,
        } in applied
        {
            self.kind_rv.insert(key.kind, at);
            let kind = key.kind;
            let slot = (key.namespace, key.name);
            match new {
                Some(doc) => {
                    self.docs.entry(kind).or_default().insert(slot, doc);
                }
                None => {
                    if let Some(map) = self.docs.get_mut(&kind) {
                        map.remove(&slot);
                    }
                }
            }
            let (event, doc) = event;
            self.history_of_mut(kind).push(at, event, doc, proto);
        }
    }
}

/// One change of a write, checked against the view and ready to commit.
struct Planned {
    key: Key,
    /// The state the change replaces (`None`: a creation).
    current: Option<DocRef>,
    /// The new state (`None`: a deletion).
    draft: Option<Draft>,
}

impl Planned {
    /// The new state `draft` as committed at revision `at`.
    fn doc(&self, draft: &Draft, at: Revision) -> Result<DocRef, RegistryError> {
        Doc::at(draft, at)
            .map(Arc::new)
            .map_err(|err| RegistryError::Invalid {
                key: self.key.clone(),
                err,
            })
    }

    /// What the view publishes of this change, committed at revision `at`.
    fn applied(self, at: Revision) -> Result<Applied, RegistryError> {
        match &self.draft {
            Some(draft) => {
                let doc = self.doc(draft, at)?;
                let kind = if self.current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                let proto = doc::with_rv(self.key.kind, &draft.proto, at);
                Ok(Applied::written(self.key, doc, kind, proto))
            }
            None => {
                let current = self
                    .current
                    .ok_or_else(|| RegistryError::NotFound(self.key.clone()))?;
                Applied::deleted(self.key, &current, at)
            }
        }
    }
}

/// One committed change as the view publishes it.
struct Applied {
    key: Key,
    /// The object's new state; `None` after a deletion.
    new: Option<DocRef>,
    /// What the change's event carries: the new state, or the deleted object's last state.
    event: (EventType, DocRef),
    /// The protobuf encoding of the event's document.
    proto: Bytes,
}

impl Applied {
    fn written(key: Key, doc: DocRef, kind: EventType, proto: Bytes) -> Self {
        Self {
            key,
            new: Some(Arc::clone(&doc)),
            event: (kind, doc),
            proto,
        }
    }

    /// The deletion of `current` at revision `at`: its event carries the last state at the
    /// deletion's revision, so a watch resumed from that event's version does not see it again.
    fn deleted(key: Key, current: &DocRef, at: Revision) -> Result<Self, RegistryError> {
        let invalid = |err| RegistryError::Invalid {
            key: key.clone(),
            err,
        };
        let last = Arc::new(current.restamped(at).map_err(invalid)?);
        let proto = last.encode_proto().map_err(invalid)?;
        Ok(Self {
            key,
            new: None,
            event: (EventType::Deleted, last),
            proto,
        })
    }
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

/// The canonical draft for `value` stored as `key`: unknown fields dropped and types checked by
/// the schema, and for objects with metadata the server-owned fields set (name, namespace, uid,
/// creationTimestamp, generation; resourceVersion when committed). At most
/// [`MAX_OBJECT_BYTES`].
fn build(key: &Key, value: &Value, previous: Option<&DocRef>) -> Result<Draft, RegistryError> {
    let invalid = |err| RegistryError::Invalid {
        key: key.clone(),
        err,
    };
    let schema = Schema::get();
    let desc = schema.message(key.kind.message()).map_err(invalid)?;
    let mut value = schema.to_json(&schema.from_json(&desc, value).map_err(invalid)?);
    if key.kind.has_metadata() {
        stamp_metadata(key, &mut value, previous.map(|p| p.value()).as_ref());
    }
    let draft = Draft::new(key.clone(), &value).map_err(invalid)?;
    // Here, where every write passes (the server's own too: operations, project tokens), and
    // on the object as it would be stored. The JSON lacks only the resourceVersion's digits.
    if draft.json.len() > MAX_OBJECT_BYTES {
        return Err(invalid(SchemaError::new(
            "",
            format!(
                "the {} object is {} bytes as stored (canonical JSON), more than the limit of {MAX_OBJECT_BYTES} \
                 bytes (1.5 MiB) for an object",
                key.kind.singular(),
                draft.json.len()
            ),
        )));
    }
    Ok(draft)
}

fn stamp_metadata(key: &Key, value: &mut Value, previous: Option<&Value>) {
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
