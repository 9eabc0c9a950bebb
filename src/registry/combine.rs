//! Group commit of application writes: a commit is durable only after the store's fsync (redb)
//! or etcd's (through raft), and registry commits follow one another (each compares the registry
//! revision), so one commit per write would cap writes at one per fsync. Application writes
//! that arrive while a commit is under way are queued, and whoever takes the writer lock next
//! commits everything queued as one batch (flat combining), answering each caller.
//!
//! Why only applications, and why that is safe: an application write's condition (`apply_if`'s
//! check: its project exists and permits it, its destination cluster exists) reads projects and
//! clusters, never other applications. So application writes with distinct keys can share a
//! batch, provided no project, cluster, repository or credential template changed since their
//! check ran; one that did is answered [`Outcome::Again`] and checks again. Every other write
//! takes the writer lock, commits what is queued first, then checks and commits alone.

use std::collections::{HashSet, VecDeque};
use std::sync::PoisonError;

use tokio::sync::oneshot;

use super::{Change, DocRef, Planned, REVISION_KEY, Registry, RegistryError, distinct};
use crate::store::StoreError;

/// Changes per batch: etcd takes at most 128 operations per transaction (two per change, and
/// the registry revision); the embedded store has no limit, but a bound keeps latency even.
const SHARED_BATCH: usize = 63;
const LOCAL_BATCH: usize = 512;

/// A queued application write.
pub(super) struct Pending {
    pub(super) changes: Vec<Change>,
    /// The registry revision the caller's check ran at.
    pub(super) checked_at: u64,
    pub(super) reply: oneshot::Sender<Outcome>,
}

pub(super) enum Outcome {
    Done(Result<Vec<Option<DocRef>>, RegistryError>),
    /// The check no longer holds (something it read changed), or another replica wrote first:
    /// check again and resubmit.
    Again,
}

impl Registry {
    /// Queues an application write checked at `checked_at` and waits for its commit.
    pub(super) async fn apply_combined(&self, changes: &[Change], checked_at: u64) -> Outcome {
        let (reply, answer) = oneshot::channel();
        self.queue().push_back(Pending {
            changes: changes.to_vec(),
            checked_at,
            reply,
        });
        // The queue is drained by a task of its own: the callers whose writes it commits need
        // their answers even if this caller goes away meanwhile.
        if let Some(this) = self.this.upgrade() {
            let leader = tokio::spawn(async move {
                let _writer = this.writer.lock().await;
                this.drain().await;
            });
            let _ = leader.await;
        }
        // Answered by whoever drained the queue (this caller's task or one before it).
        answer.await.unwrap_or_else(|_| {
            Outcome::Done(Err(StoreError::Unavailable(
                "the registry is shutting down".to_owned(),
            )
            .into()))
        })
    }

    pub(super) fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Pending>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits every queued write, in batches. Called with the writer lock held.
    pub(super) async fn drain(&self) {
        if let Err(e) = self.recover().await {
            // Nothing can be committed on a view that may be behind: every queued write fails.
            let message = e.to_string();
            for pending in self.queue().drain(..) {
                let _ = pending.reply.send(Outcome::Done(Err(same_error(&e, &message))));
            }
            return;
        }
        loop {
            let batch = self.next_batch();
            if batch.is_empty() {
                return;
            }
            self.commit_batch(batch).await;
        }
    }

    /// The queued writes that go into the next commit: in arrival order, with distinct keys,
    /// up to the batch size; the others stay queued for the next.
    fn next_batch(&self) -> Vec<Pending> {
        let limit = if self.shared { SHARED_BATCH } else { LOCAL_BATCH };
        let mut queue = self.queue();
        let mut keys = HashSet::new();
        let mut size = 0;
        let mut batch = Vec::new();
        let mut later = VecDeque::new();
        while let Some(pending) = queue.pop_front() {
            let fits = batch.is_empty() || size + pending.changes.len() <= limit;
            if fits && pending.changes.iter().all(|c| !keys.contains(c.key())) {
                keys.extend(pending.changes.iter().map(|c| c.key().clone()));
                size += pending.changes.len();
                batch.push(pending);
            } else {
                later.push_back(pending);
            }
        }
        *queue = later;
        batch
    }

    async fn commit_batch(&self, batch: Vec<Pending>) {
        let (base, counter_at, others_changed) = {
            let state = self.read();
            (state.rv, state.counter_at, state.others_rv)
        };
        let mut planned: Vec<Planned> = Vec::new();
        let mut members = Vec::new();
        for pending in batch {
            if others_changed > pending.checked_at {
                let _ = pending.reply.send(Outcome::Again);
                continue;
            }
            let first = base + 1 + planned.len() as u64;
            match distinct(&pending.changes).and_then(|()| self.plan_all(&pending.changes, first)) {
                Ok(plans) => {
                    members.push((pending.reply, plans.len()));
                    planned.extend(plans);
                }
                Err(e) => {
                    let _ = pending.reply.send(Outcome::Done(Err(e)));
                }
            }
        }
        if planned.is_empty() {
            return;
        }
        let results: Vec<Option<DocRef>> = planned.iter().map(|p| p.new.clone()).collect();
        match self.commit_planned(planned, base, counter_at).await {
            Ok(()) => {
                let mut results = results.into_iter();
                for (reply, n) in members {
                    let _ = reply.send(Outcome::Done(Ok(results.by_ref().take(n).collect())));
                }
            }
            Err(RegistryError::Store(StoreError::Conflict { key, .. }))
                if self.shared && key == REVISION_KEY =>
            {
                for (reply, _) in members {
                    let _ = reply.send(Outcome::Again);
                }
            }
            Err(e) => {
                let message = e.to_string();
                for (reply, _) in members {
                    let _ = reply.send(Outcome::Done(Err(same_error(&e, &message))));
                }
            }
        }
    }
}

/// The failure of a batch, for each of its writers.
fn same_error(e: &RegistryError, message: &str) -> RegistryError {
    match e {
        RegistryError::Store(StoreError::Unavailable(why)) => StoreError::Unavailable(why.clone()).into(),
        RegistryError::Store(StoreError::Invalid(why)) => StoreError::Invalid(why.clone()).into(),
        _ => StoreError::Corrupt(message.to_owned()).into(),
    }
}
