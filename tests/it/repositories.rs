//! `repository.RepositoryService` and `repocreds.RepoCredsService` over REST against the real
//! server: CRUD with URLs escaped in one path segment, credential templates inherited by the
//! longest URL prefix, `credsOnly`, schemes other than http(s)/ssh/git refused (SEC-25),
//! secrets never in an answer nor in the log (SEC-17/18), identical answers for missing and
//! forbidden repositories and templates (SEC-14), and what tiphys does not serve.

use serde_json::{Value, json};

use crate::credentials_api::{Rest, assert_not_logged, enc, items_field, secret, start};

const APP_REPO: &str = "https://git.example/team/app.git";
const OWN_REPO: &str = "https://git.example/other.git";
const TEAM: &str = "https://git.example/team/";
const ORG: &str = "https://git.example/";

fn repo_path(url: &str) -> String {
    format!("/api/v1/repositories/{}", enc(url))
}

fn creds_path(url: &str) -> String {
    format!("/api/v1/repocreds/{}", enc(url))
}

/// Every secret field a repository or template has, set to `secret`.
fn with_secrets(mut value: Value, secret: &str) -> Value {
    for field in [
        "password",
        "sshPrivateKey",
        "tlsClientCertKey",
        "githubAppPrivateKey",
        "gcpServiceAccountKey",
        "bearerToken",
        "azureServicePrincipalClientSecret",
    ] {
        value[field] = Value::from(secret);
    }
    value
}

fn find<'a>(list: &'a Value, field: &str, value: &str) -> &'a Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i[field] == value))
        .unwrap_or_else(|| panic!("no item with {field} {value}: {list}"))
}

#[tokio::test]
async fn repositories_and_templates_crud_never_answers_secrets() {
    let secret = secret();
    let (server, _config) = start(&[], &[], "");
    let admin = Rest::login(&server, "admin").await;

    // Two templates: the longer prefix wins.
    let org = with_secrets(json!({"url": ORG, "username": "org-bot"}), &secret);
    let created = admin.ok("POST", "/api/v1/repocreds", Some(&org)).await;
    assert_eq!(created["url"], ORG);
    assert_eq!(created["username"], "org-bot");
    let team = with_secrets(json!({"url": TEAM, "username": "team-bot"}), &secret);
    admin.ok("POST", "/api/v1/repocreds", Some(&team)).await;

    // A repository without credentials inherits them; one with its own does not.
    let created = admin
        .ok("POST", "/api/v1/repositories", Some(&json!({"repo": APP_REPO})))
        .await;
    assert_eq!(created["repo"], APP_REPO);
    assert_eq!(created["inheritedCreds"], true, "{created}");
    assert_eq!(created["username"], "team-bot");
    assert_eq!(created["type"], "git");
    assert!(created["connectionState"]["status"].is_string(), "{created}");
    let own = with_secrets(
        json!({"repo": OWN_REPO, "username": "me", "type": "git"}),
        &secret,
    );
    let created = admin.ok("POST", "/api/v1/repositories", Some(&own)).await;
    assert!(created.get("inheritedCreds").is_none(), "{created}");
    assert_eq!(created["username"], "me");

    let list = admin.ok("GET", "/api/v1/repositories", None).await;
    let mut repos = items_field(&list, "repo");
    repos.sort_unstable();
    assert_eq!(repos, [OWN_REPO, APP_REPO]);
    assert_eq!(find(&list, "repo", APP_REPO)["inheritedCreds"], true);
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    let list = admin
        .ok(
            "GET",
            &format!("/api/v1/repositories?repo={}", enc(APP_REPO)),
            None,
        )
        .await;
    assert_eq!(items_field(&list, "repo"), [APP_REPO]);

    // Get by URL escaped in one segment.
    let got = admin.ok("GET", &repo_path(APP_REPO), None).await;
    assert_eq!(got["repo"], APP_REPO);
    assert_eq!(got["inheritedCreds"], true);
    let got = admin.ok("GET", &repo_path(OWN_REPO), None).await;
    assert_eq!(got["username"], "me");

    // Create again: identical is fine, different needs upsert.
    admin.ok("POST", "/api/v1/repositories", Some(&own)).await;
    let mut changed = own.clone();
    changed["password"] = Value::from(format!("{secret}-2"));
    let r = admin
        .expect(400, "POST", "/api/v1/repositories", Some(&changed))
        .await;
    assert!(r.body["error"].as_str().unwrap().contains("upsert"), "{r:?}");
    admin
        .ok("POST", "/api/v1/repositories?upsert=true", Some(&changed))
        .await;

    // Update replaces the repository.
    let updated = admin
        .ok(
            "PUT",
            &repo_path(APP_REPO),
            Some(&json!({"repo": APP_REPO, "name": "app", "type": "helm", "project": "default"})),
        )
        .await;
    assert_eq!(updated["name"], "app");
    assert_eq!(updated["type"], "helm");
    assert_eq!(updated["project"], "default");
    assert_eq!(updated["inheritedCreds"], true);

    // Templates: list, filter, update, delete; the next-longest prefix takes over.
    let list = admin.ok("GET", "/api/v1/repocreds", None).await;
    let mut urls = items_field(&list, "url");
    urls.sort_unstable();
    assert_eq!(urls, [ORG, TEAM]);
    let list = admin
        .ok("GET", &format!("/api/v1/repocreds?url={}", enc(TEAM)), None)
        .await;
    assert_eq!(items_field(&list, "url"), [TEAM]);
    let updated = admin
        .ok(
            "PUT",
            &creds_path(TEAM),
            Some(&with_secrets(json!({"username": "team-bot-2"}), &secret)),
        )
        .await;
    assert_eq!(updated["url"], TEAM);
    assert_eq!(updated["username"], "team-bot-2");
    assert_eq!(
        admin.ok("GET", &repo_path(APP_REPO), None).await["username"],
        "team-bot-2"
    );
    admin.ok("DELETE", &creds_path(TEAM), None).await;
    let got = admin.ok("GET", &repo_path(APP_REPO), None).await;
    assert_eq!(got["inheritedCreds"], true);
    assert_eq!(got["username"], "org-bot");
    admin.expect(404, "DELETE", &creds_path(TEAM), None).await;
    admin
        .expect(404, "PUT", &creds_path(TEAM), Some(&json!({"username": "x"})))
        .await;

    // credsOnly stores a template for the URL, not a repository.
    let creds_only = with_secrets(
        json!({"repo": "https://creds.example/", "username": "c"}),
        &secret,
    );
    let answered = admin
        .ok("POST", "/api/v1/repositories?credsOnly=true", Some(&creds_only))
        .await;
    assert_eq!(answered["repo"], "https://creds.example/");
    let list = admin
        .ok(
            "GET",
            &format!("/api/v1/repocreds?url={}", enc("https://creds.example/")),
            None,
        )
        .await;
    assert_eq!(items_field(&list, "username"), ["c"], "{list}");
    admin
        .expect(404, "GET", &repo_path("https://creds.example/"), None)
        .await;

    // Schemes other than http(s), ssh and git are refused, and URLs with a password.
    for bad in [
        "javascript:alert(1)",
        "JavaScript:alert(document.cookie)",
        "file:///etc/passwd",
        "data:text/html,<script>alert(1)</script>",
    ] {
        admin
            .expect(400, "POST", "/api/v1/repositories", Some(&json!({"repo": bad})))
            .await;
        admin
            .expect(400, "POST", "/api/v1/repocreds", Some(&json!({"url": bad})))
            .await;
    }
    let with_password = format!("https://bot:{secret}@git.example/x.git");
    admin
        .expect(
            400,
            "POST",
            "/api/v1/repositories",
            Some(&json!({"repo": with_password})),
        )
        .await;
    admin
        .expect(
            400,
            "POST",
            "/api/v1/repocreds",
            Some(&json!({"url": with_password})),
        )
        .await;
    admin
        .ok(
            "POST",
            "/api/v1/repositories",
            Some(&json!({"repo": "git@github.com:example/app.git"})),
        )
        .await;

    // This server contacts no repository (the harness gives --repo-access off): what would be
    // read from one is refused, and says why.
    let off = "this server does not contact repositories (--repo-access off)";
    let r = admin
        .expect(
            400,
            "POST",
            &format!("{}/validate", repo_path(APP_REPO)),
            Some(&json!(APP_REPO)),
        )
        .await;
    assert_eq!(
        (r.body["code"].as_i64(), r.body["error"].as_str()),
        (Some(9), Some(off)),
        "{r:?}"
    );
    // Authentication comes first: a caller without a session learns nothing of what is served.
    let anonymous = Rest::anonymous(&server);
    let r = anonymous
        .expect(401, "GET", &format!("{}/refs", repo_path(APP_REPO)), None)
        .await;
    assert_eq!(r.body["code"], 16, "{r:?}");
    // Operations upstream has and tiphys does not serve: declared, so not a bare 404.
    anonymous.expect(401, "GET", "/api/v1/gpgkeys", None).await;
    for sub in ["apps?appProject=default&appName=x", "refs", "helmcharts"] {
        let r = admin
            .expect(400, "GET", &format!("{}/{sub}", repo_path(APP_REPO)), None)
            .await;
        assert_eq!(r.body["error"].as_str(), Some(off), "{sub}: {r:?}");
    }
    let r = admin
        .expect(501, "GET", &format!("{}/oci-tags", repo_path(APP_REPO)), None)
        .await;
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .starts_with("repository.RepositoryService/ListOCITags is not served by tiphys: "),
        "{r:?}"
    );
    // Write repositories are a registry of their own, with the same redaction.
    let writes = admin.ok("GET", "/api/v1/write-repositories", None).await;
    // An empty list is `[]`, never `null` (issue 22: generated clients refuse `null`).
    assert_eq!(writes["items"], json!([]), "{writes}");
    admin
        .ok(
            "POST",
            "/api/v1/write-repositories",
            Some(&with_secrets(json!({"repo": APP_REPO, "username": "u"}), &secret)),
        )
        .await;
    let writes = admin.ok("GET", "/api/v1/write-repositories", None).await;
    assert_eq!(writes["items"][0]["repo"], APP_REPO, "{writes}");
    admin
        .ok(
            "DELETE",
            &format!("/api/v1/write-repositories/{}", enc(APP_REPO)),
            None,
        )
        .await;

    // Delete.
    admin.ok("DELETE", &repo_path(APP_REPO), None).await;
    admin.expect(404, "GET", &repo_path(APP_REPO), None).await;
    admin.expect(404, "DELETE", &repo_path(APP_REPO), None).await;

    admin.assert_never_sent(&secret);
    assert_not_logged(&server, &secret);
}

#[tokio::test]
async fn missing_and_forbidden_repositories_and_templates_answer_alike() {
    let secret = secret();
    let (server, _config) = start(
        &["alice"],
        &[
            "p, alice, repositories, get, https://git.example/allowed.git, allow",
            "p, alice, repositories, update, https://git.example/allowed.git, allow",
        ],
        "",
    );
    let admin = Rest::login(&server, "admin").await;
    for repo in [
        "https://git.example/allowed.git",
        "https://git.example/hidden.git",
    ] {
        admin
            .ok(
                "POST",
                "/api/v1/repositories",
                Some(&with_secrets(json!({"repo": repo, "username": "u"}), &secret)),
            )
            .await;
    }
    admin
        .ok(
            "POST",
            "/api/v1/repositories",
            Some(&json!({"repo": "https://git.example/scoped.git", "project": "default"})),
        )
        .await;
    admin
        .ok(
            "POST",
            "/api/v1/repocreds",
            Some(&with_secrets(json!({"url": "https://hidden.example/"}), &secret)),
        )
        .await;
    let alice = Rest::login(&server, "alice").await;

    let list = alice.ok("GET", "/api/v1/repositories", None).await;
    assert_eq!(
        items_field(&list, "repo"),
        ["https://git.example/allowed.git"],
        "{list}"
    );
    let list = alice.ok("GET", "/api/v1/repocreds", None).await;
    assert_eq!(list["items"], json!([]), "{list}");

    for (hidden, missing) in [
        (
            "https://git.example/hidden.git",
            "https://git.example/missing.git",
        ),
        (
            "https://git.example/scoped.git",
            "https://git.example/missing.git",
        ),
    ] {
        for (method, body) in [
            ("GET", None),
            ("DELETE", None),
            ("PUT", Some(json!({"repo": hidden}))),
        ] {
            let body_for = |url: &str| body.as_ref().map(|_| json!({"repo": url}));
            let a = alice
                .call(method, &repo_path(hidden), body_for(hidden).as_ref())
                .await;
            let b = alice
                .call(method, &repo_path(missing), body_for(missing).as_ref())
                .await;
            assert_eq!(a.status, 403, "{method} {hidden}: {a:?}");
            assert_eq!((a.status, &a.text), (b.status, &b.text), "{method} {hidden}");
        }
    }
    for (method, body) in [("DELETE", None), ("PUT", Some(json!({"username": "x"})))] {
        let a = alice
            .call(method, &creds_path("https://hidden.example/"), body.as_ref())
            .await;
        let b = alice
            .call(method, &creds_path("https://missing.example/"), body.as_ref())
            .await;
        assert_eq!(a.status, 403, "{method}: {a:?}");
        assert_eq!((a.status, &a.text), (b.status, &b.text), "{method}");
    }

    // Moving the allowed repository into a project alice has no rights in is refused.
    alice
        .expect(
            403,
            "PUT",
            &repo_path("https://git.example/allowed.git"),
            Some(&json!({"repo": "https://git.example/allowed.git", "project": "default"})),
        )
        .await;
    alice
        .ok(
            "PUT",
            &repo_path("https://git.example/allowed.git"),
            Some(&json!({"repo": "https://git.example/allowed.git", "name": "renamed"})),
        )
        .await;

    alice.assert_never_sent(&secret);
    admin.assert_never_sent(&secret);
    assert_not_logged(&server, &secret);
}
