//! Rate limits through the whole dispatcher, on every transport: a signed-in caller's writes
//! and reads have buckets of their own, a refusal is 429 / RESOURCE_EXHAUSTED naming its keys,
//! and a refused login leaves one audit line. (The bucket arithmetic, with a paused clock, is
//! tested beside it in `src/auth/buckets.rs` and `src/auth/rate_limits.rs`.)

use http::StatusCode;
use serde_json::{Value, json};

use crate::support::{Logs, Server};

const LIMITS: &str = "  tiphys.ratelimit.write.burst: \"2\"\n  tiphys.ratelimit.write.rate: \"0.001\"\n  \
                      tiphys.ratelimit.login.burst: \"1\"\n  tiphys.ratelimit.login.rate: \"0.001\"\n";

#[tokio::test]
async fn writes_over_their_limit_are_refused_on_every_transport() {
    let server = Server::open(LIMITS, "", &[]).await;
    let admin = server.login("admin");
    let delete = |name: &str| format!("/api/v1/applications/{name}");
    for name in ["a", "b"] {
        let (status, _) = server.rest("DELETE", &delete(name), &admin, Value::Null).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, body) = server.rest("DELETE", &delete("c"), &admin, Value::Null).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["code"], 8);
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("write requests are limited to 2 at once and 0.001 a second per caller"),
        "{message}"
    );
    let method = "/application.ApplicationService/Delete";
    let (status, message, _) = server.grpc(method, &admin, &[]).await;
    assert_eq!(status, "8", "{message}");
    assert!(message.contains("tiphys.ratelimit.write"), "{message}");
    let (status, message) = server.grpc_web(method, &admin, &[]).await;
    assert_eq!(status, "8", "{message}");
    // Reads are another bucket.
    let (status, _) = server
        .rest("GET", "/api/v1/applications", &admin, Value::Null)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        server
            .server
            .app
            .auth
            .rate_limits
            .refused(tiphys::config::rate_limits::Class::Write),
        3
    );
}

#[tokio::test]
async fn a_refused_login_is_audited_once() {
    let server = Server::open(LIMITS, "", &[]).await;
    let logs = Logs::default();
    let _guard = logs.capture();
    let login = json!({"username": "admin", "password": "wrong"});
    let (status, _) = server.rest("POST", "/api/v1/session", "", login.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = server.rest("POST", "/api/v1/session", "", login).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let lines = logs.of("audit");
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| l["fields"]["result"] == "ResourceExhausted")
        .collect();
    assert_eq!(refused.len(), 1, "{lines:?}");
    let fields = &refused[0]["fields"];
    assert_eq!(fields["method"], "/session.SessionService/Create");
    assert_eq!(fields["client"], "127.0.0.1");
    assert_eq!(fields["object"], "");
    assert!(
        fields["reason"]
            .as_str()
            .unwrap()
            .contains("tiphys.ratelimit.login"),
        "{fields}"
    );
}
