//! Servers on etcd (`--etcd-endpoints`): a real 3-member cluster (`tests/support/etcd_cluster.rs`)
//! and real `tiphys server` processes sharing one prefix, driven over HTTP.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::etcd_cluster::EtcdCluster;
use crate::support::client::{self, Proto, connect};
use crate::support::{TestServer, cli};

/// The `--etcd-*` flags of `cluster` under `prefix`.
pub fn etcd_flags(cluster: &EtcdCluster, prefix: &str) -> Vec<String> {
    vec![
        "--etcd-endpoints".into(),
        cluster.endpoints().join(","),
        "--etcd-prefix".into(),
        prefix.into(),
    ]
}

/// A plaintext replica on `cluster` under `prefix`, with `extra` flags.
fn replica(cluster: &EtcdCluster, prefix: &str, extra: &[&str]) -> TestServer {
    let flags = etcd_flags(cluster, prefix);
    let mut args: Vec<&str> = vec!["--insecure"];
    args.extend(flags.iter().map(String::as_str));
    args.extend_from_slice(extra);
    TestServer::start(&args)
}

/// One REST answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

/// A REST call to `server` with an optional bearer token and extra headers.
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Answer {
    let mut conn = connect(addr, false, Proto::H1).await;
    let mut req = client::request(method, &format!("http://{addr}{path}"));
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    if method != "GET" {
        req = req.header("content-type", "application/json");
    }
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let bytes = body.map_or_else(Bytes::new, |b| Bytes::from(serde_json::to_vec(b).unwrap()));
    let r = conn.send(req.body(Full::new(bytes)).unwrap()).await;
    Answer {
        status: r.status,
        body: serde_json::from_slice(&r.body).unwrap_or_else(|_| Value::String(r.text())),
    }
}

/// Logs `user` in on `server`; the answer (200 with a token, 401, 429).
pub async fn login(addr: SocketAddr, user: &str, password: &str, headers: &[(&str, &str)]) -> Answer {
    let body = json!({"username": user, "password": password});
    call(addr, "POST", "/api/v1/session", None, headers, Some(&body)).await
}

pub fn token_of(answer: &Answer) -> String {
    assert_eq!(answer.status, 200, "login failed: {answer:?}");
    answer.body["token"].as_str().unwrap().to_owned()
}

/// `GET /api/v1/session/userinfo` with `token`: whether the server accepts it.
pub async fn accepted(addr: SocketAddr, token: &str) -> bool {
    let r = call(addr, "GET", "/api/v1/session/userinfo", Some(token), &[], None).await;
    assert_eq!(r.status, 200, "{r:?}");
    r.body["loggedIn"].as_bool() == Some(true)
}

/// A loopback port nobody listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn unreachable_etcd_endpoints_stop_the_server_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let endpoints = format!(
        "http://127.0.0.1:{},http://127.0.0.1:{}",
        closed_port(),
        closed_port()
    );
    let started = std::time::Instant::now();
    let (ok, _, err) = cli(&[
        "server",
        "--insecure",
        "--address",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--etcd-endpoints",
        &endpoints,
        "--etcd-dial-timeout",
        "1s",
    ]);
    assert!(!ok, "the server must not start without etcd: {err}");
    for endpoint in endpoints.split(',') {
        assert!(err.contains(endpoint), "the error names {endpoint}: {err}");
    }
    assert!(err.contains("did not answer"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "bounded by the dial timeout"
    );
    assert!(
        !dir.path().join("tiphys.redb").exists(),
        "no file store was opened instead"
    );
}

#[test]
fn bad_etcd_options_are_refused_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let base = [
        "server",
        "--insecure",
        "--data-dir",
        data,
        "--etcd-endpoints",
        "http://127.0.0.1:9",
    ];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (ok, _, err) = cli(&args);
        assert!(!ok, "{extra:?} must be refused");
        err
    };
    let err = run(&[
        "--etcd-username",
        "u",
        "--etcd-password-file",
        "/nonexistent/etcd-pw",
    ]);
    assert!(
        err.contains("cannot read --etcd-password-file /nonexistent/etcd-pw"),
        "{err}"
    );
    let err = run(&["--etcd-cert", "/nonexistent/c.pem"]);
    assert!(err.contains("--etcd-key"), "{err}");
    let err = run(&["--etcd-prefix", "/"]);
    assert!(err.contains("--etcd-prefix"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_on_etcd_serves_and_the_admin_commands_read_the_same_store() {
    let cluster = EtcdCluster::start(3);
    let server = replica(&cluster, "/it-admin/", &[]);
    // The first start's admin password is in etcd, for `admin initial-password`.
    let flags = etcd_flags(&cluster, "/it-admin/");
    let mut args = vec!["admin", "initial-password"];
    args.extend(flags.iter().map(String::as_str));
    let password = wait_initial_password(&args);
    let token = token_of(&login(server.addr(), "admin", &password, &[]).await);
    assert!(accepted(server.addr(), &token).await);
    assert!(
        !server.dir.path().join("data/tiphys.redb").exists(),
        "the data dir holds no store on etcd"
    );
    // Another prefix is another store.
    let other = etcd_flags(&cluster, "/it-other/");
    let mut args = vec!["admin", "initial-password"];
    args.extend(other.iter().map(String::as_str));
    let (ok, _, err) = cli(&args);
    assert!(!ok && err.contains("no initial admin password"), "{err}");

    // `admin export` reads the store while the server runs.
    let project = json!({"project": {"metadata": {"name": "p-etcd"}, "spec": {}}});
    let r = call(
        server.addr(),
        "POST",
        "/api/v1/projects",
        Some(&token),
        &[],
        Some(&project),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let mut args = vec!["admin", "export", "--include-secrets"];
    args.extend(flags.iter().map(String::as_str));
    let (ok, out, err) = cli(&args);
    assert!(ok, "{err}");
    assert!(out.contains("name: p-etcd"), "{out}");
}

/// `admin initial-password` once the server has set it (bcrypt runs beside serving).
fn wait_initial_password(args: &[&str]) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (ok, out, err) = cli(args);
        if ok {
            return out.trim().to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "no initial password: {err}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
