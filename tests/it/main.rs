//! Integration tests: the real `tiphys` binary over real sockets.
//! One test binary (each file under tests/ would be another link step).

mod support;

mod bad_input;
mod cli;
mod matrix;
mod shutdown;
mod tls;
