//! Integration tests: the real `tiphys` binary over real sockets.
//! One test binary (each file under tests/ would be another link step).

// Test helpers panic on purpose: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;
// Shared with tests/store, which uses all of it.
#[allow(dead_code)]
#[path = "../support/etcd_cluster.rs"]
mod etcd_cluster;

mod atomic_authz;
mod audit;
mod bad_input;
mod cli;
mod cli_accounts;
mod cli_apply;
mod cli_apps;
mod cli_rbac;
mod cli_timeouts;
mod clusters;
mod credentials_api;
mod free_json;
mod fuzz_corpus;
mod log_limit;
mod matrix;
mod metrics;
mod migrate;
mod paths;
mod projects;
mod redirect;
mod refusals;
mod replica_registry;
mod replicas;
mod repositories;
mod secret_names;
mod secrets_at_rest;
mod shutdown;
mod taken_names;
mod tls;
