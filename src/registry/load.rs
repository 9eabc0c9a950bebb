//! Reading the registry from the store: the whole view at one store revision (at start, and
//! when a shared store's changes cannot be followed without a gap), and single records as the
//! follower receives them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;

use super::doc::{self, Doc, DocRef};
use super::kind::{self, Key, Kind};
use super::sealing::SecretsKeys;
use super::watch::History;
use super::{REVISION_KEY, RegistryError, State, record};
use crate::schema::SchemaError;
use crate::store::{Entry, Store, StoreError};

/// Every object and the registry revision, read at one store revision.
pub(super) async fn state(store: &dyn Store, keys: &Arc<SecretsKeys>) -> Result<State, RegistryError> {
    let (lists, loaded_at) = store.snapshot(&[kind::PREFIX, REVISION_KEY]).await?;
    let mut lists = lists.into_iter();
    let entries = lists.next().unwrap_or_default();
    let counter = lists
        .next()
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.key == REVISION_KEY);
    let rv = match &counter {
        Some(entry) => counter_value(entry)?,
        None => 0,
    };
    let mut docs: HashMap<Kind, BTreeMap<(String, String), DocRef>> = HashMap::new();
    for doc in load_docs(entries, Arc::clone(keys)).await? {
        let key = doc.key.clone();
        docs.entry(key.kind)
            .or_default()
            .insert((key.namespace, key.name), doc);
    }
    Ok(State {
        rv,
        counter_at: counter.map(|e| e.mod_revision),
        loaded_at,
        kind_rv: HashMap::new(),
        others_rv: 0,
        docs,
        history: History::new(rv),
    })
}

/// The registry revision a [`REVISION_KEY`] entry holds.
pub(super) fn counter_value(entry: &Entry) -> Result<u64, StoreError> {
    std::str::from_utf8(&entry.value)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("{REVISION_KEY} is not a number")))
}

/// Parses stored entries into documents, on every core (a restart reads every object).
async fn load_docs(entries: Vec<Entry>, keys: Arc<SecretsKeys>) -> Result<Vec<DocRef>, RegistryError> {
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
                    let keys = &keys;
                    scope.spawn(move || {
                        chunk
                            .into_iter()
                            .map(|entry| load_doc(entry, keys))
                            .collect::<Result<Vec<_>, _>>()
                    })
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

pub(super) fn load_doc(entry: Entry, keys: &SecretsKeys) -> Result<DocRef, StoreError> {
    let key = Key::from_store_key(&entry.key)
        .ok_or_else(|| StoreError::Corrupt(format!("unexpected key {:?}", entry.key)))?;
    let unreadable = || StoreError::Corrupt(format!("{key}: unreadable stored record"));
    let (rv, proto_len, json) = match record::sealed_body(&entry.value) {
        Some((rv, sealed)) => {
            let plain = keys
                .open(&entry.key, rv, sealed)
                .map_err(|e| StoreError::Corrupt(format!("{key}: {e}")))?;
            let (proto_len, offset) = record::split_opened(&plain).ok_or_else(unreadable)?;
            (rv, Some(proto_len), Bytes::from(plain).slice(offset..))
        }
        None => {
            let record = record::decode_record(&entry.value).ok_or_else(unreadable)?;
            let json = Bytes::from(entry.value).slice(record.json_offset..);
            (record.rv, record.proto_len, json)
        }
    };
    let corrupt = |e: SchemaError| StoreError::Corrupt(format!("{key}: {e}"));
    let proto_len = match proto_len {
        Some(len) => len,
        // A record of the first layout: its encoding is not stored yet.
        None => {
            let value = serde_json::from_slice(&json).map_err(|_| unreadable())?;
            doc::encode_proto(key.kind, &value).map_err(corrupt)?.len()
        }
    };
    let doc = Doc::new(key.clone(), rv, json, proto_len).map_err(corrupt)?;
    Ok(Arc::new(doc))
}
