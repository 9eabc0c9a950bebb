//! Reading the registry from the store: the whole view at one store revision (at start, and
//! when a shared store's changes cannot be followed without a gap), and single records as the
//! follower receives them. An object's revision is its record's mod revision.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::doc::{Doc, DocRef, Draft};
use super::kind::{self, Key, Kind};
use super::record::{self, Decoded};
use super::sealing::SecretsKeys;
use super::watch::History;
use super::{OTHERS_KEY, RegistryError, State};
use crate::schema::SchemaError;
use crate::store::{Entry, Store, StoreError};

/// Every object, read at one store revision.
pub(super) async fn state(store: &dyn Store, keys: &Arc<SecretsKeys>) -> Result<State, RegistryError> {
    let (lists, loaded_at) = store.snapshot(&[kind::PREFIX, OTHERS_KEY]).await?;
    let mut lists = lists.into_iter();
    let entries = lists.next().unwrap_or_default();
    let others_at = lists
        .next()
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.key == OTHERS_KEY)
        .map(|e| e.mod_revision);
    let mut docs: HashMap<Kind, BTreeMap<(String, String), DocRef>> = HashMap::new();
    for doc in load_docs(entries, Arc::clone(keys)).await? {
        let key = doc.key.clone();
        docs.entry(key.kind)
            .or_default()
            .insert((key.namespace, key.name), doc);
    }
    Ok(State {
        rv: loaded_at,
        others_at,
        loaded_at,
        kind_rv: HashMap::new(),
        docs,
        history: History::new(loaded_at),
        kube: HashMap::new(),
    })
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

/// The document a stored record holds, at the record's mod revision.
pub(super) fn load_doc(entry: Entry, keys: &SecretsKeys) -> Result<DocRef, StoreError> {
    let key = Key::from_store_key(&entry.key)
        .ok_or_else(|| StoreError::Corrupt(format!("unexpected key {:?}", entry.key)))?;
    let unreadable = || StoreError::Corrupt(format!("{key}: unreadable stored record"));
    let corrupt = |e: SchemaError| StoreError::Corrupt(format!("{key}: {e}"));
    let rv = entry.mod_revision;
    let opened;
    let decoded = match record::decode(&entry.value).ok_or_else(unreadable)? {
        Decoded::Sealed {
            context_rv,
            draft,
            body,
        } => {
            opened = keys
                .open(&entry.key, context_rv, body)
                .map_err(|e| StoreError::Corrupt(format!("{key}: {e}")))?;
            record::decode_opened(draft, &opened).ok_or_else(unreadable)?
        }
        clear => clear,
    };
    let doc = match decoded {
        Decoded::Draft {
            bare_len,
            rv_at,
            json,
        } => Doc::stored(key.clone(), rv, json, rv_at, bare_len).map_err(corrupt)?,
        // An older layout holds the revision it was written at: it is made a draft again.
        Decoded::Old { json } => {
            let value = serde_json::from_slice(json).map_err(|_| unreadable())?;
            let draft = Draft::new(key.clone(), &value).map_err(corrupt)?;
            Doc::at(&draft, rv).map_err(corrupt)?
        }
        Decoded::Sealed { .. } => return Err(unreadable()),
    };
    Ok(Arc::new(doc))
}
