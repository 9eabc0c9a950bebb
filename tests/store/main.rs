//! Store-level tests: the `Store` contract against both backends (`contract`), and what only
//! the etcd backend has (`etcd`: prefixes, watch, a leader's death, connection errors), on a
//! real etcd cluster started per test (`tests/support/etcd_cluster.rs`).

// Test helpers panic on purpose: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/etcd_cluster.rs"]
mod etcd_cluster;

mod contract;
mod etcd;

use tiphys::store::{EtcdOptions, EtcdStore};

/// A store on `cluster` under `prefix`, with the default timeouts.
pub async fn connect(cluster: &etcd_cluster::EtcdCluster, prefix: &str) -> EtcdStore {
    let mut options = EtcdOptions::new(cluster.endpoints());
    options.prefix = prefix.to_owned();
    EtcdStore::connect(options).await.unwrap()
}
