//! Differential tests: tiphys's ports of Go libraries against the Go libraries themselves. Each
//! module builds cases (today's unit tests' cases, and generated ones: every character class,
//! operator, nesting, escapes, bad input), puts every case to `tools/upstream/godiff` (our small
//! Go program over the modules Argo CD v3.2.11 pins) and to tiphys, and compares the answers:
//! the same result, or an error on both sides (the messages may differ).
//!
//! The Go program is built by `tools/upstream/build.sh` (cached by its go.mod, go.sum and
//! main.go); `.ci/test-all` exports its folder in `TIPHYS_UPSTREAM_BIN`. Without it these tests
//! fail, saying how to build it: a missing oracle must not read as agreement.

// Test helpers panic on purpose: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cases;
mod csv;
mod duration;
mod expr;
mod glob;
mod oracle;
mod re2;
mod selector;
