//! Code generated from `proto/` by `build.rs`.
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

/// Encoded descriptors of every service, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("tiphys_descriptor");
