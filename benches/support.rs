//! What the load benchmarks share: a server process that is stopped (by its PID) when dropped,
//! started and waited for through its ready file; client connections (HTTP/1.1 and HTTP/2,
//! plaintext or TLS); the seeded applications and the policy of a user in 50 groups; timed
//! lists and watch streams; percentiles, and a process's RSS and CPU time from /proc.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tiphys::registry::{Change, Key, Kind, Registry};

pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` (a `tiphys server` told to write `ready`) with its log in `log`, and waits up
/// to `wait` for the ready file; returns the server and when it was spawned.
pub fn start(
    mut command: Command,
    ready: &Path,
    log: &Path,
    wait: Duration,
) -> anyhow::Result<(Server, Instant)> {
    let _ = std::fs::remove_file(ready);
    let spawned = Instant::now();
    let child = command
        .arg("--ready-file")
        .arg(ready)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .context("cannot start the server")?;
    let mut server = Server {
        child,
        addr: String::new(),
    };
    while spawned.elapsed() < wait {
        if let Ok(text) = std::fs::read_to_string(ready)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            server.addr = format!("127.0.0.1:{}", v["port"]);
            return Ok((server, spawned));
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    bail!("the server did not become ready; see {}", log.display())
}

pub type Http1 = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
pub type Http2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

pub async fn http1(addr: &str) -> anyhow::Result<Http1> {
    Dial::plain(addr).http1().await
}

/// A client connection's byte stream: TCP, or TLS over TCP.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// How to reach a server on loopback: plaintext, or TLS with the CA that signed its
/// certificate (and a client certificate, for the Kubernetes API server).
#[derive(Clone)]
pub struct Dial {
    pub addr: String,
    /// Connectors offering ALPN h2 and http/1.1.
    tls: Option<(tokio_rustls::TlsConnector, tokio_rustls::TlsConnector)>,
}

impl Dial {
    pub fn plain(addr: &str) -> Self {
        Self {
            addr: addr.to_owned(),
            tls: None,
        }
    }

    /// TLS, trusting the certificates in the PEM file `ca`; `identity` is a client certificate
    /// and its key (PEM files).
    pub fn tls(addr: &str, ca: &Path, identity: Option<(&Path, &Path)>) -> anyhow::Result<Self> {
        use rustls_pki_types::pem::PemObject as _;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca).with_context(|| ca.display().to_string())? {
            roots.add(cert?)?;
        }
        let connector = |alpn: &[u8]| -> anyhow::Result<tokio_rustls::TlsConnector> {
            let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots.clone());
            let mut config = match identity {
                Some((cert, key)) => builder.with_client_auth_cert(
                    CertificateDer::pem_file_iter(cert)?.collect::<Result<_, _>>()?,
                    PrivateKeyDer::from_pem_file(key)?,
                )?,
                None => builder.with_no_client_auth(),
            };
            config.alpn_protocols = vec![alpn.to_vec()];
            Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
        };
        Ok(Self {
            addr: addr.to_owned(),
            tls: Some((connector(b"h2")?, connector(b"http/1.1")?)),
        })
    }

    /// `http://ADDR` or `https://ADDR`.
    pub fn base(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub async fn io(&self, h2: bool) -> anyhow::Result<Box<dyn Io>> {
        let stream = tokio::net::TcpStream::connect(&self.addr).await?;
        // Without it Nagle holds a request's DATA frame until its headers are acknowledged (a
        // delayed ACK: 40 ms).
        stream.set_nodelay(true)?;
        let Some((h2_tls, h1_tls)) = &self.tls else {
            return Ok(Box::new(stream));
        };
        let ip: std::net::SocketAddr = self.addr.parse()?;
        let name = rustls_pki_types::ServerName::IpAddress(ip.ip().into());
        let connector = if h2 { h2_tls } else { h1_tls };
        Ok(Box::new(connector.connect(name, stream).await?))
    }

    pub async fn http1(&self) -> anyhow::Result<Http1> {
        let (sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(self.io(false).await?)).await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// HTTP/2 with windows large enough for a 50 MB list not to wait on them.
    pub async fn http2(&self) -> anyhow::Result<Http2> {
        let (sender, conn) = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(16 << 20)
            .handshake(TokioIo::new(self.io(true).await?))
            .await?;
        tokio::spawn(conn);
        Ok(sender)
    }
}

/// Rate limits off in every benchmark's settings: they measure the server at full load (one
/// caller, as fast as it goes), which the limits exist to refuse.
pub const NO_RATE_LIMITS: (&str, &str) = ("tiphys.ratelimit.enabled", "false");

/// A `--config-dir` with one local account `bench` (password `password`, bcrypt cost 4),
/// `policy` as `policy.csv`, and no rate limits ([`NO_RATE_LIMITS`]).
pub fn write_config(dir: &Path, password: &str, policy: &str) -> anyhow::Result<()> {
    write_settings(
        dir,
        &json!({"accounts.bench": "login", NO_RATE_LIMITS.0: NO_RATE_LIMITS.1}),
        &json!({"policy.csv": policy}),
        &json!({"accounts.bench.password": bcrypt::hash(password, 4)?}),
    )
}

/// A `--config-dir` of the three manifests: `cm` as argocd-cm's data, `rbac` as
/// argocd-rbac-cm's, `secret` as argocd-secret's stringData.
pub fn write_settings(dir: &Path, cm: &Value, rbac: &Value, secret: &Value) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let manifest = |kind: &str, name: &str, key: &str, data: &Value| {
        serde_yaml_ng::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, key: data}),
        )
    };
    let files = [
        ("argocd-cm.yaml", "ConfigMap", "argocd-cm", "data", cm),
        ("argocd-rbac-cm.yaml", "ConfigMap", "argocd-rbac-cm", "data", rbac),
        (
            "argocd-secret.yaml",
            "Secret",
            "argocd-secret",
            "stringData",
            secret,
        ),
    ];
    for (file, kind, name, key, data) in files {
        std::fs::write(dir.join(file), manifest(kind, name, key, data)?)?;
    }
    Ok(())
}

/// The policy of the issue 6 and 36 benchmarks: `bench` is a member of 50 roles (`g, bench,
/// group-N`: a local account has no token groups, so role membership stands in for them),
/// `noise` lines grant clusters to those roles, and the only grants on applications (`get` and
/// `update` on `*/*`) come through the last role. 50 + `noise` + 2 lines.
pub fn group_policy(noise: usize) -> String {
    let mut policy = String::new();
    for n in 0..50 {
        policy.push_str(&format!("g, bench, group-{n}\n"));
    }
    for n in 0..noise {
        policy.push_str(&format!(
            "p, group-{}, clusters, get, https://cluster-{n}.example.test, allow\n",
            n % 60
        ));
    }
    policy.push_str("p, group-49, applications, get, */*, allow\n");
    policy.push_str("p, group-49, applications, update, */*, allow\n");
    policy
}

/// The seeded application number `i` (`app-0000i`, about 5 KB: a Helm values block makes up
/// most of it, as in real applications), as the registry stores it: no kind, no namespace.
pub fn app(i: usize) -> Value {
    let values: String = (0..140)
        .map(|n| format!("key{n}: value-{i}-{n}-padding-text\n"))
        .collect();
    json!({
        "metadata": {"name": format!("app-{i:05}"),
                     "labels": {"team": format!("team-{}", i % 20), "tier": "web"},
                     "annotations": {"note": "benchmark application"}},
        "spec": {"project": "default",
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{}", i % 50)},
                 "source": {"repoURL": "https://git.example.test/org/apps.git", "path": format!("apps/{i}"),
                            "targetRevision": "HEAD", "helm": {"values": values}},
                 "syncPolicy": {"syncOptions": ["CreateNamespace=true"]}}
    })
}

/// Writes the applications `range` into `store` through the registry, `batch` per write, in
/// namespace `argocd`; returns their average JSON size.
pub async fn seed(
    store: Arc<dyn tiphys::store::Store>,
    batch: usize,
    range: std::ops::Range<usize>,
) -> anyhow::Result<usize> {
    // The keys a server on this store starts with (no applications are sealed, but be exact).
    let keys = tiphys::state::secrets_keys(&*store, &tiphys::config::Settings::default(), None, true).await?;
    let registry = Registry::open(store, Arc::new(keys)).await?;
    let (count, mut bytes) = (range.len(), 0);
    for start in range.clone().step_by(batch) {
        let changes = (start..(start + batch).min(range.end))
            .map(|i| {
                let value = app(i);
                bytes += value.to_string().len();
                Change::Create {
                    key: Key::new(Kind::Application, "argocd", &format!("app-{i:05}")),
                    value,
                }
            })
            .collect();
        registry.apply(changes).await?;
    }
    Ok(bytes / count.max(1))
}

/// Logs in over REST: the session token.
pub async fn login(dial: &Dial, username: &str, password: &str) -> anyhow::Result<String> {
    let mut client = dial.http1().await?;
    let body = json!({"username": username, "password": password}).to_string();
    let req = http::Request::post("/api/v1/session")
        .header("host", "bench")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))?;
    let response = client.send_request(req).await?;
    let bytes = response.into_body().collect().await?.to_bytes();
    let value: Value = serde_json::from_slice(&bytes)?;
    value["token"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("login failed: {value}"))
}

/// A REST list of applications (`/api/v1/applications{query}`): (time to the first body byte,
/// time to the end, body bytes).
pub async fn rest_list(
    client: &mut Http1,
    token: &str,
    query: &str,
) -> anyhow::Result<(Duration, Duration, usize)> {
    client.ready().await?;
    let started = Instant::now();
    let req = http::Request::get(format!("/api/v1/applications{query}"))
        .header("host", "bench")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))?;
    let response = client.send_request(req).await?;
    if !response.status().is_success() {
        bail!("list answered {}", response.status());
    }
    let mut body = response.into_body();
    let mut first = None;
    let mut size = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            first.get_or_insert_with(|| started.elapsed());
            size += data.len();
        }
    }
    Ok((first.unwrap_or_default(), started.elapsed(), size))
}

/// What a unary gRPC call over a raw HTTP/2 connection gave: when its first body byte came,
/// when its end, the body (frame headers included) and its grpc-status.
pub struct GrpcReply {
    pub first: Duration,
    pub total: Duration,
    pub body: Vec<u8>,
    pub status: Option<String>,
}

/// A unary gRPC call of `path` with `message` (unframed) over `h2`.
pub async fn grpc_unary(
    h2: &mut Http2,
    base: &str,
    path: &str,
    token: Option<&str>,
    message: &[u8],
) -> anyhow::Result<GrpcReply> {
    h2.ready().await?;
    let started = Instant::now();
    let mut req = http::Request::post(format!("{base}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        req = req.header("token", token);
    }
    let response = h2.send_request(req.body(Full::new(grpc_frame(message)))?).await?;
    let mut status = response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = response.into_body();
    let (mut first, mut bytes) = (None, Vec::new());
    while let Some(frame) = body.frame().await {
        match frame?.into_data() {
            Ok(data) => {
                first.get_or_insert_with(|| started.elapsed());
                bytes.extend_from_slice(&data);
            }
            Err(frame) => {
                if let Some(trailers) = frame.trailers_ref() {
                    status = trailers
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                }
            }
        }
    }
    Ok(GrpcReply {
        first: first.unwrap_or_default(),
        total: started.elapsed(),
        body: bytes,
        status,
    })
}

/// A gRPC length-prefixed message.
pub fn grpc_frame(message: &[u8]) -> Bytes {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// `ApplicationQuery { name }` (field 1), encoded.
pub fn application_query(name: &str) -> Vec<u8> {
    let mut query = Vec::new();
    prost::encoding::string::encode(1, &name.to_owned(), &mut query);
    query
}

pub fn memfind(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Reads `body` until `marker` appears in it (keeping at most about 1 MB): when it did. The
/// first data signals `ready` (the stream's initial events).
async fn await_marker(
    mut body: hyper::body::Incoming,
    marker: &str,
    ready: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Instant> {
    let mut signalled = false;
    let mut seen = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            if !signalled {
                signalled = true;
                let _ = ready.send(()).await;
            }
            seen.extend_from_slice(&data);
            if memfind(&seen, marker.as_bytes()) {
                return Ok(Instant::now());
            }
            if seen.len() > (1 << 20) {
                seen.drain(..seen.len() - marker.len());
            }
        }
    }
    bail!("the stream ended")
}

/// Waits on one SSE watch of application `name` (HTTP/1.1) for the event that names `marker`;
/// returns when it arrived.
pub async fn sse_watcher(
    dial: Dial,
    token: String,
    name: &'static str,
    marker: String,
    ready: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Instant> {
    let mut client = dial.http1().await?;
    let req = http::Request::get(format!("/api/v1/stream/applications?name={name}"))
        .header("host", "bench")
        .header("accept", "text/event-stream")
        .header("cookie", format!("argocd.token={token}"))
        .body(Full::new(Bytes::new()))?;
    let response = client.send_request(req).await?;
    await_marker(response.into_body(), &marker, ready)
        .await
        .context("SSE")
}

/// The same over gRPC-Web (HTTP/1.1).
pub async fn grpc_web_watcher(
    dial: Dial,
    token: String,
    name: &'static str,
    marker: String,
    ready: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Instant> {
    let mut client = dial.http1().await?;
    let req = http::Request::post("/application.ApplicationService/Watch")
        .header("host", "bench")
        .header("content-type", "application/grpc-web+proto")
        .header("token", token)
        .body(Full::new(grpc_frame(&application_query(name))))?;
    let response = client.send_request(req).await?;
    await_marker(response.into_body(), &marker, ready)
        .await
        .context("gRPC-Web")
}

/// The same over native gRPC, one stream of the HTTP/2 connection `h2`.
pub async fn grpc_h2_watcher(
    mut h2: Http2,
    base: String,
    token: String,
    name: &'static str,
    marker: String,
    ready: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Instant> {
    h2.ready().await?;
    let req = http::Request::post(format!("{base}/application.ApplicationService/Watch"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("token", token)
        .body(Full::new(grpc_frame(&application_query(name))))?;
    let response = h2.send_request(req).await?;
    await_marker(response.into_body(), &marker, ready)
        .await
        .context("gRPC")
}

pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

pub fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<34} p50 {:>8.1} ms  p95 {:>8.1} ms  max {:>8.1} ms  (n={})",
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        percentile(&samples, 0.95).as_secs_f64() * 1e3,
        samples.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        samples.len()
    );
}

/// A field of /proc/PID/status in KiB (`VmRSS:`, `VmHWM:`).
pub fn rss_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// utime + stime of the process (all its threads) in clock ticks, from /proc/PID/stat.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) in parentheses; utime and
    // stime are fields 14 and 15, so 12 and 13 after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}
