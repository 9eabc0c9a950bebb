//! Pages, filters and facet counts of applications (issue 41, item 1) at 100,000 applications,
//! beside today's unfiltered list, against the real release binary:
//!
//! `cargo run --release --example pages -- TIPHYS_BIN [APPS]`
//!
//! 1. Seeds APPS (default 100,000) applications into a fresh data dir through the registry,
//!    each with a `status` as the controller writes it (sync and health spread over their
//!    values), in 20 projects, 50 destination namespaces and 4 repositories; writes a config
//!    dir with the 50-group policy of the other benchmarks (`support::group_policy`).
//! 2. Starts the server and, for `admin` and for `bench` (a member of 50 roles), times over
//!    REST: the unfiltered list (first byte and whole body), the first page of 100 in each sort,
//!    a filtered page, a searched page, the next page by its continue token, and the facet
//!    counts of all six fields; over gRPC, the first page. The first facet request of each user
//!    is reported on its own (it decides RBAC for every application once).
//!
//! Every process started here is stopped by its PID.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use tiphys::registry::{Change, Key, Kind, Registry};
use tiphys::store::{FileStore, Store};

#[allow(dead_code)]
mod support;

use self::support::{Dial, Http1, grpc_unary, http1, rest_list, summary};

const PASSWORD: &str = "bench-password-1";
const RUNS: usize = 60;
const FULL_RUNS: usize = 5;
const SYNC: [&str; 3] = ["Synced", "OutOfSync", "Unknown"];
const HEALTH: [&str; 5] = ["Healthy", "Progressing", "Degraded", "Missing", "Suspended"];

/// Application number `i`: about 900 bytes, with the controller's status.
fn app(i: usize) -> Value {
    json!({
        "metadata": {"name": format!("app-{i:06}"), "namespace": "argocd",
                     "labels": {"team": format!("team-{}", i % 20), "tier": if i.is_multiple_of(2) { "web" } else { "db" }}},
        "spec": {"project": format!("project-{}", i % 20),
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": format!("ns-{}", i % 50)},
                 "source": {"repoURL": format!("https://git.example.test/org/apps-{}.git", i % 4),
                            "path": format!("apps/{i}"), "targetRevision": "HEAD"}},
        "status": {"sync": {"status": SYNC[(i * 7) % 3], "revision": "0123456789abcdef0123456789abcdef01234567"},
                   "health": {"status": HEALTH[(i * 3) % 5]},
                   "summary": {"images": [format!("registry.example.test/app:{}", i % 100)]}}
    })
}

async fn seed(work: &Path, apps: usize) -> anyhow::Result<()> {
    let store: Arc<dyn Store> = Arc::new(FileStore::open(&work.join("data"))?);
    let keys = tiphys::state::secrets_keys(&*store, &tiphys::config::Settings::default(), None, true).await?;
    let registry = Registry::open(store, Arc::new(keys)).await?;
    let mut projects = Vec::new();
    for p in 0..20 {
        let name = format!("project-{p}");
        projects.push(Change::Create {
            key: Key::new(Kind::AppProject, "argocd", &name),
            value: json!({"metadata": {"name": name, "namespace": "argocd"},
                          "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}),
        });
    }
    registry.apply(projects).await?;
    for start in (0..apps).step_by(1000) {
        let changes = (start..(start + 1000).min(apps))
            .map(|i| Change::Create {
                key: Key::new(Kind::Application, "argocd", &format!("app-{i:06}")),
                value: app(i),
            })
            .collect();
        registry.apply(changes).await?;
    }
    Ok(())
}

/// `RUNS` timings of the REST list `query` (whole body), after one untimed call, which must
/// answer at least `min_bytes` (a page of 100 is about 100 KB).
async fn rest_runs(
    client: &mut Http1,
    token: &str,
    query: &str,
    runs: usize,
    min_bytes: usize,
) -> anyhow::Result<Vec<Duration>> {
    let (_, _, size) = rest_list(client, token, query).await?;
    if size < min_bytes {
        bail!("{query} answered {size} bytes, fewer than {min_bytes}");
    }
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        out.push(rest_list(client, token, query).await?.1);
    }
    Ok(out)
}

/// The continue token of the page `query` gives.
async fn continue_of(dial: &Dial, token: &str, query: &str) -> anyhow::Result<String> {
    let mut client = dial.http1().await?;
    let req = http::Request::get(format!("/api/v1/applications{query}"))
        .header("host", "bench")
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Full::new(bytes::Bytes::new()))?;
    use http_body_util::BodyExt as _;
    let body = client
        .send_request(req)
        .await?
        .into_body()
        .collect()
        .await?
        .to_bytes();
    let value: Value = serde_json::from_slice(&body)?;
    value["metadata"]["continue"]
        .as_str()
        .map(str::to_owned)
        .context("no continue token")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args.get(1).context("usage: pages TIPHYS_BIN [APPS]")?;
    let apps: usize = args.get(2).map_or(Ok(100_000), |a| a.parse())?;
    let work = tempfile::tempdir()?;
    let started = Instant::now();
    seed(work.path(), apps).await?;
    println!(
        "seeded {apps} applications in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    support::write_config(&work.path().join("config"), PASSWORD, &support::group_policy(950))?;

    let mut command = Command::new(bin);
    command
        .args(["server", "--insecure", "--address", "127.0.0.1", "--port", "0"])
        .args(["--metrics-address", "127.0.0.1", "--metrics-port", "0"])
        .arg("--data-dir")
        .arg(work.path().join("data"))
        .arg("--config-dir")
        .arg(work.path().join("config"))
        .env("RUST_LOG", "warn");
    let (server, spawned) = support::start(
        command,
        &work.path().join("ready"),
        &work.path().join("server.log"),
        Duration::from_secs(60),
    )?;
    println!(
        "server ready {:.0} ms after spawn",
        spawned.elapsed().as_secs_f64() * 1e3
    );
    let dial = Dial::plain(&server.addr);
    let admin_pw = std::fs::read_to_string(work.path().join("data").join("initial-admin-password"))
        .context("the generated admin password")?;
    let users = [
        ("admin", support::login(&dial, "admin", admin_pw.trim()).await?),
        ("bench", support::login(&dial, "bench", PASSWORD).await?),
    ];
    for (user, token) in &users {
        let mut client = http1(&server.addr).await?;
        println!("\n{user}:");
        // The first page and the first facets build the catalog and decide RBAC once.
        let cold = Instant::now();
        rest_list(&mut client, token, "?limit=100").await?;
        println!(
            "  first page after start: {:.1} ms",
            cold.elapsed().as_secs_f64() * 1e3
        );
        let cold = Instant::now();
        rest_list(
            &mut client,
            token,
            "?limit=1&facets=project,cluster,namespace,sync,health,repo",
        )
        .await?;
        println!(
            "  first facets after start: {:.1} ms",
            cold.elapsed().as_secs_f64() * 1e3
        );

        let mut firsts = Vec::new();
        let mut wholes = Vec::new();
        for _ in 0..FULL_RUNS {
            let (first, whole, size) = rest_list(&mut client, token, "").await?;
            if size < apps * 100 {
                bail!("the unfiltered list for {user} is {size} bytes");
            }
            firsts.push(first);
            wholes.push(whole);
        }
        summary("unfiltered list, first byte", firsts);
        summary("unfiltered list, whole body", wholes);
        for (name, query) in [
            ("page of 100, by name", "?limit=100"),
            ("page of 100, newest first", "?limit=100&sort=-created"),
            ("page of 100, by health", "?limit=100&sort=health"),
            ("page, health=Degraded", "?limit=100&filter=health%3DDegraded"),
            (
                "page, project+sync",
                "?limit=100&filter=project%3Dproject-3&filter=sync%3DOutOfSync",
            ),
            ("page, search 'app-099'", "?limit=100&search=app-099"),
            (
                "facets, six fields",
                "?limit=100&facets=project,cluster,namespace,sync,health,repo",
            ),
            (
                "facets, filtered",
                "?limit=100&filter=health%3DDegraded&facets=project,namespace,sync",
            ),
        ] {
            summary(name, rest_runs(&mut client, token, query, RUNS, 50_000).await?);
        }
        let next = continue_of(&dial, token, "?limit=100").await?;
        summary(
            "next page by continue",
            rest_runs(
                &mut client,
                token,
                &format!("?limit=100&continue={next}"),
                RUNS,
                50_000,
            )
            .await?,
        );
        let mut h2 = dial.http2().await?;
        let query = tiphys::schema::Schema::get().message("application.ApplicationQuery")?;
        let message = tiphys::schema::Schema::get().encode(&query, &json!({"limit": 100}))?;
        let mut grpc = Vec::new();
        for _ in 0..RUNS {
            let reply = grpc_unary(
                &mut h2,
                &dial.base(),
                "/application.ApplicationService/List",
                Some(token),
                &message,
            )
            .await?;
            if reply.status.as_deref() != Some("0") {
                bail!("gRPC page answered {:?}", reply.status);
            }
            grpc.push(reply.total);
        }
        summary("gRPC page of 100", grpc);
    }
    if let Some(rss) = support::rss_kib(server.child.id(), "VmHWM:") {
        println!("\npeak RSS {:.0} MiB", rss as f64 / 1024.0);
    }
    drop(server);
    Ok(())
}
