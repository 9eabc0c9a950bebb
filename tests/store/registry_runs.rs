//! The registry contract's bodies (`registry_contract.rs`) on each backend: a fresh file store
//! and a fresh etcd cluster per body; on Kubernetes one control plane for all of them (it takes
//! a minute to start), each body in a namespace of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use tiphys::kubernetes::{Connection, KubeOptions};
use tiphys::registry::{Registry, SecretsKeys};
use tiphys::store::{FileStore, Store};

use crate::controlplane::{ControlPlane, Options};
use crate::etcd_cluster::EtcdCluster;
use crate::registry_contract::{self as contract, Backend};

mod file {
    macro_rules! run {
        ($body:ident) => {
            #[tokio::test]
            async fn $body() {
                let dir = tempfile::tempdir().unwrap();
                super::contract::on_file(dir.path(), super::contract::$body).await;
            }
        };
    }
    crate::registry_bodies!(run);
}

mod etcd {
    macro_rules! run {
        ($body:ident) => {
            #[tokio::test]
            async fn $body() {
                let cluster = super::EtcdCluster::start(1);
                let store: std::sync::Arc<dyn super::Store> =
                    std::sync::Arc::new(crate::connect(&cluster, "/tiphys/").await);
                super::contract::on_store(store, super::contract::$body).await;
            }
        };
    }
    crate::registry_bodies!(run);
}

type Body = fn(Backend) -> Pin<Box<dyn Future<Output = ()>>>;

/// Every body, in order, on one kube-apiserver: each in a namespace of its own, with a file
/// store of its own for the kinds Kubernetes does not hold.
#[test]
fn on_kubernetes() {
    let root = tempfile::tempdir().unwrap();
    let plane = ControlPlane::start(root.path(), Options::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut bodies: Vec<(&str, Body)> = Vec::new();
    macro_rules! run {
        ($body:ident) => {
            bodies.push((stringify!($body), |b| Box::pin(contract::$body(b))));
        };
    }
    crate::registry_bodies!(run);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let options = KubeOptions {
            kubeconfig: Some(plane.state.kubeconfig.clone()),
            namespace_of_context: false,
        };
        let connection = Connection::open(&options).await.unwrap();
        let namespaces: Api<Namespace> = Api::all(connection.client.clone());
        for (i, (name, body)) in bodies.into_iter().enumerate() {
            let namespace = format!("contract-{i}");
            let object =
                serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}})).unwrap();
            namespaces.create(&PostParams::default(), &object).await.unwrap();
            let dir = tempfile::tempdir().unwrap();
            let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
            let keys = Arc::new(SecretsKeys::new(
                Vec::new(),
                b"the server key of the registry contract",
            ));
            let registry =
                Registry::open_on_kube(store, keys, connection.clone(), &namespace, Default::default())
                    .await
                    .unwrap();
            let backend = Backend { registry, namespace };
            tokio::time::timeout(Duration::from_secs(120), body(backend))
                .await
                .unwrap_or_else(|_| panic!("{name} on Kubernetes did not end within 120 s"));
        }
    });
}
