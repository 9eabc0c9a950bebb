//! Store-level tests: the `Store` contract against both backends (`contract`), what only the
//! etcd backend has (`etcd`: prefixes, watch, a leader's death, connection errors), on a real
//! etcd cluster started per test (`tests/support/etcd_cluster.rs`), and the registry's contract
//! on all three backends (`registry_contract`), Kubernetes's on a real kube-apiserver
//! (`tests/support/controlplane.rs`).

// Test helpers panic on purpose: a failed setup is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/etcd_cluster.rs"]
mod etcd_cluster;

#[path = "../support/controlplane.rs"]
#[allow(dead_code)]
mod controlplane;

mod cluster_auth;
mod contract;
mod etcd;
mod registry_contract;
mod registry_runs;

use tiphys::store::{EtcdOptions, EtcdStore};

/// A store on `cluster` under `prefix`, with the default timeouts.
pub async fn connect(cluster: &etcd_cluster::EtcdCluster, prefix: &str) -> EtcdStore {
    let mut options = EtcdOptions::new(cluster.endpoints());
    options.prefix = prefix.to_owned();
    EtcdStore::connect(options).await.unwrap()
}
