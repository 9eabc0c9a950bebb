//! The registry's contract: one body per property, run on each of its three backends, the
//! embedded file store, etcd (a real cluster) and Kubernetes (a real kube-apiserver, where
//! applications are custom resources and clusters and repositories labelled Secrets).
//!
//! The store contract (`contract.rs`) cannot cover Kubernetes, which is no key-value store with
//! one revision and transactions: the Kubernetes backend sits at the registry level
//! (`src/registry/kube_view.rs`). So what every backend must do is said here, once, in terms of
//! the registry's API: creates, reads, conditional updates, deletions, watches, credentials and
//! an object moving under its Secret name. Revisions are only compared with each other: each
//! backend numbers them its own way.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tiphys::registry::{Change, DocRef, EventType, Key, Kind, Registry, RegistryError, SecretsKeys};
use tiphys::store::{FileStore, Store};

/// The namespace objects with metadata live in: Kubernetes's control namespace.
pub struct Backend {
    pub registry: Arc<Registry>,
    pub namespace: String,
}

fn keys() -> Arc<SecretsKeys> {
    Arc::new(SecretsKeys::new(
        Vec::new(),
        b"the server key of the registry contract",
    ))
}

fn app(name: &str, namespace: &str, path: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example/apps.git", "path": path},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}
        }
    })
}

async fn one(reg: &Registry, change: Change) -> Result<Option<DocRef>, RegistryError> {
    Ok(reg.apply(vec![change]).await?.pop().flatten())
}

async fn created(reg: &Registry, key: &Key, value: Value) -> DocRef {
    one(
        reg,
        Change::Create {
            key: key.clone(),
            value,
        },
    )
    .await
    .unwrap()
    .expect("a create answers the new state")
}

/// Applications: a create is read back by get and list, and a second create of the same name
/// is refused without touching the first.
pub async fn create_get_list(b: Backend) {
    let key = Key::new(Kind::Application, &b.namespace, "guestbook");
    let doc = created(&b.registry, &key, app("guestbook", &b.namespace, "guestbook")).await;
    assert!(doc.rv > 0);
    let value = doc.value();
    assert_eq!(value["spec"]["source"]["path"], "guestbook");
    assert_eq!(value["metadata"]["resourceVersion"], json!(doc.rv.to_string()));
    assert!(
        value["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{value}"
    );
    assert_eq!(b.registry.get(&key).map(|d| d.rv), Some(doc.rv));
    let (at, listed) = b.registry.list(Kind::Application);
    assert!(
        at >= doc.rv,
        "the list is current at {at}, before the object's {}",
        doc.rv
    );
    assert_eq!(
        listed.iter().map(|d| d.key.name.as_str()).collect::<Vec<_>>(),
        ["guestbook"]
    );

    let again = one(
        &b.registry,
        Change::Create {
            key: key.clone(),
            value: app("guestbook", &b.namespace, "other"),
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(again, RegistryError::AlreadyExists(_)), "{again}");
    let kept = b.registry.get(&key).unwrap();
    assert_eq!(kept.rv, doc.rv);
    assert_eq!(kept.value()["spec"]["source"]["path"], "guestbook");
}

/// An update names the revision it read: a stale one is a conflict that changes nothing, the
/// current one moves the revision forward.
pub async fn conditional_update(b: Backend) {
    let key = Key::new(Kind::Application, &b.namespace, "a");
    let first = created(&b.registry, &key, app("a", &b.namespace, "one")).await;
    let second = one(
        &b.registry,
        Change::Update {
            key: key.clone(),
            value: app("a", &b.namespace, "two"),
            expect: Some(first.rv),
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert!(second.rv > first.rv);
    let stale = one(
        &b.registry,
        Change::Update {
            key: key.clone(),
            value: app("a", &b.namespace, "three"),
            expect: Some(first.rv),
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(stale, RegistryError::Conflict { .. }), "{stale}");
    let now = b.registry.get(&key).unwrap();
    assert_eq!(
        (now.rv, now.value()["spec"]["source"]["path"].clone()),
        (second.rv, json!("two"))
    );
    let missing = one(
        &b.registry,
        Change::Update {
            key: Key::new(Kind::Application, &b.namespace, "absent"),
            value: app("absent", &b.namespace, "x"),
            expect: None,
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(missing, RegistryError::NotFound(_)), "{missing}");
}

/// A deletion removes the object; deleting it again, or with a stale revision, is refused.
pub async fn delete(b: Backend) {
    let key = Key::new(Kind::Application, &b.namespace, "d");
    let doc = created(&b.registry, &key, app("d", &b.namespace, "x")).await;
    let updated = one(
        &b.registry,
        Change::Update {
            key: key.clone(),
            value: app("d", &b.namespace, "y"),
            expect: None,
        },
    )
    .await
    .unwrap()
    .unwrap();
    let stale = one(
        &b.registry,
        Change::Delete {
            key: key.clone(),
            expect: Some(doc.rv),
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(stale, RegistryError::Conflict { .. }), "{stale}");
    assert!(b.registry.get(&key).is_some());
    let gone = one(
        &b.registry,
        Change::Delete {
            key: key.clone(),
            expect: Some(updated.rv),
        },
    )
    .await
    .unwrap();
    assert!(gone.is_none());
    assert!(b.registry.get(&key).is_none());
    let again = one(&b.registry, Change::Delete { key, expect: None })
        .await
        .unwrap_err();
    assert!(matches!(again, RegistryError::NotFound(_)), "{again}");
}

/// A watch from a list sees every later change once, in order, with rising revisions.
pub async fn watch_after_list(b: Backend) {
    let key = Key::new(Kind::Application, &b.namespace, "w");
    let (listed, mut sub) = b.registry.list_and_watch(Kind::Application).unwrap();
    assert!(listed.is_empty());
    let made = created(&b.registry, &key, app("w", &b.namespace, "1")).await;
    let changed = one(
        &b.registry,
        Change::Update {
            key: key.clone(),
            value: app("w", &b.namespace, "2"),
            expect: Some(made.rv),
        },
    )
    .await
    .unwrap()
    .unwrap();
    one(
        &b.registry,
        Change::Delete {
            key,
            expect: Some(changed.rv),
        },
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    let mut last = 0;
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("the watch delivered within 10 s")
            .expect("the watch is open")
            .expect("the watch did not fail");
        assert!(event.rv > last, "revisions rise: {} after {last}", event.rv);
        last = event.rv;
        seen.push((event.kind, event.doc.value()["spec"]["source"]["path"].clone()));
    }
    assert_eq!(
        seen,
        [
            (EventType::Added, json!("1")),
            (EventType::Modified, json!("2")),
            (EventType::Deleted, json!("2")),
        ]
    );
}

/// A cluster's credentials are kept and read back as written; an update replaces them.
pub async fn cluster_credentials(b: Backend) {
    let server = "https://10.1.2.3:6443";
    let key = Key::new(Kind::Cluster, "", server);
    let cluster = |token: &str| {
        json!({
            "server": server, "name": "edge", "namespaces": ["a", "b"], "project": "default",
            "labels": {"team": "blue"},
            "config": {"bearerToken": token, "tlsClientConfig": {"insecure": false, "caData": "Q0E="}}
        })
    };
    let doc = created(&b.registry, &key, cluster("first-token")).await;
    let value = doc.value();
    assert_eq!(value["config"]["bearerToken"], "first-token");
    assert_eq!(value["config"]["tlsClientConfig"]["caData"], "Q0E=");
    assert_eq!(value["namespaces"], json!(["a", "b"]));
    assert_eq!(value["labels"], json!({"team": "blue"}));
    let updated = one(
        &b.registry,
        Change::Update {
            key: key.clone(),
            value: cluster("second-token"),
            expect: Some(doc.rv),
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert!(updated.rv > doc.rv);
    assert_eq!(
        b.registry.get(&key).unwrap().value()["config"]["bearerToken"],
        "second-token"
    );
    let (_, listed) = b.registry.list(Kind::Cluster);
    assert_eq!(
        listed.iter().map(|d| d.key.name.as_str()).collect::<Vec<_>>(),
        [server]
    );
}

/// A repository declared under a Secret name moves to another URL as one change: the old URL
/// is gone, the new one has the name, and nothing else was added.
pub async fn repository_moves_under_its_name(b: Backend) {
    let old = Key::new(Kind::Repository, "", "https://git.example/old.git");
    let new = Key::new(Kind::Repository, "", "https://git.example/new.git");
    let repo = |url: &str| json!({"repo": url, "type": "git", "username": "bot", "password": "pw", "secretName": "team-repo"});
    let doc = created(&b.registry, &old, repo(&old.name)).await;
    assert_eq!(doc.value()["secretName"], "team-repo");
    let moved = b
        .registry
        .apply(vec![
            Change::Delete {
                key: old.clone(),
                expect: Some(doc.rv),
            },
            Change::Create {
                key: new.clone(),
                value: repo(&new.name),
            },
        ])
        .await
        .unwrap();
    assert!(moved[0].is_none());
    let now = moved[1].clone().expect("the move answers the new state");
    assert_eq!(
        (now.value()["secretName"].clone(), now.value()["password"].clone()),
        (json!("team-repo"), json!("pw"))
    );
    let (_, listed) = b.registry.list(Kind::Repository);
    assert_eq!(listed.iter().map(|d| d.key.clone()).collect::<Vec<_>>(), [new]);
    assert!(b.registry.get(&old).is_none());
}

/// Runs `body` on a registry over a fresh file store in `dir`.
pub async fn on_file<F: Future<Output = ()>>(dir: &Path, body: impl FnOnce(Backend) -> F) {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    let registry = Registry::open(store, keys()).await.unwrap();
    body(Backend {
        registry,
        namespace: "argocd".to_owned(),
    })
    .await;
}

/// Runs `body` on a registry over `store` (etcd, under a prefix of the body's own).
pub async fn on_store<F: Future<Output = ()>>(store: Arc<dyn Store>, body: impl FnOnce(Backend) -> F) {
    let registry = Registry::open(store, keys()).await.unwrap();
    body(Backend {
        registry,
        namespace: "argocd".to_owned(),
    })
    .await;
}

/// The bodies, by name, for the runners of each backend.
#[macro_export]
macro_rules! registry_bodies {
    ($run:ident) => {
        $run!(create_get_list);
        $run!(conditional_update);
        $run!(delete);
        $run!(watch_after_list);
        $run!(cluster_credentials);
        $run!(repository_moves_under_its_name);
    };
}
