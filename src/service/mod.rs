//! Transport-free use cases: `fn(&State, &Caller, input) -> Result<output, AppError>`.
//! gRPC, gRPC-Web and REST handlers are thin adapters over these.

pub mod account;
pub mod session;
pub mod settings;
pub mod version;
