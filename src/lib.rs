//! tiphys: a GitOps API server and CLI, wire-compatible with Argo CD's
//! `argocd-server`. This file is the table of contents.
//!
//! Dependency direction: `grpc`, `api`, `ui`, `cli` → `service` → `principal`;
//! `server` wires everything and is the only module that knows all the others.

pub mod api;
pub mod auth;
pub mod buildinfo;
pub mod cli;
pub mod config;
pub mod error;
pub mod fsutil;
pub mod grpc;
pub mod json;
pub mod oidc;
pub mod pb;
pub mod principal;
pub mod rbac;
pub mod registry;
pub mod rpc;
pub mod schema;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;
pub mod tlsclient;
pub mod ui;

pub use error::AppError;
