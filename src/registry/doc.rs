//! A stored object in memory: its canonical JSON (exactly what REST returns), the length of its
//! protobuf encoding (the encoding itself stays in the store, see `proto.rs`), and the few fields
//! that lists filter on.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::kind::{Key, Kind};
use crate::schema::{Schema, SchemaError};

pub struct Doc {
    pub key: Key,
    /// The registry revision of the write that produced this state.
    pub rv: u64,
    /// Canonical Go-style JSON, `metadata.resourceVersion` included.
    pub json: Bytes,
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
    /// An application's `spec.project` (`default` when empty); the `project` of a
    /// project-scoped cluster or repository; empty otherwise.
    pub project: String,
    /// An application's source repository URLs.
    pub repos: Vec<String>,
    /// An application's destination server URL and cluster name.
    pub dest_server: String,
    pub dest_name: String,
}

impl Doc {
    pub(crate) fn new(key: Key, rv: u64, json: Bytes, proto_len: usize) -> Result<Self, SchemaError> {
        // Reading the few summary fields straight from the bytes (skipping the rest) is several
        // times faster than building a Value, which matters when a restart loads every object.
        let view: View = serde_json::from_slice(&json)
            .map_err(|e| SchemaError::new("", format!("stored JSON is unreadable: {e}")))?;
        let summary = summarize(key.kind, view);
        Ok(Self {
            key,
            rv,
            json,
            proto_len,
            summary,
        })
    }

    /// The parsed JSON (a fresh copy the caller may change).
    pub fn value(&self) -> Value {
        // The bytes were produced by serde_json from a Value, so they always parse.
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// The protobuf encoding, made from the JSON (the same bytes as the stored encoding: both
    /// encode the same value).
    pub(crate) fn encode_proto(&self) -> Result<Bytes, SchemaError> {
        encode_proto(self.key.kind, &self.value())
    }
}

pub type DocRef = Arc<Doc>;

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
    labels: BTreeMap<String, String>,
    project: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct MetaView {
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SpecView {
    project: String,
    source: Option<SourceView>,
    sources: Vec<SourceView>,
    destination: DestView,
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
        },
        Kind::AppProject => Summary {
            labels: view.metadata.labels,
            ..Summary::default()
        },
        Kind::Cluster | Kind::Repository | Kind::RepoCreds => Summary {
            labels: view.labels,
            project: view.project,
            ..Summary::default()
        },
    }
}
