//! Graceful shutdown: SIGTERM stops accepting and lets in-flight requests finish.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    let mut server = TestServer::start(&["--insecure"]);
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    // A gRPC-Web call whose body is only half sent when the signal arrives.
    tcp.write_all(
        b"POST /version.VersionService/Version HTTP/1.1\r\nHost: x\r\n\
          Content-Type: application/grpc-web+proto\r\nContent-Length: 5\r\n\r\n\x00\x00",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = server.pid();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        TcpStream::connect(server.addr()).await.is_err(),
        "no new connections after SIGTERM"
    );
    tcp.write_all(b"\x00\x00\x00").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("grpc-status:0"), "{text}");
    assert!(server.terminate().success());
    assert!(
        server.logs().contains("all connections closed"),
        "{}",
        server.logs()
    );
}
