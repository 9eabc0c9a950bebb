//! Client-caused log lines are rate-limited (issue 20, item 7): 60 connections that open with a
//! TLS handshake on a plaintext port leave a burst of warnings, not 60; the suppressed ones are
//! counted in /metrics, and the next warning that gets through says how many it stands for.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;
use crate::support::client::{Proto, connect, get};

const LINE: &str = "TLS handshake on a plaintext (--insecure) port";
const ATTEMPTS: usize = 60;

/// Opens a connection, sends the start of a TLS ClientHello, and waits (bounded) for the close.
async fn tls_bytes(server: &TestServer) {
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05]).await.unwrap();
    let mut buf = [0_u8; 64];
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await;
}

async fn suppressed_metric(server: &TestServer) -> u64 {
    let addr = SocketAddr::from(([127, 0, 0, 1], server.metrics_port));
    let mut conn = connect(addr, false, Proto::H1).await;
    let text = conn.send(get(&format!("http://{addr}/metrics"))).await.text();
    let series = "tiphys_log_lines_suppressed_total{kind=\"tls_on_plaintext_port\"} ";
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{text}"))
        .parse()
        .unwrap()
}

/// Waits (at most 5 s) until the log holds `n` lines with `LINE`; the lines seen.
async fn lines_when(server: &TestServer, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let lines: Vec<String> = server
            .logs()
            .lines()
            .filter(|l| l.contains(LINE))
            .map(str::to_owned)
            .collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn tls_bytes_on_a_plaintext_port_are_logged_at_a_bounded_rate() {
    let server = TestServer::start(&["--insecure"]);
    let start = Instant::now();
    for _ in 0..ATTEMPTS {
        tls_bytes(&server).await;
    }
    let took = start.elapsed();
    // Each connection was counted and its line written (or not) before the server closed it.
    let suppressed = suppressed_metric(&server).await;
    let logged = lines_when(&server, ATTEMPTS - usize::try_from(suppressed).unwrap())
        .await
        .len();
    // A burst of 10, then 2 a second while the attempts ran.
    let bound = 10 + 2 * usize::try_from(took.as_secs()).unwrap() + 2;
    assert!(
        (1..=bound).contains(&logged),
        "{logged} warnings for {ATTEMPTS} attempts in {took:?} (at most {bound})"
    );
    assert_eq!(suppressed, (ATTEMPTS - logged) as u64, "/metrics");

    // After a pause the next one gets through and reports what was left out before it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    tls_bytes(&server).await;
    let lines = lines_when(&server, logged + 1).await;
    let last = lines.last().unwrap();
    assert_eq!(lines.len(), logged + 1, "{last}");
    assert!(last.contains(&format!("suppressed={suppressed}")), "{last}");
}
