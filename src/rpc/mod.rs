//! The method table of the resource APIs. Each RPC is described once, by its gRPC path, its
//! REST mappings and its use case; the gRPC adapter (`grpc::dynamic`) and the REST adapter
//! (`api::dynamic`) are both built from this table, and messages are converted by the schema
//! (`crate::schema`). Use cases receive the request in its JSON form, deserialized into their
//! own request type, and answer with a [`Reply`].

pub mod codec;
pub mod fields;
mod table;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use self::table::table;
use crate::error::AppError;
use crate::principal::Caller;
use crate::registry::DocRef;
use crate::server::state::AppState;

/// What a use case gets besides its request.
#[derive(Clone)]
pub struct Ctx {
    pub state: Arc<AppState>,
    pub caller: Caller,
}

/// A use case's answer.
pub enum Reply {
    /// A message in JSON form, encoded with the method's output type.
    Message(Value),
    /// A stored object exactly as stored (the method's output type is the object's type).
    Doc(DocRef),
    /// A list of stored objects: `{metadata: {resourceVersion}, items: [...]}`.
    List {
        resource_version: u64,
        items: Vec<DocRef>,
    },
    /// A server stream of messages.
    Stream(BoxStream<'static, Result<StreamItem, AppError>>),
}

impl Reply {
    /// The answer to a write: the object as stored, or `{}` after a deletion.
    pub fn written(doc: Option<DocRef>) -> Reply {
        match doc {
            Some(doc) => Reply::Doc(doc),
            None => Reply::Message(Value::Object(serde_json::Map::new())),
        }
    }
}

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

pub type UnaryFnRef =
    dyn Fn(Ctx, Value) -> Pin<Box<dyn Future<Output = Result<Reply, AppError>> + Send>> + Send + Sync;

/// How the REST body maps into the request message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body (GET, DELETE).
    None,
    /// The body is the whole request message.
    All,
    /// The body is this one field of the request message; the rest comes from path and query.
    Field(&'static str),
}

pub struct Route {
    pub method: http::Method,
    /// An axum path template; `{a.b}` fills the dotted field `a.b` of the request.
    pub path: &'static str,
    pub body: Body,
}

pub enum Handler {
    Call(Arc<UnaryFnRef>),
    /// Not served by tiphys, with the reason given to the caller.
    Unimplemented(&'static str),
}

pub struct Rpc {
    /// `/package.Service/Method`.
    pub path: &'static str,
    pub rest: Vec<Route>,
    pub handler: Handler,
}

/// A use case as a table handler: the request's JSON is read into `Req` (a bad one is an
/// `INVALID_ARGUMENT` that names the field).
pub fn call<Req, F, Fut>(f: F) -> Handler
where
    Req: DeserializeOwned + Send + 'static,
    F: Fn(Ctx, Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Reply, AppError>> + Send + 'static,
{
    let f = Arc::new(f);
    Handler::Call(Arc::new(move |ctx, json| {
        let f = Arc::clone(&f);
        Box::pin(async move {
            let req = serde_json::from_value::<Req>(json)
                .map_err(|e| AppError::InvalidArgument(format!("invalid request: {e}")))?;
            f(ctx, req).await
        })
    }))
}

pub fn route(method: http::Method, path: &'static str, body: Body) -> Route {
    Route { method, path, body }
}

/// The protobuf encoding of a list `{metadata: {resourceVersion}, items}` up to its items (ListMeta
/// is field 1 with resourceVersion as its field 2, items are field 2: the same in every list type
/// served); each item follows as [`list_item_prefix`] and its encoding.
pub fn encode_list_head(resource_version: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut meta = Vec::new();
    put_bytes(&mut meta, 2, resource_version.to_string().as_bytes());
    put_bytes(&mut out, 1, &meta);
    out
}

/// The field key and length that precede an item of `len` bytes in a list.
pub fn list_item_prefix(len: usize) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(6);
    prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut prefix);
    prost::encoding::encode_varint(len as u64, &mut prefix);
    prefix
}

/// The protobuf encoding of a watch event `{type = 1, <object> = 2}`.
pub fn encode_event(kind: &str, proto: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(proto.len() + 16);
    put_bytes(&mut out, 1, kind.as_bytes());
    put_bytes(&mut out, 2, proto);
    out.into()
}

/// A length-delimited field.
fn put_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    prost::encoding::encode_key(field, prost::encoding::WireType::LengthDelimited, out);
    prost::encoding::encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}
