//! Following the store's changes through etcd's watch, for a view kept per replica.

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::{EventType, WatchClient, WatchOptions, WatchStream};
use tokio::time::Instant;

use super::failure::{Failure, classify, unavailable};
use super::{FIRST_BACKOFF, pause, revision};
use crate::store::{Entry, Revision, StoreError};

/// One key's change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    /// The entry after the change; `None` when the key was deleted.
    pub entry: Option<Entry>,
}

/// The changes of one commit (one etcd revision), in the commit's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    pub revision: Revision,
    pub changes: Vec<Change>,
}

/// A watch over the store's prefix, in revision order, without gaps: a broken stream is
/// reopened from the revision after the last one delivered.
pub struct EtcdWatch {
    client: WatchClient,
    key: Vec<u8>,
    end: Vec<u8>,
    prefix: String,
    endpoints: String,
    /// How long the stream may stay broken before `next` reports it.
    retry_for: Duration,
    /// The first revision not delivered yet.
    next: Revision,
    stream: Option<WatchStream>,
    ready: VecDeque<Changes>,
}

impl std::fmt::Debug for EtcdWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdWatch")
            .field("prefix", &self.prefix)
            .field("next", &self.next)
            .finish()
    }
}

#[async_trait::async_trait]
impl crate::store::Feed for EtcdWatch {
    async fn next(&mut self) -> Result<Changes, StoreError> {
        EtcdWatch::next(self).await
    }
}

impl EtcdWatch {
    pub(super) fn new(
        client: WatchClient,
        key: Vec<u8>,
        end: Vec<u8>,
        prefix: String,
        endpoints: String,
        retry_for: Duration,
        from: Revision,
    ) -> Self {
        Self {
            client,
            key,
            end,
            prefix,
            endpoints,
            retry_for,
            next: from.max(1),
            stream: None,
            ready: VecDeque::new(),
        }
    }

    /// The revision the watch reopens from if its stream breaks (after the changes received).
    pub fn next_revision(&self) -> Revision {
        self.next
    }

    /// The next commit's changes; waits for one. Errors: [`StoreError::Compacted`] when etcd no
    /// longer has the revisions to deliver (list again and watch from the list's revision + 1),
    /// `Unavailable` when no member would serve the watch for the request timeout (calling
    /// again tries again, from where it stopped).
    pub async fn next(&mut self) -> Result<Changes, StoreError> {
        let mut broken_since: Option<Instant> = None;
        let mut backoff = FIRST_BACKOFF;
        loop {
            if let Some(changes) = self.ready.pop_front() {
                return Ok(changes);
            }
            let failed = match self.receive().await {
                Ok(true) => {
                    broken_since = None;
                    backoff = FIRST_BACKOFF;
                    continue;
                }
                Ok(false) => "the watch stream ended".to_owned(),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::NotSent(why) | Failure::Unsure(why)) => why,
            };
            self.stream = None;
            let since = *broken_since.get_or_insert_with(Instant::now);
            if !pause(since + self.retry_for, &mut backoff).await {
                return Err(unavailable(&self.endpoints, "a watch", &failed));
            }
        }
    }

    /// Opens the stream if needed and takes one response from it; false when it ended.
    async fn receive(&mut self) -> Result<bool, Failure> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            None => {
                let options = WatchOptions::new()
                    .with_range(self.end.clone())
                    .with_start_revision(i64::try_from(self.next).unwrap_or(i64::MAX));
                let stream = self
                    .client
                    .watch(self.key.clone(), Some(options))
                    .await
                    .map_err(|e| classify(&e, &self.endpoints))?;
                self.stream.insert(stream)
            }
        };
        let Some(response) = stream
            .message()
            .await
            .map_err(|e| classify(&e, &self.endpoints))?
        else {
            return Ok(false);
        };
        if response.compact_revision() > 0 {
            return Err(Failure::Fatal(StoreError::Compacted {
                requested: self.next,
                oldest: revision(response.compact_revision()),
            }));
        }
        if response.canceled() {
            // Not compaction: the member lost its leader, or shut down; reopen elsewhere.
            return Err(Failure::Unsure(format!(
                "the watch was cancelled: {}",
                response.cancel_reason()
            )));
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let at = revision(kv.mod_revision());
            let key = std::str::from_utf8(kv.key())
                .ok()
                .and_then(|k| k.strip_prefix(self.prefix.as_str()))
                .ok_or_else(|| {
                    Failure::Fatal(StoreError::Corrupt(format!(
                        "the etcd watch returned the key {:?} outside the prefix {}",
                        String::from_utf8_lossy(kv.key()),
                        self.prefix
                    )))
                })?
                .to_owned();
            let entry = match event.event_type() {
                EventType::Put => Some(Entry {
                    key: key.clone(),
                    value: kv.value().to_vec(),
                    create_revision: revision(kv.create_revision()),
                    mod_revision: at,
                }),
                EventType::Delete => None,
            };
            let change = Change { key, entry };
            match self.ready.back_mut() {
                Some(last) if last.revision == at => last.changes.push(change),
                _ => self.ready.push_back(Changes {
                    revision: at,
                    changes: vec![change],
                }),
            }
        }
        // etcd never splits one revision's events over two responses (without `fragment`).
        if let Some(last) = self.ready.back() {
            self.next = last.revision + 1;
        }
        Ok(true)
    }
}
