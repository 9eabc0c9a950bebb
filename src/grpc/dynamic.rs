//! gRPC for the resource APIs, from the method table (`crate::rpc`): requests and replies are
//! converted by the schema, so one adapter serves every method of these services.

use std::collections::HashMap;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf as _, BufMut as _, Bytes};
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use prost_reflect::MethodDescriptor;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::error::AppError;
use crate::rpc::{Ctx, Handler, Reply, Rpc, StreamItem, encode_event, encode_list};
use crate::schema::Schema;
use crate::server::state::AppState;

/// A service name known at compile time (tonic routes by `NamedService::NAME`).
pub trait ServiceName: Send + Sync + 'static {
    const NAME: &'static str;
}

macro_rules! service_names {
    ($($ty:ident = $name:literal),* $(,)?) => {$(
        pub struct $ty;
        impl ServiceName for $ty {
            const NAME: &'static str = $name;
        }
    )*};
}

service_names! {
    Applications = "application.ApplicationService",
    Projects = "project.ProjectService",
    Clusters = "cluster.ClusterService",
    Repositories = "repository.RepositoryService",
    RepoCreds = "repocreds.RepoCredsService",
}

pub struct DynService<N> {
    rpcs: Arc<HashMap<&'static str, Arc<Rpc>>>,
    state: Arc<AppState>,
    max_message_bytes: usize,
    _name: PhantomData<fn() -> N>,
}

impl<N> Clone for DynService<N> {
    fn clone(&self) -> Self {
        Self {
            rpcs: Arc::clone(&self.rpcs),
            state: Arc::clone(&self.state),
            max_message_bytes: self.max_message_bytes,
            _name: PhantomData,
        }
    }
}

impl<N: ServiceName> NamedService for DynService<N> {
    const NAME: &'static str = N::NAME;
}

impl<N: ServiceName> DynService<N> {
    pub fn new(rpcs: &[Arc<Rpc>], state: &Arc<AppState>, max_message_bytes: usize) -> Self {
        let prefix = format!("/{}/", N::NAME);
        let rpcs = rpcs
            .iter()
            .filter(|r| r.path.starts_with(&prefix))
            .map(|r| (r.path, Arc::clone(r)))
            .collect();
        Self {
            rpcs: Arc::new(rpcs),
            state: Arc::clone(state),
            max_message_bytes,
            _name: PhantomData,
        }
    }
}

impl<N: ServiceName> tower::Service<http::Request<tonic::body::Body>> for DynService<N> {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let path = req.uri().path().to_owned();
            let unimplemented = |why: String| Ok(Status::unimplemented(why).into_http());
            let Some(rpc) = this.rpcs.get(path.as_str()).cloned() else {
                return unimplemented(format!("unknown method {path}"));
            };
            let call = match &rpc.handler {
                Handler::Unimplemented(why) => return unimplemented((*why).to_owned()),
                Handler::Call(call) => Arc::clone(call),
            };
            let Some(method) = Schema::get().method(&path) else {
                return unimplemented(format!("{path} is not in the schema"));
            };
            let mut grpc = tonic::server::Grpc::new(RawCodec)
                .apply_max_message_size_config(Some(this.max_message_bytes), Some(this.max_message_bytes));
            let svc = Call {
                call,
                method: method.clone(),
                state: this.state,
            };
            Ok(if method.is_server_streaming() {
                grpc.server_streaming(svc, req).await
            } else {
                grpc.unary(svc, req).await
            })
        })
    }
}

/// One method call: decode, run the use case, encode.
struct Call {
    call: Arc<crate::rpc::UnaryFnRef>,
    method: MethodDescriptor,
    state: Arc<AppState>,
}

impl Call {
    async fn run(self, request: Request<Bytes>) -> Result<Reply, Status> {
        let caller = super::caller(&request);
        let schema = Schema::get();
        let json = schema
            .decode(&self.method.input(), request.get_ref())
            .map_err(|e| AppError::InvalidArgument(e.to_string()))?;
        let ctx = Ctx {
            state: self.state,
            caller,
        };
        Ok((self.call)(ctx, json).await?)
    }
}

impl tonic::server::UnaryService<Bytes> for Call {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<Response<Bytes>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let this = Call {
            call: Arc::clone(&self.call),
            method: self.method.clone(),
            state: Arc::clone(&self.state),
        };
        Box::pin(async move {
            let output = this.method.output();
            let bytes = match this.run(request).await? {
                Reply::Message(json) => Schema::get()
                    .encode(&output, &json)
                    .map_err(|e| AppError::Internal(e.into()))?
                    .into(),
                Reply::Doc(doc) => doc.proto().map_err(|e| AppError::Internal(e.into()))?,
                Reply::List {
                    resource_version,
                    items,
                } => encode_list(resource_version, &items)?.into(),
                Reply::Stream(_) => {
                    return Err(AppError::Internal(anyhow::anyhow!("a stream from a unary method")).into());
                }
            };
            Ok(Response::new(bytes))
        })
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
            let Reply::Stream(stream) = this.run(request).await? else {
                return Err(AppError::Internal(anyhow::anyhow!("a unary reply from a stream method")).into());
            };
            let stream = stream.map(move |item| {
                let bytes = match item? {
                    StreamItem::Message(json) => Schema::get()
                        .encode(&output, &json)
                        .map(Bytes::from)
                        .map_err(|e| AppError::Internal(e.into()))?,
                    StreamItem::Event { kind, doc, .. } => encode_event(kind, &doc)?,
                };
                Ok(bytes)
            });
            Ok(Response::new(stream.boxed()))
        })
    }
}

/// Bytes in, bytes out: messages are converted by the schema, not by generated types.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
