//! Integration tests: the real `tiphys` binary over real sockets.
//! One test binary (each file under tests/ would be another link step).

// Test helpers panic on purpose: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod bad_input;
mod cli;
mod cli_accounts;
mod cli_rbac;
mod matrix;
mod paths;
mod shutdown;
mod tls;
