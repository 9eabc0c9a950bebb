//! Writes per second on etcd (issue "Several replicas on etcd"), against the real release binary
//! and a real 3-member etcd on loopback:
//!
//! `cargo run --release --example etcd_writes -- TIPHYS_BIN [WRITES] [CONCURRENCY]`
//!
//! 1. The limit: raw etcd puts of the same size as an application record (about 5.3 KB, plus
//!    its stored protobuf encoding: two keys per write), from the etcd client crate, as
//!    transactions of two puts, CONCURRENCY at a time.
//! 2. tiphys with 1 replica, then 3 replicas on the same etcd (each on its own prefix run):
//!    WRITES creates of applications over REST, CONCURRENCY at a time, spread round robin over
//!    the replicas, then WRITES updates of the same applications.
//!
//! Prints writes per second of each and the ratio to raw etcd. Every process started here is
//! stopped by its PID.
//!
//! `ETCD_WRITES_PIN=ETCD_CPUS/OTHER_CPUS` (for example `0/1`) pins the etcd members to the first
//! CPU list and this process, the raw client and every tiphys replica to the second, with
//! `taskset`: etcd then has cores of its own, as in a deployment where it runs on its own
//! nodes, and the ratio measures what tiphys asks of etcd rather than the CPU it takes from it.

// Test support: panics on a failed setup on purpose.
#[allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
#[path = "../tests/support/etcd_cluster.rs"]
mod etcd_cluster;
#[allow(dead_code)]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};

use self::etcd_cluster::EtcdCluster;
use self::support::{Http1, Server, http1};

const PASSWORD: &str = "bench-password-1";

fn start(bin: &Path, work: &Path, n: usize, endpoints: &str, prefix: &str) -> anyhow::Result<Server> {
    let dir = work.join(format!("replica-{n}"));
    std::fs::create_dir_all(&dir)?;
    let mut command = Command::new(bin);
    command
        .args(["server", "--insecure", "--address", "127.0.0.1", "--port", "0"])
        .args(["--metrics-address", "127.0.0.1", "--metrics-port", "0"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .arg("--config-dir")
        .arg(work.join("config"))
        .args(["--etcd-endpoints", endpoints, "--etcd-prefix", prefix])
        .env("RUST_LOG", "error");
    let ready = dir.join("ready");
    let log = dir.join("server.log");
    Ok(support::start(command, &ready, &log, Duration::from_secs(30))?.0)
}

fn write_config(work: &Path) -> anyhow::Result<()> {
    let dir = work.join("config");
    std::fs::create_dir_all(&dir)?;
    let hash = bcrypt::hash(PASSWORD, 4)?;
    std::fs::write(
        dir.join("argocd-secret.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  \
             admin.password: '{hash}'\n  server.secretkey: bench-replicas-share-this-key\n"
        ),
    )?;
    Ok(())
}

fn app(i: usize, round: usize) -> Value {
    let values: String = (0..140)
        .map(|n| format!("key{n}: value-{i}-{n}-padding-text\n"))
        .collect();
    json!({
        "metadata": {"name": format!("app-{i:05}"), "labels": {"team": format!("team-{}", i % 20)}},
        "spec": {"project": "default",
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"},
                 "source": {"repoURL": "https://git.example.test/org/apps.git", "path": format!("apps/{i}/{round}"),
                            "targetRevision": "HEAD", "helm": {"values": values}}}
    })
}

async fn send(
    client: &mut Http1,
    method: &str,
    path: &str,
    token: &str,
    body: &Value,
) -> anyhow::Result<Value> {
    client.ready().await?;
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "bench")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = client.send_request(req).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("{method} {path}: {status} {}", String::from_utf8_lossy(&bytes));
    }
    Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn login(addr: &str) -> anyhow::Result<String> {
    let mut client = http1(addr).await?;
    let body = json!({"username": "admin", "password": PASSWORD});
    let answer = send(&mut client, "POST", "/api/v1/session", "", &body).await?;
    answer["token"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("login failed: {answer}"))
}

/// Raw etcd: `writes` transactions of two puts (a record and its encoding), `concurrency` at a
/// time; returns writes per second.
async fn raw_etcd(endpoints: &[String], writes: usize, concurrency: usize) -> anyhow::Result<f64> {
    let client = etcd_client::Client::connect(endpoints, None).await?;
    let record = vec![b'x'; app(0, 0).to_string().len()];
    let encoding = vec![b'y'; record.len() * 9 / 10];
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (mut kv, next) = (client.kv_client(), Arc::clone(&next));
            let (record, encoding) = (record.clone(), encoding.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= writes {
                        return Ok::<_, anyhow::Error>(());
                    }
                    let txn = etcd_client::Txn::new().and_then([
                        etcd_client::TxnOp::put(format!("/raw/registry/{i}"), record.clone(), None),
                        etcd_client::TxnOp::put(format!("/raw/registry-pb/{i}"), encoding.clone(), None),
                    ]);
                    kv.txn(txn).await?;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(writes as f64 / started.elapsed().as_secs_f64())
}

/// `writes` creates, then `writes` updates, of applications over the replicas (round robin),
/// `concurrency` at a time; returns (creates/s, updates/s).
async fn through_tiphys(servers: &[Server], writes: usize, concurrency: usize) -> anyhow::Result<(f64, f64)> {
    let token = login(&servers[0].addr).await?;
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let mut rates = Vec::new();
    for round in 0..2 {
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..concurrency {
            let addr = addrs[worker % addrs.len()].clone();
            let (token, next) = (token.clone(), Arc::clone(&next));
            tasks.push(tokio::spawn(async move {
                let mut client = http1(&addr).await?;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= writes {
                        return Ok::<_, anyhow::Error>(());
                    }
                    if round == 0 {
                        send(&mut client, "POST", "/api/v1/applications", &token, &app(i, 0)).await?;
                    } else {
                        let path = format!("/api/v1/applications/app-{i:05}");
                        send(&mut client, "PUT", &path, &token, &app(i, 1)).await?;
                    }
                }
            }));
        }
        for task in tasks {
            task.await??;
        }
        rates.push(writes as f64 / started.elapsed().as_secs_f64());
    }
    Ok((rates[0], rates[1]))
}

/// Pins every thread of process `pid` (one this benchmark started, or itself) to `cpus`.
fn taskset(cpus: &str, pid: u32) -> anyhow::Result<()> {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("cannot run taskset (util-linux)")?;
    if !status.success() {
        bail!("taskset -c {cpus} {pid} failed: {status}");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = PathBuf::from(
        args.get(1)
            .context("usage: etcd_writes TIPHYS_BIN [WRITES] [CONCURRENCY]")?,
    );
    let writes: usize = args.get(2).map_or(Ok(2_000), |a| a.parse())?;
    let concurrency: usize = args.get(3).map_or(Ok(16), |a| a.parse())?;
    let work = tempfile::Builder::new().prefix("tiphys-etcd-writes-").tempdir()?;
    let work = work.path();
    write_config(work)?;
    let cluster = EtcdCluster::start(3);
    if let Ok(pin) = std::env::var("ETCD_WRITES_PIN") {
        let (etcd_cpus, other_cpus) = pin
            .split_once('/')
            .context("ETCD_WRITES_PIN is ETCD_CPUS/OTHER_CPUS, such as 0/1")?;
        for pid in cluster.pids() {
            taskset(etcd_cpus, pid)?;
        }
        taskset(other_cpus, std::process::id())?;
        println!("etcd on CPUs {etcd_cpus}; tiphys and the clients on CPUs {other_cpus}");
    }
    let endpoints = cluster.endpoints();
    let joined = endpoints.join(",");
    println!("{writes} writes per run, {concurrency} at a time, 3-member etcd on loopback");

    let raw = raw_etcd(&endpoints, writes, concurrency).await?;
    println!("raw etcd (txn of 2 puts, ~5.3 KB):       {raw:>8.0} writes/s");
    for replicas in [1, 3] {
        let prefix = format!("/bench-{replicas}/");
        let servers = (0..replicas)
            .map(|n| start(&bin, work, n + 10 * replicas, &joined, &prefix))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let (creates, updates) = through_tiphys(&servers, writes, concurrency).await?;
        println!(
            "tiphys, {replicas} replica(s): creates {creates:>8.0}/s ({:.2} of raw)  updates {updates:>8.0}/s ({:.2} of raw)",
            creates / raw,
            updates / raw
        );
    }
    let again = raw_etcd(&endpoints, writes, concurrency).await?;
    println!("raw etcd again (drift check):            {again:>8.0} writes/s");
    Ok(())
}
