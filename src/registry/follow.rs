//! Following a shared store (etcd): each replica keeps its view by listing once and then
//! applying every commit from the store's change feed, in revision order, as the Kubernetes
//! watch cache does. A replica's own writes reach its view this way too (the writer waits for
//! them), so there is one path into the view and one order.
//!
//! A change that does not fit the view (the deletion of an object it does not have) or a feed
//! that cannot go on (compacted) makes the view load afresh; current watchers are then ended,
//! and resume or list again as after a restart.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::doc::{DocRef, rv_suffix_len, with_rv};
use super::kind::{Key, PREFIX};
use super::load::{self, load_doc};
use super::record::proto_entry_offset;
use super::watch::EventType;
use super::{Applied, OTHERS_KEY, Registry, RegistryError};
use crate::store::{Change, Changes, Feed, Revision, StoreError};

/// Pause between attempts to load the view afresh while the store cannot be read.
const RELOAD_BACKOFF: Duration = Duration::from_secs(1);
/// How often a view that cannot follow checks whether the store answers again (the feed only
/// speaks when something changes).
const PROBE_EVERY: Duration = Duration::from_secs(2);

impl Registry {
    /// Starts following the store's changes when others may write it too; ends with the
    /// registry. Does nothing for a store this process owns alone.
    pub(super) fn follow(self: &Arc<Self>) {
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
        let mut others_changed = false;
        let mut records = Vec::new();
        let mut protos = HashMap::new();
        for Change { key, entry } in changes.changes {
            if key == OTHERS_KEY {
                others_changed = true;
            } else if key.starts_with(PREFIX) {
                records.push((key, entry));
            } else if let Some(entry) = entry
                && let Some(kind) = Key::record_of_encoding(&key)
                    .and_then(|record| Key::from_store_key(&record))
                    .map(|key| key.kind)
                && let Some(offset) = proto_entry_offset(kind, &entry.value)
            {
                protos.insert(key, Bytes::from(entry.value).slice(offset..));
            }
        }
        // Parsed before taking the lock: readers wait only for the publication.
        let mut parsed = Vec::with_capacity(records.len());
        for (store_key, entry) in records {
            let key =
                Key::from_store_key(&store_key).ok_or_else(|| format!("unexpected key {store_key:?}"))?;
            let doc = entry
                .map(|entry| load_doc(entry, &self.keys.load()))
                .transpose()
                .map_err(|e| e.to_string())?;
            let bare = protos.remove(&key.proto_store_key());
            parsed.push((key, doc, bare));
        }
        let mut state = self.write_state();
        if at <= state.rv {
            // Already in the view (it was loaded afresh at or after this commit).
            return Ok(());
        }
        let mut applied = Vec::with_capacity(parsed.len());
        for (key, doc, bare) in parsed {
            let current = state
                .docs
                .get(&key.kind)
                .and_then(|m| m.get(&(key.namespace.clone(), key.name.clone())))
                .cloned();
            applied.push(follow_change(key, at, doc, bare, current)?);
        }
        self.publish(&mut state, applied, at, others_changed);
        Ok(())
    }

    /// Loads the view afresh at the store's current revision; the history starts over there,
    /// so every current watcher ends (and resumes or lists again).
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
        // What Kubernetes holds is not the store's: it stays as its watches have it.
        fresh.keep_kube_of(&mut state);
        *state = fresh;
        self.seen.send_replace(state.rv);
        Ok(())
    }
}

/// One followed change, committed at revision `at`, as the view publishes it. `bare` is the
/// stored encoding written with it, if any.
fn follow_change(
    key: Key,
    at: Revision,
    doc: Option<DocRef>,
    bare: Option<Bytes>,
    current: Option<DocRef>,
) -> Result<Applied, String> {
    let failed = |e: RegistryError| e.to_string();
    match doc {
        Some(doc) => {
            let proto = match bare {
                Some(bare) if bare.len() + rv_suffix_len(key.kind, at) == doc.proto_len => {
                    with_rv(key.kind, &bare, at)
                }
                _ => doc.encode_proto().map_err(|e| e.to_string())?,
            };
            let kind = if current.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            Ok(Applied::written(key, doc, kind, proto))
        }
        None => {
            let current = current.ok_or_else(|| format!("{key} was deleted but is not in the view"))?;
            Applied::deleted(key, &current, at).map_err(failed)
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
