//! Transport-free use cases: `async fn(Ctx, Request) -> Result<Reply, AppError>`, where
//! `Ctx` holds the application state and the caller. The method table (`crate::rpc`) names
//! them; the gRPC, gRPC-Web and REST adapters call them.

pub mod access;
pub mod account;
pub mod application;
pub mod applicationset;
pub mod certificate;
pub mod cluster;
pub mod deeplinks;
pub mod gotemplate;
pub mod gpgkey;
pub mod limits;
pub mod notification;
pub mod project;
pub mod project_rules;
pub mod redact;
mod reply;
pub mod repository;
pub mod resource;
pub mod secret_name;
pub mod sensitive;
pub mod session;
pub mod settings;
pub mod sync_windows;
pub mod version;
pub mod webhook;

pub use self::reply::{Answer, Ctx, Empty, PageInfo, Reply, SessionCookie, StreamItem, UseCase};
