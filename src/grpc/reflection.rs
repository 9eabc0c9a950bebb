//! gRPC server reflection (`grpc.reflection.v1` and `v1alpha`), built on its first call.
//!
//! Each version's index of every file, message and service takes about 0.4 MB of heap, and only
//! tools such as grpcurl ask for it, so it is built when first asked for and then kept.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use futures_util::future::{Either, Ready, ready};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic_reflection::server::{Builder, Error};

use super::services::GrpcServicesBuilder;

/// Adds both reflection services to `services`.
pub fn add(services: &mut GrpcServicesBuilder) {
    services
        .add_service(Lazy::new(|| with_our_files().build_v1()))
        .add_service(Lazy::new(|| with_our_files().build_v1alpha()));
}

/// A reflection builder that knows every service the server offers and the messages they use.
fn with_our_files() -> Builder<'static> {
    Builder::configure()
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(crate::schema::DESCRIPTORS)
}

/// A gRPC service made by `build` on the first request, shared by every clone after.
struct Lazy<S> {
    service: Arc<OnceLock<Option<S>>>,
    build: fn() -> Result<S, Error>,
}

impl<S> Lazy<S> {
    fn new(build: fn() -> Result<S, Error>) -> Self {
        Self {
            service: Arc::new(OnceLock::new()),
            build,
        }
    }

    fn get(&self) -> Option<&S> {
        self.service
            .get_or_init(|| {
                (self.build)()
                    .inspect_err(|err| tracing::error!(error = %err, "gRPC reflection unavailable"))
                    .ok()
            })
            .as_ref()
    }
}

impl<S> Clone for Lazy<S> {
    fn clone(&self) -> Self {
        Self {
            service: Arc::clone(&self.service),
            build: self.build,
        }
    }
}

impl<S: NamedService> NamedService for Lazy<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<http::Request<Body>> for Lazy<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible> + Clone,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<http::Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match self.get() {
            // Generated tonic servers are always ready: `poll_ready` has nothing to wait for.
            Some(service) => Either::Left(service.clone().call(req)),
            None => Either::Right(ready(Ok(tonic::Status::unavailable(
                "gRPC reflection is unavailable on this server",
            )
            .into_http()))),
        }
    }
}
