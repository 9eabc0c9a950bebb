//! `project.ProjectService` over REST (and one gRPC-Web call) against the real server:
//! create/get/list/update/delete, optimistic concurrency, deletion refused while applications
//! use a project, role policy validation, project role tokens (use, scope, revocation: SEC-08)
//! and identical answers for missing and forbidden projects (SEC-13).

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::support::TestServer;
use crate::support::client::{self, Proto, connect, grpc_frame, grpc_request, grpc_web_frames};

const PASSWORD: &str = "correct-horse-1";

/// A plaintext server with `admin` and `bob` (login only), both with [`PASSWORD`], and the
/// given `argocd-rbac-cm` data lines (indented YAML).
fn start(rbac_data: &str) -> (TestServer, tempfile::TempDir) {
    let config = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let write = |name: &str, text: String| std::fs::write(config.path().join(name), text).unwrap();
    write(
        "argocd-cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  accounts.bob: login\n"
            .into(),
    );
    write(
        "argocd-secret.yaml",
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  \
             admin.password: '{hash}'\n  accounts.bob.password: '{hash}'\n"
        ),
    );
    write(
        "argocd-rbac-cm.yaml",
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n{rbac_data}"),
    );
    let server = TestServer::start(&["--insecure", "--config-dir", config.path().to_str().unwrap()]);
    (server, config)
}

/// An answer: status and JSON body (`Null` when the body is not JSON).
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    body: Value,
}

struct Rest {
    port: u16,
    addr: std::net::SocketAddr,
    token: Option<String>,
}

impl Rest {
    fn new(server: &TestServer) -> Self {
        Self {
            port: server.port,
            addr: server.addr(),
            token: None,
        }
    }

    fn with_token(&self, token: &str) -> Self {
        Self {
            port: self.port,
            addr: self.addr,
            token: Some(token.to_owned()),
        }
    }

    async fn login(server: &TestServer, user: &str) -> Self {
        let anonymous = Self::new(server);
        let r = anonymous
            .call(
                "POST",
                "/api/v1/session",
                Some(json!({"username": user, "password": PASSWORD})),
            )
            .await;
        assert_eq!(r.status, 200, "login {user}: {r:?}");
        anonymous.with_token(r.body["token"].as_str().unwrap())
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        let mut conn = connect(self.addr, false, Proto::H1).await;
        let mut req = client::request(method, &format!("http://127.0.0.1:{}{path}", self.port));
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let bytes = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Bytes::from(serde_json::to_vec(&b).unwrap())
            }
            None => Bytes::new(),
        };
        let r = conn.send(req.body(Full::new(bytes)).unwrap()).await;
        Answer {
            status: r.status,
            body: serde_json::from_slice(&r.body).unwrap_or(Value::Null),
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.call("GET", path, None).await
    }

    async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let r = self.call(method, path, body).await;
        assert_eq!(r.status, 200, "{method} {path}: {r:?}");
        r.body
    }
}

fn open_project(name: &str, roles: Value) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*"}],
            "roles": roles
        }
    })
}

fn application(name: &str, project: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "project": project,
            "source": {"repoURL": "https://github.com/example/apps.git", "path": "guestbook"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}
        }
    })
}

fn names(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["metadata"]["name"].as_str())
                .collect()
        })
        .unwrap_or_default()
}

fn message(answer: &Answer) -> &str {
    answer.body["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn projects_are_created_read_listed_updated_and_deleted() {
    let (server, _config) = start("");
    let admin = Rest::login(&server, "admin").await;

    let spec = open_project("p1", json!([])).get("spec").cloned().unwrap();
    let created = admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": {"metadata": {"name": "p1"}, "spec": spec}})),
        )
        .await;
    assert_eq!(created["metadata"]["name"], "p1");
    assert_eq!(created["metadata"]["namespace"], "argocd");
    let rv = created["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    let got = admin.ok("GET", "/api/v1/projects/p1", None).await;
    assert_eq!(got, created);
    let list = admin.ok("GET", "/api/v1/projects", None).await;
    assert_eq!(names(&list), ["default", "p1"], "{list}");
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");

    // The same spec again: answered as stored, nothing written. Another one: refused
    // unless upsert.
    let again = admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": created.clone()})),
        )
        .await;
    assert_eq!(again["metadata"]["resourceVersion"], rv.as_str());
    let mut changed = created.clone();
    changed["spec"]["description"] = json!("changed");
    let r = admin
        .call(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": changed.clone()})),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(message(&r).contains("upsert"), "{r:?}");
    let upserted = admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": changed, "upsert": true})),
        )
        .await;
    assert_eq!(upserted["spec"]["description"], "changed");

    // Update with the current resourceVersion, then with a stale one.
    let mut update = upserted.clone();
    update["spec"]["description"] = json!("updated");
    update["spec"]["syncWindows"] =
        json!([{"kind": "deny", "schedule": "* * * * *", "duration": "1h", "applications": ["*"]}]);
    let updated = admin
        .ok(
            "PUT",
            "/api/v1/projects/p1",
            Some(json!({"project": update.clone()})),
        )
        .await;
    assert_eq!(updated["spec"]["description"], "updated");
    assert_ne!(
        updated["metadata"]["resourceVersion"],
        upserted["metadata"]["resourceVersion"]
    );
    update["spec"]["description"] = json!("lost update");
    let stale = admin
        .call("PUT", "/api/v1/projects/p1", Some(json!({"project": update})))
        .await;
    assert_eq!(stale.status, 409, "{stale:?}");
    assert_eq!(stale.body["code"], 10, "ABORTED: {stale:?}");
    assert_eq!(
        admin.ok("GET", "/api/v1/projects/p1", None).await["spec"]["description"],
        "updated"
    );

    let detailed = admin.ok("GET", "/api/v1/projects/p1/detailed", None).await;
    assert_eq!(detailed["project"]["metadata"]["name"], "p1", "{detailed}");
    // The deny window fires every minute for an hour: it is active now.
    let windows = admin.ok("GET", "/api/v1/projects/p1/syncwindows", None).await;
    assert_eq!(windows["windows"][0]["kind"], "deny", "{windows}");
    admin.ok("GET", "/api/v1/projects/p1/events", None).await;
    admin.ok("GET", "/api/v1/projects/p1/links", None).await;
    admin.ok("GET", "/api/v1/projects/p1/globalprojects", None).await;

    // The same over gRPC-Web: GetDetailedProject{name: "p1"}.
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    let mut query = vec![0x0a, 2];
    query.extend_from_slice(b"p1");
    let mut req = grpc_request(
        &format!(
            "http://127.0.0.1:{}/project.ProjectService/GetDetailedProject",
            server.port
        ),
        "application/grpc-web+proto",
        grpc_frame(&query),
    );
    req.headers_mut()
        .insert("token", admin.token.clone().unwrap().parse().unwrap());
    let web = conn.send(req).await;
    let (messages, trailer) = grpc_web_frames(&web.body, false);
    assert_eq!(web.status, 200);
    assert_eq!(web.header("grpc-status").unwrap_or("0"), "0", "{:?}", web.headers);
    assert!(trailer.contains("grpc-status:0"), "{trailer:?}");
    assert_eq!(messages.len(), 1, "{trailer:?}");
    assert!(
        messages[0].windows(2).any(|w| w == b"p1"),
        "the answer names the project"
    );

    admin.ok("DELETE", "/api/v1/projects/p1", None).await;
    let gone = admin.get("/api/v1/projects/p1").await;
    assert_eq!(gone.status, 404, "{gone:?}");
    let r = admin.call("DELETE", "/api/v1/projects/default", None).await;
    assert_eq!(r.status, 400, "the default project stays: {r:?}");
    let r = admin
        .call(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": {"metadata": {"name": "Bad_Name"}}})),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");
}

#[tokio::test]
async fn a_project_in_use_cannot_be_deleted() {
    let (server, _config) = start("");
    let admin = Rest::login(&server, "admin").await;
    admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": open_project("p2", json!([]))})),
        )
        .await;
    admin
        .ok("POST", "/api/v1/applications", Some(application("a1", "p2")))
        .await;
    let r = admin.call("DELETE", "/api/v1/projects/p2", None).await;
    assert_eq!(
        (r.status, r.body["code"].as_i64()),
        (400, Some(9)),
        "FAILED_PRECONDITION: {r:?}"
    );
    assert!(message(&r).contains("1 application"), "{r:?}");
    assert_eq!(admin.get("/api/v1/projects/p2").await.status, 200);

    // Narrowing the project under its application is refused too.
    let mut narrowed = admin.ok("GET", "/api/v1/projects/p2", None).await;
    narrowed["spec"]["sourceRepos"] = json!(["https://gitlab.example/*"]);
    let r = admin
        .call("PUT", "/api/v1/projects/p2", Some(json!({"project": narrowed})))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(message(&r).contains("source of 1 application"), "{r:?}");

    admin.ok("DELETE", "/api/v1/applications/a1", None).await;
    admin.ok("DELETE", "/api/v1/projects/p2", None).await;
}

#[tokio::test]
async fn role_policies_are_validated() {
    let (server, _config) = start("");
    let admin = Rest::login(&server, "admin").await;
    let create = |roles: Value| {
        let admin = &admin;
        async move {
            admin
                .call(
                    "POST",
                    "/api/v1/projects",
                    Some(json!({"project": open_project("p1", roles)})),
                )
                .await
        }
    };
    for (roles, expected) in [
        (
            json!([{"name": "ci", "policies": [
                "p, proj:p1:ci, applications, get, p1/*, allow",
                "p, proj:p1:ci, applications, get, */*, allow"
            ]}]),
            "role \"ci\" policy line 2",
        ),
        (
            json!([{"name": "ci", "policies": ["p, proj:p2:ci, applications, get, p1/*, allow"]}]),
            "subject must be \"proj:p1:ci\"",
        ),
        (
            json!([{"name": "ci", "policies": ["p, proj:p1:ci, projects, update, p1/*, allow"]}]),
            "cannot be granted",
        ),
        (
            json!([{"name": "ci", "policies": ["p, proj:p1:ci, applications, get, p1/*"]}]),
            "6 comma-separated",
        ),
        (
            json!([{"name": "ci", "policies": ["p, proj:p1:ci, applications, get, p1/*, maybe"]}]),
            "effect",
        ),
        (json!([{"name": "-ci"}]), "invalid role name"),
        (json!([{"name": "ci", "groups": ["a,b"]}]), "must be quoted"),
    ] {
        let r = create(roles.clone()).await;
        assert_eq!(
            (r.status, r.body["code"].as_i64()),
            (400, Some(3)),
            "{roles}: {r:?}"
        );
        assert!(message(&r).contains(expected), "{roles}: {r:?}");
    }
    assert_eq!(
        admin.get("/api/v1/projects/p1").await.status,
        404,
        "nothing was stored"
    );

    // A valid role is stored with its lines normalized; an update is validated as well.
    let stored = admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": open_project(
                "p1",
                json!([{"name": "ci", "policies": ["p,proj:p1:ci,applications,get,p1/*,allow"]}])
            )})),
        )
        .await;
    assert_eq!(
        stored["spec"]["roles"][0]["policies"][0],
        "p, proj:p1:ci, applications, get, p1/*, allow"
    );
    let mut bad = stored.clone();
    bad["spec"]["roles"][0]["policies"] = json!(["p, proj:p1:ci, applications, get, other/*, allow"]);
    let r = admin
        .call("PUT", "/api/v1/projects/p1", Some(json!({"project": bad})))
        .await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(message(&r).contains("role \"ci\" policy line 1"), "{r:?}");
}

/// The claims of a JWT (not verified: the test only reads what the server put in).
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap()
}

/// Projects p1 (role `ci` may get p1's applications) and p2, an application in each, and a
/// token of `proj:p1:ci`.
async fn token_fixture(admin: &Rest) -> (String, Value) {
    let role = json!([{"name": "ci", "policies": ["p, proj:p1:ci, applications, get, p1/*, allow"]}]);
    admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": open_project("p1", role)})),
        )
        .await;
    admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": open_project("p2", json!([]))})),
        )
        .await;
    admin
        .ok("POST", "/api/v1/applications", Some(application("a1", "p1")))
        .await;
    admin
        .ok("POST", "/api/v1/applications", Some(application("a2", "p2")))
        .await;
    let created = admin
        .ok(
            "POST",
            "/api/v1/projects/p1/roles/ci/token",
            Some(json!({"expiresIn": 3600, "description": "ci"})),
        )
        .await;
    let token = created["token"].as_str().unwrap().to_owned();
    let c = claims(&token);
    (token, c)
}

#[tokio::test]
async fn a_project_token_acts_within_its_project_until_deleted() {
    let (server, _config) = start("");
    let admin = Rest::login(&server, "admin").await;
    let (token, c) = token_fixture(&admin).await;
    assert_eq!(c["iss"], "argocd");
    assert_eq!(c["sub"], "proj:p1:ci");
    let (iat, jti) = (c["iat"].as_i64().unwrap(), c["jti"].as_str().unwrap().to_owned());
    assert_eq!(c["exp"].as_i64(), Some(iat + 3600), "{c}");
    assert_eq!(c["nbf"].as_i64(), Some(iat), "{c}");

    // Recorded on the role and in the status, alike.
    let p1 = admin.ok("GET", "/api/v1/projects/p1", None).await;
    let entry = json!([{"iat": iat, "exp": iat + 3600, "id": jti}]);
    assert_eq!(p1["spec"]["roles"][0]["jwtTokens"], entry, "{p1}");
    assert_eq!(p1["status"]["jwtTokensByRole"]["ci"]["items"], entry, "{p1}");

    let ci = admin.with_token(&token);
    let app = ci.ok("GET", "/api/v1/applications/a1", None).await;
    assert_eq!(app["metadata"]["name"], "a1");
    let info = ci.ok("GET", "/api/v1/session/userinfo", None).await;
    assert_eq!(
        (info["loggedIn"].as_bool(), info["username"].as_str()),
        (Some(true), Some("proj:p1:ci"))
    );
    let r = ci.get("/api/v1/applications/a2").await;
    assert_eq!(r.status, 403, "another project's application: {r:?}");
    let list = ci.ok("GET", "/api/v1/applications", None).await;
    assert_eq!(names(&list), ["a1"], "{list}");
    // Roles get their project automatically, nothing else.
    ci.ok("GET", "/api/v1/projects/p1", None).await;
    assert_eq!(ci.get("/api/v1/projects/p2").await.status, 403);
    // A project token is no account.
    let r = ci
        .call(
            "PUT",
            "/api/v1/account/password",
            Some(json!({"currentPassword": "x", "newPassword": "y-long-enough"})),
        )
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(message(&r).contains("project token"), "{r:?}");

    // An update that leaves the token listed keeps it; a token id is never reused.
    let mut keep = admin.ok("GET", "/api/v1/projects/p1", None).await;
    keep["spec"]["description"] = json!("still here");
    admin
        .ok("PUT", "/api/v1/projects/p1", Some(json!({"project": keep})))
        .await;
    ci.ok("GET", "/api/v1/applications/a1", None).await;
    let r = admin
        .call(
            "POST",
            "/api/v1/projects/p1/roles/ci/token",
            Some(json!({"id": jti})),
        )
        .await;
    assert_eq!(r.status, 400, "{r:?}");

    // A second token of the role, with a chosen id and no expiry.
    let second = admin
        .ok(
            "POST",
            "/api/v1/projects/p1/roles/ci/token",
            Some(json!({"id": "second"})),
        )
        .await;
    let second = admin.with_token(second["token"].as_str().unwrap());
    let c2 = claims(second.token.as_deref().unwrap());
    assert_eq!(
        (c2["jti"].as_str(), c2.get("exp")),
        (Some("second"), None),
        "{c2}"
    );
    second.ok("GET", "/api/v1/applications/a1", None).await;

    // Deleting the first revokes it at once; the second stays valid.
    admin
        .ok(
            "DELETE",
            &format!("/api/v1/projects/p1/roles/ci/token/{iat}?id={jti}"),
            None,
        )
        .await;
    let p1 = admin.ok("GET", "/api/v1/projects/p1", None).await;
    let left = json!([{"iat": c2["iat"], "id": "second"}]);
    assert_eq!(p1["spec"]["roles"][0]["jwtTokens"], left, "{p1}");
    assert_eq!(p1["status"]["jwtTokensByRole"]["ci"]["items"], left, "{p1}");
    let r = ci.get("/api/v1/applications/a1").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(message(&r).contains("no longer"), "{r:?}");
    second.ok("GET", "/api/v1/applications/a1", None).await;

    // By issue time alone (what `argocd proj role delete-token` sends), and again: no error.
    let path = format!("/api/v1/projects/p1/roles/ci/token/{}", c2["iat"]);
    admin.ok("DELETE", &path, None).await;
    admin.ok("DELETE", &path, None).await;
    let p1 = admin.ok("GET", "/api/v1/projects/p1", None).await;
    assert!(p1["spec"]["roles"][0].get("jwtTokens").is_none(), "{p1}");
    assert!(p1["status"].get("jwtTokensByRole").is_none(), "{p1}");
    assert_eq!(second.get("/api/v1/applications/a1").await.status, 401);
}

#[tokio::test]
async fn a_revoked_project_token_gets_401_even_when_the_default_role_would_allow() {
    let (server, _config) = start("  policy.default: role:readonly\n");
    let admin = Rest::login(&server, "admin").await;
    let (token, c) = token_fixture(&admin).await;
    let ci = admin.with_token(&token);
    // The default role lets any authenticated caller read: the token reads p2's app too.
    ci.ok("GET", "/api/v1/applications/a2", None).await;

    // Revoked by leaving it out of an update (by issue time alone, too).
    let mut p1 = admin.ok("GET", "/api/v1/projects/p1", None).await;
    p1["spec"]["roles"][0]
        .as_object_mut()
        .unwrap()
        .remove("jwtTokens");
    p1.as_object_mut().unwrap().remove("status");
    admin
        .ok("PUT", "/api/v1/projects/p1", Some(json!({"project": p1})))
        .await;
    for path in [
        "/api/v1/applications/a1",
        "/api/v1/applications/a2",
        "/api/v1/session/userinfo",
    ] {
        let r = ci.get(path).await;
        if path.ends_with("userinfo") {
            assert_eq!(r.body.get("loggedIn"), None, "{r:?}");
        } else {
            assert_eq!(r.status, 401, "{path}: {r:?}");
        }
    }

    // Forged entries cannot bring it back: updates never add tokens.
    let mut forged = admin.ok("GET", "/api/v1/projects/p1", None).await;
    let entry = json!([{"iat": c["iat"], "exp": c["exp"], "id": c["jti"]}]);
    forged["spec"]["roles"][0]["jwtTokens"] = entry.clone();
    forged["status"] = json!({"jwtTokensByRole": {"ci": {"items": entry}}});
    let stored = admin
        .ok("PUT", "/api/v1/projects/p1", Some(json!({"project": forged})))
        .await;
    assert!(stored["spec"]["roles"][0].get("jwtTokens").is_none(), "{stored}");
    assert_eq!(ci.get("/api/v1/applications/a1").await.status, 401);

    // Deleting the role's project revokes too (a fresh token, then the project).
    let fresh = admin
        .ok("POST", "/api/v1/projects/p1/roles/ci/token", Some(json!({})))
        .await;
    let fresh = admin.with_token(fresh["token"].as_str().unwrap());
    assert!(
        claims(fresh.token.as_deref().unwrap()).get("exp").is_none(),
        "expiresIn 0: no expiry"
    );
    fresh.ok("GET", "/api/v1/applications/a1", None).await;
    admin.ok("DELETE", "/api/v1/applications/a1", None).await;
    admin.ok("DELETE", "/api/v1/projects/p1", None).await;
    assert_eq!(fresh.get("/api/v1/applications/a2").await.status, 401);
}

#[tokio::test]
async fn missing_and_forbidden_projects_answer_alike() {
    let (server, _config) = start("");
    let admin = Rest::login(&server, "admin").await;
    let role = json!([{"name": "ci", "policies": []}]);
    admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": open_project("secret", role)})),
        )
        .await;
    let bob = Rest::login(&server, "bob").await;

    let list = bob.ok("GET", "/api/v1/projects", None).await;
    assert!(names(&list).is_empty(), "{list}");
    let same = |existing: Answer, missing: Answer, what: &str| {
        assert_eq!(existing.status, 403, "{what}: {existing:?}");
        let strip = |a: Answer| {
            let text = a.body.to_string();
            (a.status, text.replace("secret", "NAME").replace("absent", "NAME"))
        };
        assert_eq!(strip(existing), strip(missing), "{what}");
    };
    for suffix in [
        "",
        "/detailed",
        "/syncwindows",
        "/events",
        "/links",
        "/globalprojects",
    ] {
        same(
            bob.get(&format!("/api/v1/projects/secret{suffix}")).await,
            bob.get(&format!("/api/v1/projects/absent{suffix}")).await,
            suffix,
        );
    }
    same(
        bob.call("DELETE", "/api/v1/projects/secret", None).await,
        bob.call("DELETE", "/api/v1/projects/absent", None).await,
        "delete",
    );
    same(
        bob.call(
            "PUT",
            "/api/v1/projects/secret",
            Some(json!({"project": {"metadata": {"name": "secret"}}})),
        )
        .await,
        bob.call(
            "PUT",
            "/api/v1/projects/absent",
            Some(json!({"project": {"metadata": {"name": "absent"}}})),
        )
        .await,
        "update",
    );
    for role in ["ci", "nope"] {
        same(
            bob.call(
                "POST",
                &format!("/api/v1/projects/secret/roles/{role}/token"),
                Some(json!({})),
            )
            .await,
            bob.call(
                "POST",
                &format!("/api/v1/projects/absent/roles/{role}/token"),
                Some(json!({})),
            )
            .await,
            "create token",
        );
        same(
            bob.call(
                "DELETE",
                &format!("/api/v1/projects/secret/roles/{role}/token/1"),
                None,
            )
            .await,
            bob.call(
                "DELETE",
                &format!("/api/v1/projects/absent/roles/{role}/token/1"),
                None,
            )
            .await,
            "delete token",
        );
    }

    // Someone who may see projects learns that one is missing.
    assert_eq!(admin.get("/api/v1/projects/absent").await.status, 404);
    assert_eq!(
        admin
            .call(
                "POST",
                "/api/v1/projects/secret/roles/nope/token",
                Some(json!({}))
            )
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn updates_need_rights_on_the_clusters_and_repositories_they_add_or_remove() {
    let (server, _config) = start(
        "  policy.csv: |\n    \
         p, bob, projects, get, p3, allow\n    \
         p, bob, projects, update, p3, allow\n    \
         p, bob, repositories, update, https://allowed.example/*, allow\n    \
         p, bob, clusters, update, https://allowed-cluster.example, allow\n",
    );
    let admin = Rest::login(&server, "admin").await;
    admin
        .ok(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": {
                "metadata": {"name": "p3"},
                "spec": {
                    "sourceRepos": ["https://allowed.example/a"],
                    "destinations": [{"server": "https://allowed-cluster.example", "namespace": "*"}]
                }
            }})),
        )
        .await;
    let bob = Rest::login(&server, "bob").await;
    let r = bob
        .call(
            "POST",
            "/api/v1/projects",
            Some(json!({"project": open_project("p4", json!([]))})),
        )
        .await;
    assert_eq!(r.status, 403, "bob may not create projects: {r:?}");
    assert_eq!(names(&bob.ok("GET", "/api/v1/projects", None).await), ["p3"]);

    let put = |change: fn(&mut Value)| {
        let bob = &bob;
        async move {
            let mut p = bob.ok("GET", "/api/v1/projects/p3", None).await;
            change(&mut p);
            bob.call("PUT", "/api/v1/projects/p3", Some(json!({"project": p})))
                .await
        }
    };
    let r = put(|p| p["spec"]["description"] = json!("only words")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r =
        put(|p| p["spec"]["sourceRepos"] = json!(["https://allowed.example/a", "https://other.example/x"]))
            .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        message(&r).contains("repositories, update, https://other.example/x"),
        "{r:?}"
    );
    let r = put(|p| p["spec"]["sourceRepos"] = json!(["https://allowed.example/b"])).await;
    assert_eq!(r.status, 200, "adds b, removes a, both allowed: {r:?}");
    let r = put(|p| {
        p["spec"]["destinations"] = json!([
            {"server": "https://allowed-cluster.example", "namespace": "*"},
            {"server": "https://other-cluster.example", "namespace": "*"}
        ])
    })
    .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        message(&r).contains("clusters, update, https://other-cluster.example"),
        "{r:?}"
    );
    let whitelist =
        |p: &mut Value| p["spec"]["clusterResourceWhitelist"] = json!([{"group": "", "kind": "Namespace"}]);
    let r = put(whitelist).await;
    assert_eq!(r.status, 200, "every destination is bob's: {r:?}");

    // Once the project also deploys to a cluster bob may not update, changing what may be
    // deployed needs that cluster too.
    let mut p = admin.ok("GET", "/api/v1/projects/p3", None).await;
    p["spec"]["destinations"] = json!([
        {"server": "https://allowed-cluster.example", "namespace": "*"},
        {"server": "https://other-cluster.example", "namespace": "*"}
    ]);
    admin
        .ok("PUT", "/api/v1/projects/p3", Some(json!({"project": p})))
        .await;
    let r = put(|p| p["spec"]["clusterResourceWhitelist"] = json!([])).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        message(&r).contains("clusters, update, https://other-cluster.example"),
        "{r:?}"
    );
}
