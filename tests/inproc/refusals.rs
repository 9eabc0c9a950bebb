//! Every 403 leaves exactly one audit line and one count, whoever refused it: RBAC (a
//! representative denial of each service that has one, and the denials whose checks moved to
//! `service::access`), a project's rules, a sync window, a project token that is no account, a
//! request for details of an application it does not describe. Each over REST, and the
//! gRPC-only paths of a mutating call over native gRPC and gRPC-Web too, with the answer
//! clients had before (code 7, HTTP 403, upstream's message).
//!
//! "One count" is read from the `/metrics` exposition: of all the counters there except the
//! per-request ones, exactly one series moves, by one. (Settings, notifications, sessions and
//! the version have no RBAC check, so nothing of theirs is here.)

use std::collections::BTreeMap;
use std::sync::Arc;

use http::StatusCode;
use serde_json::{Value, json};
use tiphys::server::metrics::{registry, render};

use crate::support::{Logs, Server};

const REPO: &str = "https://github.com/org/repo.git";
const CREDS: &str = "https://github.com/org";
const EXAMPLES: &str = "https://github.com/argoproj/argocd-example-apps.git";
const IN_CLUSTER: &str = "https://kubernetes.default.svc";
/// The project whose rules and sync window refuse.
const RESTRICTED: &str = "restricted";

/// Counter families every request moves, whatever it is: left out of the comparison.
const PER_REQUEST: &[&str] = &["tiphys_requests_total", "tiphys_route_requests_total"];

const RBAC_SERIES: &str = "tiphys_rbac_denials_total";

const SYNC: &str = "/application.ApplicationService/Sync";
const PASSWORD: &str = "/account.AccountService/UpdatePassword";

fn refusal_series(kind: &str) -> String {
    format!("tiphys_permission_refusals_total{{kind=\"{kind}\"}}")
}

/// Every counter series of the exposition but the per-request ones, by its name and labels.
fn counters(server: &Server) -> BTreeMap<String, f64> {
    let app = &server.server;
    let text = render(&registry(Arc::clone(&app.metrics), Arc::clone(&app.app)));
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let name = series.split('{').next()?;
            let counted = name.ends_with("_total") && !PER_REQUEST.contains(&name);
            counted.then(|| (series.to_owned(), value.parse().unwrap()))
        })
        .collect()
}

/// The series that differ between two readings, with how much they moved.
fn moved(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(series, n)| {
            let was = before.get(series).copied().unwrap_or(0.0);
            (*n != was).then(|| (series.clone(), n - was))
        })
        .collect()
}

fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A protobuf message of string fields, by field number (enough for the requests here).
fn strings(fields: &[(u8, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (number, text) in fields {
        // Wire type 2: length-delimited.
        out.push((number << 3) | 2);
        out.push(u8::try_from(text.len()).unwrap());
        out.extend_from_slice(text.as_bytes());
    }
    out
}

fn application(name: &str, namespace: &str, project: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "project": project,
            "source": {"repoURL": EXAMPLES, "path": "guestbook"},
            "destination": {"server": IN_CLUSTER, "namespace": "default"}
        }
    })
}

fn restricted_project(extra_destination: Option<&str>) -> Value {
    let mut destinations = vec![json!({"server": IN_CLUSTER, "namespace": "*"})];
    destinations.extend(extra_destination.map(|server| json!({"server": server, "namespace": "*"})));
    json!({"project": {
        "metadata": {"name": RESTRICTED},
        "spec": {
            "sourceRepos": ["https://github.com/argoproj/*"],
            "destinations": destinations,
            "syncWindows": [{"kind": "deny", "schedule": "* * * * *", "duration": "1h", "applications": ["*"]}],
            "roles": [{"name": "ci"}]
        }
    }})
}

/// What one refusal must leave behind.
struct Expect {
    /// The `kind` of its audit line.
    kind: &'static str,
    subject: String,
    /// The audit line's `object`.
    object: String,
    /// The message, exactly (or its start, for messages that name a time).
    message: String,
}

impl Expect {
    fn new(kind: &'static str, subject: &str, object: &str, message: &str) -> Self {
        Self {
            kind,
            subject: subject.to_owned(),
            object: object.to_owned(),
            message: message.to_owned(),
        }
    }

    fn series(&self) -> String {
        if self.kind == "rbac" {
            RBAC_SERIES.to_owned()
        } else {
            refusal_series(self.kind)
        }
    }
}

/// The server with what the refusals are about, and its callers' tokens.
struct World {
    server: Server,
    logs: Logs,
    admin: String,
    /// Allowed what the refusals after RBAC need: reading repositories and applications,
    /// updating the restricted project.
    alice: String,
    /// Allowed nothing.
    bob: String,
    /// A token of the restricted project's role `ci`.
    ci: String,
}

impl World {
    async fn open() -> Self {
        let policy = [
            "p, alice, repositories, get, *, allow",
            "p, alice, applications, get, */*, allow",
            "p, alice, projects, get, restricted, allow",
            "p, alice, projects, update, restricted, allow",
        ];
        let rbac = format!(
            "  policy.default: ''\n  policy.csv: |\n    {}\n",
            policy.join("\n    ")
        );
        let server = Server::open("  accounts.alice: login\n  accounts.bob: login\n", &rbac, &[]).await;
        let admin = server.login("admin");
        for (path, body) in [
            ("/api/v1/projects", restricted_project(None)),
            ("/api/v1/applications", application("guestbook", "", "default")),
            ("/api/v1/applications", application("windowed", "", RESTRICTED)),
            ("/api/v1/repositories", json!({"repo": REPO})),
            (
                "/api/v1/repocreds",
                json!({"url": CREDS, "username": "bot", "password": "s3cret"}),
            ),
        ] {
            let (status, answer) = server.rest("POST", path, &admin, body).await;
            assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        }
        let (status, answer) = server
            .rest(
                "POST",
                &format!("/api/v1/projects/{RESTRICTED}/roles/ci/token"),
                &admin,
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let ci = answer["token"].as_str().unwrap().to_owned();
        let (alice, bob) = (server.login("alice"), server.login("bob"));
        Self {
            server,
            logs: Logs::default(),
            admin,
            alice,
            bob,
            ci,
        }
    }

    /// Runs `call`, which must be refused as `expect` says, and checks what it left: one audit
    /// line and one count. Returns the message the caller got.
    async fn refused<F: Future<Output = (String, String)>>(
        &self,
        what: &str,
        expect: &Expect,
        call: F,
    ) -> String {
        let before = (self.logs.of("audit").len(), counters(&self.server));
        let (code, message) = call.await;
        let after = (self.logs.of("audit"), counters(&self.server));
        assert_eq!(code, "403 / 7", "{what}: {message}");
        assert!(
            message.starts_with(&expect.message),
            "{what}: the caller's message changed: {message:?}, not {:?}",
            expect.message
        );
        let lines = &after.0[before.0..];
        assert_eq!(lines.len(), 1, "{what}: one audit line: {lines:#?}");
        let line = &lines[0]["fields"];
        assert_eq!(line["decision"], "deny", "{what}: {line}");
        assert_eq!(line["kind"], expect.kind, "{what}: {line}");
        assert_eq!(line["subject"], expect.subject.as_str(), "{what}: {line}");
        assert_eq!(line["object"], expect.object.as_str(), "{what}: {line}");
        if expect.kind != "rbac" {
            assert_eq!(line["reason"], message.as_str(), "{what}: {line}");
        }
        let moved = moved(&before.1, &after.1);
        assert_eq!(
            moved,
            BTreeMap::from([(expect.series(), 1.0)]),
            "{what}: one count, of its kind"
        );
        message
    }

    /// A REST call, as (`"<HTTP status> / <gRPC code>"`, message).
    async fn rest(&self, method: &str, path: &str, token: &str, body: Value) -> (String, String) {
        let (status, answer) = self.server.rest(method, path, token, body).await;
        let message = answer["message"].as_str().unwrap_or_default().to_owned();
        (format!("{} / {}", status.as_u16(), answer["code"]), message)
    }

    /// A native gRPC call, in the same form (a gRPC answer has no HTTP status of its own:
    /// PERMISSION_DENIED stands for 403).
    async fn grpc(&self, path: &str, token: &str, message: &[u8]) -> (String, String) {
        let (code, message, _) = self.server.grpc(path, token, message).await;
        (grpc_code(&code), message)
    }

    async fn grpc_web(&self, path: &str, token: &str, message: &[u8]) -> (String, String) {
        let (code, message) = self.server.grpc_web(path, token, message).await;
        (grpc_code(&code), message)
    }
}

fn grpc_code(code: &str) -> String {
    if code == "7" {
        "403 / 7".to_owned()
    } else {
        format!("gRPC {code}")
    }
}

#[tokio::test]
async fn every_refusal_is_audited_and_counted_once() {
    let world = World::open().await;
    let _guard = world.logs.capture();
    let (admin, alice, bob, ci) = (&world.admin, &world.alice, &world.bob, &world.ci);
    let null = Value::Null;

    // A representative RBAC denial of each service that decides by RBAC.
    let detailed = |resource: &str, action: &str, object: &str| {
        format!("permission denied: {resource}, {action}, {object}, sub: bob, iat: ")
    };
    let hidden = "permission denied";
    let repo_path = urlencode(REPO);
    let cases: Vec<(&str, &str, String, Value, Expect)> = vec![
        (
            "applications",
            "GET",
            "/api/v1/applications/guestbook".to_owned(),
            null.clone(),
            Expect::new("rbac", "bob", "default/guestbook", hidden),
        ),
        (
            "applicationsets",
            "GET",
            "/api/v1/applicationsets/nothing".to_owned(),
            null.clone(),
            Expect::new("rbac", "bob", "*/nothing", hidden),
        ),
        (
            "projects",
            "GET",
            "/api/v1/projects/default".to_owned(),
            null.clone(),
            Expect::new("rbac", "bob", "default", &detailed("projects", "get", "default")),
        ),
        (
            "project tokens",
            "POST",
            format!("/api/v1/projects/{RESTRICTED}/roles/ci/token"),
            json!({}),
            Expect::new(
                "rbac",
                "bob",
                RESTRICTED,
                &detailed("projects", "update", RESTRICTED),
            ),
        ),
        (
            "clusters",
            "GET",
            format!("/api/v1/clusters/{}", urlencode(IN_CLUSTER)),
            null.clone(),
            Expect::new("rbac", "bob", IN_CLUSTER, hidden),
        ),
        (
            "repositories",
            "GET",
            format!("/api/v1/repositories/{repo_path}"),
            null.clone(),
            Expect::new("rbac", "bob", REPO, hidden),
        ),
        (
            "repository credentials",
            "DELETE",
            format!("/api/v1/repocreds/{}", urlencode(CREDS)),
            null.clone(),
            Expect::new("rbac", "bob", CREDS, hidden),
        ),
        (
            "accounts",
            "GET",
            "/api/v1/account/admin".to_owned(),
            null.clone(),
            Expect::new("rbac", "bob", "admin", &detailed("accounts", "get", "admin")),
        ),
        (
            "certificates",
            "GET",
            "/api/v1/certificates".to_owned(),
            null.clone(),
            Expect::new("rbac", "bob", "", &detailed("certificates", "get", "")),
        ),
        (
            "gpg keys",
            "GET",
            "/api/v1/gpgkeys".to_owned(),
            null.clone(),
            Expect::new("rbac", "bob", "", &detailed("gpgkeys", "get", "")),
        ),
    ];
    for (what, method, path, body, expect) in &cases {
        world
            .refused(what, expect, world.rest(method, path, bob, body.clone()))
            .await;
    }

    // RBAC denials whose checks now go through `service::access`, by a caller allowed the
    // steps before them.
    let detailed = |resource: &str, action: &str, object: &str| {
        format!("permission denied: {resource}, {action}, {object}, sub: alice, iat: ")
    };
    let other = "https://other.example";
    let password = json!({"name": "admin", "currentPassword": "x", "newPassword": "n3w-Passw0rd"});
    let cases: Vec<(&str, &str, String, Value, Expect)> = vec![
        (
            "the apps of a repository, without create or update on the app",
            "GET",
            format!("/api/v1/repositories/{repo_path}/apps?appName=guestbook&appProject=default"),
            null.clone(),
            Expect::new("rbac", "alice", "default/guestbook", hidden),
        ),
        (
            "deleting an application one may read",
            "DELETE",
            "/api/v1/applications/guestbook".to_owned(),
            null.clone(),
            Expect::new(
                "rbac",
                "alice",
                "default/guestbook",
                &detailed("applications", "delete", "default/guestbook"),
            ),
        ),
        (
            "a project update adding a destination, without clusters update on it",
            "PUT",
            format!("/api/v1/projects/{RESTRICTED}"),
            restricted_project(Some(other)),
            Expect::new("rbac", "alice", other, &detailed("clusters", "update", other)),
        ),
        (
            "another account's password",
            "PUT",
            "/api/v1/account/password".to_owned(),
            password.clone(),
            Expect::new("rbac", "alice", "admin", &detailed("accounts", "update", "admin")),
        ),
    ];
    for (what, method, path, body, expect) in &cases {
        world
            .refused(what, expect, world.rest(method, path, alice, body.clone()))
            .await;
    }

    // Refusals that are not RBAC decisions, each with its kind.
    let not_permitted = format!("repository not permitted in project '{RESTRICTED}'");
    let details = json!({
        "source": {"repoURL": REPO, "path": "guestbook"},
        "appName": "guestbook",
        "appProject": RESTRICTED,
    });
    let stray = "app is not allowed in project \"default\", or the project does not exist";
    let restricted_app = format!("{RESTRICTED}/windowed");
    let cases: Vec<(&str, &str, String, &str, Value, Expect)> = vec![
        (
            "the apps of a repository the project does not permit",
            "GET",
            format!("/api/v1/repositories/{repo_path}/apps?appName=windowed&appProject={RESTRICTED}"),
            admin,
            null.clone(),
            Expect::new("project_rule", "admin", REPO, &not_permitted),
        ),
        (
            "an application in a namespace the project does not permit",
            "POST",
            "/api/v1/applications".to_owned(),
            admin,
            application("stray", "elsewhere", "default"),
            Expect::new("project_rule", "admin", "default/elsewhere/stray", stray),
        ),
        (
            "the details of an application, under another project",
            "POST",
            format!("/api/v1/repositories/{repo_path}/appdetails"),
            admin,
            details,
            Expect::new("app_source", "admin", &format!("{RESTRICTED}/guestbook"), hidden),
        ),
        (
            "a sync during a deny window",
            "POST",
            "/api/v1/applications/windowed/sync".to_owned(),
            admin,
            json!({}),
            Expect::new(
                "sync_window",
                "admin",
                &restricted_app,
                "cannot sync: blocked by sync window",
            ),
        ),
        (
            "a password change by a project token",
            "PUT",
            "/api/v1/account/password".to_owned(),
            ci,
            password.clone(),
            Expect::new(
                "not_an_account",
                "proj:restricted:ci",
                "admin",
                "proj:restricted:ci is a project token, not an account: it has no password to change",
            ),
        ),
    ];
    let mut rest_messages = BTreeMap::new();
    for (what, method, path, token, body, expect) in &cases {
        let message = world
            .refused(what, expect, world.rest(method, path, token, body.clone()))
            .await;
        rest_messages.insert(expect.kind, message);
    }

    // The mutating ones over gRPC and gRPC-Web: the same answer, one line, one count.
    let sync = strings(&[(1, "windowed")]);
    let by_token = strings(&[(1, "n3w-Passw0rd"), (2, "x"), (3, "admin")]);
    let by_alice = Expect::new("rbac", "alice", "admin", &detailed("accounts", "update", "admin"));
    let window = Expect::new(
        "sync_window",
        "admin",
        &restricted_app,
        &rest_messages["sync_window"],
    );
    let project_token = Expect::new(
        "not_an_account",
        "proj:restricted:ci",
        "admin",
        &rest_messages["not_an_account"],
    );
    for (transport, web) in [("gRPC", false), ("gRPC-Web", true)] {
        for (what, path, token, message, expect) in [
            ("a sync during a deny window", SYNC, admin, &sync, &window),
            (
                "a password change by a project token",
                PASSWORD,
                ci,
                &by_token,
                &project_token,
            ),
            (
                "another account's password",
                PASSWORD,
                alice,
                &by_token,
                &by_alice,
            ),
        ] {
            let what = format!("{what}, over {transport}");
            if web {
                world
                    .refused(&what, expect, world.grpc_web(path, token, message))
                    .await;
            } else {
                world
                    .refused(&what, expect, world.grpc(path, token, message))
                    .await;
            }
        }
    }
}

#[tokio::test]
async fn an_answer_to_can_i_is_neither_audited_nor_counted() {
    let world = World::open().await;
    let _guard = world.logs.capture();
    let before = counters(&world.server);
    let (status, answer) = world
        .server
        .rest(
            "GET",
            "/api/v1/account/can-i/applications/delete/default/guestbook",
            &world.bob,
            Value::Null,
        )
        .await;
    assert_eq!((status, answer), (StatusCode::OK, json!({"value": "no"})));
    assert!(world.logs.of("audit").is_empty());
    assert!(moved(&before, &counters(&world.server)).is_empty());
}
