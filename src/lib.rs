//! tiphys: a GitOps API server and CLI, wire-compatible with Argo CD's
//! `argocd-server`. This file is the table of contents.
//!
//! The layers point one way (the README's Architecture section draws them, and
//! `tests/inproc/layers.rs` checks them): `cli` → `server` → `grpc` | `api` | `ui` →
//! `rpc` → `audit` → `service` → `state` → `auth` → `oidc` → `config` → `rbac` → `principal` →
//! `registry` → `store` → the leaves. `fuzzing` (the fuzz targets' bodies) sits above them all.

pub mod api;
pub mod audit;
pub mod auth;
pub mod buildinfo;
pub mod catalog;
pub mod checks;
pub mod cli;
pub mod clock;
pub mod clusters;
pub mod config;
pub mod controller_cache;
pub mod error;
pub mod expr;
pub mod fsutil;
#[doc(hidden)]
pub mod fuzzing;
pub mod gitrepo;
pub mod glob;
pub mod grpc;
pub mod kubernetes;
pub mod labels;
pub mod oidc;
pub mod openpgp;
pub mod pb;
pub mod principal;
pub mod random;
pub mod rbac;
pub mod registry;
pub mod reposerver;
pub mod rpc;
pub mod schema;
pub mod seal;
pub mod server;
pub mod service;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod tlsclient;
pub mod ui;
pub mod urlmask;

pub use error::AppError;
