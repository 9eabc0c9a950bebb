//! Tests of the whole server in this process: the application state and the dispatcher a real
//! server builds from the same flags, called without sockets (`tiphys::server::inprocess`).
//! Fast, and able to look inside (the audit log, counters); the tests over real sockets are in
//! `tests/it` and `tests/e2e`. The layer check of `src/` lives here too, to share the link step.

// Test helpers panic on purpose: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api;
mod authz;
mod denials;
mod layers;
mod pages;
mod rate_limits;
mod refusals;
mod support;
