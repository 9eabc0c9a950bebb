//! Servers on etcd (`--etcd-endpoints`): a real 3-member cluster (`tests/support/etcd_cluster.rs`)
//! and real `tiphys server` processes sharing one prefix, driven over HTTP.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::etcd_cluster::{EtcdCluster, EtcdTls};
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

/// `method path` with `token` and a JSON body, which must answer 200.
pub async fn call_ok(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Answer {
    let r = call(addr, method, path, Some(token), &[], body).await;
    assert_eq!(r.status, 200, "{method} {path}: {r:?}");
    r
}

/// The admin's token on a server whose generated password is in the store the flags name.
pub async fn admin_token(addr: SocketAddr, flags: &[String]) -> String {
    let mut args = vec!["admin", "initial-password"];
    args.extend(flags.iter().map(String::as_str));
    token_of(&login(addr, "admin", &wait_initial_password(&args), &[]).await)
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
    call_ok(server.addr(), "POST", "/api/v1/projects", &token, Some(&project)).await;
    let mut args = vec!["admin", "export", "--include-secrets"];
    args.extend(flags.iter().map(String::as_str));
    let (ok, out, err) = cli(&args);
    assert!(ok, "{err}");
    assert!(out.contains("name: p-etcd"), "{out}");
}

/// `admin initial-password` once the server has set it (bcrypt runs beside serving).
pub fn wait_initial_password(args: &[&str]) -> String {
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

const ALICE_PASSWORD: &str = "alice-pw-1";
const ADMIN_PASSWORD: &str = "admin-pw-1";

/// A config dir with `admin` and `alice` (login), passwords from `argocd-secret`, no server
/// key (the replicas share the generated one through etcd); `alice_enabled` as given. The
/// hashes are the same in every config dir and every rewrite, as when replicas mount one
/// `argocd-secret`: a new hash would be a password change, which refuses older tokens by
/// itself.
fn write_config(dir: &std::path::Path, alice_enabled: bool) {
    static HASHES: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    let (admin, alice) = HASHES.get_or_init(|| {
        (
            bcrypt::hash(ADMIN_PASSWORD, 4).unwrap(),
            bcrypt::hash(ALICE_PASSWORD, 4).unwrap(),
        )
    });
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  accounts.alice: login\n  \
         accounts.alice.enabled: \"{alice_enabled}\"\n"
    );
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  admin.password: '{admin}'\n  \
         accounts.alice.password: '{alice}'\n"
    );
    let rbac = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.default: role:readonly\n";
    // Written aside and renamed: the server never reads a half-written file.
    for (name, text) in [
        ("argocd-cm.yaml", cm),
        ("argocd-secret.yaml", secret),
        ("argocd-rbac-cm.yaml", rbac.to_owned()),
    ] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

/// Two replicas A and B on one prefix, each with its own config dir (both enabling alice).
struct Pair {
    _cluster: EtcdCluster,
    a: TestServer,
    b: TestServer,
    config_a: tempfile::TempDir,
    config_b: tempfile::TempDir,
}

fn pair(prefix: &str, extra: &[&str]) -> Pair {
    let cluster = EtcdCluster::start(3);
    let config_a = tempfile::tempdir().unwrap();
    let config_b = tempfile::tempdir().unwrap();
    write_config(config_a.path(), true);
    write_config(config_b.path(), true);
    let start = |config: &tempfile::TempDir| {
        let mut args = vec!["--config-dir", config.path().to_str().unwrap()];
        args.extend_from_slice(extra);
        replica(&cluster, prefix, &args)
    };
    let a = start(&config_a);
    let b = start(&config_b);
    Pair {
        _cluster: cluster,
        a,
        b,
        config_a,
        config_b,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn logout_password_change_and_disablement_on_b_refuse_the_token_on_a_at_once() {
    let p = pair("/it-tokens/", &[]);
    let (a, b) = (p.a.addr(), p.b.addr());

    // A login on A is good on B, and a logout on B ends it on A at its next request.
    let token = token_of(&login(a, "alice", ALICE_PASSWORD, &[]).await);
    assert!(accepted(b, &token).await, "a token issued by A works on B");
    let r = call(b, "DELETE", "/api/v1/session", Some(&token), &[], None).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!accepted(a, &token).await, "logged out on B, refused on A");
    assert!(!accepted(b, &token).await);

    // A password change on B refuses the older tokens on A; the new password works on A.
    let old = token_of(&login(a, "alice", ALICE_PASSWORD, &[]).await);
    let other = token_of(&login(b, "alice", ALICE_PASSWORD, &[]).await);
    assert!(accepted(a, &old).await && accepted(a, &other).await);
    // Tokens carry milliseconds: the change must come after their issue.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let change = json!({"name": "alice", "currentPassword": ALICE_PASSWORD, "newPassword": "alice-pw-2"});
    let r = call(
        b,
        "PUT",
        "/api/v1/account/password",
        Some(&other),
        &[],
        Some(&change),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        !accepted(a, &old).await,
        "password changed on B, old token refused on A"
    );
    assert!(!accepted(a, &other).await);
    assert_eq!(login(a, "alice", ALICE_PASSWORD, &[]).await.status, 401);
    let fresh = token_of(&login(a, "alice", "alice-pw-2", &[]).await);
    assert!(accepted(b, &fresh).await);

    // alice disabled in B's configuration: once B has taken it in, A refuses her token.
    write_config(p.config_b.path(), false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while accepted(b, &fresh).await {
        assert!(
            std::time::Instant::now() < deadline,
            "B did not take the new configuration in"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(!accepted(a, &fresh).await, "disabled on B, refused on A at once");
    // A's own configuration still enables alice: a new login there is A's to allow.
    assert!(p.config_a.path().join("argocd-cm.yaml").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_logins_spread_over_two_replicas_lock_the_pair_on_both() {
    let p = pair("/it-throttle/", &["--trusted-proxies", "127.0.0.0/8"]);
    let (a, b) = (p.a.addr(), p.b.addr());
    let attacker = [("x-forwarded-for", "198.51.100.7")];
    let bystander = [("x-forwarded-for", "198.51.100.8")];
    for (i, replica) in [a, b, a, b, a].into_iter().enumerate() {
        let r = login(replica, "alice", "wrong", &attacker).await;
        assert_eq!(r.status, 401, "failure {i}: {r:?}");
    }
    // The sixth attempt is refused before the password is checked, on both replicas, even
    // with the right password.
    for replica in [b, a] {
        let r = login(replica, "alice", ALICE_PASSWORD, &attacker).await;
        assert_eq!(r.status, 429, "the pair is locked on every replica: {r:?}");
    }
    // Another address is not affected, on either replica.
    token_of(&login(a, "alice", ALICE_PASSWORD, &bystander).await);
    token_of(&login(b, "alice", ALICE_PASSWORD, &bystander).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_starting_at_once_agree_on_one_server_key_and_admin_password() {
    let cluster = EtcdCluster::start(3);
    let flags = etcd_flags(&cluster, "/it-start/");
    let (a, b) = std::thread::scope(|s| {
        let one = || {
            s.spawn(|| {
                let mut args: Vec<&str> = vec!["--insecure"];
                args.extend(flags.iter().map(String::as_str));
                TestServer::start(&args)
            })
        };
        let (a, b) = (one(), one());
        (a.join().unwrap(), b.join().unwrap())
    });
    let mut args = vec!["admin", "initial-password"];
    args.extend(flags.iter().map(String::as_str));
    let password = wait_initial_password(&args);
    // Both may have hashed a password; one record won, and both replicas check against it.
    let from_a = token_of(&login(a.addr(), "admin", &password, &[]).await);
    let from_b = token_of(&login(b.addr(), "admin", &password, &[]).await);
    assert!(
        accepted(b.addr(), &from_a).await,
        "a token signed on A verifies on B"
    );
    assert!(
        accepted(a.addr(), &from_b).await,
        "a token signed on B verifies on A"
    );
    let keys = cluster.etcdctl(&["get", "--prefix", "--keys-only", "/it-start/server/"]);
    let keys = String::from_utf8_lossy(&keys.stdout);
    assert_eq!(keys.matches("/it-start/server/secretkey").count(), 1, "{keys}");
}

/// `--etcd-cacert`, `--etcd-cert` and `--etcd-key` as given (none when `None`).
fn tls_flags(
    ca: Option<&std::path::Path>,
    client: Option<(&std::path::Path, &std::path::Path)>,
) -> Vec<String> {
    let mut flags = Vec::new();
    let mut flag = |name: &str, path: &std::path::Path| {
        flags.push(name.to_owned());
        flags.push(path.display().to_string());
    };
    if let Some(ca) = ca {
        flag("--etcd-cacert", ca);
    }
    if let Some((cert, key)) = client {
        flag("--etcd-cert", cert);
        flag("--etcd-key", key);
    }
    flags
}

/// A server on a TLS cluster (https endpoints, a client certificate required): it starts,
/// `admin initial-password` reads its store with the same flags, and a project created over
/// REST reads back and is in etcd.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_on_etcd_over_tls_with_a_client_certificate_serves() {
    let cluster = EtcdCluster::start_tls(3);
    let tls = cluster.tls();
    let mut flags = etcd_flags(&cluster, "/it-tls/");
    assert!(flags[1].starts_with("https://"), "{flags:?}");
    flags.extend(tls_flags(Some(&tls.ca), Some((&tls.cert, &tls.key))));
    let mut args = vec!["--insecure"];
    args.extend(flags.iter().map(String::as_str));
    let server = TestServer::start(&args);
    let token = admin_token(server.addr(), &flags).await;
    let project = json!({"project": {"metadata": {"name": "p-tls"}, "spec": {"description": "over TLS"}}});
    call_ok(server.addr(), "POST", "/api/v1/projects", &token, Some(&project)).await;
    let r = call_ok(server.addr(), "GET", "/api/v1/projects/p-tls", &token, None).await;
    assert_eq!(r.body["spec"]["description"], "over TLS", "{r:?}");
    let keys = cluster.etcdctl(&["get", "--prefix", "--keys-only", "/it-tls/"]);
    let keys = String::from_utf8_lossy(&keys.stdout);
    assert!(
        keys.lines()
            .any(|k| k.starts_with("/it-tls/") && k.ends_with("/p-tls")),
        "{keys}"
    );
}

/// Bad TLS material: the server exits with status 1 within a bounded time, and its error names
/// the endpoint and what to fix.
#[test]
fn bad_etcd_tls_material_stops_the_server_naming_the_endpoint_and_the_cause() {
    let cluster = EtcdCluster::start_tls(1);
    let tls = cluster.tls();
    let endpoint = cluster.endpoints()[0].clone();
    let dir = tempfile::tempdir().unwrap();
    // A CA, server and client certificate of their own, which the cluster does not trust.
    let other = EtcdTls::generate(dir.path(), "other");
    let missing = dir.path().join("missing.pem");
    let not_pem = dir.path().join("not-pem.pem");
    std::fs::write(&not_pem, "hello, not a certificate\n").unwrap();
    let d = |p: &std::path::Path| p.display().to_string();
    let handshake = |cause: String| {
        format!("etcd at {endpoint} did not answer at start: TLS with {endpoint} failed: {cause} (")
    };
    let file = |what: String| format!("etcd at {endpoint}: {what}");
    let client = Some((tls.cert.as_path(), tls.key.as_path()));
    let cases = [
        (
            "a CA that did not sign the member's certificate",
            tls_flags(Some(&other.ca), client),
            handshake(format!(
                "the member's certificate is not signed by the etcd CA certificate {}",
                d(&other.ca)
            )),
        ),
        (
            "no client certificate",
            tls_flags(Some(&tls.ca), None),
            handshake(
                "the member requires a client certificate; give the etcd client certificate and key"
                    .to_owned(),
            ),
        ),
        (
            "a client certificate of another CA",
            tls_flags(Some(&tls.ca), Some((&other.cert, &other.key))),
            handshake(format!(
                "the member refused the client certificate {}; is it signed by a CA in the member's \
                 --trusted-ca-file, and still valid?",
                d(&other.cert)
            )),
        ),
        (
            "a key of another certificate",
            tls_flags(Some(&tls.ca), Some((&tls.cert, &other.key))),
            file(format!(
                "the client key {} does not belong to the client certificate {}",
                d(&other.key),
                d(&tls.cert)
            )),
        ),
        (
            "no client certificate file",
            tls_flags(Some(&tls.ca), Some((&missing, &tls.key))),
            file(format!(
                "cannot read the client certificate {}: No such file or directory",
                d(&missing)
            )),
        ),
        (
            "a client certificate that is not PEM",
            tls_flags(Some(&tls.ca), Some((&not_pem, &tls.key))),
            file(format!("the client certificate {} is not PEM", d(&not_pem))),
        ),
    ];
    for (case, flags, expected) in cases {
        let mut args = vec![
            "--insecure",
            "--etcd-endpoints",
            &endpoint,
            "--etcd-dial-timeout",
            "2s",
        ];
        args.extend(flags.iter().map(String::as_str));
        let started = std::time::Instant::now();
        // Bounded: spawn gives up (and kills the server) after 60 s.
        let Err(log) = TestServer::spawn(tempfile::tempdir().unwrap(), &args) else {
            panic!("{case}: the server started");
        };
        let elapsed = started.elapsed();
        assert!(log.starts_with("exit exit status: 1\n"), "{case}: {log}");
        assert!(log.contains(&expected), "{case}:\n{log}\nexpected:\n{expected}");
        // The dial timeout (2 s), then one handshake of its own per member.
        assert!(
            elapsed < std::time::Duration::from_secs(20),
            "{case}: {elapsed:?}"
        );
    }
}
