//! Calls to the resource APIs (applications, projects, clusters, repositories, credential
//! templates), which have no generated Rust types: a request given as JSON is encoded by the
//! schema (`crate::schema`), sent as raw bytes over the command's connection (native gRPC or
//! gRPC-Web, with its token), and the answer decoded back to Go-style JSON.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use bytes::Bytes;
use http::uri::PathAndQuery;
use prost_reflect::MethodDescriptor;
use serde_json::Value;

use super::client::{Client, call_error};
use super::exit;
use crate::schema::Schema;
use crate::schema::codec::RawCodec;

/// Answers larger than this are refused (lists of many objects can be large).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// A method of the resource APIs, looked up in the schema.
fn method(path: &str) -> anyhow::Result<(MethodDescriptor, PathAndQuery)> {
    let method = Schema::get()
        .method(path)
        .ok_or_else(|| anyhow!("{path} is not a method of the resource APIs"))?;
    let path = PathAndQuery::try_from(path).map_err(|e| anyhow!("invalid method path {path:?}: {e}"))?;
    Ok((method, path))
}

fn encode(method: &MethodDescriptor, request: &Value) -> anyhow::Result<Bytes> {
    Schema::get()
        .encode(&method.input(), request)
        .map(Bytes::from)
        .map_err(|e| exit::invalid(format!("invalid {}: {e}", method.input().name())))
}

fn decode(method: &MethodDescriptor, bytes: &[u8]) -> anyhow::Result<Value> {
    Schema::get()
        .decode(&method.output(), bytes)
        .with_context(|| format!("cannot read the server's {} answer", method.name()))
}

async fn grpc(client: &Client) -> anyhow::Result<tonic::client::Grpc<super::conn::GrpcTransport>> {
    let mut grpc =
        tonic::client::Grpc::with_origin(client.conn.transport.clone(), client.conn.origin.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready().await.map_err(|e| {
        let status = tonic::Status::from_error(e);
        with_kind(
            call_error("cannot reach the server", &status),
            Some(status.code()),
        )
    })?;
    Ok(grpc)
}

/// The answer of a call (a renewed token saved, a failure worded by [`Client::finish`]), with
/// the exit code of the failure's status attached.
fn finish<T>(
    client: &Client,
    what: &str,
    result: Result<tonic::Response<T>, tonic::Status>,
) -> anyhow::Result<T> {
    let code = result.as_ref().err().map(tonic::Status::code);
    client.finish(what, result).map_err(|err| with_kind(err, code))
}

fn with_kind(err: anyhow::Error, code: Option<tonic::Code>) -> anyhow::Error {
    match code.and_then(exit::Kind::of_status) {
        Some(kind) => anyhow::Error::new(exit::Failure {
            kind,
            message: err.to_string(),
        }),
        None => err,
    }
}

/// A unary call: `request` in the method's input JSON, the answer in its output JSON. A
/// failure is worded as `{what}: <the server's message>` and carries its exit code.
pub async fn unary(client: &Client, what: &str, path: &str, request: &Value) -> anyhow::Result<Value> {
    let (method, path) = method(path)?;
    let body = encode(&method, request)?;
    let mut grpc = grpc(client).await?;
    let result = grpc.unary(tonic::Request::new(body), path, RawCodec).await;
    let bytes = finish(client, what, result)?;
    decode(&method, &bytes)
}

/// A server stream of messages in the method's output JSON.
pub struct JsonStream {
    method: MethodDescriptor,
    inner: tonic::Streaming<Bytes>,
    what: String,
}

impl JsonStream {
    /// The next message; `None` when the server ended the stream.
    pub async fn next(&mut self) -> anyhow::Result<Option<Value>> {
        match self.inner.message().await {
            Ok(Some(bytes)) => decode(&self.method, &bytes).map(Some),
            Ok(None) => Ok(None),
            Err(status) => Err(with_kind(call_error(&self.what, &status), Some(status.code()))),
        }
    }
}

/// A server-streaming call (such as `/application.ApplicationService/Watch`).
pub async fn stream(client: &Client, what: &str, path: &str, request: &Value) -> anyhow::Result<JsonStream> {
    let (method, path) = streaming_method(path)?;
    let body = encode(&method, request)?;
    let result = open_stream(client, path, body).await;
    let inner = finish(client, what, result)?;
    Ok(JsonStream {
        method,
        inner,
        what: what.to_owned(),
    })
}

fn streaming_method(path: &str) -> anyhow::Result<(MethodDescriptor, PathAndQuery)> {
    let (method, path) = method(path)?;
    if !method.is_server_streaming() {
        return Err(anyhow!("{path} is not a server-streaming method"));
    }
    Ok((method, path))
}

async fn open_stream(
    client: &Client,
    path: PathAndQuery,
    body: Bytes,
) -> Result<tonic::Response<tonic::Streaming<Bytes>>, tonic::Status> {
    let mut grpc =
        tonic::client::Grpc::with_origin(client.conn.transport.clone(), client.conn.origin.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready().await.map_err(tonic::Status::from_error)?;
    // A stream may stay quiet for as long as nothing changes: no request timeout (keep-alives
    // find a dead server instead, see `conn`).
    let mut request = tonic::Request::new(body);
    request.extensions_mut().insert(super::deadline::Streaming);
    grpc.server_streaming(request, path, RawCodec).await
}

/// Failed attempts in a row after which a [`Watch`] gives up (about a minute of backoff).
const WATCH_RETRIES: u32 = 10;

/// A watch (`…/Watch` with a `resourceVersion` field) that outlives the server it started on.
/// When the stream breaks off as unavailable (the server ends its watches as it shuts down, or
/// the connection drops), it is opened again, through the same address (a load balancer then
/// picks a live replica), resuming after the last `resourceVersion` seen; when the server no
/// longer has that version, it starts over, as a fresh watch does.
pub struct Watch<'a> {
    client: &'a Client,
    what: String,
    method: MethodDescriptor,
    path: PathAndQuery,
    request: Value,
    resource_version: Option<u64>,
    inner: Option<tonic::Streaming<Bytes>>,
}

/// Starts a [`Watch`]; a first failure is reported as [`stream`] reports it.
pub async fn watch<'a>(
    client: &'a Client,
    what: &str,
    path: &str,
    request: &Value,
) -> anyhow::Result<Watch<'a>> {
    let (method, path) = streaming_method(path)?;
    let resource_version = request
        .get("resourceVersion")
        .and_then(Value::as_str)
        .and_then(|rv| rv.parse().ok());
    let mut watch = Watch {
        client,
        what: what.to_owned(),
        method,
        path,
        request: request.clone(),
        resource_version,
        inner: None,
    };
    let result = watch.open().await;
    watch.inner = Some(finish(client, what, result)?);
    Ok(watch)
}

impl Watch<'_> {
    async fn open(&self) -> Result<tonic::Response<tonic::Streaming<Bytes>>, tonic::Status> {
        let mut request = self.request.clone();
        if let Value::Object(fields) = &mut request {
            let rv = self.resource_version.map(|rv| rv.to_string()).unwrap_or_default();
            fields.insert("resourceVersion".to_owned(), Value::String(rv));
        }
        let body =
            encode(&self.method, &request).map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        open_stream(self.client, self.path.clone(), body).await
    }

    /// The next message; `None` when the server ended the stream without an error.
    pub async fn next(&mut self) -> anyhow::Result<Option<Value>> {
        let mut failures = 0;
        loop {
            let status = match &mut self.inner {
                Some(inner) => match inner.message().await {
                    Ok(Some(bytes)) => {
                        let message = decode(&self.method, &bytes)?;
                        self.note_version(&message);
                        return Ok(Some(message));
                    }
                    Ok(None) => return Ok(None),
                    Err(status) => status,
                },
                None => match self.open().await {
                    Ok(response) => {
                        self.inner = Some(response.into_inner());
                        continue;
                    }
                    Err(status) => status,
                },
            };
            self.inner = None;
            match status.code() {
                tonic::Code::Aborted if self.resource_version.is_some() => {
                    eprintln!(
                        "note: {}: {}; watching from the start again",
                        self.what,
                        status.message()
                    );
                    self.resource_version = None;
                }
                // Unknown: a connection cut without a status (a server or proxy gone).
                tonic::Code::Unavailable | tonic::Code::Unknown if failures < WATCH_RETRIES => {
                    if failures == 0 {
                        eprintln!("note: {}: {}; reconnecting", self.what, status.message());
                    }
                    let pause = Duration::from_millis(250 << failures.min(6)).min(Duration::from_secs(10));
                    tokio::time::sleep(pause).await;
                    failures += 1;
                }
                code => return Err(with_kind(call_error(&self.what, &status), Some(code))),
            }
        }
    }

    /// Remembers the newest `metadata.resourceVersion` of the event's object.
    fn note_version(&mut self, event: &Value) {
        let newest = event
            .as_object()
            .into_iter()
            .flat_map(|fields| fields.values())
            .filter_map(|object| {
                object
                    .pointer("/metadata/resourceVersion")?
                    .as_str()?
                    .parse::<u64>()
                    .ok()
            })
            .max();
        if let Some(rv) = newest {
            self.resource_version = Some(self.resource_version.map_or(rv, |seen| seen.max(rv)));
        }
    }
}

/// A string field of a JSON object (empty when absent).
pub fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The `items` of a list answer.
pub fn items(list: &Value) -> Vec<Value> {
    list.get("items")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Whether an error is a "not found" answer.
pub fn is_not_found(err: &anyhow::Error) -> bool {
    exit::kind_of(err) == Some(exit::Kind::NotFound)
}
