//! tiphys beside upstream argocd-server (issue 36): the same data, the same policy, the same
//! certificate, on this machine, in one run.
//!
//! `argocd_peer TIPHYS_BIN` (`bash benches/argocd_peer.sh` builds and runs it)
//!
//! 1. Starts the real control plane (`tests/e2e/controlplane.py`: etcd, kube-apiserver, Argo
//!    CD's CRDs and settings, Redis, argocd-repo-server; no controller) with a local account
//!    `bench` and a policy of 2,000 lines in which `bench` is a member of 50 roles
//!    (`support::group_policy`), and writes the same settings as tiphys's `--config-dir`.
//! 2. Creates 1,000 applications (`support::app`) in the API server (server-side apply, in
//!    batches) and the same 1,000 in tiphys's embedded store.
//! 3. Starts each server `PEER_STARTS` times: time from exec to the first answered `/healthz`,
//!    and the RSS one second later (idle).
//! 4. h2load, in rounds, against both: logins (REST and gRPC), gRPC Version and Get, REST Get;
//!    req/s, server CPU per request (utime + stime from /proc/PID/stat over the measured window)
//!    and the server's RSS in the middle of the window.
//! 5. Lists of 1,000 applications, then (after 9,000 more, in both) of 10,000: REST and gRPC,
//!    first byte and whole body, as `admin` and as `bench`; CPU per list and RSS.
//! 6. Watch fan-out: WATCHERS streams (SSE, gRPC, gRPC-Web) on one application; one write
//!    (for argocd-server a merge patch of the Application in the API server, for tiphys a
//!    merge patch through its REST API); the time until each stream has it.
//! 7. Idle keep-alive connections: CONNS TLS HTTP/2 connections that made one request each,
//!    RSS delta / CONNS.
//!
//! Every ratio is tiphys / argocd-server, taken within a round; the tables show medians over
//! rounds. Knobs (environment): PEER_ROUNDS (5), PEER_SLOW_ROUNDS (3, the 10,000 lists and the
//! fan-out), PEER_STARTS (3), PEER_DURATION (4 s of h2load after 1 s of warm-up),
//! PEER_WATCHERS (1000), PEER_CONNS (1000), PEER_TIMEOUT (120 s per request), PEER_TIPHYS_KUBE
//! (0; 1: tiphys runs `--kube` on the plane's own Applications, and the fan-out's write is the
//! same API server patch for both).
//!
//! Every process started here is stopped by its PID (the control plane's by its process group).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};
use tiphys::store::FileStore;

// Test support: panics on a failed setup on purpose.
#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/controlplane.rs"]
mod controlplane;

#[allow(dead_code)]
mod support;

use self::controlplane::{ControlPlane, Options, UpstreamServer};
use self::support::{Dial, Http2, Server};

const PASSWORD: &str = "bench-password-1";
/// `support::group_policy`'s noise lines: 50 + 1,948 + 2 = 2,000 lines.
const NOISE_LINES: usize = 1_948;
const WATCHED: &str = "app-00000";
const NAMESPACE: &str = "argocd";
/// At its default level (info) argocd-server logs two lines per gRPC call; tiphys runs with
/// RUST_LOG=warn, so both log only what goes wrong.
const UPSTREAM_ARGS: &[&str] = &["--loglevel=warn"];

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Knobs {
    rounds: usize,
    slow_rounds: usize,
    starts: usize,
    duration: u64,
    watchers: usize,
    conns: usize,
    timeout: Duration,
}

/// One server under test, as the measurements see it.
struct Target {
    name: &'static str,
    dial: Dial,
    pid: u32,
    admin: String,
    bench: String,
}

/// Per-round figures of one quantity for both servers.
struct Row {
    name: String,
    unit: &'static str,
    tiphys: Vec<f64>,
    argocd: Vec<f64>,
}

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
}

impl Table {
    fn add(&mut self, name: &str, unit: &'static str, server: &str, value: f64) {
        let i = match self.rows.iter().position(|r| r.name == name) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    name: name.to_owned(),
                    unit,
                    tiphys: vec![],
                    argocd: vec![],
                });
                self.rows.len() - 1
            }
        };
        let row = &mut self.rows[i];
        if server == "tiphys" {
            row.tiphys.push(value);
        } else {
            row.argocd.push(value);
        }
        println!("  {server:<13} {name}: {value:.2} {unit}");
    }

    fn print(&self) {
        println!();
        println!(
            "| measurement | unit | tiphys | argocd-server | tiphys / argocd-server (lowest–highest round) | rounds |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: |");
        for row in &self.rows {
            let ratios: Vec<f64> = row
                .tiphys
                .iter()
                .zip(&row.argocd)
                .filter(|(_, a)| **a > 0.0)
                .map(|(t, a)| t / a)
                .collect();
            let (low, high) = ratios
                .iter()
                .fold((f64::INFINITY, 0f64), |(l, h), r| (l.min(*r), h.max(*r)));
            println!(
                "| {} | {} | {} | {} | {} ({}–{}) | {} |",
                row.name,
                row.unit,
                fmt(median(&row.tiphys)),
                fmt(median(&row.argocd)),
                ratio(median(&ratios)),
                ratio(low),
                ratio(high),
                ratios.len()
            );
        }
    }
}

fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn fmt(v: f64) -> String {
    match v {
        v if v.is_nan() => "—".to_owned(),
        v if v >= 100.0 => format!("{v:.0}"),
        v if v >= 10.0 => format!("{v:.1}"),
        v => format!("{v:.2}"),
    }
}

fn ratio(v: f64) -> String {
    match v {
        v if !v.is_finite() || v == 0.0 => "—".to_owned(),
        v if v >= 10.0 => format!("{v:.1}"),
        v if v >= 0.1 => format!("{v:.2}"),
        v => format!("{v:.3}"),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn rss_mib(pid: u32) -> f64 {
    mib(support::rss_kib(pid, "VmRSS:").unwrap_or(0))
}

/// CPU time of `pid` in ms between two readings of its ticks (100 Hz on Linux).
fn cpu_ms(pid: u32, since: u64) -> f64 {
    support::cpu_ticks(pid).unwrap_or(since).saturating_sub(since) as f64 * 10.0
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Polls `GET /healthz` over TLS every 20 ms until it answers 200 (within `wait`).
async fn healthy(dial: &Dial, wait: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(mut client) = dial.http1().await {
            let req = http::Request::get("/healthz")
                .header("host", "bench")
                .body(Full::new(Bytes::new()))?;
            if let Ok(response) = client.send_request(req).await
                && response.status().is_success()
            {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("{} did not answer /healthz within {wait:?}", dial.addr)
}

struct Tiphys {
    bin: PathBuf,
    work: PathBuf,
    pki: controlplane::Pki,
    serving: (PathBuf, PathBuf),
    /// PEER_TIPHYS_KUBE=1: tiphys serves the plane's own Applications (`--kube` with this
    /// kubeconfig) instead of a copy of them in its embedded store.
    kube: Option<PathBuf>,
}

impl Tiphys {
    /// Starts tiphys with TLS (the plane's serving certificate) on the seeded data dir; returns
    /// it and the time from spawn to its first answered `/healthz`.
    async fn start(&self) -> anyhow::Result<(Server, Dial, Duration)> {
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(&self.bin);
        command
            .args(["server", "--address", "127.0.0.1", "--port", &port.to_string()])
            .args(["--metrics-address", "127.0.0.1", "--metrics-port", "0"])
            .arg("--data-dir")
            .arg(self.work.join("data"))
            .arg("--config-dir")
            .arg(self.work.join("config"))
            .arg("--tls-cert")
            .arg(&self.serving.0)
            .arg("--tls-key")
            .arg(&self.serving.1)
            .args(self.kube.iter().flat_map(|kubeconfig| {
                [
                    "--kube".into(),
                    "--namespace".into(),
                    NAMESPACE.into(),
                    "--kubeconfig".into(),
                    kubeconfig.clone().into_os_string(),
                ]
            }))
            // Every watcher is the one `bench` account; by default a caller may hold 100 watches.
            .env("TIPHYS_MAX_WATCHES_PER_CALLER", "5000")
            .env("RUST_LOG", "warn")
            .env("TIPHYS_SHUTDOWN_DELAY", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.work.join("tiphys.log"))?);
        let spawned = Instant::now();
        let child = command.spawn().context("cannot start tiphys")?;
        let server = Server {
            child,
            addr: addr.clone(),
        };
        let dial = Dial::tls(&addr, &self.pki.ca, None)?;
        healthy(&dial, Duration::from_secs(60)).await?;
        Ok((server, dial, spawned.elapsed()))
    }
}

// ---- h2load --------------------------------------------------------------------------------

struct Load {
    rps: f64,
    cpu_us: f64,
    rss: f64,
}

/// h2load against `target` for `duration` s after 1 s of warm-up; the server's CPU time over
/// the measured window per succeeded request, and its RSS in the middle of the window.
async fn h2load(
    target: &Target,
    path: &str,
    args: &[String],
    duration: u64,
    log: &Path,
) -> anyhow::Result<Load> {
    let url = format!("{}{path}", target.dial.base());
    let seconds = duration.to_string();
    let mut cmd = Command::new("h2load");
    cmd.args(["-t", "1", "-D", seconds.as_str(), "--warm-up-time", "1"])
        .args(args)
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log)?)
        .stderr(Stdio::null());
    let mut child = cmd.spawn().context("h2load (nghttp2-client)")?;
    // The connections, then the warm-up: the CPU window starts when h2load starts counting.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let ticks = support::cpu_ticks(target.pid).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(duration * 500)).await;
    let rss = rss_mib(target.pid);
    let deadline = Instant::now() + Duration::from_secs(duration + 60);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("h2load {url} did not finish");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cpu = cpu_ms(target.pid, ticks);
    let out = std::fs::read_to_string(log)?;
    let rps: f64 = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("finished in ")?
                .split(", ")
                .nth(1)?
                .strip_suffix(" req/s")?
                .parse()
                .ok()
        })
        .with_context(|| format!("no req/s in {}", log.display()))?;
    let succeeded: f64 = out
        .lines()
        .find_map(|l| {
            let l = l.strip_prefix("requests: ")?;
            l.split(", ")
                .find_map(|p| p.strip_suffix(" succeeded")?.parse().ok())
        })
        .with_context(|| format!("no succeeded count in {}", log.display()))?;
    if succeeded == 0.0 {
        bail!("h2load {url}: no request succeeded:\n{out}");
    }
    // h2load's req/s counts every answer; only those that succeeded (2xx) count here.
    let _ = rps;
    Ok(Load {
        rps: succeeded / duration as f64,
        cpu_us: cpu * 1e3 / succeeded,
        rss,
    })
}

struct Scenario {
    name: &'static str,
    path: &'static str,
    /// h2load's -c and -m.
    clients: u32,
    streams: u32,
    /// (content-type, body file) for a POST.
    body: Option<(&'static str, PathBuf)>,
    grpc: bool,
    token: bool,
}

fn scenarios(work: &Path) -> anyhow::Result<Vec<Scenario>> {
    let login = json!({"username": "bench", "password": PASSWORD}).to_string();
    std::fs::write(work.join("login.json"), &login)?;
    // SessionCreateRequest { username = 1, password = 2 }
    let mut create = Vec::new();
    prost::encoding::string::encode(1, &"bench".to_owned(), &mut create);
    prost::encoding::string::encode(2, &PASSWORD.to_owned(), &mut create);
    std::fs::write(work.join("create.bin"), support::grpc_frame(&create))?;
    std::fs::write(work.join("empty.bin"), support::grpc_frame(&[]))?;
    std::fs::write(
        work.join("get.bin"),
        support::grpc_frame(&support::application_query(WATCHED)),
    )?;
    let grpc = "application/grpc";
    Ok(vec![
        Scenario {
            name: "login, REST POST /api/v1/session",
            path: "/api/v1/session",
            clients: 1,
            streams: 1,
            body: Some(("application/json", work.join("login.json"))),
            grpc: false,
            token: false,
        },
        Scenario {
            name: "login, gRPC SessionService/Create",
            path: "/session.SessionService/Create",
            clients: 1,
            streams: 1,
            body: Some((grpc, work.join("create.bin"))),
            grpc: true,
            token: false,
        },
        Scenario {
            name: "gRPC VersionService/Version",
            path: "/version.VersionService/Version",
            clients: 10,
            streams: 10,
            body: Some((grpc, work.join("empty.bin"))),
            grpc: true,
            token: true,
        },
        Scenario {
            name: "gRPC ApplicationService/Get (bench)",
            path: "/application.ApplicationService/Get",
            clients: 10,
            streams: 10,
            body: Some((grpc, work.join("get.bin"))),
            grpc: true,
            token: true,
        },
        Scenario {
            name: "REST GET /api/v1/applications/NAME (bench)",
            path: "/api/v1/applications/app-00000",
            clients: 10,
            streams: 10,
            body: None,
            grpc: false,
            token: true,
        },
    ])
}

fn h2load_args(s: &Scenario, token: &str) -> Vec<String> {
    // gRPC over h2 only: offered h2 and http/1.1, argocd-server's TLS listener picks http/1.1.
    // REST over HTTP/1.1: argocd-server's cmux sends an HTTP/2 connection to its gRPC server
    // only for content-type application/grpc, and to nothing otherwise (REST over h2 hangs).
    let mut args = vec![
        if s.grpc { "--npn-list=h2" } else { "--h1" }.to_owned(),
        "-c".to_owned(),
        s.clients.to_string(),
        "-m".to_owned(),
        s.streams.to_string(),
    ];
    if let Some((content_type, file)) = &s.body {
        args.extend(["-H".to_owned(), format!("content-type: {content_type}")]);
        args.extend(["-d".to_owned(), file.display().to_string()]);
    }
    if s.grpc {
        args.extend(["-H".to_owned(), "te: trailers".to_owned()]);
        if s.token {
            args.extend(["-H".to_owned(), format!("token: {token}")]);
        }
    } else if s.token {
        args.extend(["-H".to_owned(), format!("authorization: Bearer {token}")]);
    }
    args
}

/// One call of the scenario, checked: HTTP 200 and, for gRPC, grpc-status 0.
async fn check(target: &Target, s: &Scenario) -> anyhow::Result<()> {
    if s.grpc {
        let body = std::fs::read(&s.body.as_ref().context("a gRPC scenario has a body")?.1)?;
        let mut h2 = target.dial.http2().await?;
        let token = s.token.then_some(target.bench.as_str());
        let reply = support::grpc_unary(&mut h2, &target.dial.base(), s.path, token, &body[5..]).await?;
        if reply.status.as_deref() != Some("0") {
            bail!("{} {}: grpc-status {:?}", target.name, s.path, reply.status);
        }
        return Ok(());
    }
    let mut client = target.dial.http1().await?;
    let mut req = match &s.body {
        Some((content_type, file)) => http::Request::post(s.path)
            .header("content-type", *content_type)
            .body(Full::new(Bytes::from(std::fs::read(file)?))),
        None => http::Request::get(s.path).body(Full::new(Bytes::new())),
    }?;
    req.headers_mut().insert("host", "bench".parse()?);
    if s.token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {}", target.bench).parse()?);
    }
    let response = client.send_request(req).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!(
            "{} {}: {status} {}",
            target.name,
            s.path,
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

// ---- lists ---------------------------------------------------------------------------------

/// How many top-level fields number `field` a protobuf message has (ApplicationList.items = 2).
fn count_field(mut buf: &[u8], field: u32) -> anyhow::Result<usize> {
    use prost::encoding::{WireType, decode_key, decode_varint};
    let mut count = 0;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf)?;
        let skip = match wire {
            WireType::Varint => {
                decode_varint(&mut buf)?;
                0
            }
            WireType::SixtyFourBit => 8,
            WireType::ThirtyTwoBit => 4,
            WireType::LengthDelimited => decode_varint(&mut buf)? as usize,
            _ => bail!("unexpected wire type"),
        };
        if skip > buf.len() {
            bail!("truncated message");
        }
        buf = &buf[skip..];
        if tag == field {
            count += 1;
        }
    }
    Ok(count)
}

async fn grpc_list(h2: &mut Http2, target: &Target, token: &str) -> anyhow::Result<support::GrpcReply> {
    let reply = support::grpc_unary(
        h2,
        &target.dial.base(),
        "/application.ApplicationService/List",
        Some(token),
        &[],
    )
    .await?;
    if reply.status.as_deref() != Some("0") {
        bail!("{}: List answered grpc-status {:?}", target.name, reply.status);
    }
    Ok(reply)
}

/// How many applications each user of `target` sees over gRPC.
async fn visible(target: &Target) -> anyhow::Result<(usize, usize)> {
    let mut h2 = target.dial.http2().await?;
    let count = |reply: support::GrpcReply| count_field(reply.body.get(5..).unwrap_or_default(), 2);
    let admin = count(grpc_list(&mut h2, target, &target.admin).await?)?;
    let bench = count(grpc_list(&mut h2, target, &target.bench).await?)?;
    Ok((admin, bench))
}

/// The list rows for `target`: `calls` lists per transport and user (first byte and whole
/// body: the median of the calls; CPU: their total over their count).
async fn lists(
    table: &mut Table,
    target: &Target,
    apps: usize,
    calls: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut client = target.dial.http1().await?;
    let mut h2 = target.dial.http2().await?;
    for (user, token) in [("admin", &target.admin), ("bench", &target.bench)] {
        for transport in ["REST", "gRPC"] {
            let (mut first, mut total) = (vec![], vec![]);
            let ticks = support::cpu_ticks(target.pid).unwrap_or(0);
            for _ in 0..calls {
                let (a, b) = if transport == "REST" {
                    let (a, b, _) = tokio::time::timeout(timeout, support::rest_list(&mut client, token, ""))
                        .await
                        .context("REST list timed out")??;
                    (a, b)
                } else {
                    let reply = tokio::time::timeout(timeout, grpc_list(&mut h2, target, token))
                        .await
                        .context("gRPC list timed out")??;
                    (reply.first, reply.total)
                };
                first.push(ms(a));
                total.push(ms(b));
            }
            let cpu = cpu_ms(target.pid, ticks) / calls as f64;
            let what = format!("list of {apps}, {transport}, {user}");
            table.add(&format!("{what}: first byte"), "ms", target.name, median(&first));
            table.add(&format!("{what}: whole body"), "ms", target.name, median(&total));
            table.add(&format!("{what}: server CPU per list"), "ms", target.name, cpu);
        }
    }
    table.add(
        &format!("RSS after the lists of {apps}"),
        "MiB",
        target.name,
        rss_mib(target.pid),
    );
    Ok(())
}

/// One warm-up list per transport and user, with their sizes.
async fn warm_lists(target: &Target, timeout: Duration) -> anyhow::Result<()> {
    let mut client = target.dial.http1().await?;
    let mut h2 = target.dial.http2().await?;
    for (user, token) in [("admin", &target.admin), ("bench", &target.bench)] {
        let (_, rest, size) = tokio::time::timeout(timeout, support::rest_list(&mut client, token, ""))
            .await
            .context("REST list timed out")??;
        let reply = tokio::time::timeout(timeout, grpc_list(&mut h2, target, token))
            .await
            .context("gRPC list timed out")??;
        println!(
            "  {:<13} warm-up as {user}: REST {size} bytes in {:.0} ms, gRPC {} bytes in {:.0} ms",
            target.name,
            ms(rest),
            reply.body.len(),
            ms(reply.total)
        );
    }
    Ok(())
}

// ---- watch fan-out -------------------------------------------------------------------------

/// Opens `watchers` streams on WATCHED (SSE, gRPC over 8 HTTP/2 connections, gRPC-Web, in turn),
/// waits for each one's initial event, makes the change with `write(marker)` and times how
/// long each stream takes to see it. Rows: p50, p99 and the last stream; the server's CPU from
/// the write until every stream had it (or 30 s); RSS with the streams open.
async fn fan_out<F, W>(
    table: &mut Table,
    target: &Target,
    watchers: usize,
    round: usize,
    write: W,
) -> anyhow::Result<()>
where
    W: FnOnce(String) -> F,
    F: Future<Output = anyhow::Result<()>>,
{
    let marker = format!("fanout-{}-{round}-{}", std::process::id(), target.name);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(watchers.max(1));
    let mut h2s = Vec::new();
    for _ in 0..8 {
        h2s.push(target.dial.http2().await?);
    }
    let base = target.dial.base();
    let mut tasks = Vec::with_capacity(watchers);
    for i in 0..watchers {
        let (dial, token, marker, ready) = (
            target.dial.clone(),
            target.bench.clone(),
            marker.clone(),
            ready_tx.clone(),
        );
        tasks.push(match i % 3 {
            0 => tokio::spawn(support::sse_watcher(dial, token, WATCHED, marker, ready)),
            1 => tokio::spawn(support::grpc_h2_watcher(
                h2s[i % 8].clone(),
                base.clone(),
                token,
                WATCHED,
                marker,
                ready,
            )),
            _ => tokio::spawn(support::grpc_web_watcher(dial, token, WATCHED, marker, ready)),
        });
        if i % 50 == 49 {
            // Handshakes in steps: a burst of 1,000 TLS handshakes is not what is measured.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    drop(ready_tx);
    // All of them within 120 s (not each).
    let start_deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    for n in 0..watchers {
        let started = tokio::time::timeout_at(start_deadline, ready_rx.recv())
            .await
            .with_context(|| {
                format!(
                    "{}: only {n} of {watchers} watchers started within 120 s",
                    target.name
                )
            })?;
        if started.is_none() {
            let mut errors = Vec::new();
            for task in tasks.into_iter().filter(|t| t.is_finished()).take(3) {
                errors.push(format!("{:?}", task.await));
            }
            bail!(
                "{}: only {n} of {watchers} watchers started: {errors:?}",
                target.name
            );
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_mib(target.pid);
    let ticks = support::cpu_ticks(target.pid).unwrap_or(0);
    let sent = Instant::now();
    write(marker).await?;
    let mut delays = Vec::with_capacity(watchers);
    let mut missed = 0;
    let deadline = sent + Duration::from_secs(30);
    for task in tasks {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, task).await {
            Ok(Ok(Ok(at))) => delays.push(at.saturating_duration_since(sent)),
            Ok(other) => {
                if missed == 0 {
                    println!("  {:<13} a stream failed: {other:?}", target.name);
                }
                missed += 1;
            }
            Err(_) => missed += 1,
        }
    }
    let cpu = cpu_ms(target.pid, ticks);
    delays.sort();
    println!(
        "  {:<13} fan-out: {missed} of {watchers} streams missed the change",
        target.name
    );
    let name = format!("watch fan-out, {watchers} streams");
    table.add(
        &format!("{name}: p50"),
        "ms",
        target.name,
        ms(support::percentile(&delays, 0.5)),
    );
    table.add(
        &format!("{name}: p99"),
        "ms",
        target.name,
        ms(support::percentile(&delays, 0.99)),
    );
    table.add(
        &format!("{name}: server CPU for the one change"),
        "ms",
        target.name,
        cpu,
    );
    table.add(
        &format!("{name}: RSS with the streams open"),
        "MiB",
        target.name,
        rss,
    );
    if missed > 0 {
        bail!(
            "{}: {missed} of {watchers} streams missed the change",
            target.name
        );
    }
    Ok(())
}

/// A merge patch of the watched application's annotation `note`, through `path` on `dial`.
async fn patch(
    dial: &Dial,
    path: &str,
    content_type: &str,
    body: Value,
    token: Option<&str>,
) -> anyhow::Result<()> {
    let mut client = dial.http1().await?;
    let mut req = http::Request::patch(path)
        .header("host", "bench")
        .header("content-type", content_type);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let response = client
        .send_request(req.body(Full::new(Bytes::from(body.to_string())))?)
        .await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("PATCH {path}: {status} {}", String::from_utf8_lossy(&body));
    }
    Ok(())
}

// ---- idle connections ----------------------------------------------------------------------

/// `conns` TLS HTTP/2 connections that each made one gRPC call (`Version`: argocd-server's
/// cmux hands an HTTP/2 connection only to its gRPC server) and stay open:
/// the server's RSS delta per connection, 2 s after the last one was open.
async fn idle_conns(table: &mut Table, target: &Target, conns: usize) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = support::rss_kib(target.pid, "VmRSS:").unwrap_or(0);
    let mut open = Vec::with_capacity(conns);
    for chunk in 0..conns.div_ceil(50) {
        let batch = (chunk * 50..((chunk + 1) * 50).min(conns)).map(|_| async move {
            let mut h2 = target.dial.http2().await?;
            let base = target.dial.base();
            let reply =
                support::grpc_unary(&mut h2, &base, "/version.VersionService/Version", None, &[]).await?;
            if reply.status.as_deref() != Some("0") {
                bail!("{}: Version answered grpc-status {:?}", target.name, reply.status);
            }
            anyhow::Ok(h2)
        });
        let batch = tokio::time::timeout(Duration::from_secs(60), futures_util::future::try_join_all(batch));
        open.extend(batch.await.context("50 connections not open within 60 s")??);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = support::rss_kib(target.pid, "VmRSS:").unwrap_or(0);
    table.add(
        &format!("idle TLS h2 connection ({conns} open): RSS each"),
        "KiB",
        target.name,
        after.saturating_sub(before) as f64 / conns as f64,
    );
    drop(open);
    Ok(())
}

// ---- the run -------------------------------------------------------------------------------

/// The applications `range` as Kubernetes objects, in a JSON List file.
fn write_k8s_apps(file: &Path, range: std::ops::Range<usize>) -> anyhow::Result<()> {
    let items: Vec<Value> = range
        .map(|i| {
            let mut app = support::app(i);
            app["apiVersion"] = json!("argoproj.io/v1alpha1");
            app["kind"] = json!("Application");
            app["metadata"]["namespace"] = json!(NAMESPACE);
            app
        })
        .collect();
    std::fs::write(
        file,
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items}))?,
    )?;
    Ok(())
}

/// Seeds `range` into both: the API server (server-side apply in batches) and tiphys's store
/// (which must not be open).
async fn seed(
    plane: &ControlPlane,
    work: &Path,
    range: std::ops::Range<usize>,
    on_kube: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let file = work.join("apps.json");
    write_k8s_apps(&file, range.clone())?;
    plane
        .apply(&file, Duration::from_secs(900))
        .map_err(anyhow::Error::msg)?;
    let k8s = started.elapsed();
    if on_kube {
        println!(
            "seeded applications {}..{} in the API server in {:.1} s (tiphys --kube serves them)",
            range.start,
            range.end,
            k8s.as_secs_f64()
        );
        return Ok(());
    }
    let store: Arc<dyn tiphys::store::Store> = Arc::new(FileStore::open(&work.join("data"))?);
    let started = Instant::now();
    let size = support::seed(store, 500, range.clone()).await?;
    println!(
        "seeded applications {}..{} of ~{size} bytes: API server {:.1} s, tiphys's store {:.1} s",
        range.start,
        range.end,
        k8s.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Waits until both users of `target` see `apps` applications (argocd-server's informer
/// catches up with the API server).
async fn await_visible(target: &Target, apps: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let seen = visible(target).await?;
        if seen == (apps, apps) {
            println!(
                "  {:<13} admin and bench each see {apps} applications",
                target.name
            );
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{}: admin and bench see {seen:?} applications, not {apps}",
                target.name
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn tokens(dial: &Dial, admin_password: &str) -> anyhow::Result<(String, String)> {
    Ok((
        support::login(dial, "admin", admin_password).await?,
        support::login(dial, "bench", PASSWORD).await?,
    ))
}

fn raise_open_files() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bin = PathBuf::from(std::env::args().nth(1).context("usage: argocd_peer TIPHYS_BIN")?);
    let knobs = Knobs {
        rounds: knob("PEER_ROUNDS", 5) as usize,
        slow_rounds: knob("PEER_SLOW_ROUNDS", 3) as usize,
        starts: knob("PEER_STARTS", 3) as usize,
        duration: knob("PEER_DURATION", 4),
        watchers: knob("PEER_WATCHERS", 1000) as usize,
        conns: knob("PEER_CONNS", 1000) as usize,
        timeout: Duration::from_secs(knob("PEER_TIMEOUT", 120)),
    };
    raise_open_files();
    let run = Instant::now();
    let tmp = tempfile::Builder::new().prefix("tiphys-argocd-peer-").tempdir()?;
    let work = tmp.path().to_path_buf();
    // PEER_KEEP=1: keep the work dir (logs of every part and of h2load).
    let _tmp = if std::env::var_os("PEER_KEEP").is_some() {
        println!("work dir: {}", tmp.keep().display());
        None
    } else {
        Some(tmp)
    };
    let plane_root = work.join("plane");
    std::fs::create_dir_all(&plane_root)?;

    // The same settings for both servers (the password's hash at `argocd account bcrypt`'s cost): argocd-cm, argocd-rbac-cm and argocd-secret.
    let bench_hash = bcrypt::hash(PASSWORD, 10)?;
    // (upstream ignores tiphys's keys)
    let cm = json!({"accounts.bench": "login", support::NO_RATE_LIMITS.0: support::NO_RATE_LIMITS.1});
    let rbac = json!({"policy.csv": support::group_policy(NOISE_LINES)});
    let secret = json!({"accounts.bench.password": bench_hash});
    let settings = work.join("settings.json");
    std::fs::write(
        &settings,
        serde_json::to_vec(&json!({"argocd-cm": cm, "argocd-rbac-cm": rbac, "argocd-secret": secret}))?,
    )?;
    let started = Instant::now();
    let plane = ControlPlane::start(
        &plane_root,
        Options {
            settings: Some(settings),
            ..Options::default()
        },
    )
    .map_err(anyhow::Error::msg)?;
    println!(
        "control plane up in {:.1} s: {:?}",
        started.elapsed().as_secs_f64(),
        plane.start_times()
    );
    let admin_password = plane.state.argocd.admin_password.clone();
    let mut tiphys_secret = secret.clone();
    tiphys_secret["admin.password"] = json!(bcrypt::hash(&admin_password, 4)?);
    support::write_settings(&work.join("config"), &cm, &rbac, &tiphys_secret)?;
    let pki = plane.state.pki.clone();
    let serving_dir = pki.ca.parent().context("the CA's folder")?;
    let tiphys = Tiphys {
        bin: bin.clone(),
        work: work.clone(),
        pki: pki.clone(),
        serving: (serving_dir.join("serving.crt"), serving_dir.join("serving.key")),
        kube: (knob("PEER_TIPHYS_KUBE", 0) == 1).then(|| plane.state.kubeconfig.clone()),
    };
    let on_kube = tiphys.kube.is_some();
    println!(
        "tiphys's applications: {}",
        if on_kube {
            "the API server's (--kube)"
        } else {
            "a copy in its embedded store"
        }
    );
    seed(&plane, &work, 0..1000, on_kube).await?;

    let mut table = Table::default();

    println!(
        "\n## start and idle, 1,000 applications ({} starts each)",
        knobs.starts
    );
    let mut upstream = None;
    for round in 0..knobs.starts {
        for first in [round % 2 == 0, round % 2 == 1] {
            if first {
                let (server, _, ready) = tiphys.start().await?;
                table.add(
                    "start: exec to the first /healthz answered",
                    "ms",
                    "tiphys",
                    ms(ready),
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                table.add(
                    "idle RSS (1 s after ready)",
                    "MiB",
                    "tiphys",
                    rss_mib(server.child.id()),
                );
            } else {
                drop(upstream.take());
                let server = UpstreamServer::start(&plane_root, "argocd-server", UPSTREAM_ARGS)
                    .map_err(anyhow::Error::msg)?;
                table.add(
                    "start: exec to the first /healthz answered",
                    "ms",
                    "argocd-server",
                    server.ready_in_s * 1e3,
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                table.add(
                    "idle RSS (1 s after ready)",
                    "MiB",
                    "argocd-server",
                    rss_mib(server.pid as u32),
                );
                upstream = Some(server);
            }
        }
    }
    let upstream = upstream.context("no argocd-server started")?;
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", upstream.pid)).unwrap_or_default();
    println!(
        "argocd-server: PID {} ({}), {}",
        upstream.pid,
        comm.trim(),
        upstream.server.url
    );
    let argo_dial = Dial::tls(&upstream.server.address, &pki.ca, None)?;
    let (admin, bench) = tokens(&argo_dial, &admin_password).await?;
    let argo = Target {
        name: "argocd-server",
        dial: argo_dial,
        pid: upstream.pid as u32,
        admin,
        bench,
    };
    let (mut tiphys_server, dial, _) = tiphys.start().await?;
    let (admin, bench) = tokens(&dial, &admin_password).await?;
    let mut tiphys_target = Target {
        name: "tiphys",
        dial,
        pid: tiphys_server.child.id(),
        admin,
        bench,
    };
    await_visible(&argo, 1000).await?;
    await_visible(&tiphys_target, 1000).await?;

    println!("\n## h2load, {} rounds of {} s", knobs.rounds, knobs.duration);
    let scenarios = scenarios(&work)?;
    for s in &scenarios {
        for target in [&tiphys_target, &argo] {
            check(target, s).await?;
        }
        println!(
            "h2load -t 1 -D {} --warm-up-time 1 {} https://127.0.0.1:PORT{}",
            knobs.duration,
            h2load_args(s, "TOKEN")
                .join(" ")
                .replace(&work.display().to_string(), "WORK"),
            s.path
        );
    }
    for round in 0..knobs.rounds {
        for s in &scenarios {
            let order = alternate(round, [&tiphys_target, &argo]);
            for target in order {
                let log = work.join(format!("h2load-{}-{round}.log", target.name));
                let args = h2load_args(s, &target.bench);
                let load = match h2load(target, s.path, &args, knobs.duration, &log).await {
                    Ok(load) => load,
                    Err(e) => {
                        // Reported, and this round has no figure for it.
                        println!("  {:<13} {}: {e:#}", target.name, s.name);
                        continue;
                    }
                };
                table.add(&format!("{}: req/s", s.name), "req/s", target.name, load.rps);
                table.add(
                    &format!("{}: server CPU per request", s.name),
                    "µs",
                    target.name,
                    load.cpu_us,
                );
                table.add(
                    &format!("{}: RSS under load", s.name),
                    "MiB",
                    target.name,
                    load.rss,
                );
            }
        }
    }

    for (apps, rounds, calls) in [(1000, knobs.rounds, 5), (10_000, knobs.slow_rounds, 3)] {
        if apps == 10_000 {
            drop(tiphys_server);
            seed(&plane, &work, 1000..10_000, on_kube).await?;
            let (server, dial, ready) = tiphys.start().await?;
            println!(
                "  tiphys restarted on 10,000 applications: /healthz after {:.0} ms",
                ms(ready)
            );
            let (admin, bench) = tokens(&dial, &admin_password).await?;
            tiphys_target = Target {
                name: "tiphys",
                dial,
                pid: server.child.id(),
                admin,
                bench,
            };
            tiphys_server = server;
            await_visible(&argo, apps).await?;
            await_visible(&tiphys_target, apps).await?;
        }
        println!("\n## lists of {apps}: {rounds} rounds of {calls} calls per transport and user");
        for target in [&tiphys_target, &argo] {
            warm_lists(target, knobs.timeout).await?;
        }
        for round in 0..rounds {
            let order = alternate(round, [&tiphys_target, &argo]);
            for target in order {
                lists(&mut table, target, apps, calls, knobs.timeout).await?;
            }
        }
    }

    println!(
        "\n## watch fan-out: {} streams, {} rounds, 10,000 applications",
        knobs.watchers, knobs.slow_rounds
    );
    let kube = Dial::tls(
        plane.state.apiserver.url.trim_start_matches("https://"),
        &pki.ca,
        Some((pki.admin_cert.as_path(), pki.admin_key.as_path())),
    )?;
    let kube_path = format!("/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/applications/{WATCHED}");
    let tiphys_path = format!("/api/v1/applications/{WATCHED}");
    let (kube, kube_path, tiphys_path) = (&kube, kube_path.as_str(), tiphys_path.as_str());
    for round in 0..knobs.slow_rounds {
        let order = alternate(round, [&tiphys_target, &argo]);
        for target in order {
            let annotate = |marker: String| json!({"metadata": {"annotations": {"note": marker}}});
            // On --kube both see the same write to the API server come through their watches.
            let done = if target.name == "tiphys" && !on_kube {
                let token = target.bench.clone();
                let dial = target.dial.clone();
                fan_out(&mut table, target, knobs.watchers, round, move |marker| async move {
                    let body = json!({"name": WATCHED, "patch": annotate(marker).to_string(), "patchType": "merge"});
                    patch(&dial, tiphys_path, "application/json", body, Some(token.as_str())).await
                })
                .await
            } else {
                fan_out(
                    &mut table,
                    target,
                    knobs.watchers,
                    round,
                    move |marker| async move {
                        patch(
                            kube,
                            kube_path,
                            "application/merge-patch+json",
                            annotate(marker),
                            None,
                        )
                        .await
                    },
                )
                .await
            };
            if let Err(e) = done {
                // Reported; this round has no figure for that server.
                println!("  {:<13} fan-out: {e:#}", target.name);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }

    println!(
        "\n## idle connections: {} TLS h2 connections, {} rounds",
        knobs.conns, knobs.slow_rounds
    );
    for round in 0..knobs.slow_rounds {
        let order = alternate(round, [&tiphys_target, &argo]);
        for target in order {
            if let Err(e) = idle_conns(&mut table, target, knobs.conns).await {
                println!("  {:<13} idle connections: {e:#}", target.name);
            }
        }
    }
    let peaks: BTreeMap<&str, f64> = [&tiphys_target, &argo]
        .iter()
        .map(|t| (t.name, mib(support::rss_kib(t.pid, "VmHWM:").unwrap_or(0))))
        .collect();
    println!("\npeak RSS over the run (VmHWM, MiB): {peaks:?}");
    println!("run took {:.0} s", run.elapsed().as_secs_f64());
    table.print();
    drop(tiphys_server);
    drop(upstream);
    drop(plane);
    Ok(())
}

/// The two servers in the order of `round`: swapped every other round, so that neither is
/// always measured first.
fn alternate<T>(round: usize, [a, b]: [T; 2]) -> [T; 2] {
    if round.is_multiple_of(2) { [a, b] } else { [b, a] }
}
