//! What a use case receives besides its request, and what it answers: transport-free types
//! that the gRPC and REST adapters turn into their own messages.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use serde_json::Value;

use crate::error::AppError;
use crate::principal::Caller;
use crate::registry::DocRef;
use crate::state::ServerState;

/// A use case on the JSON form of its request: what the method table calls and the audit
/// trail wraps, whatever the transport.
pub type UseCase =
    dyn Fn(Ctx, Value) -> futures_util::future::BoxFuture<'static, Result<Reply, AppError>> + Send + Sync;

/// What a use case gets besides its request.
#[derive(Clone)]
pub struct Ctx {
    pub app: Arc<ServerState>,
    pub caller: Caller,
    /// The registry's view had caught up with the store when the request arrived
    /// ([`RequestContext::fenced`](crate::principal::RequestContext)).
    pub fenced: bool,
}

/// A use case's answer.
pub enum Reply {
    /// A message in JSON form, encoded with the method's output type.
    Message(Value),
    /// A message as a value of the use case's own type (see [`Reply::json`]): REST writes it
    /// straight to JSON text, gRPC through its JSON form, as [`Reply::Message`].
    Answer(Box<dyn Answer>),
    /// A stored object exactly as stored (the method's output type is the object's type).
    Doc(DocRef),
    /// A list of stored objects: `{metadata: {resourceVersion}, items: [...]}`, and for a
    /// page of applications, `metadata.continue` and `facets`.
    List {
        resource_version: u64,
        items: Vec<DocRef>,
        page: Option<Box<PageInfo>>,
    },
    /// A server stream of messages.
    Stream(BoxStream<'static, Result<StreamItem, AppError>>),
    /// A message that also starts or ends the caller's browser session: REST answers it with
    /// the session cookie set or cleared; gRPC with the message alone.
    Session { message: Value, cookie: SessionCookie },
}

/// What a page of a list adds to it (a tiphys extension).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PageInfo {
    /// `metadata.continue`: the token of the next page, when there is one.
    pub continue_token: Option<String>,
    /// `facets`, in the form of `ApplicationFacet`s.
    pub facets: Option<Value>,
}

/// What a [`Reply::Session`] does to the session cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionCookie {
    /// Set it to this token.
    Set(String),
    /// Expire every chunk of it.
    Clear,
}

impl Reply {
    /// The answer to a write: the object as stored, or `{}` after a deletion.
    pub fn written(doc: Option<DocRef>) -> Reply {
        match doc {
            Some(doc) => Reply::Doc(doc),
            None => Reply::empty(),
        }
    }

    /// `{}`.
    pub fn empty() -> Reply {
        Reply::Message(Value::Object(serde_json::Map::new()))
    }

    /// A value whose JSON form is the answer. It is serialized only by the adapter that
    /// answers, once, to what that adapter needs.
    pub fn json(value: impl serde::Serialize + Send + 'static) -> Result<Reply, AppError> {
        Ok(Reply::Answer(Box::new(value)))
    }
}

/// A use case's answer of its own type, serializable both ways an adapter needs it.
pub trait Answer: Send {
    /// The JSON text (REST).
    fn to_json_bytes(&self) -> Result<Vec<u8>, AppError>;
    /// The JSON form (gRPC's encoding, `fields` projections).
    fn to_value(&self) -> Result<Value, AppError>;
}

impl<T: serde::Serialize + Send> Answer for T {
    fn to_json_bytes(&self) -> Result<Vec<u8>, AppError> {
        serde_json::to_vec(self).map_err(|e| AppError::Internal(e.into()))
    }

    fn to_value(&self) -> Result<Value, AppError> {
        serde_json::to_value(self).map_err(|e| AppError::Internal(e.into()))
    }
}

/// A request without fields (`google.protobuf.Empty` and its kin); any fields are ignored.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Empty {}

/// One message of a server stream.
pub enum StreamItem {
    /// A message in JSON form.
    Message(Value),
    /// A watch event `{type: ..., <field>: <object>}` whose object is a stored document; kept
    /// as the document so its encodings are reused, not rebuilt per watcher.
    Event {
        kind: &'static str,
        field: &'static str,
        doc: DocRef,
        /// The document's protobuf encoding when the event already has it (a change); `None`
        /// for an object of the initial snapshot (gRPC reads it from the registry).
        proto: Option<Bytes>,
    },
}
