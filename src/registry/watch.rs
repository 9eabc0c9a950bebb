//! Change events: a bounded in-memory history (so a watch can resume from a resourceVersion
//! without a gap) and a broadcast of new events. Both are fed under the registry's state lock,
//! in revision order, so a subscriber that copies the history and subscribes under the same lock
//! sees every event exactly once.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::broadcast;

use super::doc::DocRef;
use super::kind::Kind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct Event {
    /// The revision of the write (the changes of one commit share it).
    pub rv: u64,
    /// The event's place in the history: one per event, increasing.
    seq: u64,
    pub kind: EventType,
    /// The object after the write; for a deletion, its last stored state.
    pub doc: DocRef,
    /// The protobuf encoding of `doc` (made by the write, shared by every gRPC watcher).
    pub proto: Bytes,
}

impl Event {
    /// The memory the event keeps alive (counted in full, also when the index shares it).
    fn bytes(&self) -> usize {
        self.doc.json.len() + self.proto.len()
    }
}

/// How many past events a watch can resume from, at most.
pub(crate) const HISTORY: usize = 4096;
/// The most memory the history keeps; large objects shorten how far back a watch can resume.
const HISTORY_BYTES: usize = 16 << 20;
/// How many events a subscriber may fall behind before it must relist.
const BACKLOG: usize = 2048;

pub(crate) struct History {
    events: VecDeque<Arc<Event>>,
    /// The sum of `Event::bytes` over `events`.
    bytes: usize,
    /// Every event with a revision above this is in `events`.
    base: u64,
    /// The sequence number of the next event.
    next_seq: u64,
    tx: broadcast::Sender<Arc<Event>>,
}

impl History {
    pub fn new(base: u64) -> Self {
        Self {
            events: VecDeque::with_capacity(HISTORY),
            bytes: 0,
            base,
            next_seq: 0,
            tx: broadcast::Sender::new(BACKLOG),
        }
    }

    pub fn push(&mut self, rv: u64, kind: EventType, doc: DocRef, proto: Bytes) {
        let event = Arc::new(Event {
            rv,
            seq: self.next_seq,
            kind,
            doc,
            proto,
        });
        self.next_seq += 1;
        self.bytes += event.bytes();
        self.events.push_back(Arc::clone(&event));
        // The newest event always stays, whatever its size.
        while self.events.len() > 1 && (self.events.len() > HISTORY || self.bytes > HISTORY_BYTES) {
            let Some(dropped) = self.events.pop_front() else {
                break;
            };
            self.bytes -= dropped.bytes();
            self.base = dropped.rv;
        }
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(event);
    }

    /// A subscription to `kind` that starts after revision `since` (at most `current`).
    pub fn subscribe(&self, kind: Kind, since: u64, current: u64) -> Result<Subscription, WatchError> {
        if since > current {
            return Err(WatchError::Future { since, current });
        }
        if since < self.base {
            return Err(WatchError::TooOld {
                since,
                oldest: self.base,
            });
        }
        let backlog = self
            .events
            .iter()
            .filter(|e| e.rv > since && e.doc.key.kind == kind)
            .cloned()
            .collect();
        Ok(Subscription {
            kind,
            backlog,
            rx: self.tx.subscribe(),
            last: since,
            next_seq: self.next_seq,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    #[error(
        "resourceVersion {since} is too old (the oldest this server can resume from is {oldest}): \
         list again and watch from the list's resourceVersion"
    )]
    TooOld { since: u64, oldest: u64 },
    #[error("resourceVersion {since} is newer than this server's ({current}): list again")]
    Future { since: u64, current: u64 },
    #[error(
        "this watch fell too far behind the changes: list again and watch from the list's resourceVersion"
    )]
    Lagged,
}

/// Events of one kind after a starting revision, in order, each once.
pub struct Subscription {
    kind: Kind,
    backlog: VecDeque<Arc<Event>>,
    rx: broadcast::Receiver<Arc<Event>>,
    last: u64,
    /// The first event not in the backlog: live events before it were delivered from there.
    next_seq: u64,
}

impl Subscription {
    /// The next event; `None` once the registry is gone.
    pub async fn next(&mut self) -> Option<Result<Arc<Event>, WatchError>> {
        if let Some(event) = self.backlog.pop_front() {
            self.last = event.rv;
            return Some(Ok(event));
        }
        loop {
            match self.rx.recv().await {
                Ok(event) if event.seq >= self.next_seq && event.doc.key.kind == self.kind => {
                    self.last = event.rv;
                    return Some(Ok(event));
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return Some(Err(WatchError::Lagged)),
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The next event if one is already waiting (`None`: none yet, or the registry is gone).
    /// Every write publishes its events before it returns, so draining this after a write was
    /// acknowledged sees that write.
    pub fn try_next(&mut self) -> Option<Result<Arc<Event>, WatchError>> {
        if let Some(event) = self.backlog.pop_front() {
            self.last = event.rv;
            return Some(Ok(event));
        }
        loop {
            match self.rx.try_recv() {
                Ok(event) if event.seq >= self.next_seq && event.doc.key.kind == self.kind => {
                    self.last = event.rv;
                    return Some(Ok(event));
                }
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Lagged(_)) => return Some(Err(WatchError::Lagged)),
                Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                    return None;
                }
            }
        }
    }

    /// The revision of the last event delivered (or the starting revision).
    pub fn last(&self) -> u64 {
        self.last
    }
}
