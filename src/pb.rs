//! Code generated from `proto/` by `build.rs`: the CLI's clients, and the server stubs of the
//! benchmarks' bare-tonic baseline (tiphys's server answers through the method table instead).
#![allow(
    clippy::all,
    clippy::pedantic,
    clippy::clone_on_ref_ptr,
    unused_qualifications,
    missing_docs
)]

pub mod version {
    tonic::include_proto!("version");
}

pub mod cluster {
    tonic::include_proto!("cluster");
}

pub mod session {
    tonic::include_proto!("session");
}

pub mod account {
    tonic::include_proto!("account");
}
