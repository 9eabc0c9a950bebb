//! `grpc.health.v1.Health` as tonic serves it, except that a `Watch` ends when the server ends
//! streams (as every other stream does), instead of holding the shutdown until its deadline.

use std::sync::Arc;

use futures_util::stream::BoxStream;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, HealthService};

use crate::state::ServerState;
use crate::state::drain::SHUTTING_DOWN;

pub struct Draining {
    inner: HealthService,
    app: Arc<ServerState>,
}

/// The health service whose statuses `reporter` sets.
pub fn server(reporter: &HealthReporter, app: &Arc<ServerState>) -> HealthServer<Draining> {
    HealthServer::new(Draining {
        inner: HealthService::from_health_reporter(reporter.clone()),
        app: Arc::clone(app),
    })
}

#[tonic::async_trait]
impl Health for Draining {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.inner.check(request).await
    }

    type WatchStream = BoxStream<'static, Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let stream = self.inner.watch(request).await?.into_inner();
        Ok(Response::new(
            self.app
                .drain
                .bound(stream, || Status::unavailable(SHUTTING_DOWN)),
        ))
    }
}
