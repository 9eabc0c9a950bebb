//! A stored object in memory: its canonical JSON (exactly what REST returns), the length of its
//! protobuf encoding (the encoding itself stays in the store, see `proto.rs`), and the few fields
//! that lists filter on.
//!
//! An object's `resourceVersion` is the store revision of the commit that wrote it (etcd's mod
//! revision), known only once the commit is done. So a write prepares a [`Draft`]: the JSON with
//! an empty `resourceVersion` and where its digits go, and the protobuf encoding without it.
//! That is also how the store keeps it; the revision is filled in when the object is read
//! (spliced into the JSON; appended to the encoding as a second `metadata` holding only
//! `resourceVersion`, which protobuf parsers merge into the first, as the encoding rules require
//! for a message field that appears twice).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::kind::{Key, Kind};
use crate::schema::{Schema, SchemaError};

pub struct Doc {
    pub key: Key,
    /// The store revision of the write that produced this state.
    pub rv: u64,
    /// Canonical Go-style JSON, `metadata.resourceVersion` included.
    pub json: Bytes,
    /// Where the digits of `metadata.resourceVersion` start in `json` (kinds with metadata).
    pub(crate) rv_at: Option<usize>,
    /// The length of the object's protobuf encoding, so a gRPC List can announce its size before
    /// the encodings are read from the store.
    pub proto_len: usize,
    pub summary: Summary,
}

impl std::fmt::Debug for Doc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the JSON: clusters and repositories hold credentials.
        f.debug_struct("Doc")
            .field("key", &self.key)
            .field("rv", &self.rv)
            .finish_non_exhaustive()
    }
}

/// What list filters, RBAC objects and reference checks need, without parsing the JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub labels: BTreeMap<String, String>,
    /// An application's `spec.project` (`default` when empty), an ApplicationSet's
    /// `spec.template.spec.project` (the same); the `project` of a
    /// project-scoped cluster or repository; empty otherwise.
    pub project: String,
    /// An application's source repository URLs.
    pub repos: Vec<String>,
    /// An application's destination server URL, cluster name and namespace.
    pub dest_server: String,
    pub dest_name: String,
    pub dest_namespace: String,
    /// An application's `status.sync.status` and `status.health.status`, as the controller
    /// last reported them (empty before it has).
    pub sync_status: String,
    pub health_status: String,
    /// `metadata.creationTimestamp` (RFC 3339 in UTC, so its text sorts as its time does).
    pub created: String,
}

impl Doc {
    /// The object of `draft` at revision `rv`.
    pub(crate) fn at(draft: &Draft, rv: u64) -> Result<Self, SchemaError> {
        Self::stored(draft.key.clone(), rv, &draft.json, draft.rv_at, draft.proto.len())
    }

    /// The object stored as `json` (with an empty `resourceVersion` whose digits go at `rv_at`)
    /// and an encoding of `bare_len` bytes (without it), at revision `rv`.
    pub(crate) fn stored(
        key: Key,
        rv: u64,
        json: &[u8],
        rv_at: Option<usize>,
        bare_len: usize,
    ) -> Result<Self, SchemaError> {
        let json = match rv_at {
            Some(at) if at <= json.len() => splice(json, at, 0, &rv.to_string()),
            Some(_) => {
                return Err(SchemaError::new(
                    "metadata.resourceVersion",
                    "misplaced in the record",
                ));
            }
            None => Bytes::copy_from_slice(json),
        };
        let proto_len = bare_len + rv_suffix_len(key.kind, rv);
        Self::new(key, rv, json, rv_at, proto_len)
    }

    fn new(
        key: Key,
        rv: u64,
        json: Bytes,
        rv_at: Option<usize>,
        proto_len: usize,
    ) -> Result<Self, SchemaError> {
        // Reading the few summary fields straight from the bytes (skipping the rest) is several
        // times faster than building a Value, which matters when a restart loads every object.
        let view: View = serde_json::from_slice(&json)
            .map_err(|e| SchemaError::new("", format!("stored JSON is unreadable: {e}")))?;
        let summary = summarize(key.kind, view);
        Ok(Self {
            key,
            rv,
            json,
            rv_at,
            proto_len,
            summary,
        })
    }

    /// This state as of revision `rv` (a deleted object's last state, as its event carries it).
    pub(crate) fn restamped(&self, rv: u64) -> Result<Self, SchemaError> {
        let json = match self.rv_at {
            Some(at) => splice(&self.json, at, self.rv.to_string().len(), &rv.to_string()),
            None => self.json.clone(),
        };
        let proto_len =
            self.proto_len - rv_suffix_len(self.key.kind, self.rv) + rv_suffix_len(self.key.kind, rv);
        Self::new(self.key.clone(), rv, json, self.rv_at, proto_len)
    }

    /// The object `value` of `key` at revision `rv`, as the view holds it (for other modules'
    /// tests).
    #[cfg(test)]
    pub(crate) fn of_value(key: Key, value: &Value, rv: u64) -> Result<DocRef, SchemaError> {
        Ok(Arc::new(Self::at(&Draft::new(key, value)?, rv)?))
    }

    /// The parsed JSON (a fresh copy the caller may change).
    pub fn value(&self) -> Value {
        // The bytes were produced by serde_json from a Value, so they always parse.
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// The protobuf encoding, made from the JSON (the same bytes as the stored encoding with
    /// its revision appended: both encode the same value).
    pub(crate) fn encode_proto(&self) -> Result<Bytes, SchemaError> {
        let mut value = self.value();
        take_resource_version(self.key.kind, &mut value);
        let bare = encode_proto(self.key.kind, &value)?;
        Ok(with_rv(self.key.kind, &bare, self.rv))
    }
}

pub type DocRef = Arc<Doc>;

/// An object as a write prepares it and the store keeps it: everything but its revision.
pub(crate) struct Draft {
    pub key: Key,
    /// The canonical JSON with an empty `metadata.resourceVersion` (kinds with metadata).
    pub json: Bytes,
    /// Where the revision's digits go in `json`.
    pub rv_at: Option<usize>,
    /// The protobuf encoding without `metadata.resourceVersion`.
    pub proto: Bytes,
}

impl Draft {
    /// The draft of `value`, a canonical object of `key`'s kind (whatever `resourceVersion` it
    /// holds is left out).
    pub fn new(key: Key, value: &Value) -> Result<Self, SchemaError> {
        let mut value = value.clone();
        take_resource_version(key.kind, &mut value);
        let proto = encode_proto(key.kind, &value)?;
        let unreadable = |e: serde_json::Error| SchemaError::new("", e.to_string());
        let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) else {
            let json = serde_json::to_vec(&value).map_err(unreadable)?;
            return Ok(Self {
                key,
                json: Bytes::from(json),
                rv_at: None,
                proto,
            });
        };
        // A mark no object can hold by chance shows where the field lands in the output.
        let mark = crate::random::token(24);
        meta.insert("resourceVersion".to_owned(), Value::String(mark.clone()));
        let json = serde_json::to_vec(&value).map_err(unreadable)?;
        let at = find(&json, mark.as_bytes())
            .ok_or_else(|| SchemaError::new("metadata.resourceVersion", "missing from the output"))?;
        Ok(Self {
            key,
            json: splice(&json, at, mark.len(), ""),
            rv_at: Some(at),
            proto,
        })
    }
}

/// Removes `metadata.resourceVersion` from an object of `kind`.
fn take_resource_version(kind: Kind, value: &mut Value) {
    if kind.has_metadata()
        && let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("resourceVersion");
    }
}

/// `bytes` with `len` bytes at `at` replaced by `with`.
fn splice(bytes: &[u8], at: usize, len: usize, with: &str) -> Bytes {
    let mut out = Vec::with_capacity(bytes.len() - len + with.len());
    out.extend_from_slice(&bytes[..at]);
    out.extend_from_slice(with.as_bytes());
    out.extend_from_slice(&bytes[at + len..]);
    Bytes::from(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The field number of `metadata` in Application, AppProject and ApplicationSet, and of `resourceVersion` in
/// ObjectMeta.
const METADATA_FIELD: u8 = 1;
const RESOURCE_VERSION_FIELD: u8 = 6;
/// The wire type of length-delimited fields.
const LEN: u8 = 2;

/// An encoding without `metadata.resourceVersion` (a [`Draft`]'s), completed with revision `rv`.
pub(crate) fn with_rv(kind: Kind, bare: &[u8], rv: u64) -> Bytes {
    let mut out = Vec::with_capacity(bare.len() + rv_suffix_len(kind, rv));
    out.extend_from_slice(bare);
    if kind.has_metadata() {
        let digits = rv.to_string();
        // At most 20 digits: both lengths fit one varint byte.
        out.push(METADATA_FIELD << 3 | LEN);
        out.push(digits.len() as u8 + 2);
        out.push(RESOURCE_VERSION_FIELD << 3 | LEN);
        out.push(digits.len() as u8);
        out.extend_from_slice(digits.as_bytes());
    }
    Bytes::from(out)
}

/// How many bytes [`with_rv`] appends.
pub(crate) fn rv_suffix_len(kind: Kind, rv: u64) -> usize {
    if kind.has_metadata() {
        4 + rv.to_string().len()
    } else {
        0
    }
}

/// The protobuf encoding of an object of `kind` given as JSON.
pub(crate) fn encode_proto(kind: Kind, value: &Value) -> Result<Bytes, SchemaError> {
    let schema = Schema::get();
    let desc = schema.message(kind.message())?;
    Ok(Bytes::from(schema.encode(&desc, value)?))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct View {
    metadata: MetaView,
    spec: SpecView,
    status: StatusView,
    labels: BTreeMap<String, String>,
    project: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MetaView {
    labels: BTreeMap<String, String>,
    #[serde(rename = "creationTimestamp")]
    created: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StatusView {
    sync: StatusField,
    health: StatusField,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StatusField {
    status: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SpecView {
    project: String,
    source: Option<SourceView>,
    sources: Vec<SourceView>,
    destination: DestView,
    /// An ApplicationSet's template (its project is the set's).
    template: Option<Box<TemplateView>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TemplateView {
    spec: SpecView,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SourceView {
    #[serde(rename = "repoURL")]
    repo_url: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct DestView {
    server: String,
    name: String,
    namespace: String,
}

fn summarize(kind: Kind, view: View) -> Summary {
    match kind {
        Kind::Application => Summary {
            labels: view.metadata.labels,
            project: if view.spec.project.is_empty() {
                "default".to_owned()
            } else {
                view.spec.project
            },
            repos: view
                .spec
                .source
                .into_iter()
                .chain(view.spec.sources)
                .map(|s| s.repo_url)
                .filter(|u| !u.is_empty())
                .collect(),
            dest_server: view.spec.destination.server,
            dest_name: view.spec.destination.name,
            dest_namespace: view.spec.destination.namespace,
            sync_status: view.status.sync.status,
            health_status: view.status.health.status,
            created: view.metadata.created,
        },
        Kind::AppProject => Summary {
            labels: view.metadata.labels,
            ..Summary::default()
        },
        Kind::Certificate | Kind::GpgKey => Summary::default(),
        Kind::ApplicationSet => Summary {
            labels: view.metadata.labels,
            project: view
                .spec
                .template
                .map(|t| t.spec.project)
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "default".to_owned()),
            ..Summary::default()
        },
        Kind::Cluster | Kind::Repository | Kind::RepoCreds | Kind::WriteRepository | Kind::WriteRepoCreds => {
            Summary {
                labels: view.labels,
                project: view.project,
                ..Summary::default()
            }
        }
    }
}
