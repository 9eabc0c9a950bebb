//! The schema of every API the server answers (applications, projects, clusters, repositories,
//! and the account, session, settings and version services): messages are not generated Rust
//! types but descriptors read at run time, so one codec serves
//! every message in both encodings a caller may use:
//!
//! - protobuf for gRPC and gRPC-Web ([`Schema::encode`], written straight from the JSON form by
//!   [`encode`], and [`Schema::decode`]);
//! - Argo CD's REST JSON, which is Go `encoding/json` applied to upstream's structs
//!   ([`gojson`]: names as written, `omitempty`, always-present structs, int64 as numbers,
//!   Kubernetes time strings).
//!
//! The service layer works on the JSON form (`serde_json::Value` and serde views of it), which is
//! also how objects are stored.

pub mod codec;
mod encode;
pub mod gojson;
pub mod jsonschema;
mod plan;
pub mod time;
mod unknown;

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, MethodDescriptor};
use serde_json::Value;

use self::plan::{MessagePlan, NameMap};
pub use self::unknown::{Step, UnknownField, path_string};

/// `omitempty` for the REST bodies tiphys writes from serde types rather than through the schema
/// (`#[serde(skip_serializing_if = "crate::schema::is_zero")]`): Go's `encoding/json` leaves out
/// empty strings, zero numbers, `false`, and empty lists and maps.
pub fn is_zero<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// The encoded descriptors of every API the server answers (built by `build.rs`).
pub const DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/api_descriptor.bin"));

/// The descriptors and, per message, how its fields map to JSON. Immutable and derived from
/// data compiled into the binary, so one instance is shared by the whole process.
pub struct Schema {
    pool: DescriptorPool,
    /// One plan per message of the pool, in the pool's order.
    plans: Vec<MessagePlan>,
    /// A message's full name → its index in `plans`.
    plan_index: NameMap<usize>,
}

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    // The descriptor set is produced by protoc at build time, and a unit test decodes it; a
    // failure here means a broken build, not bad input.
    #[allow(clippy::expect_used)]
    Schema::from_descriptors(DESCRIPTORS).expect("the embedded API schema is valid")
});

/// A failure to convert a message; `path` names the field (`spec.destination.server`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct SchemaError {
    pub path: String,
    pub reason: String,
}

impl SchemaError {
    pub(crate) fn new(path: &str, reason: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }
}

impl Schema {
    pub fn get() -> &'static Schema {
        &SCHEMA
    }

    pub fn from_descriptors(bytes: &[u8]) -> Result<Self, SchemaError> {
        let pool = DescriptorPool::decode(bytes)
            .map_err(|e| SchemaError::new("", format!("bad descriptor set: {e}")))?;
        let (plans, plan_index) = plan::build_all(&pool)?;
        Ok(Self {
            pool,
            plans,
            plan_index,
        })
    }

    pub fn pool(&self) -> &DescriptorPool {
        &self.pool
    }

    /// A message type by its full name.
    pub fn message(&self, full_name: &str) -> Result<MessageDescriptor, SchemaError> {
        self.pool
            .get_message_by_name(full_name)
            .ok_or_else(|| SchemaError::new("", format!("unknown message type {full_name}")))
    }

    /// A method by its gRPC path (`/application.ApplicationService/List`).
    pub fn method(&self, path: &str) -> Option<MethodDescriptor> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        self.pool
            .get_service_by_name(service)?
            .methods()
            .find(|m| m.name() == method)
    }

    pub(crate) fn plan(&self, desc: &MessageDescriptor) -> &MessagePlan {
        &self.plans[self.plan_index_of(desc)]
    }

    fn plan_index_of(&self, desc: &MessageDescriptor) -> usize {
        // Every message of the pool has a plan (built from the same pool).
        self.plan_index[desc.full_name()]
    }

    /// The JSON form of a message given as protobuf bytes.
    pub fn decode(&self, desc: &MessageDescriptor, bytes: &[u8]) -> Result<Value, SchemaError> {
        let msg = DynamicMessage::decode(desc.clone(), bytes)
            .map_err(|e| SchemaError::new("", format!("malformed {} message: {e}", desc.name())))?;
        Ok(self.to_json(&msg))
    }
}

#[cfg(test)]
mod encode_tests;
#[cfg(test)]
mod tests;
