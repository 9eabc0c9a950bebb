//! `cluster.ClusterService` over REST against the real server: the built-in in-cluster
//! destination, create/get/update/delete by URL (escaped in one path segment) and by name,
//! credentials never in an answer nor in the log (SEC-16/17/18), identical answers for
//! missing and forbidden clusters (SEC-14), and updates checked on the stored and the
//! resulting object (SEC-15).

use base64::Engine as _;
use serde_json::{Value, json};

use crate::credentials_api::{Rest, assert_not_logged, enc, items_field, secret, start};

const IN_CLUSTER: &str = "https://kubernetes.default.svc";
const PROD: &str = "https://10.0.0.1:6443";
/// `PROD` as the UI puts it in a path (`encodeURIComponent`).
const PROD_PATH: &str = "/api/v1/clusters/https%3A%2F%2F10.0.0.1%3A6443";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A cluster with every kind of credential set to `secret`.
fn cluster(server: &str, name: &str, secret: &str) -> Value {
    json!({
        "server": server,
        "name": name,
        "config": {
            "username": "admin",
            "password": secret,
            "bearerToken": secret,
            "tlsClientConfig": {
                "insecure": false,
                "serverName": "api.internal",
                "certData": b64("-----BEGIN CERTIFICATE-----"),
                "keyData": b64(secret),
                "caData": b64("-----BEGIN CERTIFICATE----- ca")
            },
            "execProviderConfig": {"command": "get-token", "args": ["--token", secret], "env": {"TOKEN": secret}},
            "awsAuthConfig": {"clusterName": "eks", "roleARN": "arn:aws:iam::1:role/x"}
        },
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!("{{\"password\":\"{secret}\"}}")}
    })
}

#[track_caller]
fn assert_cluster_shape(item: &Value) {
    for field in ["server", "name"] {
        assert!(item[field].is_string(), "{field}: {item}");
    }
    assert!(item["config"].is_object(), "{item}");
    let state = &item["info"]["connectionState"];
    assert!(state["status"].is_string(), "{item}");
    assert!(state["message"].is_string(), "{item}");
    // tiphys attempts no connection: no time, and never `null`.
    assert!(!state.as_object().unwrap().contains_key("attemptedAt"), "{item}");
    assert!(item["info"]["applicationsCount"].is_number(), "{item}");
}

#[tokio::test]
async fn clusters_crud_over_rest_never_answers_credentials() {
    let secret = secret();
    let (server, _config) = start(&[], &[], "");
    let admin = Rest::login(&server, "admin").await;

    // The in-cluster destination is there without being stored.
    let list = admin.ok("GET", "/api/v1/clusters", None).await;
    assert_eq!(items_field(&list, "server"), [IN_CLUSTER], "{list}");
    assert_eq!(list["items"][0]["name"], "in-cluster");
    assert_cluster_shape(&list["items"][0]);
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    let got = admin
        .ok("GET", &format!("/api/v1/clusters/{}", enc(IN_CLUSTER)), None)
        .await;
    assert_eq!(got["name"], "in-cluster");
    let got = admin
        .ok("GET", "/api/v1/clusters/in-cluster?id.type=name", None)
        .await;
    assert_eq!(got["server"], IN_CLUSTER);

    // Create: the answer has the cluster, not its credentials.
    let body = cluster(PROD, "prod", &secret);
    let created = admin.ok("POST", "/api/v1/clusters", Some(&body)).await;
    assert_eq!(created["server"], PROD);
    assert_eq!(created["name"], "prod");
    assert_cluster_shape(&created);
    // What upstream's Cluster.Sanitized leaves of the config, and nothing else.
    assert_eq!(
        created["config"],
        json!({"tlsClientConfig": {"insecure": false}, "awsAuthConfig": {"clusterName": "eks", "roleARN": "arn:aws:iam::1:role/x"}}),
        "{created}"
    );
    assert!(created["annotations"].is_null(), "{created}");

    // Get by escaped URL, by name, by escaped name.
    let got = admin.ok("GET", PROD_PATH, None).await;
    assert_eq!(got["name"], "prod");
    assert_cluster_shape(&got);
    let got = admin.ok("GET", "/api/v1/clusters/prod?id.type=name", None).await;
    assert_eq!(got["server"], PROD);
    let got = admin
        .ok("GET", "/api/v1/clusters/prod?id.type=name_escaped", None)
        .await;
    assert_eq!(got["server"], PROD);
    let list = admin.ok("GET", "/api/v1/clusters", None).await;
    assert_eq!(items_field(&list, "server"), [PROD, IN_CLUSTER], "{list}");
    let list = admin.ok("GET", "/api/v1/clusters?name=prod", None).await;
    assert_eq!(items_field(&list, "server"), [PROD], "{list}");

    // Create again: identical is fine, different needs upsert.
    admin.ok("POST", "/api/v1/clusters", Some(&body)).await;
    let mut changed = body.clone();
    changed["config"]["bearerToken"] = Value::from(format!("{secret}-2"));
    let r = admin
        .expect(400, "POST", "/api/v1/clusters", Some(&changed))
        .await;
    assert!(r.body["error"].as_str().unwrap().contains("upsert"), "{r:?}");
    admin
        .ok("POST", "/api/v1/clusters?upsert=true", Some(&changed))
        .await;

    // A second cluster cannot take the name.
    let r = admin
        .expect(
            409,
            "POST",
            "/api/v1/clusters",
            Some(&cluster("https://10.0.0.2", "prod", &secret)),
        )
        .await;
    assert!(r.text.contains("prod"), "{r:?}");

    // Partial update: only the named fields change.
    let updated = admin
        .ok(
            "PUT",
            &format!("{PROD_PATH}?updatedFields=namespaces&updatedFields=labels"),
            Some(&json!({"namespaces": ["web", "db"], "labels": {"env": "prod"}, "name": "ignored"})),
        )
        .await;
    assert_eq!(updated["namespaces"], json!(["web", "db"]));
    assert_eq!(updated["labels"], json!({"env": "prod"}));
    assert_eq!(updated["name"], "prod");
    // Full update (the body replaces the cluster), renaming it.
    let mut renamed = cluster(PROD, "production", &secret);
    renamed["namespaces"] = json!(["web"]);
    let updated = admin.ok("PUT", PROD_PATH, Some(&renamed)).await;
    assert_eq!(updated["name"], "production");
    assert!(updated.get("labels").is_none(), "{updated}");
    admin
        .expect(
            400,
            "PUT",
            &format!("{PROD_PATH}?updatedFields=server"),
            Some(&json!({})),
        )
        .await;

    // Applications deploying to a cluster are counted.
    let app = json!({
        "metadata": {"name": "guestbook"},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://github.com/example/apps.git", "path": "guestbook"},
            "destination": {"server": PROD, "namespace": "default"}
        }
    });
    admin.ok("POST", "/api/v1/applications", Some(&app)).await;
    let got = admin.ok("GET", PROD_PATH, None).await;
    assert_eq!(got["info"]["applicationsCount"], 1, "{got}");
    let list = admin.ok("GET", "/api/v1/clusters", None).await;
    assert_eq!(list["items"][1]["info"]["applicationsCount"], 0, "{list}");

    // This server contacts no cluster (the harness gives --cluster-access off): the cache has
    // nothing to drop, and auth cannot be rotated, saying why.
    let got = admin
        .ok("POST", &format!("{PROD_PATH}/invalidate-cache"), Some(&json!({})))
        .await;
    assert_eq!(got["server"], PROD);
    let r = admin
        .expect(400, "POST", &format!("{PROD_PATH}/rotate-auth"), Some(&json!({})))
        .await;
    assert!(
        r.body["error"].as_str().unwrap().contains("--cluster-access off"),
        "{r:?}"
    );

    // Refused input, with messages that never quote a password.
    for bad in [
        json!({"server": "ftp://10.0.0.3", "name": "x"}),
        json!({"server": "javascript:alert(1)", "name": "x"}),
        json!({"server": "https://10.0.0.3", "name": ""}),
        json!({"server": "", "name": "x"}),
        json!({"server": format!("https://admin:{secret}@10.0.0.3"), "name": "x"}),
    ] {
        admin.expect(400, "POST", "/api/v1/clusters", Some(&bad)).await;
    }

    // Delete; the built-in cluster is turned off in argocd-cm, not deleted.
    admin.ok("DELETE", PROD_PATH, None).await;
    let r = admin.expect(404, "GET", PROD_PATH, None).await;
    assert!(r.body["error"].is_string(), "{r:?}");
    admin
        .expect(
            400,
            "DELETE",
            &format!("/api/v1/clusters/{}", enc(IN_CLUSTER)),
            None,
        )
        .await;

    admin.assert_never_sent(&secret);
    assert_not_logged(&server, &secret);
}

#[tokio::test]
async fn the_in_cluster_destination_can_be_disabled() {
    let (server, _config) = start(&[], &[], "  cluster.inClusterEnabled: \"false\"\n");
    let admin = Rest::login(&server, "admin").await;
    let list = admin.ok("GET", "/api/v1/clusters", None).await;
    assert_eq!(items_field(&list, "server"), Vec::<&str>::new(), "{list}");
    admin
        .expect(404, "GET", &format!("/api/v1/clusters/{}", enc(IN_CLUSTER)), None)
        .await;
    admin
        .expect(
            400,
            "POST",
            "/api/v1/clusters",
            Some(&json!({"server": IN_CLUSTER, "name": "in-cluster"})),
        )
        .await;
}

#[tokio::test]
async fn missing_and_forbidden_clusters_answer_alike() {
    let secret = secret();
    let (server, _config) = start(
        &["alice"],
        &[
            "p, alice, clusters, get, https://allowed.example, allow",
            "p, alice, clusters, update, https://allowed.example, allow",
            "p, alice, clusters, delete, https://allowed.example, allow",
        ],
        "",
    );
    let admin = Rest::login(&server, "admin").await;
    admin
        .ok(
            "POST",
            "/api/v1/clusters",
            Some(&cluster(PROD, "hidden", &secret)),
        )
        .await;
    admin
        .ok(
            "POST",
            "/api/v1/clusters",
            Some(&cluster("https://allowed.example", "allowed", &secret)),
        )
        .await;
    let alice = Rest::login(&server, "alice").await;

    // Only what alice may see is listed (not even the in-cluster destination).
    let list = alice.ok("GET", "/api/v1/clusters", None).await;
    assert_eq!(items_field(&list, "name"), ["allowed"], "{list}");
    alice
        .ok(
            "GET",
            &format!("/api/v1/clusters/{}", enc("https://allowed.example")),
            None,
        )
        .await;

    // Hidden and missing: same status, same body, by URL and by name, for every verb.
    let pairs = [
        (PROD_PATH, "/api/v1/clusters/https%3A%2F%2F10.0.0.9%3A6443", ""),
        (
            "/api/v1/clusters/hidden",
            "/api/v1/clusters/nowhere",
            "?id.type=name",
        ),
    ];
    for (hidden, missing, query) in pairs {
        for (method, suffix, body) in [
            ("GET", "", None),
            ("DELETE", "", None),
            ("PUT", "", Some(json!({"name": "taken"}))),
            ("POST", "/invalidate-cache", Some(json!({}))),
        ] {
            let a = alice
                .call(method, &format!("{hidden}{suffix}{query}"), body.as_ref())
                .await;
            let b = alice
                .call(method, &format!("{missing}{suffix}{query}"), body.as_ref())
                .await;
            assert_eq!(a.status, 403, "{method} {hidden}{suffix}{query}: {a:?}");
            assert_eq!(
                (a.status, &a.text),
                (b.status, &b.text),
                "{method} {hidden} vs {missing}"
            );
        }
    }

    // SEC-15: an update through the allowed cluster that names the hidden one in its body is
    // refused, and the hidden one is untouched.
    let allowed_path = format!("/api/v1/clusters/{}", enc("https://allowed.example"));
    alice
        .expect(
            403,
            "PUT",
            &allowed_path,
            Some(&json!({"server": PROD, "name": "hijacked"})),
        )
        .await;
    // Moving the allowed cluster to a project alice has no rights in is refused too.
    alice
        .expect(
            403,
            "PUT",
            &format!("{allowed_path}?updatedFields=project"),
            Some(&json!({"project": "other"})),
        )
        .await;
    let hidden = admin.ok("GET", PROD_PATH, None).await;
    assert_eq!(hidden["name"], "hidden");
    // What alice may do, she can.
    let renamed = alice
        .ok(
            "PUT",
            &format!("{allowed_path}?updatedFields=name"),
            Some(&json!({"name": "mine"})),
        )
        .await;
    assert_eq!(renamed["name"], "mine");
    alice.ok("DELETE", &allowed_path, None).await;

    alice.assert_never_sent(&secret);
    admin.assert_never_sent(&secret);
    assert_not_logged(&server, &secret);
}
