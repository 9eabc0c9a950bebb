//! Latency of `GET /api/version` with and without a concurrent login storm.
//!
//! `cargo run --release --example login_load -- ADDR PASSWORD [SECONDS] [LOGINS] [RATE] [ROUNDS]`
//!
//! A quiet phase measures 16 keep-alive HTTP/1.1 clients calling
//! `/api/version` against an `--insecure` server at `ADDR` for SECONDS,
//! together at RATE requests per second (default 2000), evenly spread (open
//! loop, so the CPU is not simply saturated and latency means latency). A
//! loaded phase measures the same while LOGINS (default 200) clients log in as
//! `admin` in a loop, each from its own loopback address (127.0.1.x, …) so
//! that the brute-force rules do not turn them away. After a discarded 3 s
//! warm-up, ROUNDS (default 3) pairs of quiet and loaded phases alternate. It
//! prints each round's p99, then p50/p99 over all rounds, their ratio, and how
//! many logins succeeded.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(server: SocketAddr, from: IpAddr) -> anyhow::Result<Sender> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let stream = socket.connect(server).await?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One client sending at a fixed rate (open loop). Latency counts from the
/// time a request was due, so a stalled server cannot hide its stall.
async fn version_client(
    server: SocketAddr,
    rate: f64,
    first: Instant,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<Duration>> {
    let mut sender = connect(server, IpAddr::V4(Ipv4Addr::LOCALHOST)).await?;
    let mut latencies = Vec::with_capacity(100_000);
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut due = first;
    while !stop.load(Ordering::Relaxed) && latencies.len() < 5_000_000 {
        // Ahead of schedule: wait, and time from the wake-up (the timer is
        // coarser than a request). Behind schedule: time from when the
        // request was due, so that a stall counts for every request it delayed.
        let start = if Instant::now() < due {
            tokio::time::sleep_until(due.into()).await;
            Instant::now()
        } else {
            due
        };
        let req = http::Request::get("/api/version")
            .header("host", "bench")
            .body(Full::new(Bytes::new()))?;
        let response = sender.send_request(req).await?;
        response.into_body().collect().await?;
        latencies.push(start.elapsed());
        due += interval;
    }
    Ok(latencies)
}

async fn login_client(
    server: SocketAddr,
    from: IpAddr,
    body: Bytes,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let mut sender = connect(server, from).await?;
    for _ in 0..100_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let req = http::Request::post("/api/v1/session")
            .header("host", "bench")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))?;
        let response = sender.send_request(req).await?;
        if response.status().is_success() {
            ok.fetch_add(1, Ordering::Relaxed);
        }
        response.into_body().collect().await?;
    }
    Ok(())
}

async fn phase(
    server: SocketAddr,
    seconds: u64,
    rate: f64,
    logins: usize,
    password: &str,
) -> anyhow::Result<(Vec<Duration>, u64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let body = Bytes::from(serde_json::json!({"username": "admin", "password": password}).to_string());
    let mut login_tasks = Vec::new();
    for i in 0..logins {
        let from = IpAddr::V4(Ipv4Addr::new(
            127,
            0,
            1 + u8::try_from(i / 250)?,
            1 + u8::try_from(i % 250)?,
        ));
        login_tasks.push(tokio::spawn(login_client(
            server,
            from,
            body.clone(),
            Arc::clone(&stop),
            Arc::clone(&ok),
        )));
    }
    if logins > 0 {
        // Let the storm build up before measuring.
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Each client sends at RATE/CLIENTS, offset by an equal share of its
    // interval, so that requests arrive evenly spread rather than as bursts of
    // CLIENTS at once (which would measure the load generator's own queueing).
    let per_client = rate / CLIENTS as f64;
    let start = Instant::now() + Duration::from_millis(20);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let offset = Duration::from_secs_f64(i as f64 / (per_client * CLIENTS as f64));
            tokio::spawn(version_client(
                server,
                per_client,
                start + offset,
                Arc::clone(&stop),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for c in clients {
        latencies.extend(c.await??);
    }
    for t in login_tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    latencies.sort_unstable();
    Ok((latencies, ok.load(Ordering::Relaxed)))
}

const CLIENTS: usize = 16;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(addr), Some(password)) = (args.get(1), args.get(2)) else {
        anyhow::bail!("usage: login_load ADDR PASSWORD [SECONDS] [LOGINS] [RATE]");
    };
    let server: SocketAddr = addr.parse()?;
    let seconds: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let logins: usize = args.get(4).map_or(Ok(200), |s| s.parse())?;
    let rate: f64 = args.get(5).map_or(Ok(2000.0), |s| s.parse())?;
    let rounds: usize = args.get(6).map_or(Ok(3), |s| s.parse())?;
    // Warm-up, discarded: connections, caches and CPU clocks settle first, so
    // start-up cost does not land in the quiet phase.
    phase(server, 3, rate, 0, password).await?;
    // Quiet and loaded phases alternate, so that drift in the machine's
    // background load falls on both alike. A loaded phase returns only once
    // its clients' last logins are answered, so the next quiet phase is quiet.
    let (mut quiet, mut loaded, mut ok) = (Vec::new(), Vec::new(), 0);
    for round in 1..=rounds.max(1) {
        let (q, _) = phase(server, seconds, rate, 0, password).await?;
        let (l, n) = phase(server, seconds, rate, logins, password).await?;
        println!(
            "round {round}: p99 quiet {:?} / under logins {:?} (ratio {:.2})",
            pct(&q, 0.99),
            pct(&l, 0.99),
            pct(&l, 0.99).as_secs_f64() / pct(&q, 0.99).as_secs_f64()
        );
        quiet.extend(q);
        loaded.extend(l);
        ok += n;
    }
    quiet.sort_unstable();
    loaded.sort_unstable();
    let (q99, l99) = (pct(&quiet, 0.99), pct(&loaded, 0.99));
    println!(
        "version requests: quiet {} / under logins {}",
        quiet.len(),
        loaded.len()
    );
    println!(
        "p50: quiet {:?} / under logins {:?}",
        pct(&quiet, 0.5),
        pct(&loaded, 0.5)
    );
    println!(
        "p99: quiet {q99:?} / under logins {l99:?} (ratio {:.2})",
        l99.as_secs_f64() / q99.as_secs_f64()
    );
    println!("successful logins during the loaded phases: {ok} ({logins} concurrent clients)");
    Ok(())
}
