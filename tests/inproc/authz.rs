//! Every resource kind denies through the one place that writes the audit line and counts
//! the denial (`Rbac::deny`), whatever the denial's wording.

use http::StatusCode;
use serde_json::json;

use crate::support::{Logs, Server};

const APP: &str = "guestbook";
const REPO: &str = "https://github.com/org/repo.git";
const CREDS: &str = "https://github.com/org";
const IN_CLUSTER: &str = "https%3A%2F%2Fkubernetes.default.svc";

#[tokio::test]
async fn a_denial_of_each_resource_kind_is_audited_and_counted() {
    let server = Server::open("  accounts.alice: login\n", "  policy.default: ''\n", &[]).await;
    let admin = server.login("admin");
    let alice = server.login("alice");
    let app = json!({
        "metadata": {"name": APP},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git", "path": "guestbook"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}
        }
    });
    for (path, body) in [
        ("/api/v1/applications", app),
        ("/api/v1/repositories", json!({"repo": REPO})),
        (
            "/api/v1/repocreds",
            json!({"url": CREDS, "username": "bot", "password": "s3cret"}),
        ),
    ] {
        let (status, answer) = server.rest("POST", path, &admin, body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
    }

    let logs = Logs::default();
    let _guard = logs.capture();
    let cases = [
        (
            format!("/api/v1/applications/{APP}"),
            "applications",
            "default/guestbook",
        ),
        ("/api/v1/projects/default".to_owned(), "projects", "default"),
        (
            format!("/api/v1/clusters/{IN_CLUSTER}"),
            "clusters",
            "https://kubernetes.default.svc",
        ),
        (
            format!("/api/v1/repositories/{}", urlencode(REPO)),
            "repositories",
            REPO,
        ),
        (
            format!("/api/v1/repocreds/{}", urlencode(CREDS)),
            "repositories",
            CREDS,
        ),
        ("/api/v1/account/admin".to_owned(), "accounts", "admin"),
    ];
    for (i, (path, resource, object)) in cases.iter().enumerate() {
        let before = server.server.app.rbac.denials();
        let method = if path.starts_with("/api/v1/repocreds") {
            // Templates are read through the list or changed; a change needs `update`.
            "DELETE"
        } else {
            "GET"
        };
        let (status, answer) = server.rest(method, path, &alice, serde_json::Value::Null).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {answer}");
        assert_eq!(
            server.server.app.rbac.denials(),
            before + 1,
            "{path}: counted once"
        );
        let audit = logs.of("audit");
        assert_eq!(audit.len(), i + 1, "{path}: one audit line each: {audit:?}");
        let line = &audit[i]["fields"];
        assert_eq!(line["subject"], "alice", "{line}");
        assert_eq!(line["resource"], *resource, "{line}");
        assert_eq!(line["object"], *object, "{line}");
        assert_eq!(line["decision"], "deny", "{line}");
    }
}

#[tokio::test]
async fn a_missing_object_is_denied_and_audited_like_a_hidden_one() {
    let server = Server::open("  accounts.alice: login\n", "  policy.default: ''\n", &[]).await;
    let alice = server.login("alice");
    let logs = Logs::default();
    let _guard = logs.capture();
    let (hidden, hidden_body) = server
        .rest(
            "GET",
            &format!("/api/v1/clusters/{IN_CLUSTER}"),
            &alice,
            serde_json::Value::Null,
        )
        .await;
    let (missing, missing_body) = server
        .rest(
            "GET",
            "/api/v1/clusters/https%3A%2F%2Fnowhere.example",
            &alice,
            serde_json::Value::Null,
        )
        .await;
    assert_eq!((hidden, missing), (StatusCode::FORBIDDEN, StatusCode::FORBIDDEN));
    assert_eq!(hidden_body, missing_body, "the same answer (SEC-14)");
    assert_eq!(logs.of("audit").len(), 2);
    assert_eq!(server.server.app.rbac.denials(), 2);
}

#[tokio::test]
async fn listing_hides_without_denying() {
    let server = Server::open("  accounts.alice: login\n", "  policy.default: ''\n", &[]).await;
    let alice = server.login("alice");
    let logs = Logs::default();
    let _guard = logs.capture();
    for path in [
        "/api/v1/applications",
        "/api/v1/projects",
        "/api/v1/clusters",
        "/api/v1/repositories",
    ] {
        let (status, answer) = server.rest("GET", path, &alice, serde_json::Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        assert!(
            answer["items"].as_array().is_none_or(Vec::is_empty),
            "{path}: nothing visible: {answer}"
        );
    }
    assert!(logs.of("audit").is_empty(), "hiding is not denying");
    assert_eq!(server.server.app.rbac.denials(), 0);
}

fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[tokio::test]
async fn a_password_in_a_denied_object_is_masked_in_the_audit_line() {
    let server = Server::open("  accounts.alice: login\n", "  policy.default: ''\n", &[]).await;
    let alice = server.login("alice");
    let logs = Logs::default();
    let _guard = logs.capture();
    let path = format!(
        "/api/v1/clusters/{}",
        urlencode("https://u:hunter2@nope.example.com")
    );
    let (status, answer) = server.rest("GET", &path, &alice, serde_json::Value::Null).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert!(!answer.to_string().contains("hunter2"), "{answer}");
    let audit = logs.of("audit");
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0]["fields"]["object"], "https://u:***@nope.example.com");
}
