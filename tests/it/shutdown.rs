//! Graceful shutdown: on SIGTERM the server keeps serving for `--shutdown-delay` with
//! `/healthz` at 503, then stops accepting, ends every open watch with UNAVAILABLE "server
//! shutting down, reconnect", and lets in-flight requests finish.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::cli_apps::{Session, create_args, session_token, start_server_with};
use crate::support::TestServer;
use crate::support::client::{Conn, Proto, connect, get, grpc_frame, grpc_web_frames, request};

#[tokio::test]
async fn without_a_delay_sigterm_stops_accepting_at_once_and_lets_an_in_flight_request_finish() {
    let mut server = TestServer::start(&["--insecure", "--shutdown-delay=0"]);
    // A gRPC-Web call whose body is only half sent when the signal arrives.
    let mut tcp = half_sent(server.addr()).await;
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
    finish_half_sent(&mut tcp).await;
    assert!(server.terminate().success());
    assert!(
        server.logs().contains("all connections closed"),
        "{}",
        server.logs()
    );
}

/// How long the drain tests keep serving after SIGTERM.
const DELAY: Duration = Duration::from_secs(3);
/// How soon after the delay every watch must have ended.
const WATCHES_END_WITHIN: Duration = Duration::from_secs(1);

/// What an open response carried once its body ended.
struct Ended {
    at: Instant,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
    error: Option<String>,
}

/// Sends `req` and returns once the response head is in; its body is read by a task.
async fn open(conn: &mut Conn, mut req: http::Request<Full<Bytes>>) -> (u16, JoinHandle<Ended>) {
    let response = match conn {
        Conn::H1(send) => {
            let host = req.uri().authority().unwrap().to_string();
            req.headers_mut()
                .insert(http::header::HOST, host.parse().unwrap());
            *req.uri_mut() = req.uri().path_and_query().unwrap().as_str().parse().unwrap();
            send.ready().await.unwrap();
            send.send_request(req).await.unwrap()
        }
        Conn::H2(send) => {
            send.ready().await.unwrap();
            send.send_request(req).await.unwrap()
        }
    };
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let task = tokio::spawn(async move {
        let mut ended = Ended {
            at: Instant::now(),
            body: Vec::new(),
            trailers: None,
            error: None,
        };
        // Bounded by the frames a watch sends in a test (a keepalive per 15 s at most).
        for _ in 0..10_000 {
            match body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => ended.body.extend_from_slice(&data),
                    Err(frame) => ended.trailers = frame.into_trailers().ok(),
                },
                Some(Err(err)) => {
                    ended.error = Some(err.to_string());
                    break;
                }
                None => break,
            }
        }
        ended.at = Instant::now();
        ended
    });
    (status, task)
}

fn watch_request(url: &str, token: &str, content_type: &str) -> http::Request<Full<Bytes>> {
    request("POST", url)
        .header("content-type", content_type)
        .header("te", "trailers")
        .header("authorization", format!("Bearer {token}"))
        // An empty ApplicationQuery: every application, then live changes.
        .body(Full::new(grpc_frame(&[])))
        .unwrap()
}

/// A request on a connection of its own, as a load balancer's health check makes.
async fn fresh_get(server: &TestServer, path: &str) -> (u16, String) {
    let mut conn = connect(server.addr(), false, Proto::H1).await;
    let r = conn.send(get(&format!("http://{}{path}", server.addr()))).await;
    (r.status, r.text())
}

#[tokio::test]
async fn sigterm_keeps_serving_for_the_delay_then_ends_every_watch_and_finishes_requests() {
    let delay = format!("--shutdown-delay={}s", DELAY.as_secs());
    let (mut server, _config) = start_server_with(None, &[&delay]);
    let token = session_token(&Session::login(&server, "admin", &[]));
    let base = format!("http://{}", server.addr());
    let watch = format!("{base}/application.ApplicationService/Watch");

    // Native gRPC: the application watch and the health watch, on one HTTP/2 connection.
    let mut h2 = connect(server.addr(), false, Proto::H2).await;
    let (status, grpc) = open(&mut h2, watch_request(&watch, &token, "application/grpc")).await;
    assert_eq!(status, 200);
    let health = watch_request(
        &format!("{base}/grpc.health.v1.Health/Watch"),
        &token,
        "application/grpc",
    );
    let (status, health) = open(&mut h2, health).await;
    assert_eq!(status, 200);
    // gRPC-Web over HTTP/1.1, as a browser or the CLI's --grpc-web sends it.
    let mut h1 = connect(server.addr(), false, Proto::H1).await;
    let (status, grpc_web) = open(
        &mut h1,
        watch_request(&watch, &token, "application/grpc-web+proto"),
    )
    .await;
    assert_eq!(status, 200);
    // SSE, as the dashboard reads it.
    let mut h1 = connect(server.addr(), false, Proto::H1).await;
    let sse = request("GET", &format!("{base}/api/v1/stream/applications"))
        .header("accept", "text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, sse) = open(&mut h1, sse).await;
    assert_eq!(status, 200);
    // A unary call in flight: its body is only half sent when the signal arrives.
    let mut slow = half_sent(server.addr()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let watches = [
        ("gRPC", grpc),
        ("gRPC health", health),
        ("gRPC-Web", grpc_web),
        ("SSE", sse),
    ];
    for (name, task) in &watches {
        assert!(!task.is_finished(), "the {name} watch is open before the signal");
    }

    let signalled = Instant::now();
    server.signal_term();
    // During the delay: new connections are accepted; the health check says 503, and
    // everything else is served as before.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fresh_get(&server, "/healthz").await,
        (503, "shutting down\n".to_owned())
    );
    let (status, _) = fresh_get(&server, "/api/version").await;
    assert_eq!(status, 200, "requests arriving during the delay are served");
    assert!(
        signalled.elapsed() < DELAY,
        "the checks above ran within the delay"
    );
    for (name, task) in &watches {
        assert!(
            !task.is_finished(),
            "the {name} watch stays open during the delay"
        );
    }

    // After it: every watch ends, at once, with the message.
    let mut ended = Vec::new();
    for (name, task) in watches {
        let end = tokio::time::timeout(DELAY + Duration::from_secs(10), task)
            .await
            .unwrap_or_else(|_| panic!("the {name} watch did not end"))
            .unwrap();
        let after = end.at.duration_since(signalled);
        assert!(
            after >= DELAY && after <= DELAY + WATCHES_END_WITHIN,
            "the {name} watch ended {after:?} after SIGTERM, not within {WATCHES_END_WITHIN:?} of the {DELAY:?} delay"
        );
        assert_eq!(end.error, None, "the {name} watch ended cleanly");
        ended.push((name, end));
    }
    for (name, end) in &ended {
        let (code, message) = match *name {
            "gRPC-Web" => {
                let (_, trailer) = grpc_web_frames(&end.body, false);
                let field = |key: &str| {
                    trailer
                        .lines()
                        .find_map(|l| l.trim().strip_prefix(key))
                        .map(|v| v.trim().to_owned())
                        .unwrap_or_default()
                };
                (field("grpc-status:"), decode(&field("grpc-message:")))
            }
            "SSE" => {
                let text = String::from_utf8_lossy(&end.body).into_owned();
                let last = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: "))
                    .next_back()
                    .unwrap_or_else(|| panic!("no SSE event: {text:?}"));
                let event: serde_json::Value = serde_json::from_str(last).unwrap();
                assert_eq!(event["error"]["http_code"], 503, "{event}");
                (
                    event["error"]["grpc_code"].to_string(),
                    event["error"]["message"].as_str().unwrap_or_default().to_owned(),
                )
            }
            _ => {
                let trailers = end
                    .trailers
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name}: no trailers"));
                let field = |key: &str| trailers.get(key).map_or("", |v| v.to_str().unwrap()).to_owned();
                (field("grpc-status"), decode(&field("grpc-message")))
            }
        };
        assert_eq!(code, "14", "{name}: UNAVAILABLE");
        assert_eq!(message, "server shutting down, reconnect", "{name}");
    }
    // The health watch said NOT_SERVING (status 2) before it ended.
    let health = &ended[1].1.body;
    assert!(
        health.windows(2).any(|w| w == [0x08, 0x02]),
        "health watch: {health:?}"
    );

    // New connections are refused now; the request in flight still finishes.
    assert!(
        TcpStream::connect(server.addr()).await.is_err(),
        "no new connections after the delay"
    );
    finish_half_sent(&mut slow).await;

    let status = server.exited(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}: {}", server.logs());
    assert!(
        server.logs().contains("all connections closed"),
        "{}",
        server.logs()
    );
}

/// A second signal skips what is left of the delay: the server exits at once.
#[tokio::test]
async fn a_second_signal_skips_the_rest_of_the_delay() {
    let mut server = TestServer::start(&["--insecure", "--shutdown-delay=1m"]);
    server.signal_term();
    let mut served = false;
    for _ in 0..100 {
        if fresh_get(&server, "/healthz").await.0 == 503 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(served, "/healthz answers 503 during the delay");
    let again = Instant::now();
    server.signal_term();
    let status = server.exited(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}: {}", server.logs());
    assert!(again.elapsed() < Duration::from_secs(5), "{:?}", again.elapsed());
}

fn decode(raw: &str) -> String {
    percent_encoding::percent_decode_str(raw)
        .decode_utf8_lossy()
        .into_owned()
}

/// `tiphys app watch` outlives the server it started on: the server's shutdown ends the watch
/// with UNAVAILABLE, and the CLI reconnects by itself (here to the server started again on the
/// same address, as a load balancer would pick another replica) and goes on printing.
#[test]
fn the_cli_watch_reconnects_when_the_server_shuts_down() {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};

    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let (mut first, config) = start_server_with(Some(&data), &[]);
    let admin = Session::login(&first, "admin", &[]);
    admin.ok(&create_args("before", &[]));

    let mut cmd = Command::new(crate::support::bin());
    cmd.args(["app", "watch", "--config"]).arg(admin.config());
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("TIPHYS_") {
            cmd.env_remove(var);
        }
    }
    let mut watch = cmd
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let stderr = watch.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let until = |name: &str, within: Duration| -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.split_whitespace().nth(1).is_some_and(|n| n.ends_with(name));
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("no event for {name} within {within:?}: {seen:?}");
    };
    let seen = until("before", Duration::from_secs(20));
    assert!(seen[0].starts_with("ADDED "), "{seen:?}");

    assert!(first.terminate().success(), "{}", first.logs());
    let port = first.port.to_string();
    // The same accounts and data: the CLI's session holds on the server started again.
    let second = TestServer::start(&[
        "--insecure",
        "--config-dir",
        config.path().to_str().unwrap(),
        &format!("--data-dir={}", data.display()),
        "--port",
        &port,
    ]);
    admin.ok(&create_args("after", &[]));
    until("after", Duration::from_secs(60));
    assert!(
        watch.try_wait().unwrap().is_none(),
        "the watch runs on across the restart"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    let stderr = stderr.join().unwrap();
    assert!(
        stderr.contains("server shutting down, reconnect; reconnecting"),
        "{stderr}"
    );
    drop(second);
}

/// A unary gRPC-Web call to `addr` whose body is only half sent (see [`finish_half_sent`]).
async fn half_sent(addr: std::net::SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        b"POST /version.VersionService/Version HTTP/1.1\r\nHost: x\r\n\
          Content-Type: application/grpc-web+proto\r\nContent-Length: 5\r\n\r\n\x00\x00",
    )
    .await
    .unwrap();
    tcp
}

/// Sends the rest of a half-sent unary call (its last bytes) and checks that it is answered in
/// full, with success.
async fn finish_half_sent(tcp: &mut TcpStream) {
    tcp.write_all(b"\x00\x00\x00").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("grpc-status:0"), "{text}");
}
