//! gRPC adapters: decode, call the use case, encode. One place lists every service.

mod account;
pub mod codec;
pub mod dynamic;
mod encode;
mod reflection;
mod services;
mod session;
mod settings;
mod version;

use std::sync::Arc;

use self::dynamic::DynService;
pub use self::services::GrpcServices;

use crate::app::App;
use crate::pb;
use crate::principal::Caller;
use crate::principal::RequestContext;

/// Every gRPC service the server offers, with the message size limit applied.
pub fn routes(
    state: &Arc<App>,
    health: tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    max_message_bytes: usize,
) -> GrpcServices {
    use pb::account::account_service_server::AccountServiceServer;
    use pb::cluster::settings_service_server::SettingsServiceServer;
    use pb::session::session_service_server::SessionServiceServer;
    use pb::version::version_service_server::VersionServiceServer;

    let version = VersionServiceServer::new(version::VersionGrpc)
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes);
    let settings = SettingsServiceServer::new(settings::SettingsGrpc {
        state: Arc::clone(state),
    })
    .max_decoding_message_size(max_message_bytes)
    .max_encoding_message_size(max_message_bytes);
    let session = SessionServiceServer::new(session::SessionGrpc {
        state: Arc::clone(state),
    })
    .max_decoding_message_size(max_message_bytes)
    .max_encoding_message_size(max_message_bytes);
    let account = AccountServiceServer::new(account::AccountGrpc {
        state: Arc::clone(state),
    })
    .max_decoding_message_size(max_message_bytes)
    .max_encoding_message_size(max_message_bytes);
    let rpcs = crate::rpc::table();
    let mut services = GrpcServices::builder();
    services
        .add_service(version)
        .add_service(settings)
        .add_service(session)
        .add_service(account)
        .add_service(health)
        .add_service(DynService::<dynamic::Applications>::new(
            &rpcs,
            state,
            max_message_bytes,
        ))
        .add_service(DynService::<dynamic::Projects>::new(
            &rpcs,
            state,
            max_message_bytes,
        ))
        .add_service(DynService::<dynamic::Clusters>::new(
            &rpcs,
            state,
            max_message_bytes,
        ))
        .add_service(DynService::<dynamic::Repositories>::new(
            &rpcs,
            state,
            max_message_bytes,
        ))
        .add_service(DynService::<dynamic::RepoCreds>::new(
            &rpcs,
            state,
            max_message_bytes,
        ));
    reflection::add(&mut services);
    services.build()
}

/// The caller, as the dispatcher worked it out for this request.
fn caller<T>(request: &tonic::Request<T>) -> Caller {
    RequestContext::caller_of(request.extensions())
}
