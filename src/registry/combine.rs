//! Group commit on a store this process owns alone (redb): a commit is durable only after an
//! fsync, so one commit per write would cap writes at one per fsync. Writes that arrive while a
//! commit is under way are queued, and whoever takes the writer lock next commits everything
//! queued with one fsync (flat combining, `Store::commit_each`). Each write is still a commit
//! of its own, with its own revision and compares, checked in order, and each caller gets its
//! own answer. On etcd each write is its own transaction: etcd batches concurrent ones itself.

use std::collections::VecDeque;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::{DocRef, Kind, Planned, Registry, RegistryError, State};
use crate::store::{Op, Revision, StoreError};

/// Changes per group commit: a bound keeps latency even.
const LOCAL_BATCH: usize = 512;

type Answer = Result<Vec<Option<DocRef>>, RegistryError>;

/// A queued write.
pub(super) struct Pending {
    pub(super) ops: Vec<Op>,
    pub(super) planned: Vec<Planned>,
    pub(super) reply: oneshot::Sender<Answer>,
}

impl Registry {
    /// Queues a planned write and waits for its commit.
    pub(super) async fn commit_local(&self, ops: Vec<Op>, planned: Vec<Planned>) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.queue().push_back(Pending { ops, planned, reply });
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
            Err(StoreError::Unavailable("the registry is shutting down".to_owned()).into())
        })
    }

    pub(super) fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Pending>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits every queued write, in groups. Called with the writer lock held.
    async fn drain(&self) {
        if let Err(e) = self.recover().await {
            // Nothing can be committed on a view that may be behind: every queued write fails.
            for pending in self.queue().drain(..) {
                let _ = pending.reply.send(Err(same_error(&e)));
            }
            return;
        }
        loop {
            let group = self.next_group();
            if group.is_empty() {
                return;
            }
            self.commit_group(group).await;
        }
    }

    /// The queued writes that go into the next commit: in arrival order, up to the group size.
    fn next_group(&self) -> Vec<Pending> {
        let mut queue = self.queue();
        let mut size = 0;
        let mut group = Vec::new();
        while let Some(pending) = queue.front() {
            if !group.is_empty() && size + pending.planned.len() > LOCAL_BATCH {
                break;
            }
            size += pending.planned.len();
            group.extend(queue.pop_front());
        }
        group
    }

    async fn commit_group(&self, mut group: Vec<Pending>) {
        let ops = group.iter_mut().map(|p| std::mem::take(&mut p.ops)).collect();
        // Until published: the view must not miss a write the store made (see `recover`).
        self.unpublished.store(true, Ordering::Release);
        let outcomes = self.store.commit_each(ops).await;
        let mut published = true;
        let mut state = self.write_state();
        for (pending, outcome) in group.into_iter().zip(outcomes) {
            let answer = match outcome {
                Ok(at) => self.publish_planned(&mut state, pending.planned, at),
                Err(e) => Err(e.into()),
            };
            published &= !matches!(answer, Err(RegistryError::Invalid { .. }));
            let _ = pending.reply.send(answer);
        }
        if published {
            self.unpublished.store(false, Ordering::Release);
        }
    }

    /// Publishes a write committed at revision `at`; its objects' new states.
    fn publish_planned(&self, state: &mut State, planned: Vec<Planned>, at: Revision) -> Answer {
        let others_changed = planned.iter().any(|p| p.key.kind != Kind::Application);
        let applied = planned
            .into_iter()
            .map(|plan| plan.applied(at))
            .collect::<Result<Vec<_>, _>>()?;
        let answer = applied.iter().map(|a| a.new.clone()).collect();
        self.publish(state, applied, at, others_changed);
        Ok(answer)
    }
}

/// The failure of a recovery, for each queued writer.
fn same_error(e: &RegistryError) -> RegistryError {
    match e {
        RegistryError::Store(e) => e.clone().into(),
        e => StoreError::Corrupt(e.to_string()).into(),
    }
}
