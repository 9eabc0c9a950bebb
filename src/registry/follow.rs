//! Following a shared store (etcd): each replica keeps its view by listing once and then
//! applying every registry commit from the store's change feed, in revision order, as the
//! Kubernetes watch cache does. A replica's own writes arrive twice (published when the commit
//! returns, and through the feed); whichever comes second is skipped by its registry revision.
//!
//! A registry commit writes its objects' records in the batch's order and the registry
//! revision's key; the n-th record of a batch carries revision `previous + n`, which is how a
//! deletion (whose key is all the feed shows) gets its revision. A batch that does not fit the
//! view (a gap, an unknown deletion) or a feed that cannot go on (compacted) makes the view load
//! afresh; current watchers are then ended, and resume or list again as after a restart.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::doc::DocRef;
use super::kind::{Key, PREFIX};
use super::load::{self, counter_value, load_doc};
use super::record::decode_proto_entry;
use super::watch::EventType;
use super::{Planned, REVISION_KEY, Registry, RegistryError, finish, tombstone};
use crate::store::{Change, Changes, Feed, StoreError};

/// Pause between attempts to load the view afresh while the store cannot be read.
const RELOAD_BACKOFF: Duration = Duration::from_secs(1);
/// How often a view that cannot follow checks whether the store answers again (the feed only
/// speaks when something changes).
const PROBE_EVERY: Duration = Duration::from_secs(2);

impl Registry {
    /// Starts following the store's changes when others may write it too; ends with the
    /// registry. Does nothing for a store this process owns alone.
    pub fn follow(self: &Arc<Self>) {
        let Some(feed) = self.store.feed(self.read().loaded_at + 1) else {
            return;
        };
        let task = tokio::spawn(run(Arc::downgrade(self), feed));
        let probe = tokio::spawn(probe(Arc::downgrade(self)));
        let mut tasks = self.follower.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.push(task.abort_handle());
        tasks.push(probe.abort_handle());
    }

    /// Applies one commit's changes to the view; `Err` says why the view must load afresh.
    fn absorb(&self, changes: Changes) -> Result<(), String> {
        let at = changes.revision;
        let mut counter = None;
        let mut records = Vec::new();
        let mut protos = HashMap::new();
        for Change { key, entry } in changes.changes {
            if key == REVISION_KEY {
                counter = Some(entry);
            } else if key.starts_with(PREFIX) {
                records.push((key, entry));
            } else if let Some(entry) = entry
                && let Some((rv, proto)) = decode_proto_entry(&entry.value)
            {
                let offset = entry.value.len() - proto.len();
                protos.insert(key, (rv, Bytes::from(entry.value).slice(offset..)));
            }
        }
        let Some(counter) = counter else {
            return match records.first() {
                None => Ok(()),
                Some((key, _)) => Err(format!("{key} changed without the registry revision")),
            };
        };
        let counter = counter.ok_or("the registry revision was deleted")?;
        let last = counter_value(&counter).map_err(|e| e.to_string())?;
        // Parsed before taking the lock: readers wait only for the publication.
        let mut parsed = Vec::with_capacity(records.len());
        for (store_key, entry) in records {
            let key =
                Key::from_store_key(&store_key).ok_or_else(|| format!("unexpected key {store_key:?}"))?;
            let doc = entry
                .map(|entry| load_doc(entry, &self.keys.load()))
                .transpose()
                .map_err(|e| e.to_string())?;
            let proto = doc.as_ref().and_then(|doc| {
                let (rv, proto) = protos.remove(&key.proto_store_key())?;
                (rv == doc.rv && proto.len() == doc.proto_len).then_some(proto)
            });
            parsed.push((key, doc, proto));
        }
        let mut state = self.write_state();
        if last <= state.rv {
            // This replica's own commit, published when it returned.
            self.saw_counter(&mut state, at);
            return Ok(());
        }
        let base = state.rv;
        if last != base + parsed.len() as u64 {
            return Err(format!(
                "the registry went from revision {base} to {last} in a commit of {} objects",
                parsed.len()
            ));
        }
        let mut planned = Vec::with_capacity(parsed.len());
        for (rv, (key, doc, proto)) in (base + 1..).zip(parsed) {
            let current = state
                .docs
                .get(&key.kind)
                .and_then(|m| m.get(&(key.namespace.clone(), key.name.clone())))
                .cloned();
            planned.push(follow_change(key, rv, doc, proto, current)?);
        }
        self.publish(&mut state, planned, at);
        Ok(())
    }

    /// Loads the whole view afresh at the store's current revision; the history starts over
    /// there, so every current watcher ends (and resumes or lists again).
    async fn reload(&self) -> Result<(), RegistryError> {
        let _writer = self.writer.lock().await;
        self.reload_locked().await
    }

    /// [`Registry::reload`] with the writer lock held.
    pub(super) async fn reload_locked(&self) -> Result<(), RegistryError> {
        let fresh = load::state(&*self.store, &self.keys.load_full()).await?;
        let mut state = self.write_state();
        let kinds: Vec<_> = fresh.docs.keys().chain(state.docs.keys()).copied().collect();
        let mut fresh = fresh;
        // Caches keyed by a kind's revision see a change, whatever it was.
        for kind in kinds {
            fresh.kind_rv.insert(kind, fresh.rv.max(state.rv) + 1);
        }
        fresh.others_rv = fresh.rv;
        *state = fresh;
        self.seen.send_replace(state.counter_at.unwrap_or(0));
        Ok(())
    }
}

/// One followed change as the view publishes it.
fn follow_change(
    key: Key,
    rv: u64,
    doc: Option<DocRef>,
    proto: Option<Bytes>,
    current: Option<DocRef>,
) -> Result<Planned, String> {
    let failed = |e: RegistryError| e.to_string();
    match doc {
        Some(doc) => {
            if doc.rv != rv {
                return Err(format!("{key} carries revision {}, not {rv}", doc.rv));
            }
            let proto = match proto {
                Some(proto) => proto,
                None => finish(&key, rv, &doc.value()).map_err(failed)?.1,
            };
            let kind = if current.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            Ok(Planned {
                key,
                rv,
                new: Some(Arc::clone(&doc)),
                event: (kind, doc),
                proto,
            })
        }
        None => {
            let current = current.ok_or_else(|| format!("{key} was deleted but is not in the view"))?;
            let (last, proto) = tombstone(&current, rv).map_err(failed)?;
            Ok(Planned {
                key,
                rv,
                new: None,
                event: (EventType::Deleted, last),
                proto,
            })
        }
    }
}

/// The follower: applies the feed until the registry is dropped.
async fn run(registry: Weak<Registry>, mut feed: Box<dyn Feed>) {
    loop {
        let next = feed.next().await;
        let Some(view) = registry.upgrade() else {
            return;
        };
        let why = match next {
            Ok(changes) => {
                view.following.store(true, Ordering::Release);
                match view.absorb(changes) {
                    Ok(()) => continue,
                    Err(why) => why,
                }
            }
            Err(StoreError::Compacted { requested, oldest }) => {
                format!("etcd no longer has revision {requested} (compacted up to {oldest})")
            }
            Err(e) => {
                // The feed goes on from where it stopped when called again.
                view.following.store(false, Ordering::Release);
                tracing::warn!("the registry cannot follow etcd: {e}");
                continue;
            }
        };
        tracing::warn!("the registry view loads afresh: {why}");
        view.following.store(false, Ordering::Release);
        drop(view);
        let Some(next) = reload(&registry).await else {
            return;
        };
        feed = next;
    }
}

/// Loads the view afresh until it works; the feed from there, `None` once the registry is gone.
async fn reload(registry: &Weak<Registry>) -> Option<Box<dyn Feed>> {
    loop {
        let view = registry.upgrade()?;
        match view.reload().await {
            Ok(()) => {
                view.following.store(true, Ordering::Release);
                return view.store.feed(view.read().loaded_at + 1);
            }
            Err(e) => tracing::warn!("loading the registry view failed, trying again: {e}"),
        }
        drop(view);
        tokio::time::sleep(RELOAD_BACKOFF).await;
    }
}

/// While the view cannot follow, asks the store for its revision now and then: once it answers,
/// the feed (which reconnects by itself) is following again as far as anyone can tell.
async fn probe(registry: Weak<Registry>) {
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Some(view) = registry.upgrade() else {
            return;
        };
        if !view.following.load(Ordering::Acquire)
            && let Ok(Ok(_)) = tokio::time::timeout(PROBE_EVERY, view.store.revision()).await
        {
            view.following.store(true, Ordering::Release);
        }
    }
}
