//! gRPC adapters: decode, call the use case, encode. One place lists every service.

pub mod dynamic;
mod encode;
pub mod health;
mod reflection;
mod services;

use std::sync::Arc;

use self::dynamic::DynService;
pub use self::services::GrpcServices;

use crate::principal::Caller;
use crate::principal::RequestContext;
use crate::state::ServerState;

/// Every gRPC service the server offers (one per service of the method table, health and
/// reflection), with the message size limit applied.
pub fn routes(
    state: &Arc<ServerState>,
    health: tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    max_message_bytes: usize,
) -> GrpcServices {
    let mut services = GrpcServices::builder();
    services.add_service(health);
    for service in DynService::for_table(&crate::rpc::table(), state, max_message_bytes) {
        services.add_table_service(service);
    }
    reflection::add(&mut services);
    services.build()
}

/// The caller, as the dispatcher worked it out for this request.
fn caller<T>(request: &tonic::Request<T>) -> Caller {
    RequestContext::caller_of(request.extensions())
}
