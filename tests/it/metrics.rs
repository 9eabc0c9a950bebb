//! `/metrics` tells the truth: each protocol's calls are counted by their final status (the
//! gRPC trailers, the gRPC-Web trailer frame, the HTTP status), once, and by route with a
//! bounded set of labels.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use base64::Engine as _;
use bytes::Bytes;

use crate::support::client::{Conn, Proto, connect, get, grpc_frame, grpc_request};
use crate::support::{TestServer, cli};

/// Series name with labels → value, of every request counter (per protocol and per route) and
/// per-route histogram count.
type Counters = BTreeMap<String, u64>;

async fn scrape(server: &TestServer) -> Counters {
    let addr = SocketAddr::from(([127, 0, 0, 1], server.metrics_port));
    let mut conn = connect(addr, false, Proto::H1).await;
    let text = conn.send(get(&format!("http://{addr}/metrics"))).await.text();
    text.lines()
        .filter(|l| {
            l.starts_with("tiphys_requests_total{")
                || l.starts_with("tiphys_route_requests_total{")
                || l.starts_with("tiphys_route_request_duration_seconds_count{")
        })
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// The series that moved, by how much (a new series moved from 0).
fn moved(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .filter_map(|(k, v)| {
            let was = before.get(k).copied().unwrap_or(0);
            (*v != was).then(|| (k.clone(), v - was))
        })
        .collect()
}

fn requests(protocol: &str, outcome: &str) -> String {
    format!("tiphys_requests_total{{protocol=\"{protocol}\",outcome=\"{outcome}\"}}")
}

/// The per-route counter and histogram count a request adds to.
fn route(route: &str, protocol: &str, outcome: &str) -> [String; 2] {
    [
        format!(
            "tiphys_route_requests_total{{route=\"{route}\",protocol=\"{protocol}\",outcome=\"{outcome}\"}}"
        ),
        format!("tiphys_route_request_duration_seconds_count{{route=\"{route}\",protocol=\"{protocol}\"}}"),
    ]
}

/// Adds `n` to every series in `keys`.
fn expect(want: &mut Counters, keys: impl IntoIterator<Item = String>, n: u64) {
    for key in keys {
        *want.entry(key).or_default() += n;
    }
}

/// A gRPC-Web call of an empty message; the response's status (header or trailer frame).
async fn grpc_web(conn: &mut Conn, url: &str, text: bool) -> String {
    let (ct, body) = if text {
        let b64 = base64::engine::general_purpose::STANDARD.encode(grpc_frame(&[]));
        ("application/grpc-web-text", Bytes::from(b64))
    } else {
        ("application/grpc-web+proto", grpc_frame(&[]))
    };
    let r = conn.send(grpc_request(url, ct, body)).await;
    assert_eq!(r.status, 200, "{url}");
    if let Some(status) = r.grpc_status() {
        return status;
    }
    let (_, trailer) = crate::support::client::grpc_web_frames(&r.body, text);
    let line = trailer.lines().find_map(|l| l.strip_prefix("grpc-status:"));
    line.unwrap_or_else(|| panic!("no status in {trailer:?}"))
        .trim()
        .to_owned()
}

fn http_outcome(status: u16) -> &'static str {
    match status {
        200..=299 => "success",
        400..=499 => "client_error",
        _ => panic!("unexpected status {status}"),
    }
}

async fn grpc(conn: &mut Conn, url: &str) -> String {
    let r = conn
        .send(grpc_request(url, "application/grpc", grpc_frame(&[])))
        .await;
    r.grpc_status()
        .unwrap_or_else(|| panic!("no grpc-status from {url}"))
}

#[tokio::test]
async fn every_protocol_is_counted_once_by_its_final_status() {
    let server = TestServer::start(&["--insecure"]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H2).await;
    let version = format!("{base}/version.VersionService/Version");
    let mut want = Counters::new();
    let before = scrape(&server).await;

    assert_eq!(grpc(&mut conn, &version).await, "0");
    expect(&mut want, [requests("grpc", "success")], 1);
    expect(
        &mut want,
        route("/version.VersionService/Version", "grpc", "success"),
        1,
    );

    assert_eq!(grpc_web(&mut conn, &version, false).await, "0");
    assert_eq!(grpc_web(&mut conn, &version, true).await, "0");
    expect(&mut want, [requests("grpc-web", "success")], 2);
    expect(
        &mut want,
        route("/version.VersionService/Version", "grpc-web", "success"),
        2,
    );

    let list = format!("{base}/application.ApplicationService/List");
    assert_eq!(grpc(&mut conn, &list).await, "16", "anonymous: UNAUTHENTICATED");
    expect(&mut want, [requests("grpc", "client_error")], 1);
    expect(
        &mut want,
        route("/application.ApplicationService/List", "grpc", "client_error"),
        1,
    );

    let get_app = format!("{base}/application.ApplicationService/Get");
    assert_eq!(grpc_web(&mut conn, &get_app, false).await, "16");
    assert_eq!(
        grpc_web(&mut conn, &format!("{base}/no.Such/Method"), true).await,
        "12"
    );
    expect(&mut want, [requests("grpc-web", "client_error")], 2);
    expect(
        &mut want,
        route("/application.ApplicationService/Get", "grpc-web", "client_error"),
        1,
    );
    expect(&mut want, route("other", "grpc-web", "client_error"), 1);

    let rest = conn.send(get(&format!("{base}/api/version"))).await;
    assert_eq!(rest.status, 200);
    expect(&mut want, [requests("rest", "success")], 1);
    expect(&mut want, route("/api/version", "rest", "success"), 1);

    let missing = conn.send(get(&format!("{base}/api/v1/no-such-thing"))).await;
    assert_eq!(missing.status, 404);
    let app = conn
        .send(get(&format!("{base}/api/v1/applications/guestbook")))
        .await;
    assert!((400..500).contains(&app.status), "anonymous: {}", app.status);
    expect(&mut want, [requests("rest", "client_error")], 2);
    expect(&mut want, route("other", "rest", "client_error"), 1);
    expect(
        &mut want,
        route("/api/v1/applications/{name}", "rest", "client_error"),
        1,
    );

    let ui = conn.send(get(&format!("{base}/applications/guestbook"))).await;
    let outcome = http_outcome(ui.status);
    expect(&mut want, [requests("ui", outcome)], 1);
    expect(&mut want, route("ui", "ui", outcome), 1);

    assert_eq!(moved(&before, &scrape(&server).await), want);
}

#[test]
fn cli_calls_over_grpc_web_count_as_successes() {
    let server = TestServer::start(&["--insecure"]);
    let addr = format!("127.0.0.1:{}", server.port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = rt.block_on(scrape(&server));
    for _ in 0..5 {
        let (ok, _, err) = cli(&[
            "version",
            "--server",
            &addr,
            "--plaintext",
            "--grpc-web",
            "-o",
            "json",
        ]);
        assert!(ok, "{err}");
    }
    let moved = moved(&before, &rt.block_on(scrape(&server)));
    // Whatever calls `version` makes besides Version, none failed, and each counted once.
    let outcomes: Vec<_> = moved.keys().filter(|k| k.contains("outcome=")).collect();
    assert!(
        outcomes
            .iter()
            .all(|k| k.contains("protocol=\"grpc-web\",outcome=\"success\"")),
        "{moved:#?}"
    );
    let by_route: u64 = moved
        .iter()
        .filter(|(k, _)| k.starts_with("tiphys_route_requests_total"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(moved.get(&requests("grpc-web", "success")), Some(&by_route));
    let [version, _] = route("/version.VersionService/Version", "grpc-web", "success");
    // Each run probes the server with Version, then makes its call.
    assert_eq!(moved.get(&version), Some(&10), "{moved:#?}");
}

#[tokio::test]
async fn unknown_paths_share_one_route_label() {
    let server = TestServer::start(&["--insecure"]);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut conn = connect(server.addr(), false, Proto::H2).await;
    let before = scrape(&server).await;
    let mut want = Counters::new();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    for i in 0..50 {
        let token = format!("z{:x}", seed.wrapping_mul(i + 7919));
        let r = conn.send(get(&format!("{base}/api/v1/{token}/{i}"))).await;
        assert_eq!(r.status, 404);
        assert_eq!(grpc(&mut conn, &format!("{base}/{token}.S/M{i}")).await, "12");
        // The dashboard: 200 when built into the binary, 404 without it.
        let ui = conn.send(get(&format!("{base}/{token}/{i}"))).await;
        expect(&mut want, [requests("ui", http_outcome(ui.status))], 1);
        expect(&mut want, route("ui", "ui", http_outcome(ui.status)), 1);
    }
    expect(&mut want, [requests("rest", "client_error")], 50);
    expect(&mut want, [requests("grpc", "client_error")], 50);
    expect(&mut want, route("other", "rest", "client_error"), 50);
    expect(&mut want, route("other", "grpc", "client_error"), 50);
    let after = scrape(&server).await;
    assert_eq!(moved(&before, &after), want);
    // The counters of a route come all together; nothing else was added.
    let route_lines = after.keys().filter(|k| k.contains("route=")).count();
    let known = before.keys().filter(|k| k.contains("route=")).count();
    assert!(route_lines <= known + 3 * 5, "{after:#?}");
}
