//! Argo CD's declarative Secrets keep their names through tiphys (issue 25, item 4): `apply`
//! of a cluster, repository or repo-creds Secret, then `admin export`, gives the Secret back
//! under its `metadata.name`; re-applying it with a new `server` or `url` moves the object in
//! place (as `kubectl apply` updates the Secret it names) instead of failing or adding a
//! second; an export applied to a fresh server exports again byte for byte. Against the real
//! server and CLI, and over REST as upstream's clients (which do not know `secretName`) call.

use serde_json::{Value, json};

use crate::cli_apps::{IN_CLUSTER, REPO, Session, start_server};
use crate::credentials_api::{Rest, enc};

const TOKEN: &str = "cluster-token-5150";
const OLD_SERVER: &str = "https://prod.example:6443";
const NEW_SERVER: &str = "https://prod2.example:6443";
const NEW_REPO: &str = "https://github.com/argoproj/moved-apps.git";

fn cluster(name: &str, server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  labels:\n    \
         argocd.argoproj.io/secret-type: cluster\nstringData:\n  name: prod\n  server: {server}\n  \
         config: '{{\"bearerToken\": \"{TOKEN}\"}}'\n"
    )
}

fn repository(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: guestbook-repo\n  labels:\n    \
         argocd.argoproj.io/secret-type: repository\nstringData:\n  url: {url}\n  name: guestbook\n"
    )
}

fn creds(url: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: github-creds\n  labels:\n    \
         argocd.argoproj.io/secret-type: repo-creds\nstringData:\n  url: {url}\n  username: bot\n"
    )
}

fn apply(session: &Session, docs: &[String]) -> crate::cli_apps::Run {
    session.run_with(&["apply", "-f", "-"], &docs.join("---\n"))
}

/// Whether the clusters at [`OLD_SERVER`] and at [`NEW_SERVER`] are stored, over REST.
async fn stored_servers(rest: &Rest) -> [bool; 2] {
    let list = rest.ok("GET", "/api/v1/clusters", None).await;
    let items = list["items"].as_array().unwrap();
    [OLD_SERVER, NEW_SERVER].map(|server| items.iter().any(|c| c["server"] == server))
}

/// `run` succeeded and reported each of the three Secrets with `action`.
#[track_caller]
fn assert_each_reported(run: &crate::cli_apps::Run, action: &str) {
    assert_eq!(run.code, Some(0), "{run:?}");
    for secret in ["prod-cluster", "guestbook-repo", "github-creds"] {
        let line = format!("secret/{secret} {action}");
        assert!(run.out.contains(&line), "{line}: {run:?}");
    }
}

/// The exported Secrets as (`secret-type` label, `metadata.name`, URL), sorted.
fn exported_secrets(text: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<_> = text
        .split("\n---\n")
        .filter_map(|doc| serde_yaml_ng::from_str::<Value>(doc).ok())
        .filter(|doc| doc["kind"] == "Secret" && doc["stringData"]["server"] != IN_CLUSTER)
        .map(|doc| {
            let data = &doc["stringData"];
            let url = data["server"]
                .as_str()
                .or(data["url"].as_str())
                .unwrap_or_default();
            (
                doc["metadata"]["labels"]["argocd.argoproj.io/secret-type"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                doc["metadata"]["name"].as_str().unwrap().to_owned(),
                url.to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The stored objects' URLs and Secret names, for one `list -o json` of the CLI.
fn listed(session: &Session, what: &str, url_field: &str) -> Vec<(String, String)> {
    let list = session.json(&[what, "list", "-o", "json"]);
    list.as_array()
        .unwrap()
        .iter()
        .filter(|o| o[url_field] != IN_CLUSTER)
        .map(|o| {
            (
                o[url_field].as_str().unwrap().to_owned(),
                o["secretName"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn secrets_keep_their_names_and_a_new_url_moves_the_object() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let first = [
        cluster("prod-cluster", OLD_SERVER),
        repository(REPO),
        creds("https://github.com/argoproj"),
    ];
    let run = apply(&admin, &first);
    assert_eq!(run.code, Some(0), "{run:?}");

    let export = admin.ok(&["admin", "export"]);
    let names: Vec<(String, String, String)> = exported_secrets(&export);
    assert_eq!(
        names,
        [
            ("cluster".into(), "prod-cluster".into(), OLD_SERVER.into()),
            (
                "repo-creds".into(),
                "github-creds".into(),
                "https://github.com/argoproj".into()
            ),
            ("repository".into(), "guestbook-repo".into(), REPO.into()),
        ],
        "{export}"
    );

    // The same Secrets with new URLs: each object moves, nothing is added.
    let moved = [
        cluster("prod-cluster", NEW_SERVER),
        repository(NEW_REPO),
        creds("https://github.com/moved"),
    ];
    assert_each_reported(&apply(&admin, &moved), "configured");
    assert_eq!(
        listed(&admin, "cluster", "server"),
        [(NEW_SERVER.to_owned(), "prod-cluster".to_owned())]
    );
    assert_eq!(
        listed(&admin, "repo", "repo"),
        [(NEW_REPO.to_owned(), "guestbook-repo".to_owned())]
    );
    assert_eq!(
        listed(&admin, "repocreds", "url"),
        [("https://github.com/moved".to_owned(), "github-creds".to_owned())]
    );
    // Unchanged, though the cluster's token is never shown back.
    assert_each_reported(&apply(&admin, &moved), "unchanged");

    // A second Secret cannot declare the server the first one does; nothing changes.
    let run = apply(&admin, &[cluster("other-cluster", NEW_SERVER)]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.err
            .contains("was declared in the Secret \"prod-cluster\", so the Secret \"other-cluster\""),
        "{run:?}"
    );
    // A name that is not a Secret name is refused, naming the field.
    let run = apply(&admin, &[cluster("Bad_Name", "https://third.example")]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.err.contains("secretName: invalid Secret name \"Bad_Name\""),
        "{run:?}"
    );
    assert_eq!(
        listed(&admin, "cluster", "server"),
        [(NEW_SERVER.to_owned(), "prod-cluster".to_owned())]
    );
}

/// Upstream's clients send updates without `secretName`: the stored name stays. A create
/// that would move an object needs `upsert`, and a name held by another object is refused.
#[tokio::test]
async fn clients_that_do_not_know_the_name_keep_it() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let run = apply(&admin, &[cluster("prod-cluster", OLD_SERVER), repository(REPO)]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let rest = Rest::login(&server, "admin").await;

    let path = format!("/api/v1/clusters/{}", enc(OLD_SERVER));
    let body = json!({"server": OLD_SERVER, "name": "prod-renamed", "config": {"bearerToken": TOKEN}});
    let updated = rest.ok("PUT", &path, Some(&body)).await;
    assert_eq!(updated["secretName"], "prod-cluster", "{updated}");
    assert_eq!(updated["name"], "prod-renamed", "{updated}");
    let repo_path = format!("/api/v1/repositories/{}", enc(REPO));
    let updated = rest
        .ok("PUT", &repo_path, Some(&json!({"repo": REPO, "name": "gb"})))
        .await;
    assert_eq!(updated["secretName"], "guestbook-repo", "{updated}");

    // Without upsert, a create naming the Secret of a cluster elsewhere does not move it.
    let create = json!({"server": NEW_SERVER, "name": "prod-renamed", "secretName": "prod-cluster"});
    let r = rest.expect(400, "POST", "/api/v1/clusters", Some(&create)).await;
    assert!(
        r.text
            .contains("use upsert to move it to https://prod2.example:6443"),
        "{r:?}"
    );
    // A cluster of its own may not take another's Secret name.
    let other = json!({"server": NEW_SERVER, "name": "second"});
    rest.ok("POST", "/api/v1/clusters", Some(&other)).await;
    let path = format!("/api/v1/clusters/{}", enc(NEW_SERVER));
    let taken = json!({"server": NEW_SERVER, "name": "second", "secretName": "prod-cluster"});
    let r = rest.expect(409, "PUT", &path, Some(&taken)).await;
    assert!(
        r.text.contains(
            "the Secret \\\"prod-cluster\\\" already declares the cluster https://prod.example:6443"
        ),
        "{r:?}"
    );
    // With upsert, the move happens in one step: the old server is gone.
    let r = rest
        .call("POST", "/api/v1/clusters?upsert=true", Some(&create))
        .await;
    assert_eq!(r.status, 409, "the new server is taken by `second`: {r:?}");
    rest.ok("DELETE", &path, None).await;
    let moved = rest
        .ok("POST", "/api/v1/clusters?upsert=true", Some(&create))
        .await;
    assert_eq!(moved["server"], NEW_SERVER, "{moved}");
    assert_eq!(stored_servers(&rest).await, [false, true]);
}

/// apply → export (with credentials, server stopped) → apply into a fresh data dir → export:
/// the two exports are the same bytes, but for the header comment that names the data dir.
#[test]
fn an_export_applied_to_a_fresh_server_exports_the_same_bytes() {
    let work = tempfile::tempdir().unwrap();
    let export = |dir: &std::path::Path, session: &Session| {
        let text = session.ok(&[
            "admin",
            "export",
            "--data-dir",
            dir.to_str().unwrap(),
            "--include-secrets",
        ]);
        let header = text.find("\n---\n").expect("documents after the header");
        text[header..].to_owned()
    };
    let data_a = work.path().join("a");
    let (mut server_a, _config_a) = start_server(Some(&data_a));
    let admin_a = Session::login(&server_a, "admin", &[]);
    let run = apply(
        &admin_a,
        &[
            cluster("prod-cluster", OLD_SERVER),
            repository(REPO),
            creds("https://github.com/argoproj"),
        ],
    );
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(server_a.terminate().success());
    let first = export(&data_a, &admin_a);
    assert!(
        first.contains(TOKEN) && first.contains("name: prod-cluster"),
        "{first}"
    );

    let data_b = work.path().join("b");
    let (mut server_b, _config_b) = start_server(Some(&data_b));
    let admin_b = Session::login(&server_b, "admin", &[]);
    let run = admin_b.run_with(&["apply", "-f", "-"], &first);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(server_b.terminate().success());
    let second = export(&data_b, &admin_b);
    assert_eq!(first, second);
}

/// A move is an update of the object moved and of the one it becomes (SEC-15), and a name held
/// by an object the caller cannot see is not said to be taken (SEC-14).
#[tokio::test]
async fn a_move_needs_update_on_both_urls_and_hides_what_the_caller_cannot_see() {
    let (server, _config) = crate::credentials_api::start(
        &["carol", "dave"],
        &[
            "p, carol, clusters, get, *, allow",
            "p, carol, clusters, create, *, allow",
            &format!("p, carol, clusters, update, {NEW_SERVER}, allow"),
            "p, dave, clusters, create, *, allow",
        ],
        "",
    );
    let admin = Rest::login(&server, "admin").await;
    let declared = json!({"server": OLD_SERVER, "name": "prod", "secretName": "prod-cluster"});
    admin.ok("POST", "/api/v1/clusters", Some(&declared)).await;
    let moving = json!({"server": NEW_SERVER, "name": "prod", "secretName": "prod-cluster"});

    let carol = Rest::login(&server, "carol").await;
    let r = carol
        .call("POST", "/api/v1/clusters?upsert=true", Some(&moving))
        .await;
    assert_eq!(r.status, 403, "no update on the cluster moved: {r:?}");
    let dave = Rest::login(&server, "dave").await;
    let r = dave
        .call("POST", "/api/v1/clusters?upsert=true", Some(&moving))
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        !r.text.contains(OLD_SERVER) && !r.text.contains("upsert"),
        "{r:?}"
    );

    assert_eq!(stored_servers(&admin).await, [true, false]);
}
