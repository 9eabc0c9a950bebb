//! The resources API at scale (issue 6 targets), against the real release binary:
//!
//! `cargo run --release --example resources_load -- TIPHYS_BIN [APPS] [WATCHERS]`
//!
//! 1. Seeds APPS (default 10,000) applications of about 5 KB straight into a fresh data dir
//!    (through the registry, in batches), and writes a config dir with a 1,000-line policy in
//!    which the `bench` account reaches its only `applications, get` grant through one of 50
//!    roles it is a member of (`g, bench, group-N`: a local account has no token groups, so
//!    role membership stands in for them).
//! 2. Starts the server, logs in as `bench`, and times List: REST full body, REST with the
//!    UI's `fields=`, and gRPC; for REST both the time to the first body byte and to the end.
//! 3. Opens WATCHERS (default 1,000) watch streams split between SSE, gRPC and gRPC-Web, changes
//!    one application, and times how long the event takes to reach each stream.
//! 4. Reads the server's peak RSS, stops it, restarts it on the same data, and times from the
//!    spawn to the first successful List.
//!
//! With `RESOURCES_ETCD=1` the same runs go against a 3-member etcd on loopback started here
//! (issue "Several replicas on etcd"): the applications are seeded into etcd, two replicas
//! serve them, the lists go to the first, the watchers to the second while the change is made on
//! the first, and the restart is a replica started afresh on the data in etcd.
//!
//! Every process started here is stopped by its PID.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::{Buf as _, BufMut as _, Bytes};
use futures_util::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use serde_json::json;
use tiphys::store::{EtcdOptions, EtcdStore, FileStore, Store};

// Test support: panics on a failed setup on purpose.
#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/etcd_cluster.rs"]
mod etcd_cluster;

#[allow(dead_code)]
mod support;

use self::support::{
    Dial, Server, grpc_web_watcher, http1, memfind, percentile, rest_list, rss_kib, sse_watcher, summary,
};

/// The etcd prefix of the runs with `RESOURCES_ETCD=1`.
const ETCD_PREFIX: &str = "/bench/";

const FIELDS: &str = "metadata.resourceVersion,items.metadata.name,items.metadata.namespace,items.metadata.annotations,items.metadata.labels,items.metadata.creationTimestamp,items.metadata.deletionTimestamp,items.spec.destination,items.spec.project,items.spec.source,items.spec.sources,items.spec.sourceHydrator,items.spec.syncPolicy,items.operation.sync,items.status.sourceHydrator,items.status.summary,items.status.sync.status,items.status.sync.revision,items.status.health,items.status.operationState.phase,items.status.operationState.startedAt,items.status.operationState.finishedAt";
const PASSWORD: &str = "bench-password-1";
const LIST_RUNS: usize = 20;

/// Starts a server on `work`'s data dir, or on etcd at `etcd` (then with its own data dir:
/// `replica` tells them apart).
fn start(bin: &Path, work: &Path, etcd: Option<&str>, replica: usize) -> anyhow::Result<(Server, Instant)> {
    let mut command = Command::new(bin);
    command
        .args(["server", "--insecure", "--address", "127.0.0.1", "--port", "0"])
        .args(["--metrics-address", "127.0.0.1", "--metrics-port", "0"])
        // Every watcher is the one `bench` account; by default a caller may hold 100 watches.
        .env("TIPHYS_MAX_WATCHES_PER_CALLER", "2000");
    match etcd {
        Some(endpoints) => command
            .arg("--data-dir")
            .arg(work.join(format!("replica-{replica}")))
            .args(["--etcd-endpoints", endpoints, "--etcd-prefix", ETCD_PREFIX]),
        None => command.arg("--data-dir").arg(work.join("data")),
    };
    command
        .arg("--config-dir")
        .arg(work.join("config"))
        .env("RUST_LOG", "warn");
    let ready = work.join(format!("ready-{replica}"));
    let log = work.join(format!("server-{replica}.log"));
    let (server, spawned) = support::start(command, &ready, &log, Duration::from_secs(10))?;
    println!(
        "  (server ready {:.0} ms after spawn)",
        spawned.elapsed().as_secs_f64() * 1e3
    );
    Ok((server, spawned))
}

async fn seed(work: &Path, apps: usize, etcd: Option<&str>) -> anyhow::Result<usize> {
    let (store, batch): (Arc<dyn Store>, usize) = match etcd {
        Some(endpoints) => {
            let mut options = EtcdOptions::new(endpoints.split(',').map(str::to_owned).collect());
            options.prefix = ETCD_PREFIX.to_owned();
            // Two keys per object and the revision: etcd's 128 operations per transaction.
            (Arc::new(EtcdStore::connect(options).await?), 60)
        }
        None => (Arc::new(FileStore::open(&work.join("data"))?), 500),
    };
    support::seed(store, batch, 0..apps).await
}

fn write_config(work: &Path) -> anyhow::Result<()> {
    support::write_config(&work.join("config"), PASSWORD, &support::group_policy(950))
}

async fn login(addr: &str) -> anyhow::Result<String> {
    support::login(&Dial::plain(addr), "bench", PASSWORD).await
}

#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self {
        RawCodec
    }
    fn decoder(&mut self) -> Self {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

fn grpc_request(token: &str, body: Bytes) -> anyhow::Result<tonic::Request<Bytes>> {
    let mut req = tonic::Request::new(body);
    req.metadata_mut().insert("token", token.parse()?);
    Ok(req)
}

async fn grpc_channel(addr: &str) -> anyhow::Result<tonic::transport::Channel> {
    Ok(tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?)
}

async fn grpc_list(channel: &tonic::transport::Channel, token: &str) -> anyhow::Result<(Duration, usize)> {
    let mut grpc = tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(1 << 30);
    grpc.ready().await?;
    let started = Instant::now();
    let path = http::uri::PathAndQuery::from_static("/application.ApplicationService/List");
    let reply = grpc
        .unary(grpc_request(token, Bytes::new())?, path, RawCodec)
        .await?;
    Ok((started.elapsed(), reply.into_inner().len()))
}

async fn grpc_watcher(
    channel: tonic::transport::Channel,
    token: String,
    marker: String,
    ready: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<Instant> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(1 << 26);
    grpc.ready().await?;
    let query = support::application_query("app-00000");
    let path = http::uri::PathAndQuery::from_static("/application.ApplicationService/Watch");
    let reply = grpc
        .server_streaming(grpc_request(&token, Bytes::from(query))?, path, RawCodec)
        .await?;
    let mut stream = reply.into_inner();
    let mut signalled = false;
    while let Some(message) = stream.next().await {
        let message = message?;
        if !signalled {
            signalled = true;
            let _ = ready.send(()).await;
        }
        if memfind(&message, marker.as_bytes()) {
            return Ok(Instant::now());
        }
    }
    bail!("gRPC stream ended")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .context("usage: resources_load TIPHYS_BIN [APPS] [WATCHERS]")?,
    );
    let apps: usize = args.get(2).map_or(Ok(10_000), |a| a.parse())?;
    let watchers: usize = args.get(3).map_or(Ok(1_000), |a| a.parse())?;
    // RESOURCES_SEED_ONLY=DIR: only write the config and the seeded data dir into DIR (for
    // looking at a server by hand).
    if let Ok(dir) = std::env::var("RESOURCES_SEED_ONLY") {
        let dir = PathBuf::from(dir);
        write_config(&dir)?;
        seed(&dir, apps, None).await?;
        return Ok(());
    }
    let work = tempfile::Builder::new().prefix("tiphys-resources-").tempdir()?;
    let work = work.path();
    let cluster = std::env::var_os("RESOURCES_ETCD").map(|_| etcd_cluster::EtcdCluster::start(3));
    let endpoints = cluster.as_ref().map(|c| c.endpoints().join(","));
    let etcd = endpoints.as_deref();

    write_config(work)?;
    let seeding = Instant::now();
    let size = seed(work, apps, etcd).await?;
    println!(
        "seeded {apps} applications of ~{size} bytes in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );

    let (server, _) = start(&bin, work, etcd, 0)?;
    // On etcd the watchers are on a second replica, the change is made on the first.
    let second = match etcd {
        Some(_) => Some(start(&bin, work, etcd, 1)?.0),
        None => None,
    };
    let watched = second.as_ref().unwrap_or(&server);
    let pid = server.child.id();
    let rss = |phase: &str| {
        let now = rss_kib(pid, "VmRSS:").unwrap_or(0);
        println!("  (RSS {phase}: {:.1} MiB)", now as f64 / 1024.0);
    };
    rss("after start");
    let token = login(&server.addr).await?;
    let mut client = http1(&server.addr).await?;
    let channel = grpc_channel(&server.addr).await?;
    // Warm-up: first use builds the protobuf encodings and fills the RBAC decision cache.
    let (_, _, full_size) = rest_list(&mut client, &token, "").await?;
    rss("after a REST list");
    let (cold, grpc_size) = grpc_list(&channel, &token).await?;
    println!(
        "  (first gRPC list after start: {:.0} ms)",
        cold.as_secs_f64() * 1e3
    );
    rss("after a gRPC list");
    println!("list sizes: REST {full_size} bytes, gRPC {grpc_size} bytes");
    let (mut first, mut total, mut f_first, mut f_total, mut grpc) = (vec![], vec![], vec![], vec![], vec![]);
    let (mut g_first, mut g_total) = (vec![], vec![]);
    let mut h2 = Dial::plain(&server.addr).http2().await?;
    let base = format!("http://{}", server.addr);
    for _ in 0..LIST_RUNS {
        let (a, b, _) = rest_list(&mut client, &token, "").await?;
        first.push(a);
        total.push(b);
        let (a, b, _) = rest_list(&mut client, &token, &format!("?fields={FIELDS}")).await?;
        f_first.push(a);
        f_total.push(b);
        grpc.push(grpc_list(&channel, &token).await?.0);
        let reply = support::grpc_unary(
            &mut h2,
            &base,
            "/application.ApplicationService/List",
            Some(&token),
            &[],
        )
        .await?;
        g_first.push(reply.first);
        g_total.push(reply.total);
    }
    summary("REST list, first byte", first);
    summary("REST list, whole body", total);
    summary("REST list fields=, first byte", f_first);
    summary("REST list fields=, whole body", f_total);
    summary("gRPC list, whole message (tonic)", grpc);
    summary("gRPC list, first byte (raw h2)", g_first);
    summary("gRPC list, whole body (raw h2)", g_total);

    // Watch fan-out.
    let marker = format!("fanout-{}", std::process::id());
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(watchers.max(1));
    let mut tasks = Vec::with_capacity(watchers);
    let channels = futures_util::future::try_join_all((0..8).map(|_| grpc_channel(&watched.addr))).await?;
    for i in 0..watchers {
        let (addr, token, marker, ready) = (
            watched.addr.clone(),
            token.clone(),
            marker.clone(),
            ready_tx.clone(),
        );
        let task = match i % 3 {
            0 => tokio::spawn(sse_watcher(Dial::plain(&addr), token, "app-00000", marker, ready)),
            1 => tokio::spawn(grpc_watcher(
                channels[i % channels.len()].clone(),
                token,
                marker,
                ready,
            )),
            _ => tokio::spawn(grpc_web_watcher(
                Dial::plain(&addr),
                token,
                "app-00000",
                marker,
                ready,
            )),
        };
        tasks.push(task);
    }
    for _ in 0..watchers {
        tokio::time::timeout(Duration::from_secs(60), ready_rx.recv())
            .await
            .context("watchers did not all start within 60 s")?;
    }
    let body = json!({"name": "app-00000", "patch": json!({"metadata": {"annotations": {"note": marker}}}).to_string(), "patchType": "merge"});
    let sent = Instant::now();
    let req = http::Request::patch("/api/v1/applications/app-00000")
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))?;
    let mut writer = http1(&server.addr).await?;
    let response = writer.send_request(req).await?;
    let status = response.status();
    let _ = response.into_body().collect().await;
    let acked = sent.elapsed();
    if !status.is_success() {
        bail!("the update answered {status}");
    }
    rss("with the watchers");
    let mut delays = Vec::with_capacity(watchers);
    let mut failed = 0;
    for task in tasks {
        match tokio::time::timeout(Duration::from_secs(30), task).await {
            Ok(Ok(Ok(at))) => delays.push(at.saturating_duration_since(sent)),
            _ => failed += 1,
        }
    }
    println!(
        "update acknowledged after {:.1} ms; {failed} of {watchers} streams missed it",
        acked.as_secs_f64() * 1e3
    );
    let mut sorted = delays.clone();
    sorted.sort();
    println!(
        "watch fan-out ({watchers} streams: SSE, gRPC, gRPC-Web): p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        percentile(&sorted, 0.5).as_secs_f64() * 1e3,
        percentile(&sorted, 0.99).as_secs_f64() * 1e3,
        sorted.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    let rss = rss_kib(server.child.id(), "VmHWM:").unwrap_or(0);
    println!("server peak RSS: {:.1} MiB", rss as f64 / 1024.0);
    if let Some(second) = &second {
        let rss = rss_kib(second.child.id(), "VmHWM:").unwrap_or(0);
        println!("watching replica's peak RSS: {:.1} MiB", rss as f64 / 1024.0);
    }
    drop(server);
    drop(second);

    let (server, spawned) = start(&bin, work, etcd, 2)?;
    let token = login(&server.addr).await?;
    let mut client = http1(&server.addr).await?;
    let (_, _, size) = rest_list(&mut client, &token, "").await?;
    println!(
        "restart with {apps} applications: first full List answered {:.0} ms after spawn ({size} bytes)",
        spawned.elapsed().as_secs_f64() * 1e3
    );
    drop(server);
    Ok(())
}
