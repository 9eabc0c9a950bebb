//! The gRPC services by name.
//!
//! A call's path is `/<package.Service>/<Method>`, so one map lookup of the
//! service segment finds its handler. tonic's `Routes` did the same with
//! axum's router: a path matcher, a boxed clone of the route and two body
//! conversions on every call, about a tenth of a unary call's CPU time here.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Map};
use http::{Request, Response};
use tonic::body::Body;
use tonic::server::NamedService;
use tower::{Service, ServiceExt};

/// Every gRPC service the server offers; cheap to clone.
#[derive(Clone)]
pub struct GrpcServices {
    by_name: Arc<HashMap<&'static str, Box<dyn Handler>>>,
}

/// One service with its type erased: each call clones the service (an `Arc`
/// for tonic's generated servers) and boxes its future once.
trait Handler: Send + Sync {
    fn call(&self, req: Request<Body>) -> BoxFuture<'static, Response<Body>>;
}

struct Entry<S>(S);

impl<S> Handler for Entry<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    fn call(&self, req: Request<Body>) -> BoxFuture<'static, Response<Body>> {
        let service = self.0.clone();
        Box::pin(async move {
            match service.oneshot(req).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        })
    }
}

/// Collects the services, then freezes them into a [`GrpcServices`].
#[derive(Default)]
pub struct GrpcServicesBuilder {
    by_name: HashMap<&'static str, Box<dyn Handler>>,
}

impl GrpcServicesBuilder {
    /// Adds `service` under its gRPC name; a later service of the same name replaces it.
    pub fn add_service<S>(&mut self, service: S) -> &mut Self
    where
        S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.by_name.insert(S::NAME, Box::new(Entry(service)));
        self
    }

    /// Adds a service of the method table under its gRPC name.
    pub fn add_table_service(&mut self, service: super::dynamic::DynService) -> &mut Self {
        self.by_name.insert(service.name(), Box::new(Entry(service)));
        self
    }

    pub fn build(self) -> GrpcServices {
        GrpcServices {
            by_name: Arc::new(self.by_name),
        }
    }
}

impl GrpcServices {
    pub fn builder() -> GrpcServicesBuilder {
        GrpcServicesBuilder::default()
    }

    /// The service's answer, or `UNIMPLEMENTED` when no service has the
    /// path's name (never an HTTP error: a gRPC client reads the status).
    pub fn call(&self, req: Request<Body>) -> BoxFuture<'static, Response<Body>> {
        match service_name(req.uri().path()).and_then(|name| self.by_name.get(name)) {
            Some(handler) => handler.call(req),
            None => Box::pin(std::future::ready(unimplemented())),
        }
    }
}

/// `/pkg.Service/Method` → `pkg.Service`.
pub(super) fn service_name(path: &str) -> Option<&str> {
    let (name, _method) = path.strip_prefix('/')?.split_once('/')?;
    Some(name)
}

fn unimplemented() -> Response<Body> {
    tonic::Status::unimplemented("").into_http()
}

/// For layers such as tonic-web's, which wrap a tower service.
impl Service<Request<Body>> for GrpcServices {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future =
        Map<BoxFuture<'static, Response<Body>>, fn(Response<Body>) -> Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        GrpcServices::call(self, req).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_is_the_first_path_segment() {
        assert_eq!(
            service_name("/version.VersionService/Version"),
            Some("version.VersionService")
        );
        assert_eq!(
            service_name("/version.VersionService/"),
            Some("version.VersionService")
        );
        assert_eq!(service_name("/version.VersionService"), None);
        assert_eq!(service_name("version.VersionService/Version"), None);
        assert_eq!(service_name("/"), None);
    }

    #[tokio::test]
    async fn an_unknown_service_is_unimplemented_with_a_grpc_status() {
        let services = GrpcServices::builder().build();
        let req = Request::builder()
            .uri("/nope.Nothing/Call")
            .body(Body::empty())
            .unwrap();
        let response = services.call(req).await;
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()["grpc-status"], "12");
        assert_eq!(response.headers()["content-type"], "application/grpc");
    }
}
