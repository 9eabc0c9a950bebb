//! Transport-free use cases: `fn(&State, &Caller, input) -> Result<output, AppError>`.
//! gRPC, gRPC-Web and REST handlers are thin adapters over these.

pub mod access;
pub mod account;
pub mod application;
pub mod cluster;
pub mod project;
pub mod project_rules;
pub mod redact;
mod reply;
pub mod repocreds;
pub mod repository;
pub mod resource;
pub mod sensitive;
pub mod session;
pub mod settings;
pub mod sync_windows;
pub mod version;

pub use self::reply::{Ctx, Empty, Reply, SessionCookie, StreamItem};
