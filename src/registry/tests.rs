use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::store::FileStore;

fn app(name: &str, project: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"project": project, "source": {"repoURL": "https://r"}}})
}

fn test_keys() -> Arc<SecretsKeys> {
    Arc::new(SecretsKeys::new(
        Vec::new(),
        b"the server key of the registry tests",
    ))
}

fn key(name: &str) -> Key {
    Key::new(Kind::Application, "argocd", name)
}

async fn open(dir: &std::path::Path) -> Arc<Registry> {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir).unwrap());
    Registry::open(store, test_keys()).await.unwrap()
}

async fn create(reg: &Registry, name: &str) -> DocRef {
    reg.apply(vec![Change::Create {
        key: key(name),
        value: app(name, "p"),
    }])
    .await
    .unwrap()
    .pop()
    .flatten()
    .unwrap()
}

#[tokio::test]
async fn writes_stamp_metadata_and_advance_one_revision() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    let a = create(&reg, "a").await;
    let v = a.value();
    assert_eq!(a.rv, 1);
    assert_eq!(v["metadata"]["resourceVersion"], json!("1"));
    assert_eq!(v["metadata"]["namespace"], json!("argocd"));
    assert_eq!(v["metadata"]["generation"], json!(1));
    assert!(v["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert_eq!(a.summary.project, "p");
    let b = create(&reg, "b").await;
    assert_eq!(b.rv, 2);
    assert_eq!(reg.revision(), 2);
    let err = reg
        .apply(vec![Change::Create {
            key: key("a"),
            value: app("a", "p"),
        }])
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::AlreadyExists(_)), "{err}");
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    let a = create(&reg, "a").await;
    let updated = reg
        .apply(vec![Change::Update {
            key: key("a"),
            value: app("a", "q"),
            expect: Some(a.rv),
        }])
        .await
        .unwrap()
        .pop()
        .flatten()
        .unwrap();
    assert_eq!(updated.value()["metadata"]["generation"], json!(2));
    assert_eq!(updated.value()["metadata"]["uid"], a.value()["metadata"]["uid"]);
    let err = reg
        .apply(vec![Change::Update {
            key: key("a"),
            value: app("a", "z"),
            expect: Some(a.rv),
        }])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Conflict {
                expected: 1,
                actual: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(reg.get(&key("a")).unwrap().summary.project, "q");
    let err = reg
        .apply(vec![Change::Delete {
            key: key("a"),
            expect: Some(1),
        }])
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::Conflict { .. }), "{err}");
    assert!(reg.get(&key("a")).is_some());
}

#[tokio::test]
async fn invalid_documents_are_refused_with_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    let err = reg
        .apply(vec![Change::Create {
            key: key("a"),
            value: json!({"spec": {"destination": {"namespace": ["x"]}}}),
        }])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.destination.namespace"), "{err}");
    assert_eq!(reg.revision(), 0);
}

#[tokio::test]
async fn objects_and_revision_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let reg = open(dir.path()).await;
        create(&reg, "a").await;
        create(&reg, "b").await;
        reg.apply(vec![Change::Delete {
            key: key("a"),
            expect: None,
        }])
        .await
        .unwrap();
    }
    let reg = open(dir.path()).await;
    assert_eq!(reg.revision(), 3);
    let (rv, docs) = reg.list(Kind::Application);
    assert_eq!(rv, 3);
    assert_eq!(
        docs.iter().map(|d| d.key.name.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    assert_eq!(docs[0].rv, 2);
    // History starts at the reopened revision: older versions must relist.
    assert!(matches!(
        reg.watch(Kind::Application, 2).await,
        Err(WatchError::TooOld { .. })
    ));
    assert!(reg.watch(Kind::Application, 3).await.is_ok());
    assert!(matches!(
        reg.watch(Kind::Application, 9).await,
        Err(WatchError::Future { .. })
    ));
}

#[tokio::test]
async fn watches_resume_from_a_version_without_gaps_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    create(&reg, "a").await;
    let mut first = reg.watch(Kind::Application, 1).await.unwrap();
    create(&reg, "b").await;
    create(&reg, "c").await;
    let seen = first.next().await.unwrap().unwrap();
    assert_eq!(
        (seen.rv, seen.kind, seen.doc.key.name.as_str()),
        (2, EventType::Added, "b")
    );
    drop(first);
    // Reconnect after the last event seen: exactly what followed.
    reg.apply(vec![Change::Delete {
        key: key("a"),
        expect: None,
    }])
    .await
    .unwrap();
    let mut resumed = reg.watch(Kind::Application, 2).await.unwrap();
    let c = resumed.next().await.unwrap().unwrap();
    let a = resumed.next().await.unwrap().unwrap();
    assert_eq!((c.rv, c.doc.key.name.as_str()), (3, "c"));
    assert_eq!(
        (a.rv, a.kind, a.doc.key.name.as_str()),
        (4, EventType::Deleted, "a")
    );
    create(&reg, "d").await;
    let d = resumed.next().await.unwrap().unwrap();
    assert_eq!((d.rv, d.doc.key.name.as_str()), (5, "d"));
    // Other kinds are not delivered.
    reg.apply(vec![Change::Create {
        key: Key::new(Kind::AppProject, "argocd", "p"),
        value: json!({"metadata": {"name": "p"}}),
    }])
    .await
    .unwrap();
    create(&reg, "e").await;
    let e = resumed.next().await.unwrap().unwrap();
    assert_eq!((e.rv, e.doc.key.name.as_str()), (7, "e"));
    assert_eq!(reg.kind_revision(Kind::AppProject), 6);
}

#[tokio::test]
async fn list_and_watch_is_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Arc::new(open(dir.path()).await);
    create(&reg, "a").await;
    let (docs, mut sub) = reg.list_and_watch(Kind::Application).unwrap();
    assert_eq!(docs.len(), 1);
    create(&reg, "b").await;
    let event = sub.next().await.unwrap().unwrap();
    assert_eq!(event.doc.key.name, "b");
    assert_eq!(sub.last(), 2);
}

#[tokio::test]
async fn history_is_bounded_and_old_versions_must_relist() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    // Commits of 512 objects keep this quick; the objects of one commit share its revision.
    // One commit more than the history holds: the first commit's events are dropped.
    let total = watch::HISTORY + 512;
    for chunk in (0..total).collect::<Vec<_>>().chunks(512) {
        let changes = chunk
            .iter()
            .map(|i| Change::Create {
                key: key(&format!("a{i}")),
                value: app(&format!("a{i}"), "p"),
            })
            .collect();
        reg.apply(changes).await.unwrap();
    }
    assert!(matches!(
        reg.watch(Kind::Application, 0).await,
        Err(WatchError::TooOld { oldest: 1, .. })
    ));
    let mut sub = reg.watch(Kind::Application, 1).await.unwrap();
    let first = sub.next().await.unwrap().unwrap();
    assert_eq!((first.rv, first.doc.key.name.as_str()), (2, "a512"));
}

#[tokio::test]
async fn the_history_is_bounded_in_bytes_too() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    // 24 writes of about 1 MB each: more than the history's byte budget, far fewer events than
    // its count.
    let big = "x".repeat(1 << 20);
    for i in 0..24 {
        let mut value = app(&format!("a{i}"), "p");
        value["metadata"]["annotations"] = json!({"big": big});
        reg.apply(vec![Change::Create {
            key: key(&format!("a{i}")),
            value,
        }])
        .await
        .unwrap();
    }
    assert!(matches!(
        reg.watch(Kind::Application, 1).await,
        Err(WatchError::TooOld { .. })
    ));
    // The latest events are still there.
    assert!(reg.watch(Kind::Application, 20).await.is_ok());
}

#[tokio::test]
async fn encodings_are_stored_and_match_the_state_listed() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    let reg = Registry::open(Arc::clone(&store), test_keys()).await.unwrap();
    let a = create(&reg, "a").await;
    let stored = store.get(&a.key.proto_store_key()).await.unwrap().unwrap();
    let expected = a.encode_proto().unwrap();
    // Stored without the revision, which a read appends.
    assert_eq!(
        doc::with_rv(Kind::Application, &stored.value[8..], a.rv),
        expected
    );
    assert_eq!(stored.mod_revision, a.rv);
    assert_eq!(a.proto_len, expected.len());
    assert_eq!(reg.proto(&a).unwrap(), expected);

    // The listed state is served even after the object changed (from its JSON).
    let mut changed = app("a", "p");
    changed["metadata"]["labels"] = json!({"new": "label"});
    let b = reg
        .apply_one(Change::Update {
            key: key("a"),
            value: changed,
            expect: None,
        })
        .await
        .unwrap()
        .unwrap();
    let protos = reg.protos(&[Arc::clone(&a), Arc::clone(&b)]).await.unwrap();
    assert_eq!(protos[0], expected);
    assert_eq!(protos[1].len(), b.proto_len);
    assert_ne!(protos[0], protos[1]);

    // A deletion removes the stored encoding with the object.
    reg.apply_one(Change::Delete {
        key: key("a"),
        expect: None,
    })
    .await
    .unwrap();
    assert!(store.get(&a.key.proto_store_key()).await.unwrap().is_none());
}

#[tokio::test]
async fn records_of_the_first_layout_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    // How objects were stored before their encodings were: revision, then the JSON. The
    // revision is now the record's mod revision in the store.
    let json =
        br#"{"metadata":{"name":"old","namespace":"argocd","resourceVersion":"3"},"spec":{"project":"p"}}"#;
    let mut record = 3u64.to_le_bytes().to_vec();
    record.extend_from_slice(json);
    let at = store
        .commit(vec![put(key("old").store_key(), record)])
        .await
        .unwrap();
    let reg = Registry::open(store, test_keys()).await.unwrap();
    let old = reg.get(&key("old")).unwrap();
    assert_eq!((old.rv, old.summary.project.as_str()), (at, "p"));
    assert_eq!(old.value()["metadata"]["resourceVersion"], json!(at.to_string()));
    let listed = reg.protos(&[Arc::clone(&old)]).await.unwrap();
    assert_eq!(listed[0].len(), old.proto_len);
    assert_eq!(listed[0], reg.proto(&old).unwrap());
}

#[test]
fn encodings_with_the_revision_appended_decode_as_the_json() {
    let value = json!({"metadata": {"name": "a", "namespace": "argocd", "labels": {"k": "v"}},
        "spec": {"project": "p", "source": {"repoURL": "https://r"}}});
    let draft = Draft::new(key("a"), &value).unwrap();
    let doc = Doc::at(&draft, 12_345_678_901).unwrap();
    assert_eq!(doc.value()["metadata"]["resourceVersion"], json!("12345678901"));
    let proto = doc.encode_proto().unwrap();
    assert_eq!(proto.len(), doc.proto_len);
    let schema = Schema::get();
    let desc = schema.message(Kind::Application.message()).unwrap();
    let decoded = schema.decode(&desc, &proto).unwrap();
    assert_eq!(decoded["metadata"], doc.value()["metadata"]);
    // Restamped at another revision: only the revision differs.
    let later = doc.restamped(7).unwrap();
    assert_eq!(later.value()["metadata"]["resourceVersion"], json!("7"));
    assert_eq!(later.encode_proto().unwrap().len(), later.proto_len);
    let mut expected = doc.value();
    expected["metadata"]["resourceVersion"] = json!("7");
    assert_eq!(later.value(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_application_writes_share_commits_and_each_gets_its_own_answer() {
    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(FileStore::open(dir.path()).unwrap());
    let store: Arc<dyn Store> = Arc::clone(&file) as Arc<dyn Store>;
    let reg = Registry::open(Arc::clone(&store), test_keys()).await.unwrap();
    reg.apply(vec![Change::Create {
        key: key("taken"),
        value: app("taken", "default"),
    }])
    .await
    .unwrap();
    let before = reg.revision();
    let transactions = file.write_transactions();
    let (_, mut sub) = reg.list_and_watch(Kind::Application).unwrap();
    let writes: Vec<_> = (0..64)
        .map(|i| {
            let reg = Arc::clone(&reg);
            // One write collides with an existing object: only it fails.
            let name = if i == 13 {
                "taken".to_owned()
            } else {
                format!("a{i:02}")
            };
            tokio::spawn(async move {
                let change = Change::Create {
                    key: key(&name),
                    value: app(&name, "default"),
                };
                reg.apply_one(change).await.map(|doc| doc.map(|d| d.rv))
            })
        })
        .collect();
    let mut rvs = Vec::new();
    for (i, write) in writes.into_iter().enumerate() {
        match write.await.unwrap() {
            Ok(Some(rv)) => rvs.push(rv),
            Err(RegistryError::AlreadyExists(k)) if i == 13 => assert_eq!(k, key("taken")),
            other => panic!("write {i}: {other:?}"),
        }
    }
    rvs.sort_unstable();
    assert_eq!(
        rvs,
        (before + 1..=before + 63).collect::<Vec<_>>(),
        "one revision each, no gap"
    );
    let commits = file.write_transactions() - transactions;
    assert!(
        commits < 63,
        "63 writes in {commits} transactions: none were combined"
    );
    for rv in before + 1..=before + 63 {
        let event = sub.next().await.unwrap().unwrap();
        assert_eq!(event.rv, rv, "events in revision order");
    }
}

/// A registry holding project `p`, and that project's key.
async fn with_project(dir: &std::path::Path) -> (Arc<Registry>, Key) {
    let reg = open(dir).await;
    let project = Key::new(Kind::AppProject, "argocd", "p");
    reg.apply_one(Change::Create {
        key: project.clone(),
        value: json!({"metadata": {"name": "p"}, "spec": {}}),
    })
    .await
    .unwrap();
    (reg, project)
}

#[tokio::test]
async fn an_application_write_planned_before_a_project_changed_does_not_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (reg, project) = with_project(dir.path()).await;
    // Planned (and checked) now...
    let others_at = reg.read().others_at;
    let plan = |name: &str| {
        reg.plan(&Change::Create {
            key: key(name),
            value: app(name, "p"),
        })
        .unwrap()
    };
    let stale = vec![plan("stale")];
    let stale_ops = reg.ops(&stale, None, others_at);
    // ...committed after the project changed.
    reg.apply_one(Change::Update {
        key: project,
        value: json!({"metadata": {"name": "p"}, "spec": {"description": "changed"}}),
        expect: None,
    })
    .await
    .unwrap();
    let err = reg.commit_local(stale_ops, stale).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Store(StoreError::Conflict { key, .. }) if key == OTHERS_KEY),
        "{err}"
    );
    assert!(reg.get(&key("stale")).is_none(), "not written on the old check");
    let current = vec![plan("current")];
    let ops = reg.ops(&current, None, reg.read().others_at);
    reg.commit_local(ops, current).await.unwrap();
    assert!(reg.get(&key("current")).is_some());
}

#[tokio::test]
async fn a_checked_project_write_does_not_commit_over_an_application_written_after_its_check() {
    let dir = tempfile::tempdir().unwrap();
    let (reg, project) = with_project(dir.path()).await;
    let (checked_at, others_at) = (reg.revision(), reg.read().others_at);
    let delete = vec![
        reg.plan(&Change::Delete {
            key: project.clone(),
            expect: None,
        })
        .unwrap(),
    ];
    let ops = reg.ops(&delete, Some(checked_at), others_at);
    create(&reg, "joined").await;
    let err = reg.commit_local(ops, delete).await.unwrap_err();
    assert!(
        matches!(&err, RegistryError::Store(StoreError::Conflict { key, .. }) if *key == Kind::Application.store_prefix()),
        "{err}"
    );
    assert!(reg.get(&project).is_some());
}

#[tokio::test]
async fn every_event_of_a_commit_reaches_a_live_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    let (_, mut sub) = reg.list_and_watch(Kind::Application).unwrap();
    let changes = ["x", "y", "z"]
        .iter()
        .map(|name| Change::Create {
            key: key(name),
            value: app(name, "p"),
        })
        .collect();
    reg.apply(changes).await.unwrap();
    let mut names = Vec::new();
    for _ in 0..3 {
        let event = sub.next().await.unwrap().unwrap();
        assert_eq!(event.rv, 1, "one commit, one revision");
        names.push(event.doc.key.name.clone());
    }
    assert_eq!(names, ["x", "y", "z"]);
}

fn cluster(token: &str) -> (Key, Value) {
    let server = "https://10.0.0.1:6443";
    let value = json!({"server": server, "name": "prod", "config": {"bearerToken": token}});
    (Key::new(Kind::Cluster, "", server), value)
}

fn holds(raw: &[u8], needle: &str) -> bool {
    raw.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn credentials_are_sealed_at_rest_and_open_only_with_a_key_of_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    let old_key = b"0123456789abcdef0123456789abcdef-old".to_vec();
    let new_key = b"0123456789abcdef0123456789abcdef-new".to_vec();
    let ring = |file: Vec<Vec<u8>>| Arc::new(SecretsKeys::new(file, b"server key"));

    // A record an older version stored in clear (record and encoding) is read, then sealed.
    let (key, value) = cluster("token-in-clear");
    let legacy = Registry::open(Arc::clone(&store), ring(vec![])).await.unwrap();
    let doc = legacy
        .apply(vec![Change::Create {
            key: key.clone(),
            value,
        }])
        .await
        .unwrap()[0]
        .clone()
        .unwrap();
    drop(legacy);
    // The layout before drafts: revision, format 1, the encoding's length, the JSON.
    let mut clear = doc.rv.to_le_bytes().to_vec();
    clear.push(1);
    clear.extend_from_slice(&u32::try_from(doc.proto_len).unwrap().to_le_bytes());
    clear.extend_from_slice(&doc.json);
    let mut proto = doc.rv.to_le_bytes().to_vec();
    proto.extend_from_slice(&doc.encode_proto().unwrap());
    store
        .commit(vec![
            put(key.store_key(), clear),
            put(key.proto_store_key(), proto),
        ])
        .await
        .unwrap();

    let reg = Registry::open(Arc::clone(&store), ring(vec![old_key.clone()]))
        .await
        .unwrap();
    assert_eq!(
        reg.get(&key).unwrap().value()["config"]["bearerToken"],
        "token-in-clear"
    );
    let sealed = reg.sealed().await.unwrap();
    assert_eq!((sealed.records, sealed.clear, sealed.other_key), (1, 1, 0));
    assert_eq!(reg.reseal().await.unwrap(), 1);
    assert_eq!(reg.sealed().await.unwrap().stale(), 0);
    let raw = store.get(&key.store_key()).await.unwrap().unwrap().value;
    assert!(!holds(&raw, "token-in-clear") && !holds(&raw, "bearerToken"));
    assert!(
        store.get(&key.proto_store_key()).await.unwrap().is_none(),
        "no encoding in clear"
    );

    // Writes seal too; the gRPC encoding is made from the JSON.
    let (_, value) = cluster("token-two");
    let doc = reg
        .apply(vec![Change::Update {
            key: key.clone(),
            value,
            expect: None,
        }])
        .await
        .unwrap()[0]
        .clone()
        .unwrap();
    let raw = store.get(&key.store_key()).await.unwrap().unwrap().value;
    assert!(!holds(&raw, "token-two"));
    assert_eq!(
        reg.protos(&[Arc::clone(&doc)]).await.unwrap()[0],
        doc.encode_proto().unwrap()
    );
    drop(reg);

    // Mid-rotation the old key still opens; after re-sealing the new one alone does.
    let rotating = Registry::open(Arc::clone(&store), ring(vec![new_key.clone(), old_key.clone()]))
        .await
        .unwrap();
    assert_eq!(rotating.sealed().await.unwrap().other_key, 1);
    assert_eq!(rotating.reseal().await.unwrap(), 1);
    drop(rotating);
    let rotated = Registry::open(Arc::clone(&store), ring(vec![new_key]))
        .await
        .unwrap();
    assert_eq!(
        rotated.get(&key).unwrap().value()["config"]["bearerToken"],
        "token-two"
    );
    drop(rotated);

    // Without the key that sealed it, the registry does not open, and says which key it needs.
    let err = Registry::open(Arc::clone(&store), ring(vec![old_key]))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("which this process does not hold"), "{err}");
    assert!(err.contains("clusters"), "{err}");

    // A sealed record moved to another object's key does not open either.
    let raw = store.get(&key.store_key()).await.unwrap().unwrap().value;
    let (other, _) = (Key::new(Kind::Cluster, "", "https://10.0.0.2:6443"), ());
    store.commit(vec![put(other.store_key(), raw)]).await.unwrap();
    let err = Registry::open(
        store,
        ring(vec![b"0123456789abcdef0123456789abcdef-new".to_vec()]),
    )
    .await
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("do not open"), "{err}");
}

#[tokio::test]
async fn a_server_key_changed_while_running_reseals_so_the_next_start_opens_with_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
    let reg = Registry::open(
        Arc::clone(&store),
        Arc::new(SecretsKeys::new(Vec::new(), b"key one")),
    )
    .await
    .unwrap();
    let (key, value) = cluster("kept-token");
    reg.apply(vec![Change::Create {
        key: key.clone(),
        value,
    }])
    .await
    .unwrap();
    assert!(
        !reg.server_key_changed(b"key one"),
        "the same key changes nothing"
    );
    assert!(reg.server_key_changed(b"key two"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reg.sealed().await.unwrap().stale() > 0 {
        assert!(std::time::Instant::now() < deadline, "not re-sealed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(reg);
    let next = Registry::open(store, Arc::new(SecretsKeys::new(Vec::new(), b"key two")))
        .await
        .unwrap();
    assert_eq!(
        next.get(&key).unwrap().value()["config"]["bearerToken"],
        "kept-token"
    );
}

#[tokio::test]
async fn an_object_over_the_size_limit_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let reg = open(dir.path()).await;
    let a = create(&reg, "a").await;
    // The padding goes into a string field, so the JSON grows by its length exactly.
    let sized = |name: &str, bytes: usize| {
        let mut value = app(name, "p");
        value["spec"]["source"]["path"] = json!("x".repeat(bytes));
        value
    };
    // (An empty string would be left out, so the base is measured with one byte.)
    let base = build(&key("b"), &sized("b", 1), None).unwrap().json.len() - 1;
    let fits = MAX_OBJECT_BYTES - base;
    assert_eq!(
        build(&key("b"), &sized("b", fits), None).unwrap().json.len(),
        MAX_OBJECT_BYTES
    );
    let over = |bytes| Change::Update {
        key: key("a"),
        value: sized("a", bytes),
        expect: None,
    };
    let err = reg.apply(vec![over(fits + 1)]).await.unwrap_err();
    let RegistryError::Invalid { err, .. } = err else {
        panic!("{err}");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "the application object is {} bytes as stored (canonical JSON), more than the limit of \
             1572864 bytes (1.5 MiB) for an object",
            MAX_OBJECT_BYTES + 1
        )
    );
    assert_eq!(reg.revision(), a.rv);
    assert_eq!(reg.get(&key("a")).unwrap().json, a.json);
    reg.apply(vec![over(fits)]).await.unwrap();
}
