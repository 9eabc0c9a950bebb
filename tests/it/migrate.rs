//! `tiphys admin migrate`: a stopped single-node server's store copied into etcd, and served from
//! there by a replica with everything in it (objects and their versions, the server key that
//! signed existing tokens, the generated admin password); and what it refuses.

use serde_json::json;

use crate::cli_apps::{IN_CLUSTER, REPO};
use crate::etcd_cluster::EtcdCluster;
use crate::replicas::{accepted, call, call_ok, etcd_flags, login, token_of};
use crate::support::{TestServer, cli};

fn migrate(data_dir: &str, flags: &[String], extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["admin", "migrate", "--data-dir", data_dir];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(extra);
    cli(&args)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_single_node_store_moves_into_etcd_with_everything_in_it() {
    let cluster = EtcdCluster::start(3);
    let mut single = TestServer::start(&["--insecure"]);
    let data = single.dir.path().join("data");
    let data_dir = data.to_str().unwrap().to_owned();
    let password = std::fs::read_to_string(data.join("initial-admin-password")).unwrap();
    let token = token_of(&login(single.addr(), "admin", password.trim(), &[]).await);
    let project = json!({"project": {"metadata": {"name": "moved"}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}});
    call_ok(single.addr(), "POST", "/api/v1/projects", &token, Some(&project)).await;
    let app = json!({"metadata": {"name": "guestbook"}, "spec": {"project": "moved",
        "source": {"repoURL": REPO, "path": "guestbook"},
        "destination": {"server": IN_CLUSTER, "namespace": "default"}}});
    call_ok(single.addr(), "POST", "/api/v1/applications", &token, Some(&app)).await;
    let before = call(
        single.addr(),
        "GET",
        "/api/v1/applications",
        Some(&token),
        &[],
        None,
    )
    .await;

    // While the server runs, its store is locked: refused, naming why.
    let flags = etcd_flags(&cluster, "/it-migrate/");
    let (ok, _, err) = migrate(&data_dir, &flags, &[]);
    assert!(!ok && err.contains("in use by another tiphys process"), "{err}");
    single.terminate();

    let (ok, out, err) = migrate(&data_dir, &flags, &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("into etcd prefix /it-migrate/ (and the initial admin password)"),
        "{out}"
    );

    let mut args = vec!["--insecure".to_owned()];
    args.extend(flags.clone());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replica = TestServer::start(&args);
    assert!(
        accepted(replica.addr(), &token).await,
        "the token signed before still holds"
    );
    let after = call(
        replica.addr(),
        "GET",
        "/api/v1/applications",
        Some(&token),
        &[],
        None,
    )
    .await;
    assert_eq!(after.status, 200, "{after:?}");
    // The same objects; their versions are etcd's revisions now (each object's record was
    // written anew), so clients list again as after any restart.
    let without_versions = |items: &serde_json::Value| {
        let mut items = items.clone();
        for item in items.as_array_mut().unwrap() {
            let meta = item["metadata"].as_object_mut().unwrap();
            assert!(
                meta.remove("resourceVersion")
                    .and_then(|v| v.as_str().map(|s| s.parse::<u64>().is_ok()))
                    .unwrap_or(false),
                "{meta:?}"
            );
        }
        items
    };
    assert_eq!(
        without_versions(&after.body["items"]),
        without_versions(&before.body["items"]),
        "same objects"
    );
    let mut args = vec!["admin", "initial-password"];
    args.extend(flags.iter().map(String::as_str));
    let (ok, out, err) = cli(&args);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), password.trim());
    // The registry goes on from the migrated revision.
    let r = call(
        replica.addr(),
        "GET",
        "/api/v1/applications/guestbook",
        Some(&token),
        &[],
        None,
    )
    .await;
    let mut changed = r.body.clone();
    changed["spec"]["source"]["path"] = json!("changed");
    let r = call(
        replica.addr(),
        "PUT",
        "/api/v1/applications/guestbook",
        Some(&token),
        &[],
        Some(&changed),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    drop(replica);

    // A prefix that holds anything is refused, unless told to replace it.
    let (ok, _, err) = migrate(&data_dir, &flags, &[]);
    assert!(!ok, "a second copy into the same prefix");
    assert!(
        err.contains("already holds") && err.contains("--replace"),
        "{err}"
    );
    let (ok, out, err) = migrate(&data_dir, &flags, &["--replace"]);
    assert!(ok && out.contains("copied"), "{err}");
}

#[test]
fn migrate_refuses_what_it_cannot_do() {
    let empty = tempfile::tempdir().unwrap();
    let dir = empty.path().to_str().unwrap();
    let (ok, _, err) = cli(&["admin", "migrate", "--data-dir", dir]);
    assert!(!ok && err.contains("--etcd-endpoints"), "{err}");
    let (ok, _, err) = cli(&[
        "admin",
        "migrate",
        "--data-dir",
        dir,
        "--etcd-endpoints",
        "http://127.0.0.1:9",
    ]);
    assert!(!ok && err.contains("holds no tiphys store"), "{err}");
    assert!(
        !empty.path().join("tiphys.redb").exists(),
        "no empty store was created in its place"
    );
}
