//! gRPC for the resource APIs, from the method table (`crate::rpc`): requests and replies are
//! converted by the schema, so one adapter serves every method of these services.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use prost_reflect::MethodDescriptor;
use tonic::{Request, Response, Status};

use super::encode::{encode_event, encode_list_head, list_item_prefix};
use crate::error::AppError;
use crate::principal::{BodyLimit, OverLimit, RequestContext};
use crate::registry::{DocRef, Registry};
use crate::rpc::{Handler, Rpc};
use crate::schema::Schema;
use crate::schema::codec::RawCodec;
use crate::service::{Ctx, Reply, StreamItem};
use crate::state::ServerState;

/// One gRPC service of the method table (`/<service>/<method>` for each of its methods).
#[derive(Clone)]
pub struct DynService {
    name: &'static str,
    rpcs: Arc<HashMap<&'static str, Arc<Rpc>, foldhash::fast::RandomState>>,
    state: Arc<ServerState>,
    max_message_bytes: usize,
}

impl DynService {
    /// One service per gRPC service named in `rpcs`, in the table's order.
    pub fn for_table(rpcs: &[Arc<Rpc>], state: &Arc<ServerState>, max_message_bytes: usize) -> Vec<Self> {
        let mut services: Vec<Self> = Vec::new();
        for rpc in rpcs {
            let Some(name) = super::services::service_name(rpc.path) else {
                continue;
            };
            let index = match services.iter().position(|s| s.name == name) {
                Some(index) => index,
                None => {
                    services.push(Self {
                        name,
                        rpcs: Arc::new(HashMap::default()),
                        state: Arc::clone(state),
                        max_message_bytes,
                    });
                    services.len() - 1
                }
            };
            if let Some(map) = Arc::get_mut(&mut services[index].rpcs) {
                map.insert(rpc.path, Arc::clone(rpc));
            }
        }
        services
    }

    /// The gRPC service name (`package.Service`).
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for DynService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        let rpc = this.rpcs.get(req.uri().path()).cloned();
        Box::pin(async move {
            let unimplemented = |why: String| Ok(Status::unimplemented(why).into_http());
            let Some(rpc) = rpc else {
                return unimplemented(format!("unknown method {}", req.uri().path()));
            };
            let call = match &rpc.handler {
                Handler::Unimplemented(why) => {
                    let refusal = rpc.unserved(&RequestContext::caller_of(req.extensions()), why);
                    return Ok(Status::from(refusal).into_http());
                }
                Handler::Call(call, _) => Arc::clone(call),
            };
            let Some(method) = rpc.method.clone() else {
                return unimplemented(format!("{} is not in the schema", rpc.path));
            };
            let svc = Call {
                call,
                method: method.clone(),
                state: this.state,
            };
            let limit = request_limit(&req, this.max_message_bytes);
            if method.is_client_streaming() && !method.is_server_streaming() {
                return Ok(client_streaming(svc, req, limit, this.max_message_bytes).await);
            }
            if !method.is_server_streaming() {
                return Ok(unary(svc, req, limit, this.max_message_bytes).await);
            }
            // tonic checks the length prefix against the size limit; a caller without a
            // session is stopped by the body's own limit, with UNAUTHENTICATED.
            let decode_limit = match limit.over {
                OverLimit::TooLarge { .. } => usize::try_from(limit.bytes).unwrap_or(usize::MAX),
                OverLimit::Unauthenticated { .. } => this.max_message_bytes,
            };
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .apply_max_message_size_config(Some(decode_limit), Some(this.max_message_bytes));
            Ok(grpc.server_streaming(svc, req).await)
        })
    }
}

/// One method call: decode, run the use case, encode.
struct Call {
    call: Arc<crate::service::UseCase>,
    method: MethodDescriptor,
    state: Arc<ServerState>,
}

impl Call {
    async fn run(self, request: Request<Bytes>) -> Result<Reply, Status> {
        let json = self.decode(request.get_ref())?;
        self.run_json(request.map(|_| json)).await
    }

    fn decode(&self, message: &[u8]) -> Result<serde_json::Value, AppError> {
        // An empty message (every field at its default) has nothing to decode.
        if message.is_empty() {
            return Ok(serde_json::Value::Object(serde_json::Map::new()));
        }
        Schema::get()
            .decode(&self.method.input(), message)
            .map_err(|e| AppError::InvalidArgument(e.to_string()))
    }

    async fn run_json(self, request: Request<serde_json::Value>) -> Result<Reply, Status> {
        let caller = super::caller(&request);
        let fenced = request
            .extensions()
            .get::<RequestContext>()
            .is_some_and(|c| c.fenced);
        let ctx = Ctx {
            app: self.state,
            caller,
            fenced,
        };
        Ok((self.call)(ctx, request.into_inner()).await?)
    }
}

impl tonic::server::ServerStreamingService<Bytes> for Call {
    type Response = Bytes;
    type ResponseStream = BoxStream<'static, Result<Bytes, Status>>;
    type Future = BoxFuture<'static, Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let this = Call {
            call: Arc::clone(&self.call),
            method: self.method.clone(),
            state: Arc::clone(&self.state),
        };
        Box::pin(async move {
            let output = this.method.output();
            let registry = Arc::clone(&this.state.registry);
            let Reply::Stream(stream) = this.run(request).await? else {
                return Err(AppError::Internal(anyhow::anyhow!("a unary reply from a stream method")).into());
            };
            let stream = stream.map(move |item| {
                let bytes = match item? {
                    StreamItem::Message(json) => Schema::get()
                        .encode(&output, &json)
                        .map(Bytes::from)
                        .map_err(|e| AppError::Internal(e.into()))?,
                    StreamItem::Event {
                        kind,
                        proto: Some(proto),
                        ..
                    } => encode_event(kind, &proto),
                    StreamItem::Event {
                        kind,
                        doc,
                        proto: None,
                        ..
                    } => encode_event(kind, &registry.proto(&doc).map_err(internal)?),
                };
                Ok(bytes)
            });
            Ok(Response::new(stream.boxed()))
        })
    }
}

/// A unary call, answered by this adapter rather than tonic so that a large reply (a List of
/// thousands of objects) is written as it is produced: the message's length is known up front
/// (every document knows the length of its encoding), so its frame header goes first and the
/// objects follow in chunks read from the store, without the whole message ever being in memory.
async fn unary(
    call: Call,
    req: http::Request<tonic::body::Body>,
    limit: BodyLimit,
    max: usize,
) -> http::Response<tonic::body::Body> {
    let (parts, body) = req.into_parts();
    let message = match read_message(body, limit).await {
        Ok(message) => message,
        Err(status) => return status.into_http(),
    };
    let output = call.method.output();
    let request = Request::from_parts(
        tonic::metadata::MetadataMap::from_headers(parts.headers),
        parts.extensions,
        message,
    );
    let registry = Arc::clone(&call.state.registry);
    let reply = match call.run(request).await {
        Ok(reply) => reply,
        Err(status) => return status.into_http(),
    };
    respond(reply, &output, registry, max)
}

/// A client-streaming call: every message of the request read in turn (all of them together
/// held to `limit`) and handed to the use case as `{"messages": [...]}`; its one reply is
/// written as a unary call's.
async fn client_streaming(
    call: Call,
    req: http::Request<tonic::body::Body>,
    limit: BodyLimit,
    max: usize,
) -> http::Response<tonic::body::Body> {
    use http_body_util::BodyExt as _;
    let (parts, mut body) = req.into_parts();
    let mut reader = StreamReader::new(limit);
    let mut messages = Vec::new();
    // A refusal ends the call at once: the request body's own bound (`server::body`) drains
    // what the client still sends.
    while let Some(frame) = body.frame().await {
        let data = match frame {
            Ok(frame) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
            Err(status) => return status.into_http(),
        };
        let decoded = reader.push(&data).and_then(|done| {
            done.iter()
                .map(|m| call.decode(m).map_err(Status::from))
                .collect::<Result<Vec<_>, _>>()
        });
        match decoded {
            Ok(decoded) => messages.extend(decoded),
            Err(status) => return status.into_http(),
        }
    }
    if let Err(status) = reader.finish() {
        return status.into_http();
    }
    let output = call.method.output();
    let registry = Arc::clone(&call.state.registry);
    let request = Request::from_parts(
        tonic::metadata::MetadataMap::from_headers(parts.headers),
        parts.extensions,
        serde_json::json!({ "messages": messages }),
    );
    match call.run_json(request).await {
        Ok(reply) => respond(reply, &output, registry, max),
        Err(status) => status.into_http(),
    }
}

/// The messages of a client-streaming request, taken in as its body arrives; all of them
/// together may be no larger than the limit.
struct StreamReader {
    bytes: bytes::BytesMut,
    total: u64,
    limit: BodyLimit,
}

impl StreamReader {
    fn new(limit: BodyLimit) -> Self {
        Self {
            bytes: bytes::BytesMut::new(),
            total: 0,
            limit,
        }
    }

    /// The next bytes of the body, and the messages they complete.
    fn push(&mut self, data: &[u8]) -> Result<Vec<Bytes>, Status> {
        self.bytes.extend_from_slice(data);
        let mut done = Vec::new();
        while self.bytes.len() >= FRAME_HEADER {
            if self.bytes[0] != 0 {
                return Err(Status::unimplemented("compressed messages are not supported"));
            }
            let len = u32::from_be_bytes([self.bytes[1], self.bytes[2], self.bytes[3], self.bytes[4]]);
            self.total += u64::from(len) + FRAME_HEADER as u64;
            if self.limit.exceeded_by(self.total) {
                let limit = match self.limit.over {
                    OverLimit::TooLarge { why, .. } => BodyLimit {
                        over: OverLimit::TooLarge {
                            noun: "the upload (all of the call's messages together)",
                            why,
                        },
                        ..self.limit
                    },
                    OverLimit::Unauthenticated { .. } => self.limit,
                };
                return Err(limit.refusal().into());
            }
            let total = FRAME_HEADER + len as usize;
            if self.bytes.len() < total {
                // Counted again once the whole frame is in.
                self.total -= u64::from(len) + FRAME_HEADER as u64;
                break;
            }
            let mut frame = self.bytes.split_to(total);
            frame.advance(FRAME_HEADER);
            done.push(frame.freeze());
        }
        Ok(done)
    }

    fn finish(self) -> Result<(), Status> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Status::invalid_argument("truncated gRPC message frame"))
        }
    }
}

/// The response of a call with one reply.
fn respond(
    reply: Reply,
    output: &prost_reflect::MessageDescriptor,
    registry: Arc<Registry>,
    max: usize,
) -> http::Response<tonic::body::Body> {
    // A reply of one piece is written with its frame header as one buffer (one DATA frame).
    let framed = |encode: &dyn Fn(&mut Vec<u8>) -> Result<(), AppError>| {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(&[0; FRAME_HEADER]);
        encode(&mut out).map(|()| ReplyParts::Framed(out))
    };
    let encoded = match reply {
        // gRPC clients keep the token themselves: the cookie is the browser's.
        Reply::Message(json) | Reply::Session { message: json, .. } => framed(&|out| {
            Schema::get()
                .encode_into(output, &json, out)
                .map_err(|e| AppError::Internal(e.into()))
        }),
        Reply::Answer(answer) => answer.to_value().and_then(|json| {
            framed(&|out| {
                Schema::get()
                    .encode_into(output, &json, out)
                    .map_err(|e| AppError::Internal(e.into()))
            })
        }),
        Reply::Doc(doc) => registry.proto(&doc).map_err(internal).and_then(|bytes| {
            framed(&|out| {
                out.extend_from_slice(&bytes);
                Ok(())
            })
        }),
        Reply::List {
            resource_version,
            items,
            page,
        } => {
            let page = page.unwrap_or_default();
            let mut head = encode_list_head(resource_version, page.continue_token.as_deref());
            // The facets are fields of the list message like its items; protobuf takes a
            // message's fields in any order, so they go out with the head.
            match page.facets {
                Some(facets) => Schema::get()
                    .encode_into(output, &serde_json::json!({ "facets": facets }), &mut head)
                    .map_err(|e| AppError::Internal(e.into()))
                    .map(|()| head),
                None => Ok(head),
            }
            .map(|head| ReplyParts::List {
                head: Bytes::from(head),
                items,
                registry,
            })
        }
        Reply::Stream(_) => Err(AppError::Internal(anyhow::anyhow!(
            "a stream from a unary method"
        ))),
    };
    let parts = match encoded {
        Ok(parts) => parts,
        Err(e) => return Status::from(e).into_http(),
    };
    let len = parts.message_len();
    if len > max {
        return Status::resource_exhausted(format!(
            "the reply is {len} bytes, more than the limit of {max} (--grpc-max-message-bytes)"
        ))
        .into_http();
    }
    let Ok(len32) = u32::try_from(len) else {
        return Status::resource_exhausted("the reply is too large for one gRPC message").into_http();
    };
    let mut header = [0; FRAME_HEADER];
    header[1..].copy_from_slice(&len32.to_be_bytes());
    let mut trailers = http::HeaderMap::with_capacity(1);
    trailers.insert(GRPC_STATUS, GRPC_OK);
    let frames = parts
        .into_stream(header)
        .map(|chunk| Ok::<_, Status>(http_body::Frame::data(chunk)))
        .chain(futures_util::stream::once(async move {
            Ok(http_body::Frame::trailers(trailers))
        }));
    let mut response = http::Response::new(tonic::body::Body::new(http_body_util::StreamBody::new(frames)));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, GRPC_CONTENT_TYPE);
    response
}

/// What the request may send, as the dispatcher decided from its caller; without one (not
/// through the dispatcher), the message size limit.
fn request_limit<B>(req: &http::Request<B>, max: usize) -> BodyLimit {
    match req.extensions().get::<RequestContext>() {
        Some(context) if context.body_limit != BodyLimit::NONE => context.body_limit,
        _ => BodyLimit {
            bytes: max as u64,
            over: OverLimit::TooLarge {
                noun: "request message",
                why: "--grpc-max-message-bytes",
            },
        },
    }
}

/// Reads the one message of a unary request (uncompressed). Its length prefix is held against
/// `limit` before the message is read, so a message over it is refused having read 5 bytes.
async fn read_message(mut body: tonic::body::Body, limit: BodyLimit) -> Result<Bytes, Status> {
    use http_body_util::BodyExt as _;
    let mut reader = MessageReader::new(limit);
    while let Some(frame) = body.frame().await {
        // A body stopped at its limit carries the refusal as its status.
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        reader.push(&data)?;
    }
    reader.finish()
}

/// The one message of a unary request, taken in as its body arrives: the framing without the
/// I/O, so that it can be fuzzed on its own (`crate::fuzzing`).
pub(crate) struct MessageReader {
    bytes: bytes::BytesMut,
    /// The framed length, once the prefix is in.
    framed: Option<usize>,
    limit: BodyLimit,
}

impl MessageReader {
    pub(crate) fn new(limit: BodyLimit) -> Self {
        Self {
            bytes: bytes::BytesMut::new(),
            framed: None,
            limit,
        }
    }

    /// The next bytes of the body; an error ends the call.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<(), Status> {
        let bytes = &mut self.bytes;
        bytes.extend_from_slice(data);
        if self.framed.is_none() && bytes.len() >= FRAME_HEADER {
            if bytes[0] != 0 {
                return Err(Status::unimplemented("compressed messages are not supported"));
            }
            let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
            if self.limit.exceeded_by(u64::from(len)) {
                return Err(self.limit.refusal().into());
            }
            let total = FRAME_HEADER + len as usize;
            bytes.reserve(total.saturating_sub(bytes.len()));
            self.framed = Some(total);
        }
        if self.framed.is_some_and(|total| bytes.len() > total) {
            return Err(Status::invalid_argument(
                "a unary call carries exactly one message",
            ));
        }
        Ok(())
    }

    /// The message, once the body has ended.
    pub(crate) fn finish(mut self) -> Result<Bytes, Status> {
        match self.framed {
            None if self.bytes.is_empty() => Ok(Bytes::new()),
            Some(total) if self.bytes.len() == total => {
                self.bytes.advance(FRAME_HEADER);
                Ok(self.bytes.freeze())
            }
            _ => Err(Status::invalid_argument("truncated gRPC message frame")),
        }
    }
}

/// The compression flag and the big-endian length before each gRPC message.
const FRAME_HEADER: usize = 5;
const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");
const GRPC_OK: http::HeaderValue = http::HeaderValue::from_static("0");
const GRPC_CONTENT_TYPE: http::HeaderValue = http::HeaderValue::from_static("application/grpc");

/// An encoded reply, as parts that are written in turn.
enum ReplyParts {
    /// A whole message behind room for its frame header.
    Framed(Vec<u8>),
    /// The list's header bytes, then per object its field prefix and encoding.
    List {
        head: Bytes,
        items: Vec<DocRef>,
        registry: Arc<Registry>,
    },
}

impl ReplyParts {
    /// The length of the message (without the frame header).
    fn message_len(&self) -> usize {
        match self {
            ReplyParts::Framed(bytes) => bytes.len() - FRAME_HEADER,
            ReplyParts::List { head, items, .. } => {
                let item = |len: usize| {
                    prost::encoding::key_len(2) + prost::encoding::encoded_len_varint(len as u64) + len
                };
                head.len() + items.iter().map(|d| item(d.proto_len)).sum::<usize>()
            }
        }
    }

    /// The frame `header`, then the message in chunks of about [`CHUNK`] bytes; a list's
    /// encodings are read from the store a chunk at a time, as the client takes them.
    fn into_stream(self, header: [u8; FRAME_HEADER]) -> BoxStream<'static, Bytes> {
        const CHUNK: usize = 256 << 10;
        match self {
            ReplyParts::Framed(mut bytes) => {
                bytes[..FRAME_HEADER].copy_from_slice(&header);
                futures_util::stream::once(async move { Bytes::from(bytes) }).boxed()
            }
            ReplyParts::List {
                head,
                items,
                registry,
            } => {
                let mut batches = Vec::new();
                let mut batch = Vec::new();
                let mut size = head.len();
                for doc in items {
                    size += doc.proto_len;
                    batch.push(doc);
                    if size >= CHUNK {
                        batches.push(std::mem::take(&mut batch));
                        size = 0;
                    }
                }
                if !batch.is_empty() || batches.is_empty() {
                    batches.push(batch);
                }
                // The frame header goes out with the list's own head.
                let mut head = Some(Bytes::from([&header[..], &head[..]].concat()));
                futures_util::stream::iter(batches)
                    .map(move |batch| {
                        let registry = Arc::clone(&registry);
                        let head = head.take();
                        async move { list_chunk(&registry, head, &batch).await }
                    })
                    // The next chunk is read while this one is written.
                    .buffered(2)
                    // A failed read cannot be reported once the header is out: the stream ends
                    // short, and the client sees a truncated message.
                    .take_while(|chunk| std::future::ready(chunk.is_some()))
                    .filter_map(std::future::ready)
                    .boxed()
            }
        }
    }
}

/// One chunk of a list reply: the head (first chunk only), then each object's prefix and encoding.
async fn list_chunk(registry: &Registry, head: Option<Bytes>, docs: &[DocRef]) -> Option<Bytes> {
    let protos = match registry.protos(docs).await {
        Ok(protos) => protos,
        Err(err) => {
            tracing::error!(error = %err, "cannot read the encodings of a list");
            return None;
        }
    };
    let size = protos.iter().map(|p| p.len() + 6).sum::<usize>();
    let mut chunk = bytes::BytesMut::with_capacity(size + head.as_ref().map_or(0, Bytes::len));
    if let Some(head) = head {
        chunk.extend_from_slice(&head);
    }
    for proto in protos {
        chunk.extend_from_slice(&list_item_prefix(proto.len()));
        chunk.extend_from_slice(&proto);
    }
    Some(chunk.freeze())
}

fn internal(err: crate::registry::RegistryError) -> AppError {
    AppError::Internal(err.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    fn limit(bytes: u64) -> BodyLimit {
        BodyLimit {
            bytes,
            over: OverLimit::TooLarge {
                noun: "request message",
                why: "--grpc-max-request-bytes",
            },
        }
    }

    #[test]
    fn a_stream_is_read_message_by_message_across_any_split() {
        let body = [framed(b"one"), framed(b""), framed(b"three")].concat();
        for split in 0..body.len() {
            let mut reader = StreamReader::new(limit(100));
            let mut got = reader.push(&body[..split]).unwrap();
            got.extend(reader.push(&body[split..]).unwrap());
            reader.finish().unwrap();
            assert_eq!(got, [&b"one"[..], b"", b"three"], "split at {split}");
        }
        let mut reader = StreamReader::new(limit(100));
        reader.push(&body[..body.len() - 1]).unwrap();
        assert_eq!(reader.finish().unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn the_messages_together_are_held_to_the_limit() {
        let mut reader = StreamReader::new(limit(20));
        assert_eq!(reader.push(&framed(b"0123456789")).unwrap().len(), 1);
        let refused = reader.push(&framed(b"0123456789")).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(
            refused.message().contains("upload") && refused.message().contains("--grpc-max-request-bytes"),
            "{}",
            refused.message()
        );
    }
}
