//! Applications, projects and the other resources shared by replicas on one etcd prefix: each
//! replica's view follows etcd, so a write on one replica is read on another at once, stale
//! versions conflict on any replica, racing writers lose nothing, and watches on one replica see
//! (and resume from) the versions another handed out. Real 3-member etcd, real `tiphys server`
//! processes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::cli_apps::{IN_CLUSTER, PASSWORD, REPO};
use crate::etcd_cluster::EtcdCluster;
use crate::replicas::{Answer, call, etcd_flags, login, token_of};
use crate::support::TestServer;

/// A plaintext replica on `cluster` under `prefix`, with `admin`'s password [`PASSWORD`] and a
/// fixed server key from the configuration (every replica signs and checks tokens alike).
fn replica(cluster: &EtcdCluster, prefix: &str, config: &tempfile::TempDir) -> TestServer {
    let mut args = vec![
        "--insecure".to_owned(),
        "--config-dir".to_owned(),
        config.path().to_str().unwrap().to_owned(),
    ];
    args.extend(etcd_flags(cluster, prefix));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestServer::start(&args)
}

fn config() -> tempfile::TempDir {
    let config = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    std::fs::write(
        config.path().join("argocd-secret.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  \
             admin.password: '{hash}'\n  server.secretkey: replicas-share-this-key-0123456789\n"
        ),
    )
    .unwrap();
    config
}

struct Pair {
    _cluster: EtcdCluster,
    _config: tempfile::TempDir,
    a: TestServer,
    b: TestServer,
    token: String,
}

async fn pair(prefix: &str) -> Pair {
    let cluster = EtcdCluster::start(3);
    let config = config();
    let a = replica(&cluster, prefix, &config);
    let b = replica(&cluster, prefix, &config);
    let token = token_of(&login(a.addr(), "admin", PASSWORD, &[]).await);
    Pair {
        _cluster: cluster,
        _config: config,
        a,
        b,
        token,
    }
}

impl Pair {
    async fn call(&self, on: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> Answer {
        call(on, method, path, Some(&self.token), &[], body).await
    }
}

fn project(name: &str, repos: &[String], rv: Option<&str>) -> Value {
    let mut meta = json!({"name": name});
    if let Some(rv) = rv {
        meta["resourceVersion"] = json!(rv);
    }
    json!({"project": {
        "metadata": meta,
        "spec": {
            "sourceRepos": repos,
            "destinations": [{"server": "*", "namespace": "*"}]
        }
    }})
}

fn application(name: &str, path: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "project": "default",
            "source": {"repoURL": REPO, "path": path},
            "destination": {"server": IN_CLUSTER, "namespace": "default"}
        }
    })
}

fn rv(answer: &Answer) -> String {
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.body["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_on_one_replica_is_read_on_the_other_at_once_and_stale_versions_conflict() {
    let p = pair("/it-rr-read/").await;
    // Alternating writers; the read goes to the other replica right after the acknowledgement.
    for i in 0..20 {
        let (writer, reader) = if i % 2 == 0 { (&p.a, &p.b) } else { (&p.b, &p.a) };
        let name = format!("p{i}");
        let written = p
            .call(
                writer.addr(),
                "POST",
                "/api/v1/projects",
                Some(&project(&name, &[], None)),
            )
            .await;
        let read = p
            .call(reader.addr(), "GET", &format!("/api/v1/projects/{name}"), None)
            .await;
        assert_eq!(
            rv(&read),
            rv(&written),
            "replica {} sees the write at once",
            reader.addr()
        );
    }
    let a = p.call(p.a.addr(), "GET", "/api/v1/projects", None).await;
    let b = p.call(p.b.addr(), "GET", "/api/v1/projects", None).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body, b.body, "both replicas list the same state");
    assert_eq!(a.body["items"].as_array().unwrap().len(), 21, "20 and default");

    // A version read on B, then changed on A: B refuses the stale update, and so does A.
    let old = rv(&p.call(p.b.addr(), "GET", "/api/v1/projects/p0", None).await);
    let repos = vec![REPO.to_owned()];
    let put = |rv: &str| project("p0", &repos, Some(rv));
    let newer = p
        .call(p.a.addr(), "PUT", "/api/v1/projects/p0", Some(&put(&old)))
        .await;
    assert_eq!(newer.status, 200, "{newer:?}");
    for on in [p.b.addr(), p.a.addr()] {
        let stale = p.call(on, "PUT", "/api/v1/projects/p0", Some(&put(&old))).await;
        assert_eq!(stale.status, 409, "{stale:?}");
        assert!(
            stale.body["message"]
                .as_str()
                .unwrap()
                .contains("changed by someone else"),
            "{stale:?}"
        );
    }
    let now = p.call(p.b.addr(), "GET", "/api/v1/projects/p0", None).await;
    assert_eq!(rv(&now), rv(&newer));
    assert_eq!(
        now.body["spec"]["sourceRepos"],
        json!(repos),
        "the first update stays"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_writers_on_two_replicas_lose_no_update() {
    let p = pair("/it-rr-race/").await;
    let created = p
        .call(
            p.a.addr(),
            "POST",
            "/api/v1/projects",
            Some(&project("race", &[], None)),
        )
        .await;
    assert_eq!(created.status, 200, "{created:?}");
    // Each writer adds its own repositories to one project, read-modify-write with the version it
    // read, on its own replica; a conflict means reading again. Nothing may be lost.
    const EACH: usize = 12;
    let writer = |on: SocketAddr, tag: &'static str| {
        let p = &p;
        async move {
            let mut conflicts = 0;
            for i in 0..EACH {
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    assert!(attempts <= 50, "{tag}: no progress after 50 attempts");
                    let current = p.call(on, "GET", "/api/v1/projects/race", None).await;
                    let version = rv(&current);
                    let mut repos: Vec<String> =
                        serde_json::from_value(current.body["spec"]["sourceRepos"].clone())
                            .unwrap_or_default();
                    repos.push(format!("https://example.test/{tag}/{i}.git"));
                    let r = p
                        .call(
                            on,
                            "PUT",
                            "/api/v1/projects/race",
                            Some(&project("race", &repos, Some(&version))),
                        )
                        .await;
                    match r.status {
                        200 => break,
                        409 => conflicts += 1,
                        _ => panic!("{tag}: {r:?}"),
                    }
                }
            }
            conflicts
        }
    };
    let (ca, cb) = tokio::join!(writer(p.a.addr(), "a"), writer(p.b.addr(), "b"));
    let last = p.call(p.b.addr(), "GET", "/api/v1/projects/race", None).await;
    let repos = last.body["spec"]["sourceRepos"].as_array().unwrap();
    assert_eq!(
        repos.len(),
        2 * EACH,
        "every update kept ({ca} + {cb} conflicts): {repos:?}"
    );
    let same = p.call(p.a.addr(), "GET", "/api/v1/projects/race", None).await;
    assert_eq!(same.body, last.body);

    // Creates racing on both replicas: every one lands once, and both list them all.
    let create = |on: SocketAddr, tag: &'static str| {
        let p = &p;
        async move {
            for i in 0..10 {
                let body = application(&format!("{tag}-{i}"), "guestbook");
                let r = p.call(on, "POST", "/api/v1/applications", Some(&body)).await;
                assert_eq!(r.status, 200, "{r:?}");
            }
        }
    };
    tokio::join!(create(p.a.addr(), "a"), create(p.b.addr(), "b"));
    for on in [p.a.addr(), p.b.addr()] {
        let list = p.call(on, "GET", "/api/v1/applications", None).await;
        assert_eq!(list.body["items"].as_array().unwrap().len(), 20, "{on}");
    }
    // Creating the same name on both at once: exactly one wins.
    let (one, other) = (application("dup", "guestbook"), application("dup", "other"));
    let (x, y) = tokio::join!(
        p.call(p.a.addr(), "POST", "/api/v1/applications", Some(&one)),
        p.call(p.b.addr(), "POST", "/api/v1/applications", Some(&other))
    );
    // The loser either lost the commit (409, already exists) or saw the winner's object with
    // another spec (400, as upstream answers a create that differs from what exists).
    let mut statuses = [x.status, y.status];
    statuses.sort_unstable();
    assert!(statuses == [200, 400] || statuses == [200, 409], "{x:?} {y:?}");
    let winner = if x.status == 200 { "guestbook" } else { "other" };
    for on in [p.a.addr(), p.b.addr()] {
        let dup = p.call(on, "GET", "/api/v1/applications/dup", None).await;
        assert_eq!(dup.body["spec"]["source"]["path"], winner, "{on}: {dup:?}");
    }
}

/// SSE events of `/api/v1/stream/applications` from `on`, read line by line.
pub struct Sse {
    lines: tokio::io::Lines<BufReader<tokio::net::TcpStream>>,
}

impl Sse {
    pub async fn open(on: SocketAddr, token: &str, since: &str) -> Self {
        let mut conn = tokio::net::TcpStream::connect(on).await.unwrap();
        let request = format!(
            "GET /api/v1/stream/applications?resourceVersion={since} HTTP/1.1\r\nHost: {on}\r\n\
             Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut lines = BufReader::new(conn).lines();
        let status = lines.next_line().await.unwrap().unwrap();
        assert!(status.contains(" 200 "), "{status}");
        Self { lines }
    }

    /// The next event's `result` (type and application).
    pub async fn next(&mut self) -> Value {
        let read = async {
            loop {
                let line = self.lines.next_line().await.unwrap().expect("the stream is open");
                if let Some(data) = line.strip_prefix("data: ") {
                    let event: Value = serde_json::from_str(data).unwrap();
                    return event["result"].clone();
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("an event within 10 s")
    }
}

/// The type, name and version of a watch event.
fn seen(event: &Value) -> (String, String, String) {
    (
        event["type"].as_str().unwrap_or_default().to_owned(),
        event["application"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        event["application"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn watches_on_one_replica_see_the_other_replicas_writes_in_order_and_resume_from_its_versions() {
    use tiphys::cli::client::{Client, Target};
    use tiphys::cli::conn::ClientOpts;

    let p = pair("/it-rr-watch/").await;
    let first = p
        .call(
            p.a.addr(),
            "POST",
            "/api/v1/applications",
            Some(&application("w0", "guestbook")),
        )
        .await;
    let since = rv(&first);

    // Watchers on B, from the version A handed out: SSE, native gRPC and gRPC-Web.
    let mut sse = Sse::open(p.b.addr(), &p.token, &since).await;
    let home = tempfile::tempdir().unwrap();
    let mut grpc = Vec::new();
    for grpc_web in [false, true] {
        let opts = ClientOpts {
            server: Some(p.b.addr().to_string()),
            plaintext: true,
            grpc_web,
            auth_token: Some(p.token.clone()),
            ..ClientOpts::default()
        };
        let target = Target {
            opts,
            context: None,
            user: None,
        };
        let client = Client::connect_to(&home.path().join("config"), target)
            .await
            .unwrap();
        let stream = tiphys::cli::call::stream(
            &client,
            "watch",
            "/application.ApplicationService/Watch",
            &json!({"resourceVersion": since}),
        )
        .await
        .unwrap();
        grpc.push(stream);
    }

    // Writes on A: a create, an update, a delete.
    let mut expected = Vec::new();
    let w1 = p
        .call(
            p.a.addr(),
            "POST",
            "/api/v1/applications",
            Some(&application("w1", "guestbook")),
        )
        .await;
    expected.push(("ADDED".to_owned(), "w1".to_owned(), rv(&w1)));
    let mut changed = w1.body.clone();
    changed["spec"]["source"]["path"] = json!("changed");
    let w1b = p
        .call(p.a.addr(), "PUT", "/api/v1/applications/w1", Some(&changed))
        .await;
    expected.push(("MODIFIED".to_owned(), "w1".to_owned(), rv(&w1b)));
    let gone = p
        .call(p.a.addr(), "DELETE", "/api/v1/applications/w0", None)
        .await;
    assert_eq!(gone.status, 200, "{gone:?}");

    let mut events = Vec::new();
    for _ in 0..3 {
        events.push(seen(&sse.next().await));
    }
    assert_eq!(&events[..2], &expected[..], "SSE on B");
    assert_eq!((events[2].0.as_str(), events[2].1.as_str()), ("DELETED", "w0"));
    expected.push(events[2].clone());
    for stream in &mut grpc {
        let mut got = Vec::new();
        for _ in 0..3 {
            let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .expect("an event within 10 s")
                .unwrap()
                .expect("the stream is open");
            got.push(seen(&event));
        }
        assert_eq!(got, expected, "gRPC watch on B");
    }

    // A watch on A resumed from the version of B's event sees the same rest.
    let mut resumed = Sse::open(p.a.addr(), &p.token, &expected[0].2).await;
    assert_eq!(seen(&resumed.next().await), expected[1]);
    assert_eq!(seen(&resumed.next().await), expected[2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_and_restarted_serves_what_was_written_meanwhile() {
    let cluster = EtcdCluster::start(3);
    let config = config();
    let prefix = "/it-rr-restart/";
    let a = replica(&cluster, prefix, &config);
    let b = replica(&cluster, prefix, &config);
    let token = token_of(&login(a.addr(), "admin", PASSWORD, &[]).await);
    let write = |on: SocketAddr, name: String| {
        let token = token.clone();
        async move {
            let body = project(&name, &[], None);
            let r = call(on, "POST", "/api/v1/projects", Some(&token), &[], Some(&body)).await;
            assert_eq!(r.status, 200, "{r:?}");
        }
    };
    write(b.addr(), "before".into()).await;
    // B is killed (dropping it sends SIGKILL); A is unaffected and goes on writing.
    drop(b);
    for i in 0..5 {
        write(a.addr(), format!("k{i}")).await;
    }
    let b = replica(&cluster, prefix, &config);
    let list = |on: SocketAddr| {
        let token = token.clone();
        async move { call(on, "GET", "/api/v1/projects", Some(&token), &[], None).await }
    };
    let (from_a, from_b) = (list(a.addr()).await, list(b.addr()).await);
    assert_eq!(from_b.status, 200, "{from_b:?}");
    assert_eq!(
        from_a.body, from_b.body,
        "the restarted replica lists what A wrote"
    );
    assert_eq!(from_b.body["items"].as_array().unwrap().len(), 7);
    // And follows from there.
    write(a.addr(), "after".into()).await;
    let r = call(b.addr(), "GET", "/api/v1/projects/after", Some(&token), &[], None).await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// A TCP proxy on loopback in front of one etcd member: it delivers what etcd sends `delay`
/// late (in order), as across a slow link, and can be cut (every connection dropped, new ones
/// closed at once) and restored, as a network partition of one replica would.
struct Link {
    url: String,
    open: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Link {
    async fn start(target: &str, delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = target.trim_start_matches("http://").to_owned();
        let open = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (is_open, tasks) = (Arc::clone(&open), Arc::clone(&connections));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !is_open.load(Ordering::Acquire) {
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let task = tokio::spawn(relay(client, server, delay));
                tasks.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            url,
            open,
            connections,
        }
    }

    fn cut(&self) {
        self.open.store(false, Ordering::Release);
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::Release);
    }
}

/// Both directions of one proxied connection; etcd's side `delay` late. Aborting it drops both
/// sockets.
async fn relay(client: tokio::net::TcpStream, server: tokio::net::TcpStream, delay: Duration) {
    use tokio::io::AsyncReadExt as _;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let upstream = tokio::io::copy(&mut client_read, &mut server_write);
    let downstream = async {
        let mut buf = vec![0; 64 << 10];
        while let Ok(n) = server_read.read(&mut buf).await {
            if n == 0
                || tx
                    .send((tokio::time::Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
            {
                break;
            }
        }
        drop(tx);
    };
    let deliver = async {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if client_write.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::join!(upstream, downstream, deliver);
}

/// Replica A on etcd, and B whose etcd link delivers 300 ms late: B's view follows late.
struct SlowPair {
    _cluster: EtcdCluster,
    _config: tempfile::TempDir,
    _link: Link,
    a: TestServer,
    b: TestServer,
}

impl SlowPair {
    async fn start(prefix: &str) -> Self {
        let cluster = EtcdCluster::start(3);
        let config = config();
        let a = replica(&cluster, prefix, &config);
        let link = Link::start(&cluster.endpoints()[0], Duration::from_millis(300)).await;
        let args = [
            "--insecure",
            "--config-dir",
            config.path().to_str().unwrap(),
            "--etcd-endpoints",
            &link.url,
            "--etcd-prefix",
            prefix,
        ];
        let b = TestServer::start(&args);
        Self {
            _cluster: cluster,
            _config: config,
            _link: link,
            a,
            b,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_follows_etcd_late_still_reads_the_other_replicas_writes() {
    // (Bound whole: the cluster, the configuration and the link live as long as the test.)
    let pair = SlowPair::start("/it-rr-slow/").await;
    let (a, b) = (&pair.a, &pair.b);
    let token = token_of(&login(a.addr(), "admin", PASSWORD, &[]).await);
    for i in 0..3 {
        let body = project(&format!("s{i}"), &[], None);
        let written = call(
            a.addr(),
            "POST",
            "/api/v1/projects",
            Some(&token),
            &[],
            Some(&body),
        )
        .await;
        let path = format!("/api/v1/projects/s{i}");
        let read = call(b.addr(), "GET", &path, Some(&token), &[], None).await;
        assert_eq!(
            rv(&read),
            rv(&written),
            "B waited for its view to reach A's write"
        );
    }
}

/// A project token deleted on A is refused by B at its next request, even when B's view follows
/// etcd late: B checks the project's roles only once its view has caught up (before, B read the
/// role from its view while the token check's store read ran, and let the token in).
#[tokio::test(flavor = "multi_thread")]
async fn a_project_token_deleted_on_one_replica_is_refused_at_once_by_a_replica_that_follows_late() {
    // (Bound whole: the cluster, the configuration and the link live as long as the test.)
    let pair = SlowPair::start("/it-rr-ptoken/").await;
    let (a, b) = (&pair.a, &pair.b);
    let admin = token_of(&login(a.addr(), "admin", PASSWORD, &[]).await);
    let body = json!({"project": {"metadata": {"name": "pt"}, "spec": {"roles": [
        {"name": "ci", "policies": ["p, proj:pt:ci, applications, get, pt/*, allow"]}]}}});
    let r = call(
        a.addr(),
        "POST",
        "/api/v1/projects",
        Some(&admin),
        &[],
        Some(&body),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    let path = "/api/v1/projects/pt/roles/ci/token";
    let made = call(a.addr(), "POST", path, Some(&admin), &[], Some(&json!({}))).await;
    assert_eq!(made.status, 200, "{made:?}");
    let token = made.body["token"].as_str().unwrap().to_owned();
    let read = call(b.addr(), "GET", "/api/v1/applications", Some(&token), &[], None).await;
    assert_eq!(
        read.status, 200,
        "B accepts the token while the role records it: {read:?}"
    );
    let project = call(a.addr(), "GET", "/api/v1/projects/pt", Some(&admin), &[], None).await;
    let issued = &project.body["spec"]["roles"][0]["jwtTokens"][0];
    let (iat, jti) = (issued["iat"].as_i64().unwrap(), issued["id"].as_str().unwrap());
    let gone = format!("/api/v1/projects/pt/roles/ci/token/{iat}?id={jti}");
    let r = call(a.addr(), "DELETE", &gone, Some(&admin), &[], None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let refused = call(b.addr(), "GET", "/api/v1/applications", Some(&token), &[], None).await;
    assert_eq!(
        refused.status, 401,
        "B let a deleted project token in: {refused:?}"
    );
}

/// `/healthz` of `on` until it answers `want` (bounded).
async fn health_becomes(on: SocketAddr, want: &str, within: Duration) -> String {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let r = call(on, "GET", "/healthz", None, &[], None).await;
        let text = r.body.as_str().unwrap_or_default().to_owned();
        if text.starts_with(want) {
            assert_eq!(r.status, 200, "a degraded replica stays in rotation: {text}");
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/healthz still says {text:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_etcd_down_reads_are_answered_writes_refused_naming_etcd_and_all_recovers_by_itself() {
    let mut p = pair("/it-rr-down/").await;
    let body = project("kept", &[], None);
    let r = p.call(p.a.addr(), "POST", "/api/v1/projects", Some(&body)).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        health_becomes(p.b.addr(), "ok", Duration::from_secs(5)).await,
        "ok\n"
    );

    for i in 0..3 {
        p._cluster.kill(i);
    }
    // Reads come from the view, on both replicas.
    for on in [p.a.addr(), p.b.addr()] {
        let started = std::time::Instant::now();
        let r = p.call(on, "GET", "/api/v1/projects/kept", None).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
    }
    // Writes are refused, and the message says why.
    let body = project("while-down", &[], None);
    let r = p.call(p.a.addr(), "POST", "/api/v1/projects", Some(&body)).await;
    assert_eq!(r.status, 503, "{r:?}");
    let message = r.body["message"].as_str().unwrap();
    assert!(message.contains("etcd at http://127.0.0.1:"), "{message}");
    let text = health_becomes(p.b.addr(), "degraded", Duration::from_secs(40)).await;
    assert!(text.contains("etcd"), "{text}");
    let r = p.call(p.b.addr(), "GET", "/api/v1/projects", None).await;
    assert_eq!(r.status, 200, "a degraded replica answers reads at once: {r:?}");

    p._cluster.restart_all();
    // No restart of tiphys: the next write goes through (bounded wait for the clients to
    // reconnect), and the other replica reads it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let written = loop {
        let r = p.call(p.a.addr(), "POST", "/api/v1/projects", Some(&body)).await;
        if r.status == 200 {
            break r;
        }
        assert!(tokio::time::Instant::now() < deadline, "no recovery: {r:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Once B reaches etcd again (its /healthz says so), it reads A's write.
    health_becomes(p.b.addr(), "ok", Duration::from_secs(30)).await;
    let read = p
        .call(p.b.addr(), "GET", "/api/v1/projects/while-down", None)
        .await;
    assert_eq!(read.status, 200, "{read:?}\n{}", p.b.logs());
    assert_eq!(rv(&read), rv(&written));
    health_becomes(p.a.addr(), "ok", Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_etcd_leader_while_both_replicas_write_loses_no_acknowledged_write() {
    let Pair {
        _cluster: mut cluster,
        _config,
        a,
        b,
        token,
    } = pair("/it-rr-leader/").await;
    const EACH: usize = 30;
    let stop_after = tokio::sync::Barrier::new(3);
    let writer = |on: SocketAddr, tag: &'static str| {
        let (token, stop_after) = (&token, &stop_after);
        async move {
            let mut acknowledged = Vec::new();
            let mut retries = 0;
            for i in 0..EACH {
                if i == EACH / 3 {
                    stop_after.wait().await;
                }
                let name = format!("{tag}-{i}");
                let body = project(&name, &[], None);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                loop {
                    let r = call(on, "POST", "/api/v1/projects", Some(token), &[], Some(&body)).await;
                    match r.status {
                        200 => break,
                        // An attempt whose answer was lost in the election landed after all.
                        409 if retries > 0 => break,
                        503 => retries += 1,
                        _ => panic!("{name}: {r:?}"),
                    }
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "{name} never acknowledged: {r:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                acknowledged.push(name);
            }
            (acknowledged, retries)
        }
    };
    let leader = cluster.leader();
    let killer = async {
        stop_after.wait().await;
        cluster.kill(leader);
    };
    let ((from_a, ra), (from_b, rb), ()) = tokio::join!(writer(a.addr(), "a"), writer(b.addr(), "b"), killer);
    assert_eq!(from_a.len() + from_b.len(), 2 * EACH, "every write acknowledged");
    // The servers ride out the election themselves: clients see latency, not errors.
    assert_eq!((ra, rb), (0, 0), "writes that had to be retried by the client");
    for on in [a.addr(), b.addr()] {
        let list = call(on, "GET", "/api/v1/projects", Some(&token), &[], None).await;
        assert_eq!(list.status, 200, "{list:?}");
        let names: Vec<&str> = list.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["metadata"]["name"].as_str())
            .collect();
        for name in from_a.iter().chain(&from_b) {
            assert!(names.contains(&name.as_str()), "{name} missing on {on}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_cut_off_past_etcds_compaction_loads_afresh_and_ends_its_watches() {
    let cluster = EtcdCluster::start(3);
    let config = config();
    let prefix = "/it-rr-compact/";
    let a = replica(&cluster, prefix, &config);
    let link = Link::start(&cluster.endpoints()[0], Duration::ZERO).await;
    let args = [
        "--insecure",
        "--config-dir",
        config.path().to_str().unwrap(),
        "--etcd-endpoints",
        &link.url,
        "--etcd-prefix",
        prefix,
        "--etcd-request-timeout",
        "2s",
    ];
    let b = TestServer::start(&args);
    let token = token_of(&login(a.addr(), "admin", PASSWORD, &[]).await);
    let create = |on: SocketAddr, name: &str| {
        let body = application(name, "guestbook");
        let token = token.clone();
        async move { call(on, "POST", "/api/v1/applications", Some(&token), &[], Some(&body)).await }
    };
    let first = create(a.addr(), "c0").await;
    let since = rv(&first);
    let mut watch = Sse::open(b.addr(), &token, &since).await;

    // B loses etcd; A writes on, and etcd compacts everything B has not seen.
    link.cut();
    for i in 1..4 {
        assert_eq!(create(a.addr(), &format!("c{i}")).await.status, 200);
    }
    let status = cluster.etcdctl(&["endpoint", "status", "-w", "json"]);
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    let revision = status[0]["Status"]["header"]["revision"].as_u64().unwrap();
    let out = cluster.etcdctl(&["compact", &revision.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    link.restore();

    // B's view loads afresh: its watcher is ended rather than left with a gap ...
    let ended = tokio::time::timeout(Duration::from_secs(40), async {
        loop {
            match watch.lines.next_line().await {
                Ok(Some(_)) => {}
                _ => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch on B ended once its view loaded afresh");
    assert!(b.logs().contains("loads afresh"), "{}", b.logs());
    // ... and B serves everything A wrote, and follows on.
    let list = call(b.addr(), "GET", "/api/v1/applications", Some(&token), &[], None).await;
    assert_eq!(list.body["items"].as_array().unwrap().len(), 4, "{list:?}");
    let later = create(a.addr(), "c4").await;
    let read = call(
        b.addr(),
        "GET",
        "/api/v1/applications/c4",
        Some(&token),
        &[],
        None,
    )
    .await;
    assert_eq!(rv(&read), rv(&later));
    // A client that resumes from the version it had is told to list again, never skips.
    let path = format!("/api/v1/stream/applications?resourceVersion={since}");
    let r = call(b.addr(), "GET", &path, Some(&token), &[], None).await;
    assert_eq!(r.status, 409, "{r:?}");
    assert!(
        r.body["message"].as_str().unwrap().contains("list again"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_object_near_the_size_limit_fits_etcds_default_request_limit() {
    let p = pair("/it-rr-large/").await;
    // About 1.4 MiB of JSON: with its encoding beside it, one transaction would exceed etcd's
    // default 1.5 MiB request limit.
    let mut app = application("large", "guestbook");
    app["spec"]["source"]["helm"] = json!({"values": "x".repeat(1_400_000)});
    let written = p
        .call(p.a.addr(), "POST", "/api/v1/applications", Some(&app))
        .await;
    assert_eq!(written.status, 200, "{:?}", written.body["message"]);
    let read = p
        .call(p.b.addr(), "GET", "/api/v1/applications/large", None)
        .await;
    assert_eq!(rv(&read), rv(&written));
    assert_eq!(
        read.body["spec"]["source"]["helm"]["values"],
        app["spec"]["source"]["helm"]["values"]
    );
}
