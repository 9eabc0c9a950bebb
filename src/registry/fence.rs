//! Read your writes on every replica: before a request reads the view, the view catches up
//! with the registry's latest commit, whose revision a quorum read of [`HEAD_KEY`] gives.
//!
//! That read is the price of every request on etcd, and token checks pay one too (the account's
//! record and the token's revocation). So the store the token checks read through
//! ([`Registry::fencing_store`]) reads [`HEAD_KEY`] in the same etcd request and notes when
//! that read started and what it found; [`Registry::fresh_since`] then waits for the view to
//! reach a revision read after the request arrived, instead of reading again. One quorum read
//! per request (shared by the requests that overlap) instead of two: the writes benchmark went
//! from 0.45 to about 0.5 of raw etcd with it (BENCHMARKS.md).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{FRESH_WAIT, HEAD_KEY, Registry, RegistryError};
use crate::store::shared_read::SharedReads;
use crate::store::{Entry, Feed, Op, Outage, Revision, Store, StoreError};

/// How long a read waits for etcd to say what the latest revision is: longer than an election,
/// and than one attempt on a connection that hangs plus a retry on another member (the etcd
/// store gives an attempt a quarter of its 10 s request timeout). Past it (etcd unreachable) the
/// view answers as it is.
const FENCE_READ: Duration = Duration::from_secs(6);
/// After a fence read failed, reads answer from the view without trying again for this long.
const FENCE_PAUSE: Duration = Duration::from_secs(2);

/// The registry's fence reads and the last one any reader made.
pub(super) struct Fences {
    /// When the last fence read failed: reads skip the fence for [`FENCE_PAUSE`] after, so an
    /// unreachable etcd does not slow every read down.
    failed: Outage,
    /// Fence reads shared by the requests that overlap: one quorum read serves every request
    /// that arrived before it started, however many arrive at once.
    reads: SharedReads<Result<Option<Revision>, String>>,
    /// The latest-started read of [`HEAD_KEY`] that answered, and what it found.
    last: Arc<LastRead>,
}

impl Default for Fences {
    fn default() -> Self {
        Self {
            failed: Outage::new(FENCE_PAUSE),
            reads: SharedReads::default(),
            last: Arc::default(),
        }
    }
}

#[derive(Default)]
struct LastRead(Mutex<Option<(Instant, Revision)>>);

impl LastRead {
    /// A read of [`HEAD_KEY`] that started at `started` found `head`.
    fn note(&self, started: Instant, head: Revision) {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_none_or(|(at, _)| at < started) {
            *last = Some((started, head));
        }
    }

    /// What a read that started at or after `began` found.
    fn since(&self, began: Instant) -> Option<Revision> {
        let last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        last.filter(|(at, _)| *at >= began).map(|(_, head)| head)
    }
}

impl Registry {
    /// Waits until the view holds every registry write acknowledged before this call, on any
    /// replica (a quorum read of the last registry commit's revision, then a bounded wait for the
    /// view). Immediate on a store this process owns alone. While the store cannot be reached
    /// the view answers as it is, and [`Registry::degraded`] says so.
    pub async fn fresh(&self) -> Result<(), RegistryError> {
        if !self.shared || self.fences.failed.pausing() {
            return Ok(());
        }
        let read = || async {
            let started = Instant::now();
            match tokio::time::timeout(FENCE_READ, self.store.get(HEAD_KEY)).await {
                Ok(Ok(entry)) => {
                    let head = entry.map(|e| e.mod_revision);
                    self.fences.last.note(started, head.unwrap_or(0));
                    Ok(head)
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err(format!("no answer within {FENCE_READ:?}")),
            }
        };
        match self.fences.reads.get(HEAD_KEY, read).await {
            Ok(Some(target)) => self.reach(target).await,
            Ok(None) => Ok(()),
            Err(why) => {
                tracing::debug!("reading from the view without a fence: {why}");
                self.fences.failed.failed();
                Ok(())
            }
        }
    }

    /// [`Registry::fresh`] for a request that arrived at `began`: when a read through
    /// [`Registry::fencing_store`] (the request's token check) has learned the registry's
    /// latest revision since, only the wait for the view is left.
    pub async fn fresh_since(&self, began: Instant) -> Result<(), RegistryError> {
        if !self.shared {
            return Ok(());
        }
        match self.fences.last.since(began) {
            Some(target) => self.reach(target).await,
            None => self.fresh().await,
        }
    }

    /// Waits (bounded) until the view has reached store revision `target`.
    async fn reach(&self, target: Revision) -> Result<(), RegistryError> {
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

    /// The registry's store as token checks should read it: on a shared store every point read
    /// also reads [`HEAD_KEY`], so that it serves the request's fence too (see the module's
    /// doc). The store itself otherwise.
    pub fn fencing_store(&self) -> Arc<dyn Store> {
        if !self.shared {
            return Arc::clone(&self.store);
        }
        Arc::new(FencingStore {
            inner: Arc::clone(&self.store),
            last: Arc::clone(&self.fences.last),
        })
    }
}

/// See [`Registry::fencing_store`].
struct FencingStore {
    inner: Arc<dyn Store>,
    last: Arc<LastRead>,
}

#[async_trait::async_trait]
impl Store for FencingStore {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let mut got = self.get_many(vec![key.to_owned()]).await?;
        Ok(got.pop().flatten())
    }

    async fn get_many(&self, mut keys: Vec<String>) -> Result<Vec<Option<Entry>>, StoreError> {
        let started = Instant::now();
        keys.push(HEAD_KEY.to_owned());
        let mut got = self.inner.get_many(keys).await?;
        let head = got.pop().flatten().map_or(0, |e| e.mod_revision);
        self.last.note(started, head);
        Ok(got)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        self.inner.list(prefix).await
    }

    async fn commit(&self, ops: Vec<Op>) -> Result<Revision, StoreError> {
        self.inner.commit(ops).await
    }

    async fn commit_each(&self, batches: Vec<Vec<Op>>) -> Vec<Result<Revision, StoreError>> {
        self.inner.commit_each(batches).await
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.inner.revision().await
    }

    async fn snapshot(&self, prefixes: &[&str]) -> Result<(Vec<Vec<Entry>>, Revision), StoreError> {
        self.inner.snapshot(prefixes).await
    }

    fn feed(&self, revision: Revision) -> Option<Box<dyn Feed>> {
        self.inner.feed(revision)
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }
}
