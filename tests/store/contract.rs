//! The `Store` trait's contract, one body per property, run against `FileStore` and
//! `EtcdStore` alike (`both!` below). Revisions are taken relative to the store's revision at
//! the start: etcd starts at 1, and its revision is shared with other prefixes.

use tiphys::store::{Entry, Expect, Op, Revision, Store, StoreError, get_json, put_json};

pub fn put(key: &str, value: &str, expect: Expect) -> Op {
    Op::Put {
        key: key.to_owned(),
        value: value.as_bytes().to_vec(),
        expect,
    }
}

pub fn delete(key: &str, expect: Expect) -> Op {
    Op::Delete {
        key: key.to_owned(),
        expect,
    }
}

pub fn keys(list: Vec<Entry>) -> Vec<String> {
    list.into_iter().map(|e| e.key).collect()
}

async fn value(store: &dyn Store, key: &str) -> Option<String> {
    let entry = store.get(key).await.unwrap()?;
    Some(String::from_utf8(entry.value).unwrap())
}

fn conflict(r: Result<Revision, StoreError>) -> (String, Expect, Option<Revision>) {
    match r {
        Err(StoreError::Conflict {
            key,
            expected,
            actual,
        }) => (key, expected, actual),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

pub async fn put_get_list_delete(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    assert_eq!(store.get("a/1").await.unwrap(), None);
    let ops = vec![
        put("a/2", "two", Expect::Any),
        put("a/1", "one", Expect::Any),
        put("b/1", "x", Expect::Any),
        put("a0", "not under a/", Expect::Any),
    ];
    assert_eq!(store.commit(ops).await.unwrap(), r0 + 1);
    assert_eq!(
        store.get("a/1").await.unwrap().unwrap(),
        Entry {
            key: "a/1".to_owned(),
            value: b"one".to_vec(),
            create_revision: r0 + 1,
            mod_revision: r0 + 1
        }
    );
    assert_eq!(keys(store.list("a/").await.unwrap()), ["a/1", "a/2"]);
    assert_eq!(keys(store.list("").await.unwrap()), ["a/1", "a/2", "a0", "b/1"]);
    assert!(store.list("c").await.unwrap().is_empty());
    let many = store
        .get_many(vec!["b/1".to_owned(), "nope".to_owned(), "a/2".to_owned()])
        .await
        .unwrap();
    let values: Vec<_> = many.into_iter().map(|e| e.map(|e| e.value)).collect();
    assert_eq!(values, [Some(b"x".to_vec()), None, Some(b"two".to_vec())]);

    // An update keeps create_revision; a delete removes the key.
    assert_eq!(
        store.commit(vec![put("a/1", "uno", Expect::Any)]).await.unwrap(),
        r0 + 2
    );
    let entry = store.get("a/1").await.unwrap().unwrap();
    assert_eq!(
        (entry.value.as_slice(), entry.create_revision, entry.mod_revision),
        (&b"uno"[..], r0 + 1, r0 + 2)
    );
    assert_eq!(
        store.commit(vec![delete("a/1", Expect::Any)]).await.unwrap(),
        r0 + 3
    );
    assert_eq!(store.get("a/1").await.unwrap(), None);
    assert_eq!(keys(store.list("a/").await.unwrap()), ["a/2"]);
    assert_eq!(store.revision().await.unwrap(), r0 + 3);
}

/// Every writing commit advances the revision by exactly 1. A commit that changes nothing
/// returns the revision the store is at afterwards (FileStore advances, etcd does not).
pub async fn revisions(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    for i in 1..=5 {
        let ops = vec![
            put(&format!("k{i}"), "v", Expect::Absent),
            put("shared", "v", Expect::Any),
        ];
        assert_eq!(store.commit(ops).await.unwrap(), r0 + i);
        assert_eq!(store.revision().await.unwrap(), r0 + i);
    }
    let shared = store.get("shared").await.unwrap().unwrap();
    assert_eq!((shared.create_revision, shared.mod_revision), (r0 + 1, r0 + 5));
    for ops in [vec![delete("missing", Expect::Any)], vec![]] {
        let before = store.revision().await.unwrap();
        let at = store.commit(ops).await.unwrap();
        assert!(at == before || at == before + 1, "{at} after {before}");
        assert_eq!(store.revision().await.unwrap(), at);
    }
    // A key deleted and created again starts a new life.
    let r = store.revision().await.unwrap();
    store
        .commit(vec![delete("k1", Expect::ModRevision(r0 + 1))])
        .await
        .unwrap();
    store
        .commit(vec![put("k1", "again", Expect::Absent)])
        .await
        .unwrap();
    let k1 = store.get("k1").await.unwrap().unwrap();
    assert_eq!((k1.create_revision, k1.mod_revision), (r + 2, r + 2));
}

/// Each kind of precondition, on a put and on a delete, met and not met.
pub async fn every_expect_kind(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    let r1 = store.commit(vec![put("k", "v1", Expect::Absent)]).await.unwrap();
    assert_eq!(r1, r0 + 1);
    assert_eq!(
        conflict(store.commit(vec![put("k", "x", Expect::Absent)]).await),
        ("k".to_owned(), Expect::Absent, Some(r1))
    );
    let r2 = store
        .commit(vec![put("k", "v2", Expect::ModRevision(r1))])
        .await
        .unwrap();
    assert_eq!(
        conflict(store.commit(vec![put("k", "x", Expect::ModRevision(r1))]).await),
        ("k".to_owned(), Expect::ModRevision(r1), Some(r2))
    );
    assert_eq!(
        conflict(store.commit(vec![put("new", "x", Expect::ModRevision(r1))]).await),
        ("new".to_owned(), Expect::ModRevision(r1), None)
    );
    let r3 = store.commit(vec![put("k", "v3", Expect::Any)]).await.unwrap();
    assert_eq!(value(store, "k").await.as_deref(), Some("v3"));

    // Deletes.
    let err = store.commit(vec![delete("k", Expect::Absent)]).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("conflict on k: expected absent, found mod revision {r3}")
    );
    assert_eq!(
        conflict(store.commit(vec![delete("k", Expect::ModRevision(r2))]).await),
        ("k".to_owned(), Expect::ModRevision(r2), Some(r3))
    );
    assert_eq!(
        conflict(store.commit(vec![delete("gone", Expect::ModRevision(r2))]).await),
        ("gone".to_owned(), Expect::ModRevision(r2), None)
    );
    store.commit(vec![delete("gone", Expect::Absent)]).await.unwrap();
    let r4 = store
        .commit(vec![delete("k", Expect::ModRevision(r3))])
        .await
        .unwrap();
    assert_eq!(store.revision().await.unwrap(), r4);
    assert_eq!(store.get("k").await.unwrap(), None);
    store.commit(vec![delete("k", Expect::Any)]).await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), None);
}

/// A failed precondition anywhere in a batch writes nothing of it.
pub async fn failed_preconditions_write_nothing(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    store.commit(vec![put("k", "v1", Expect::Absent)]).await.unwrap();
    store
        .commit(vec![
            put("k", "v2", Expect::ModRevision(r0 + 1)),
            put("keep", "kept", Expect::Any),
        ])
        .await
        .unwrap();
    let stale = vec![
        put("other", "x", Expect::Any),
        delete("keep", Expect::Any),
        put("k", "v3", Expect::ModRevision(r0 + 1)),
    ];
    assert_eq!(
        conflict(store.commit(stale).await),
        ("k".to_owned(), Expect::ModRevision(r0 + 1), Some(r0 + 2))
    );
    let second_fails = vec![
        delete("gone", Expect::Absent),
        put("other", "x", Expect::Absent),
        put("k", "v", Expect::ModRevision(r0 + 9)),
    ];
    assert_eq!(conflict(store.commit(second_fails).await).0, "k");
    assert_eq!(store.revision().await.unwrap(), r0 + 2);
    assert_eq!(value(store, "k").await.as_deref(), Some("v2"));
    assert_eq!(value(store, "keep").await.as_deref(), Some("kept"));
    assert_eq!(store.get("other").await.unwrap(), None);
}

/// Checks write nothing; a commit takes place only when they hold, and a failed one names the
/// key (or prefix) and the newest revision found.
pub async fn checks_and_range_checks(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    let check = |key: &str, expect| Op::Check {
        key: key.to_owned(),
        expect,
    };
    let unchanged = |prefix: &str, since| Op::Unchanged {
        prefix: prefix.to_owned(),
        since,
    };
    store
        .commit(vec![
            put("apps/a", "1", Expect::Any),
            put("apps/b", "1", Expect::Any),
        ])
        .await
        .unwrap();
    store.commit(vec![put("apps/b", "2", Expect::Any)]).await.unwrap();
    // Held: the commit happens, and the checked keys are untouched.
    let at = store
        .commit(vec![
            check("apps/a", Expect::ModRevision(r0 + 1)),
            check("missing", Expect::Absent),
            unchanged("apps/", r0 + 2),
            unchanged("none/", r0),
            put("out", "x", Expect::Any),
        ])
        .await
        .unwrap();
    assert_eq!(at, r0 + 3);
    assert_eq!(value(store, "apps/a").await.as_deref(), Some("1"));
    // Not held: nothing is written, and the newest write under the prefix is named.
    assert_eq!(
        conflict(
            store
                .commit(vec![unchanged("apps/", r0 + 1), put("out", "y", Expect::Any)])
                .await
        ),
        ("apps/".to_owned(), Expect::NotAfter(r0 + 1), Some(r0 + 2))
    );
    assert_eq!(
        conflict(
            store
                .commit(vec![
                    check("apps/b", Expect::ModRevision(r0 + 1)),
                    put("out", "y", Expect::Any)
                ])
                .await
        ),
        ("apps/b".to_owned(), Expect::ModRevision(r0 + 1), Some(r0 + 2))
    );
    assert_eq!(value(store, "out").await.as_deref(), Some("x"));
    assert_eq!(store.revision().await.unwrap(), r0 + 3);
}

/// Commits made together are still separate: in order, a revision each, each with its own
/// outcome.
pub async fn commits_made_together_stay_separate(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    let outcomes = store
        .commit_each(vec![
            vec![put("k", "1", Expect::Absent)],
            // Sees the first commit's write: fails alone.
            vec![put("k", "2", Expect::Absent)],
            vec![
                put("k", "3", Expect::ModRevision(r0 + 1)),
                put("j", "3", Expect::Any),
            ],
            vec![put("j", "a", Expect::Any), delete("j", Expect::Any)],
        ])
        .await;
    assert_eq!(outcomes.len(), 4);
    assert_eq!(*outcomes[0].as_ref().unwrap(), r0 + 1);
    assert_eq!(conflict(outcomes[1].clone()).0, "k");
    assert_eq!(*outcomes[2].as_ref().unwrap(), r0 + 2);
    assert!(
        matches!(outcomes[3], Err(StoreError::Invalid(_))),
        "{:?}",
        outcomes[3]
    );
    assert_eq!(value(store, "k").await.as_deref(), Some("3"));
    assert_eq!(value(store, "j").await.as_deref(), Some("3"));
    assert_eq!(store.revision().await.unwrap(), r0 + 2);
}

/// A key at most once per batch, whatever the ops.
pub async fn a_key_twice_is_refused(store: &dyn Store) {
    let r0 = store.revision().await.unwrap();
    for twice in [
        vec![put("k", "a", Expect::Any), delete("k", Expect::Any)],
        vec![put("k", "a", Expect::Absent), put("k", "b", Expect::Any)],
    ] {
        let err = store.commit(twice).await.unwrap_err();
        assert!(matches!(err, StoreError::Invalid(_)), "{err:?}");
        assert_eq!(err.to_string(), "key k appears twice in one commit");
    }
    assert_eq!(store.get("k").await.unwrap(), None);
    assert_eq!(store.revision().await.unwrap(), r0);
}

pub async fn json_helpers(store: &dyn Store) {
    let op = put_json("j", &vec![1, 2, 3], Expect::Absent).unwrap();
    let rev = store.commit(vec![op]).await.unwrap();
    assert_eq!(
        get_json::<Vec<u32>>(store, "j").await.unwrap(),
        Some((vec![1, 2, 3], rev))
    );
    assert_eq!(get_json::<Vec<u32>>(store, "none").await.unwrap(), None);
    assert!(matches!(
        get_json::<String>(store, "j").await,
        Err(StoreError::Corrupt(_))
    ));
}

/// Keys sort bytewise; values are bytes; a list larger than one etcd page is complete.
pub async fn lists_in_key_order(store: &dyn Store) {
    let names: Vec<String> = (0..1200).rev().map(|i| format!("many/{i:05}")).collect();
    for chunk in names.chunks(100) {
        let ops = chunk
            .iter()
            .map(|k| Op::Put {
                key: k.clone(),
                value: vec![0, 255, b'\n'],
                expect: Expect::Absent,
            })
            .collect();
        store.commit(ops).await.unwrap();
    }
    let listed = store.list("many/").await.unwrap();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(keys(listed.clone()), sorted);
    assert!(listed.iter().all(|e| e.value == [0, 255, b'\n']));
    store
        .commit(vec![
            put("many/é", "", Expect::Any),
            put("many/Z", "", Expect::Any),
        ])
        .await
        .unwrap();
    let tail: Vec<String> = keys(store.list("many/").await.unwrap()).split_off(1200);
    assert_eq!(tail, ["many/Z", "many/é"]);
}

pub async fn snapshots_read_several_prefixes_at_one_revision(store: &dyn Store) {
    let (empty, r0) = store.snapshot(&["s/", "t"]).await.unwrap();
    assert_eq!(empty, vec![Vec::<Entry>::new(), Vec::new()]);
    assert_eq!(r0, store.revision().await.unwrap());
    let mut ops: Vec<Op> = (0..700)
        .map(|i| put(&format!("s/{i:04}"), "v", Expect::Absent))
        .collect();
    let rest = ops.split_off(100);
    store.commit(ops).await.unwrap();
    for chunk in rest.chunks(100) {
        store.commit(chunk.to_vec()).await.unwrap();
    }
    let at = store
        .commit(vec![put("t", "counter", Expect::Absent)])
        .await
        .unwrap();
    let (lists, read_at) = store.snapshot(&["s/", "t"]).await.unwrap();
    assert_eq!(read_at, at, "read at the store's revision");
    assert_eq!(lists[0].len(), 700, "every page of the first prefix");
    assert_eq!(keys(lists[0].clone()), keys(store.list("s/").await.unwrap()));
    assert_eq!(keys(lists[1].clone()), ["t"]);
    store
        .commit(vec![put("s/9999", "v", Expect::Absent)])
        .await
        .unwrap();
    let (lists, later) = store.snapshot(&["s/"]).await.unwrap();
    assert_eq!((lists[0].len(), later), (701, at + 1));
}

/// Instantiates each contract body once per backend.
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod file_store {
            $(
                #[tokio::test]
                async fn $name() {
                    let dir = tempfile::tempdir().unwrap();
                    let store = tiphys::store::FileStore::open(dir.path()).unwrap();
                    super::$name(&store).await;
                }
            )*
        }
        mod etcd_store {
            $(
                #[tokio::test]
                async fn $name() {
                    let cluster = crate::etcd_cluster::EtcdCluster::start(3);
                    let store = crate::connect(&cluster, "/tiphys/").await;
                    super::$name(&store).await;
                }
            )*
        }
    };
}

both!(
    put_get_list_delete,
    revisions,
    every_expect_kind,
    failed_preconditions_write_nothing,
    a_key_twice_is_refused,
    json_helpers,
    lists_in_key_order,
    snapshots_read_several_prefixes_at_one_revision,
    checks_and_range_checks,
    commits_made_together_stay_separate,
);
