//! The audit trail (issue 20, item 8): one JSON line per change, refusal, failed login, lockout
//! and token revocation, with who, from where, what and the result, and never a secret. Reads
//! the real server's log (`--log-format json`).

use serde_json::{Value, json};

use crate::replicas::{call, login, token_of};
use crate::support::TestServer;

const ADMIN_PASSWORD: &str = "audit-admin-pass-1";
const ALICE_PASSWORD: &str = "audit-alice-pass-1";

fn config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let admin = bcrypt::hash(ADMIN_PASSWORD, 4).unwrap();
    let alice = bcrypt::hash(ALICE_PASSWORD, 4).unwrap();
    let files = [
        (
            "argocd-cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  accounts.alice: login\n"
                .to_owned(),
        ),
        (
            "argocd-secret.yaml",
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  \
                 admin.password: '{admin}'\n  accounts.alice.password: '{alice}'\n"
            ),
        ),
        // alice may do nothing.
        (
            "argocd-rbac-cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.default: ''\n"
                .to_owned(),
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// The audit lines the server has logged so far (their `fields`).
fn audit_lines(server: &TestServer) -> Vec<Value> {
    server
        .logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "audit" && l["fields"]["event"] == "call")
        .map(|l| l["fields"].clone())
        .collect()
}

fn find<'a>(lines: &'a [Value], method: &str, result: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["method"] == method && l["result"] == result)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn changes_refusals_failed_logins_lockouts_and_revocations_leave_one_line_each_without_secrets() {
    let config = config();
    let server = TestServer::start(&[
        "--insecure",
        "--log-format",
        "json",
        "--config-dir",
        config.path().to_str().unwrap(),
    ]);
    let addr = server.addr();
    let admin = token_of(&login(addr, "admin", ADMIN_PASSWORD, &[]).await);
    let alice = token_of(&login(addr, "alice", ALICE_PASSWORD, &[]).await);

    let project = json!({"project": {"metadata": {"name": "p-audit"}, "spec": {}}});
    let r = call(
        addr,
        "POST",
        "/api/v1/projects",
        Some(&admin),
        &[],
        Some(&project),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let denied = call(addr, "GET", "/api/v1/projects/p-audit", Some(&alice), &[], None).await;
    assert_eq!(denied.status, 403, "{denied:?}");
    let anonymous = call(addr, "DELETE", "/api/v1/projects/p-audit", None, &[], None).await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    let logout = call(addr, "DELETE", "/api/v1/session", Some(&alice), &[], None).await;
    assert_eq!(logout.status, 200, "{logout:?}");
    // Failed logins from one address until it is locked out (bounded).
    let mut statuses = Vec::new();
    for _ in 0..8 {
        let r = login(addr, "alice", "wrong-password-for-alice", &[]).await;
        statuses.push(r.status);
        if r.status == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");

    let lines = audit_lines(&server);
    let logins = find(&lines, "/session.SessionService/Create", "ok");
    assert_eq!(logins.len(), 2, "{lines:#?}");
    assert_eq!(logins[0]["object"], "username=admin", "{lines:#?}");
    assert_eq!(logins[0]["client"], "127.0.0.1", "{lines:#?}");

    let created = find(&lines, "/project.ProjectService/Create", "ok");
    assert_eq!(created.len(), 1, "{lines:#?}");
    assert_eq!(created[0]["subject"], "admin");
    assert_eq!(created[0]["object"], "project.metadata.name=p-audit");
    assert!(!created[0]["token_id"].as_str().unwrap().is_empty(), "{lines:#?}");

    // A denial has one line, RBAC's, naming what was checked.
    assert!(find(&lines, "/project.ProjectService/Get", "PermissionDenied").is_empty());
    let denials: Vec<Value> = server
        .logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "audit" && l["fields"]["decision"] == "deny")
        .map(|l| l["fields"].clone())
        .collect();
    assert_eq!(denials.len(), 1, "{denials:#?}");
    assert_eq!(denials[0]["subject"], "alice");
    assert_eq!(denials[0]["resource"], "projects");
    assert_eq!(denials[0]["object"], "p-audit");
    assert_eq!(denials[0]["token_id"], jwt_id(&alice).as_str());
    let unauthenticated = find(&lines, "/project.ProjectService/Delete", "Unauthenticated");
    assert_eq!(unauthenticated.len(), 1, "{lines:#?}");
    assert_eq!(unauthenticated[0]["subject"], "");

    // The logout names the token it revoked.
    let revoked = find(&lines, "/session.SessionService/Delete", "ok");
    assert_eq!(revoked.len(), 1, "{lines:#?}");
    let jti = jwt_id(&alice);
    assert_eq!(revoked[0]["token_id"], jti.as_str(), "{lines:#?}");

    let failed = find(&lines, "/session.SessionService/Create", "Unauthenticated");
    assert_eq!(failed.len(), statuses.len() - 1, "{statuses:?} {lines:#?}");
    assert!(
        failed.iter().all(|l| l["object"] == "username=alice"),
        "{lines:#?}"
    );
    let locked = find(&lines, "/session.SessionService/Create", "ResourceExhausted");
    assert_eq!(locked.len(), 1, "{lines:#?}");

    // No password or token anywhere in the trail.
    let trail = serde_json::to_string(&lines).unwrap();
    for secret in [
        ADMIN_PASSWORD,
        ALICE_PASSWORD,
        "wrong-password-for-alice",
        &admin,
        &alice,
    ] {
        assert!(!trail.contains(secret), "a secret in the audit trail: {trail}");
    }
}

/// The `jti` claim of one of our tokens.
fn jwt_id(token: &str) -> String {
    use base64::Engine as _;
    let payload = token.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    claims["jti"].as_str().unwrap().to_owned()
}
