//! Refusals over raw HTTP/2 (the `h2` crate): a request refused before its body is read gets
//! its complete status and message, and its stream is then drained, not reset, so the client
//! can finish its upload (curl 7.x reported a reset mid-upload as a stream error and lost the
//! status). Every refusal path, over h2c and TLS, repeated: the old reset was a race.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use tokio::net::TcpStream;

use crate::support::TestServer;
use crate::support::client::{tls_config, tls_connect};

/// Sent before the answer is awaited (more than a caller without a session may send), then
/// the rest: more than the stream's 1 MiB window, so the rest only goes out if the server
/// keeps reading.
const FIRST: usize = 96 * 1024;
const TOTAL: usize = 3 * 1024 * 1024;
const ROUNDS: usize = 30;

struct Case {
    name: &'static str,
    path: &'static str,
    content_type: &'static str,
    token: bool,
    /// Sends `content-length` (as curl and browsers do; gRPC clients do not).
    declared: bool,
    /// The first bytes of the body (a gRPC message's prefix), the rest is filler.
    prefix: Vec<u8>,
    status: u16,
    /// `grpc-status` for gRPC and gRPC-Web.
    grpc: Option<&'static str>,
    message: &'static str,
}

fn grpc_prefix(len: usize) -> Vec<u8> {
    let mut p = vec![0];
    p.extend_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
    p
}

fn cases() -> Vec<Case> {
    let unauthenticated =
        "no session information: without a valid session a request may send at most 65536 bytes";
    vec![
        Case {
            name: "REST, CSRF content type",
            path: "/api/v1/session",
            content_type: "text/plain",
            declared: true,
            token: false,
            prefix: Vec::new(),
            status: 415,
            grpc: None,
            message: "unsupported content type \"text/plain\": use application/json",
        },
        Case {
            name: "REST, unauthenticated and large",
            path: "/api/v1/applications",
            content_type: "application/json",
            declared: true,
            token: false,
            prefix: Vec::new(),
            status: 401,
            grpc: None,
            message: unauthenticated,
        },
        Case {
            name: "REST, unauthenticated and large, no Content-Length",
            path: "/api/v1/applications",
            content_type: "application/json",
            declared: false,
            token: false,
            prefix: Vec::new(),
            status: 401,
            grpc: None,
            message: unauthenticated,
        },
        Case {
            name: "REST, over --max-body-bytes",
            path: "/api/v1/applications",
            content_type: "application/json",
            declared: true,
            token: true,
            prefix: Vec::new(),
            status: 413,
            grpc: None,
            message: "request body is larger than 2097152 bytes (--max-body-bytes)",
        },
        Case {
            name: "UI, a body",
            path: "/applications",
            content_type: "text/plain",
            declared: true,
            token: false,
            prefix: Vec::new(),
            status: 413,
            grpc: None,
            message: "request body is larger than 65536 bytes (the dashboard takes none)",
        },
        Case {
            name: "gRPC, unauthenticated and large",
            path: "/application.ApplicationService/Create",
            content_type: "application/grpc",
            declared: false,
            token: false,
            prefix: grpc_prefix(TOTAL - 5),
            status: 200,
            grpc: Some("16"),
            message: unauthenticated,
        },
        Case {
            name: "gRPC, over --grpc-max-request-bytes",
            path: "/application.ApplicationService/Create",
            content_type: "application/grpc",
            declared: false,
            token: true,
            prefix: grpc_prefix(TOTAL - 5),
            status: 200,
            grpc: Some("8"),
            message: "request message is larger than 1048576 bytes (--grpc-max-request-bytes)",
        },
        Case {
            name: "gRPC-Web, unauthenticated and large",
            path: "/application.ApplicationService/Create",
            content_type: "application/grpc-web+proto",
            declared: false,
            token: false,
            prefix: grpc_prefix(TOTAL - 5),
            status: 200,
            grpc: Some("16"),
            message: unauthenticated,
        },
    ]
}

type Client = h2::client::SendRequest<Bytes>;

async fn connect(addr: SocketAddr, tls: bool) -> Client {
    // The connection drives itself in a task of its own until the test ends.
    if tls {
        let (stream, _) = tls_connect(addr, tls_config(&[b"h2"], rustls::ALL_VERSIONS))
            .await
            .unwrap();
        let (client, conn) = h2::client::handshake(stream).await.unwrap();
        tokio::spawn(conn);
        client
    } else {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        client
    }
}

/// One refused request: the answer (status, grpc-status, message) and whether the whole body
/// could be sent after it, or how the stream ended instead.
async fn refuse(
    client: &mut Client,
    url: &str,
    case: &Case,
    token: &str,
) -> (u16, Option<String>, String, Result<(), String>) {
    let mut req = Request::post(url)
        .header("content-type", case.content_type)
        .header("te", "trailers");
    if case.token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    if case.declared {
        req = req.header("content-length", TOTAL);
    }
    client.clone().ready().await.unwrap();
    let (response, mut body) = client.send_request(req.body(()).unwrap(), false).unwrap();
    let mut first = case.prefix.clone();
    first.resize(FIRST, b'x');
    body.send_data(Bytes::from(first), false).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .unwrap_or_else(|_| panic!("{}: no answer within 10 s", case.name))
        .unwrap();
    let status = response.status().as_u16();
    let mut grpc = response
        .headers()
        .get("grpc-status")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut message = response
        .headers()
        .get("grpc-message")
        .map(|v| percent(v.to_str().unwrap()));
    let mut recv = response.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        text.extend_from_slice(&chunk);
    }
    if let Ok(Some(trailers)) = recv.trailers().await {
        grpc = grpc.or_else(|| {
            trailers
                .get("grpc-status")
                .map(|v| v.to_str().unwrap().to_owned())
        });
        message = message.or_else(|| trailers.get("grpc-message").map(|v| percent(v.to_str().unwrap())));
    }
    let message = message.unwrap_or_else(|| {
        if case.content_type.starts_with("application/grpc") {
            String::from_utf8_lossy(&text).into_owned()
        } else {
            let err: serde_json::Value = serde_json::from_slice(&text).unwrap();
            err["message"].as_str().unwrap().to_owned()
        }
    });
    // The complete answer is in; the rest of the body must still be taken.
    let sent = send_rest(&mut body, TOTAL - FIRST).await;
    (status, grpc, message, sent)
}

async fn send_rest(body: &mut h2::SendStream<Bytes>, mut left: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while left > 0 {
        body.reserve_capacity(left.min(64 * 1024));
        let capacity =
            tokio::time::timeout_at(deadline.into(), std::future::poll_fn(|cx| body.poll_capacity(cx)))
                .await
                .map_err(|_| format!("no flow-control window for 10 s with {left} bytes left"))?;
        let n = match capacity {
            Some(Ok(n)) => n,
            Some(Err(err)) => return Err(format!("stream ended with {left} bytes left: {err}")),
            None => return Err(format!("stream closed with {left} bytes left")),
        };
        let n = n.min(left);
        if n == 0 {
            continue;
        }
        body.send_data(Bytes::from(vec![b'x'; n]), n == left)
            .map_err(|err| format!("stream ended with {left} bytes left: {err}"))?;
        left -= n;
    }
    Ok(())
}

fn percent(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = raw.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn admin_token(server: &TestServer, tls: bool) -> String {
    let password = std::fs::read_to_string(server.dir.path().join("data/initial-admin-password")).unwrap();
    let scheme = if tls { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{}/api/v1/session", server.port);
    let mut conn =
        crate::support::client::connect(server.addr(), tls, crate::support::client::Proto::H2).await;
    let login = serde_json::json!({"username": "admin", "password": password.trim()}).to_string();
    let r = conn
        .send(
            crate::support::client::request("POST", &url)
                .header("content-type", "application/json")
                .body(http_body_util::Full::new(Bytes::from(login)))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let json: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    json["token"].as_str().unwrap().to_owned()
}

async fn every_refusal_is_read_whole_and_its_stream_drained(tls: bool) {
    let mut args = vec!["--grpc-max-request-bytes", "1048576"];
    if !tls {
        args.push("--insecure");
    }
    let server = TestServer::start(&args);
    let token = admin_token(&server, tls).await;
    let scheme = if tls { "https" } else { "http" };
    let started = Instant::now();
    let mut client = connect(server.addr(), tls).await;
    for case in cases() {
        let url = format!("{scheme}://127.0.0.1:{}{}", server.port, case.path);
        for round in 0..ROUNDS {
            let (status, grpc, message, sent) = refuse(&mut client, &url, &case, &token).await;
            let what = format!("{} (round {round}, tls {tls})", case.name);
            assert_eq!(status, case.status, "{what}: {message}");
            assert_eq!(grpc.as_deref(), case.grpc, "{what}: {message}");
            assert_eq!(message, case.message, "{what}");
            assert_eq!(sent, Ok(()), "{what}: the rest of the body");
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "rounds took too long"
        );
    }
    assert!(server.logs().contains("serving on"), "{}", server.logs());
}

#[tokio::test]
async fn refusals_over_h2c_are_read_whole_and_the_stream_drained() {
    every_refusal_is_read_whole_and_its_stream_drained(false).await;
}

#[tokio::test]
async fn refusals_over_tls_h2_are_read_whole_and_the_stream_drained() {
    every_refusal_is_read_whole_and_its_stream_drained(true).await;
}
