//! {TLS, --insecure} × {HTTP/1.1, HTTP/2} × {REST, gRPC, gRPC-Web binary,
//! gRPC-Web text, UI, SPA deep link}, and one HTTP/2 connection carrying
//! gRPC, REST and UI requests together.

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;

use crate::support::TestServer;
use crate::support::client::{
    self, Proto, connect, get, grpc_frame, grpc_request, grpc_web_frames, version_field,
};

const VERSION: &str = concat!("v3.4.0+tiphys.", env!("CARGO_PKG_VERSION"));

async fn check_all(server: &TestServer, tls: bool, proto: Proto) {
    let scheme = if tls { "https" } else { "http" };
    let base = format!("{scheme}://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), tls, proto).await;
    let label = format!("tls={tls} {proto:?}");
    let expected_version = if proto == Proto::H2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };

    let rest = conn.send(get(&format!("{base}/api/version"))).await;
    assert_eq!(rest.status, 200, "{label} REST");
    assert_eq!(rest.version, expected_version, "{label}");
    assert_eq!(rest.text(), format!("{{\"Version\":\"{VERSION}\"}}"), "{label}");
    assert!(
        rest.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );

    let settings = conn.send(get(&format!("{base}/api/v1/settings"))).await;
    assert_eq!(settings.status, 200, "{label} settings");
    let json: serde_json::Value = serde_json::from_slice(&settings.body).unwrap();
    assert!(
        json["help"].is_object() && json["googleAnalytics"].is_object(),
        "{label}: {json}"
    );

    // gRPC-Web, binary and text, over both HTTP versions.
    for (ct, text) in [
        ("application/grpc-web+proto", false),
        ("application/grpc-web-text", true),
    ] {
        let frame = grpc_frame(&[]);
        let body = if text {
            Bytes::from(base64::engine::general_purpose::STANDARD.encode(&frame))
        } else {
            frame
        };
        let web = conn
            .send(grpc_request(
                &format!("{base}/version.VersionService/Version"),
                ct,
                body,
            ))
            .await;
        assert_eq!(web.status, 200, "{label} {ct}");
        let (messages, trailer) = grpc_web_frames(&web.body, text);
        assert_eq!(version_field(&messages[0]), VERSION, "{label} {ct}");
        assert!(trailer.contains("grpc-status:0"), "{label} {ct}: {trailer:?}");
    }

    let ui = conn.send(get(&format!("{base}/"))).await;
    assert_eq!(ui.status, 200, "{label} UI");
    assert!(ui.text().contains("<base href=\"/\""), "{label}");
    assert!(
        ui.header("content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );

    let deep = client::request("GET", &format!("{base}/applications/argocd/guestbook"))
        .header("accept", "text/html,application/xhtml+xml")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let deep = conn.send(deep).await;
    assert_eq!(deep.status, 200, "{label} SPA deep link");
    assert!(deep.text().contains("<div id=\"app\">"), "{label}");
    let missing = conn
        .send(get(&format!("{base}/applications/argocd/guestbook")))
        .await;
    assert_eq!(
        missing.status, 404,
        "{label}: a non-HTML request gets no index.html"
    );

    let api_404 = conn.send(get(&format!("{base}/api/v1/nothing-here"))).await;
    assert_eq!(api_404.status, 404);
    let err: serde_json::Value = serde_json::from_slice(&api_404.body).unwrap();
    assert_eq!(err["code"], 5, "{label}: {err}");

    if proto == Proto::H2 {
        let grpc = conn
            .send(grpc_request(
                &format!("{base}/version.VersionService/Version"),
                "application/grpc",
                grpc_frame(&[]),
            ))
            .await;
        assert_eq!(grpc.grpc_status().as_deref(), Some("0"), "{label} native gRPC");
        assert_eq!(version_field(&grpc.body[5..]), VERSION);
    }
}

#[tokio::test]
async fn tls_mode_serves_every_protocol_over_h1_and_h2() {
    let server = TestServer::start(&[]);
    check_all(&server, true, Proto::H1).await;
    check_all(&server, true, Proto::H2).await;
}

#[tokio::test]
async fn insecure_mode_serves_every_protocol_over_h1_and_h2c() {
    let server = TestServer::start(&["--insecure"]);
    check_all(&server, false, Proto::H1).await;
    check_all(&server, false, Proto::H2).await;
}

#[tokio::test]
async fn one_http2_connection_carries_grpc_rest_and_ui_concurrently() {
    let server = TestServer::start(&[]);
    let base = format!("https://127.0.0.1:{}", server.port);
    let client::Conn::H2(send) = connect(server.addr(), true, Proto::H2).await else {
        unreachable!()
    };
    let mut tasks = Vec::new();
    for i in 0..30 {
        let mut conn = client::Conn::H2(send.clone());
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            match i % 3 {
                0 => {
                    let r = conn
                        .send(grpc_request(
                            &format!("{base}/version.VersionService/Version"),
                            "application/grpc",
                            grpc_frame(&[]),
                        ))
                        .await;
                    r.grpc_status() == Some("0".into())
                }
                1 => conn.send(get(&format!("{base}/api/version"))).await.status == 200,
                _ => conn
                    .send(get(&format!("{base}/")))
                    .await
                    .text()
                    .contains("<div id=\"app\">"),
            }
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap());
    }
}

#[tokio::test]
async fn unknown_grpc_method_is_unimplemented_never_html() {
    let server = TestServer::start(&["--insecure"]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H2).await;
    for path in ["/version.VersionService/Nope", "/no.Such/Method"] {
        let req = grpc_request(
            &format!("{base}{path}"),
            "application/grpc+proto",
            grpc_frame(&[]),
        );
        let mut req = req;
        req.headers_mut().insert("accept", "text/html".parse().unwrap());
        let r = conn.send(req).await;
        assert_eq!(r.grpc_status().as_deref(), Some("12"), "{path}");
        assert!(!r.header("content-type").unwrap_or_default().contains("html"));
    }
    let mut h1 = connect(server.addr(), false, Proto::H1).await;
    let web = h1
        .send(grpc_request(
            &format!("{base}/no.Such/Method"),
            "application/grpc-web+proto",
            grpc_frame(&[]),
        ))
        .await;
    assert_eq!(web.grpc_status().as_deref(), Some("12"));
}

#[tokio::test]
async fn grpc_over_http1_gets_a_grpc_shaped_error_naming_grpc_web() {
    let server = TestServer::start(&["--insecure"]);
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    let r = conn
        .send(grpc_request(
            &format!("http://127.0.0.1:{}/version.VersionService/Version", server.port),
            "application/grpc",
            grpc_frame(&[]),
        ))
        .await;
    assert_eq!(r.grpc_status().as_deref(), Some("14"));
    assert!(r.grpc_message().contains("--grpc-web"), "{}", r.grpc_message());
    assert!(r.header("content-type").unwrap().starts_with("application/grpc"));
}

#[tokio::test]
async fn metrics_count_requests_by_protocol() {
    let server = TestServer::start(&["--insecure"]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H2).await;
    conn.send(get(&format!("{base}/api/version"))).await;
    conn.send(grpc_request(
        &format!("{base}/version.VersionService/Version"),
        "application/grpc",
        grpc_frame(&[]),
    ))
    .await;
    let metrics_addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.metrics_port));
    let mut m = connect(metrics_addr, false, Proto::H1).await;
    let text = m
        .send(get(&format!("http://{metrics_addr}/metrics")))
        .await
        .text();
    assert!(
        text.contains("tiphys_requests_total{protocol=\"rest\",outcome=\"success\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tiphys_requests_total{protocol=\"grpc\",outcome=\"success\"} 1"),
        "{text}"
    );
}
