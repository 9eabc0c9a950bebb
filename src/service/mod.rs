//! Transport-free use cases: `fn(&State, &Principal, input) -> Result<output, AppError>`.
//! gRPC, gRPC-Web and REST handlers are thin adapters over these.

pub mod settings;
pub mod version;
