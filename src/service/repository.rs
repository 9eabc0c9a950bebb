//! Placeholder filled in by the repository use cases.

use std::sync::Arc;

use crate::rpc::Rpc;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    Vec::new()
}
