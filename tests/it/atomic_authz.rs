//! Authorization and write are one step (issue 20): a caller allowed to update applications in
//! one project races an admin who moves the application between that project and another. Every
//! write of the caller's must have replaced a version in the caller's project; none may land on
//! the application while it is in the other one.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli_apps::{IN_CLUSTER, REPO};
use crate::replica_registry::Sse;
use crate::replicas::{call, call_ok, login, token_of};
use crate::support::TestServer;

const ADMIN_PASSWORD: &str = "admin-pw-race";
const MALLORY_PASSWORD: &str = "mallory-pw-race";
const RACE_FOR: Duration = Duration::from_secs(3);
const MAX_WRITES: usize = 400;

fn config(dir: &std::path::Path) {
    let admin = bcrypt::hash(ADMIN_PASSWORD, 4).unwrap();
    let mallory = bcrypt::hash(MALLORY_PASSWORD, 4).unwrap();
    let files = [
        (
            "argocd-cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  accounts.mallory: login\n"
                .to_owned(),
        ),
        (
            "argocd-secret.yaml",
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  \
                 admin.password: '{admin}'\n  accounts.mallory.password: '{mallory}'\n"
            ),
        ),
        (
            "argocd-rbac-cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.csv: |\n    \
             p, mallory, applications, get, */*, allow\n    p, mallory, applications, update, team-a/*, allow\n"
                .to_owned(),
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

fn app(project: &str, path: &str) -> Value {
    json!({"metadata": {"name": "target"}, "spec": {"project": project,
        "source": {"repoURL": REPO, "path": path},
        "destination": {"server": IN_CLUSTER, "namespace": "default"}}})
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_racing_a_move_to_another_project_never_writes_there() {
    let dir = tempfile::tempdir().unwrap();
    config(dir.path());
    let server = TestServer::start(&["--insecure", "--config-dir", dir.path().to_str().unwrap()]);
    let addr = server.addr();
    let admin = token_of(&login(addr, "admin", ADMIN_PASSWORD, &[]).await);
    let mallory = token_of(&login(addr, "mallory", MALLORY_PASSWORD, &[]).await);
    for name in ["team-a", "team-b"] {
        let project = json!({"project": {"metadata": {"name": name}, "spec": {
            "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}});
        call_ok(addr, "POST", "/api/v1/projects", &admin, Some(&project)).await;
    }
    let created = call_ok(
        addr,
        "POST",
        "/api/v1/applications",
        &admin,
        Some(&app("team-a", "start")),
    )
    .await;
    let since = created.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // The admin moves it back and forth; mallory writes it as a team-a application. Each write
    // marks the path with its author, so the events say who wrote what.
    let deadline = Instant::now() + RACE_FOR;
    let mover_token = admin.clone();
    let mover = tokio::spawn(async move {
        let mut moves = 0;
        for i in 0..MAX_WRITES {
            if Instant::now() >= deadline {
                break;
            }
            let to = if i % 2 == 0 { "team-b" } else { "team-a" };
            let patch = json!({"patch": json!({"spec": {"project": to, "source": {"path": format!("admin-{i}")}}}).to_string(), "patchType": "merge"});
            let r = call(
                addr,
                "PATCH",
                "/api/v1/applications/target",
                Some(&mover_token),
                &[],
                Some(&patch),
            )
            .await;
            assert_eq!(r.status, 200, "the admin's move: {r:?}");
            moves += 1;
        }
        moves
    });
    let (mut written, mut refused) = (0, 0);
    for i in 0..MAX_WRITES {
        if Instant::now() >= deadline {
            break;
        }
        let body = app("team-a", &format!("mallory-{i}"));
        let r = call(
            addr,
            "PUT",
            "/api/v1/applications/target",
            Some(&mallory),
            &[],
            Some(&body),
        )
        .await;
        match r.status {
            200 => written += 1,
            403 => refused += 1,
            other => panic!("mallory's write: {other} {r:?}"),
        }
    }
    let moves = mover.await.unwrap();
    assert!(
        moves > 10 && written > 0 && refused > 0,
        "no race: {moves} moves, {written} written, {refused} refused"
    );

    // Every event in order: each of mallory's writes follows a team-a version.
    let last = call_ok(addr, "GET", "/api/v1/applications/target", &admin, None).await;
    let last: u64 = last.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut events = Sse::open(addr, &admin, &since).await;
    let mut before = "team-a".to_owned();
    let mut checked = 0;
    loop {
        let event = events.next().await;
        let app = &event["application"];
        let project = app["spec"]["project"].as_str().unwrap().to_owned();
        let path = app["spec"]["source"]["path"].as_str().unwrap_or_default();
        if path.starts_with("mallory-") && project == "team-a" && event["type"] == "MODIFIED" {
            assert_eq!(
                before, "team-a",
                "mallory's write {path} replaced a version in {before}"
            );
            checked += 1;
        }
        before = project;
        let rv: u64 = app["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        if rv >= last {
            break;
        }
    }
    assert!(checked > 0, "no write of mallory's seen");
}
