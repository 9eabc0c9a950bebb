//! Bad input on the port: garbage, TLS on a plaintext port, malformed
//! gRPC-Web frames, idle and slow clients, oversized bodies and headers, a
//! port in use. Each gets a clear answer and the server keeps serving.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;
use crate::support::client::{Proto, connect, get, grpc_frame, grpc_request, tls_config, tls_connect};

/// Reads until the server closes; returns what it sent and how long it took.
async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let start = Instant::now();
    let mut all = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        match tokio::time::timeout_at((start + limit).into(), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (all, start.elapsed()),
            Ok(Ok(n)) => all.extend_from_slice(&buf[..n]),
            Err(_) => panic!("connection still open after {limit:?}"),
        }
    }
}

async fn still_serves(server: &TestServer, tls: bool) {
    let scheme = if tls { "https" } else { "http" };
    let mut conn = connect(server.addr(), tls, Proto::H1).await;
    let r = conn
        .send(get(&format!("{scheme}://127.0.0.1:{}/api/version", server.port)))
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn garbage_bytes_are_refused_and_the_server_keeps_serving() {
    for (args, tls) in [(vec![], true), (vec!["--insecure"], false)] {
        let server = TestServer::start(&args);
        let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
        tcp.write_all(b"\x00\xff\xfe garbage \r\n\r\n\x01\x02")
            .await
            .unwrap();
        let (answer, _) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(answer.is_empty() || text.starts_with("HTTP/1.1 400"), "{text}");
        still_serves(&server, tls).await;
    }
}

#[tokio::test]
async fn tls_on_an_insecure_port_is_closed_with_one_clear_log_line() {
    let server = TestServer::start(&["--insecure"]);
    assert!(
        tls_connect(server.addr(), tls_config(&[b"h2"], rustls::ALL_VERSIONS))
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = server.logs();
    assert_eq!(
        logs.matches("TLS handshake on a plaintext (--insecure) port")
            .count(),
        1,
        "{logs}"
    );
    still_serves(&server, false).await;
}

#[tokio::test]
async fn malformed_grpc_web_frames_get_an_error_status_not_a_crash() {
    let server = TestServer::start(&["--insecure"]);
    let url = format!("http://127.0.0.1:{}/version.VersionService/Version", server.port);
    let bodies: [&[u8]; 3] = [b"\x00\x00\x00\x00\x64abc", b"\x00\x00", b"\x7f\x00\x00\x00\x01x"];
    for body in bodies {
        let mut conn = connect(server.addr(), false, Proto::H1).await;
        let r = conn
            .send(grpc_request(
                &url,
                "application/grpc-web+proto",
                Bytes::from_static(body),
            ))
            .await;
        let status = r.grpc_status();
        assert!(
            r.status >= 400 || status.as_deref().is_some_and(|s| s != "0"),
            "{body:?}: {} {status:?}",
            r.status
        );
    }
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    let text = crate::support::client::request("POST", &url)
        .header("content-type", "application/grpc-web-text")
        .body(http_body_util::Full::new(Bytes::from_static(b"!!!not base64!!!")))
        .unwrap();
    let r = conn.send(text).await;
    assert!(r.status >= 400 || r.grpc_status().as_deref().is_some_and(|s| s != "0"));
    still_serves(&server, false).await;
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_handshake_timeout() {
    let server = TestServer::start(&["--handshake-timeout", "1s"]);
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (_, took) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let server = TestServer::start(&["--insecure", "--idle-timeout", "1s"]);
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (answer, took) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let server = TestServer::start(&["--insecure", "--header-read-timeout", "1s"]);
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let (_, took) = read_until_closed(&mut tcp, Duration::from_secs(6)).await;
    assert!(took < Duration::from_secs(5));
}

#[tokio::test]
async fn oversized_bodies_and_messages_are_refused_with_413_and_resource_exhausted() {
    let server = TestServer::start(&[
        "--insecure",
        "--max-body-bytes",
        "1000",
        "--grpc-max-message-bytes",
        "1024",
    ]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H2).await;
    let big = crate::support::client::request("POST", &format!("{base}/api/v1/session"))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(Bytes::from(vec![b'x'; 5000])))
        .unwrap();
    let r = conn.send(big).await;
    assert_eq!(r.status, 413, "{}", r.text());
    let err: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(err["code"], 8);
    assert!(err["message"].as_str().unwrap().contains("--max-body-bytes"));

    let r = conn
        .send(grpc_request(
            &format!("{base}/version.VersionService/Version"),
            "application/grpc",
            grpc_frame(&[0; 4096]),
        ))
        .await;
    assert_eq!(r.grpc_status().as_deref(), Some("8"), "{}", r.grpc_message());
}

#[tokio::test]
async fn an_oversized_header_is_refused() {
    let server = TestServer::start(&["--insecure", "--max-header-bytes", "16384"]);
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    let request = format!(
        "GET /api/version HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100_000)
    );
    let _ = tcp.write_all(request.as_bytes()).await;
    let (answer, _) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || text.starts_with("HTTP/1.1 431") || text.starts_with("HTTP/1.1 400"),
        "{text}"
    );
    still_serves(&server, false).await;
}

#[test]
fn a_port_in_use_is_a_clear_startup_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let Err(log) = TestServer::spawn(tempfile::tempdir().unwrap(), &["--port", &port]) else {
        panic!("server started on a taken port");
    };
    assert!(
        log.contains(&format!("cannot listen on 127.0.0.1:{port}")) && log.contains("in use"),
        "{log}"
    );
}
