//! The account, session, settings and version services through the method table, over REST
//! and gRPC alike.

use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use prost::Message as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;

use crate::support::Server;

#[tokio::test]
async fn version_tells_anonymous_callers_only_the_version_on_both_transports() {
    let server = Server::open("", "", &[]).await;
    let (status, anonymous) = server.rest("GET", "/api/version", "", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        anonymous.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["Version"]
    );
    let admin = server.login("admin");
    let (_, known) = server.rest("GET", "/api/version", &admin, Value::Null).await;
    assert_eq!(known["ExtraBuildInfo"], "tiphys");
    // The build facts upstream sends a signed-in caller (empty ones are left out).
    assert_eq!(known["BuildDate"], tiphys::buildinfo::BUILD_DATE);
    assert!(!tiphys::buildinfo::BUILD_DATE.is_empty());
    for (field, fact) in [
        ("GitCommit", tiphys::buildinfo::GIT_COMMIT),
        ("GitTreeState", tiphys::buildinfo::GIT_TREE_STATE),
    ] {
        assert_eq!(
            known.get(field).and_then(Value::as_str).unwrap_or(""),
            fact,
            "{known}"
        );
    }

    let (code, _, bytes) = server.grpc("/version.VersionService/Version", "", &[]).await;
    assert_eq!(code, "0");
    let message = tiphys::pb::version::VersionMessage::decode(bytes.as_slice()).unwrap();
    assert_eq!(message.version, anonymous["Version"]);
    assert!(message.compiler.is_empty());
    let (_, _, bytes) = server.grpc("/version.VersionService/Version", &admin, &[]).await;
    let message = tiphys::pb::version::VersionMessage::decode(bytes.as_slice()).unwrap();
    assert_eq!(message.extra_build_info, "tiphys");
    assert_eq!(message.build_date, tiphys::buildinfo::BUILD_DATE);
    assert_eq!(message.git_commit, tiphys::buildinfo::GIT_COMMIT);
    assert_eq!(message.git_tree_state, tiphys::buildinfo::GIT_TREE_STATE);
}

#[tokio::test]
async fn settings_carry_the_objects_the_dashboard_reads_on_both_transports() {
    let server = Server::open("  url: https://cd.example.com\n", "", &[]).await;
    let (status, settings) = server.rest("GET", "/api/v1/settings", "", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    for object in ["googleAnalytics", "help", "kustomizeOptions"] {
        assert!(settings[object].is_object(), "{object}: {settings}");
    }
    assert_eq!(settings["url"], "https://cd.example.com");
    let (code, message, bytes) = server.grpc("/cluster.SettingsService/Get", "", &[]).await;
    assert_eq!(code, "0", "{message}");
    let message = tiphys::pb::cluster::Settings::decode(bytes.as_slice()).unwrap();
    assert_eq!(message.url, "https://cd.example.com");
    assert!(message.help.is_some());
    // Plugins need a caller.
    let (status, _) = server
        .rest("GET", "/api/v1/settings/plugins", "", Value::Null)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn can_i_takes_the_rest_of_the_path_as_the_object_or_none() {
    let server = Server::open(
        "  accounts.alice: login\n",
        "  policy.csv: |\n    p, alice, applications, get, default/*, allow\n",
        &[],
    )
    .await;
    let alice = server.login("alice");
    for (path, want) in [
        ("/api/v1/account/can-i/applications/get/default/guestbook", "yes"),
        ("/api/v1/account/can-i/applications/get/other/guestbook", "no"),
        ("/api/v1/account/can-i/applications/sync/default/guestbook", "no"),
        ("/api/v1/account/can-i/applications/get", "no"),
        ("/api/v1/account/can-i/applications/get/", "no"),
    ] {
        let (status, answer) = server.rest("GET", path, &alice, Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{path}: {answer}");
        assert_eq!(answer, json!({"value": want}), "{path}");
    }
    let (status, answer) = server
        .rest("GET", "/api/v1/account/can-i/nonsense/get/x", &alice, Value::Null)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
}

#[tokio::test]
async fn login_sets_the_session_cookie_and_logout_clears_it() {
    let server = Server::open("", "", &[]).await;
    let password = std::fs::read_to_string(server.dir.path().join("data/initial-admin-password")).unwrap();
    let login = Request::builder()
        .method("POST")
        .uri("/api/v1/session")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(
            json!({"username": "admin", "password": password.trim()}).to_string(),
        ))
        .unwrap();
    let response = server.server.clone().oneshot(login).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cookie = response.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.starts_with("argocd.token="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("Secure"),
        "{cookie}"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let token = serde_json::from_slice::<Value>(&body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(cookie.split(';').next().unwrap(), format!("argocd.token={token}"));

    let logout = Request::builder()
        .method("DELETE")
        .uri("/api/v1/session")
        .header("cookie", format!("argocd.token={token}"))
        .header("content-type", "application/json")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = server.server.clone().oneshot(logout).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let cleared = response.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.starts_with("argocd.token=;"), "{cleared}");
    assert!(cleared.split("; ").any(|a| a == "Max-Age=0"), "{cleared}");
    let (status, _) = server.rest("GET", "/api/v1/account", &token, Value::Null).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the session ended");
}

#[tokio::test]
async fn credentials_are_never_taken_from_the_query_string() {
    let server = Server::open("", "", &[]).await;
    let password = std::fs::read_to_string(server.dir.path().join("data/initial-admin-password")).unwrap();
    let path = format!("/api/v1/session?username=admin&password={}", password.trim());
    let (status, answer) = server.rest("POST", &path, "", json!({})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{answer}");
    assert_eq!(answer["message"], "no credentials supplied");
    // The same in the body logs in.
    let body = json!({"username": "admin", "password": password.trim()});
    let (status, answer) = server.rest("POST", "/api/v1/session", "", body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}
