//! Reading repositories (issue 23 targets), against the real release binary and the `git`
//! executable in the same run:
//!
//! `cargo run --release --example repo_reads -- TIPHYS_BIN [RUNS]`
//!
//! 1. Builds bare repositories with 1,000 refs (500 branches, 500 tags) and 100 app
//!    directories (50 Kustomize, 50 Helm charts with values files): `apps-0.git` …
//!    `apps-{RUNS}.git`, each with a commit of its own, so that every one is cold once. Serves
//!    them with `git daemon` on loopback.
//! 2. Starts tiphys (`--repo-access on`), adds every repository, and times:
//!    - ListRefs cold (`forceRefresh=true`: refs listed anew) against `git ls-remote`;
//!    - ListRefs cached;
//!    - GetAppDetails of a Helm app on a repository not fetched before against a shallow
//!      `git clone --depth 1` (with checkout, as a repo server does);
//!    - GetAppDetails cached.
//!
//! Every process started here is stopped by its PID.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};

#[allow(dead_code)]
mod support;

use self::support::{Http1, http1};

const PASSWORD: &str = "bench-password-1";
const CACHED_RUNS: usize = 50;

fn git(dir: &Path, args: &[&str], input: Option<&[u8]>) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input)?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A bare repository with 100 apps in one commit (its message makes it unique) and 1,000 refs.
fn build_repo(root: &Path, name: &str) -> anyhow::Result<()> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    git(&dir, &["init", "-q", "--bare"], None)?;
    let mut stream = String::new();
    stream.push_str("commit refs/heads/main\ncommitter Bench <bench@example.com> 1700000000 +0000\n");
    let message = format!("apps of {name}");
    stream.push_str(&format!("data {}\n{message}\n", message.len()));
    let mut inline = |path: &str, text: &str| {
        stream.push_str(&format!("M 100644 inline {path}\ndata {}\n{text}\n", text.len()));
    };
    for i in 0..100 {
        if i % 2 == 0 {
            inline(
                &format!("apps/kustomize-{i}/kustomization.yaml"),
                &format!(
                    "namePrefix: k{i}-\nresources:\n- deploy.yaml\nimages:\n- name: app\n  newTag: v{i}\n"
                ),
            );
            inline(
                &format!("apps/kustomize-{i}/deploy.yaml"),
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n",
            );
        } else {
            inline(
                &format!("apps/helm-{i}/Chart.yaml"),
                &format!("apiVersion: v2\nname: chart-{i}\nversion: 0.1.{i}\n"),
            );
            let values: String = (0..40)
                .map(|n| format!("key{n}:\n  nested: value-{n}\n  list: [a, b]\n"))
                .collect();
            inline(&format!("apps/helm-{i}/values.yaml"), &values);
            inline(&format!("apps/helm-{i}/values-prod.yaml"), "replicas: 3\n");
            inline(
                &format!("apps/helm-{i}/templates/deployment.yaml"),
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n",
            );
        }
    }
    git(&dir, &["fast-import", "--quiet"], Some(stream.as_bytes()))?;
    let head = git(&dir, &["rev-parse", "refs/heads/main"], None)?;
    let mut updates = String::new();
    for i in 0..500 {
        updates.push_str(&format!("create refs/heads/branch-{i:03} {head}\n"));
        updates.push_str(&format!("create refs/tags/v1.{i:03} {head}\n"));
    }
    git(&dir, &["update-ref", "--stdin"], Some(updates.as_bytes()))?;
    Ok(())
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn call(
    client: &mut Http1,
    token: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<Value> {
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "bench")
        .header("content-type", "application/json");
    if !token.is_empty() {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req.body(Full::new(Bytes::from(
        body.map(Value::to_string).unwrap_or_default(),
    )))?;
    client.ready().await.context("the connection closed")?;
    let response = client
        .send_request(req)
        .await
        .with_context(|| format!("{method} {path}"))?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .with_context(|| format!("{method} {path}: reading the answer"))?
        .to_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !status.is_success() {
        bail!("{method} {path}: {status} {value}");
    }
    Ok(value)
}

fn enc(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn timed<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<Duration> {
    let start = Instant::now();
    f()?;
    Ok(start.elapsed())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let bin = PathBuf::from(args.next().context("usage: repo_reads TIPHYS_BIN [RUNS]")?);
    let runs: usize = args.next().map(|r| r.parse()).transpose()?.unwrap_or(10);
    let work = std::env::temp_dir().join(format!("tiphys-repo-reads-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let repos = work.join("repos");
    let built = Instant::now();
    for i in 0..=runs {
        build_repo(&repos, &format!("apps-{i}.git"))?;
    }
    println!(
        "repositories: {} x (1,000 refs, 100 apps), built in {:.1} s",
        runs + 1,
        built.elapsed().as_secs_f64()
    );
    let port = free_port()?;
    let _daemon = Daemon(
        Command::new("git")
            .args(["daemon", "--export-all", "--reuseaddr", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", repos.display()))
            .arg(&repos)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let url = |i: usize| format!("git://127.0.0.1:{port}/apps-{i}.git");
    // Wait for the daemon.
    let deadline = Instant::now() + Duration::from_secs(10);
    while git(&work, &["ls-remote", &url(0), "HEAD"], None).is_err() {
        if Instant::now() > deadline {
            bail!("git daemon did not start");
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let policy = "p, bench, repositories, *, *, allow\np, bench, applications, *, */*, allow\n";
    support::write_config(&work.join("config"), PASSWORD, policy)?;
    let mut command = Command::new(&bin);
    command
        .args(["server", "--insecure", "--address", "127.0.0.1", "--port", "0"])
        .args([
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            "0",
            "--repo-access",
            "on",
        ])
        .arg("--data-dir")
        .arg(work.join("data"))
        .arg("--config-dir")
        .arg(work.join("config"))
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_owned()),
        );
    let (server, _) = support::start(
        command,
        &work.join("ready"),
        &work.join("server.log"),
        Duration::from_secs(20),
    )?;
    let mut client = http1(&server.addr).await.context("connecting")?;
    let login = json!({"username": "bench", "password": PASSWORD});
    let token = call(&mut client, "", "POST", "/api/v1/session", Some(&login))
        .await
        .context("login")?["token"]
        .as_str()
        .context("no token")?
        .to_owned();
    for i in 0..=runs {
        call(
            &mut client,
            &token,
            "POST",
            "/api/v1/repositories",
            Some(&json!({"repo": url(i)})),
        )
        .await?;
    }

    // ListRefs, cold and cached, against git ls-remote (all on apps-0).
    let refs_path = format!("/api/v1/repositories/{}/refs", enc(&url(0)));
    let (mut cold, mut ls_remote) = (Vec::new(), Vec::new());
    for _ in 0..runs.max(5) {
        let start = Instant::now();
        let refs = call(
            &mut client,
            &token,
            "GET",
            &format!("{refs_path}?forceRefresh=true"),
            None,
        )
        .await?;
        cold.push(start.elapsed());
        let count =
            refs["branches"].as_array().map_or(0, Vec::len) + refs["tags"].as_array().map_or(0, Vec::len);
        if count != 1001 {
            bail!("ListRefs answered {count} refs");
        }
        ls_remote.push(timed(|| git(&work, &["ls-remote", &url(0)], None).map(|_| ()))?);
    }
    let mut cached = Vec::new();
    for _ in 0..CACHED_RUNS {
        let start = Instant::now();
        call(&mut client, &token, "GET", &refs_path, None).await?;
        cached.push(start.elapsed());
    }
    let (cold, ls_remote, cached) = (median(cold), median(ls_remote), median(cached));
    println!(
        "ListRefs   cold {:7.2} ms   git ls-remote {:7.2} ms   ratio {:.2}   cached {:6.2} ms",
        ms(cold),
        ms(ls_remote),
        cold.as_secs_f64() / ls_remote.as_secs_f64(),
        ms(cached)
    );

    // GetAppDetails: each repository is cold once; a shallow clone of the same one beside it.
    let details = |i: usize| {
        json!({"source": {"repoURL": url(i), "path": "apps/helm-51", "targetRevision": "main"},
               "appName": "bench-app", "appProject": "default"})
    };
    let details_path = |i: usize| format!("/api/v1/repositories/{}/appdetails", enc(&url(i)));
    let (mut cold, mut clone) = (Vec::new(), Vec::new());
    for i in 1..=runs {
        let start = Instant::now();
        let answer = call(&mut client, &token, "POST", &details_path(i), Some(&details(i))).await?;
        cold.push(start.elapsed());
        if answer["helm"]["parameters"].as_array().map_or(0, Vec::len) != 120 {
            bail!("GetAppDetails answered {answer}");
        }
        let target = work.join(format!("clone-{i}"));
        let target_arg = target.display().to_string();
        clone.push(timed(|| {
            git(
                &work,
                &["clone", "-q", "--depth", "1", &url(i), &target_arg],
                None,
            )
            .map(|_| ())
        })?);
    }
    let mut cached = Vec::new();
    for _ in 0..CACHED_RUNS {
        let start = Instant::now();
        call(&mut client, &token, "POST", &details_path(1), Some(&details(1))).await?;
        cached.push(start.elapsed());
    }
    let (cold, clone, cached) = (median(cold), median(clone), median(cached));
    println!(
        "AppDetails cold {:7.2} ms   git clone -1  {:7.2} ms   ratio {:.2}   cached {:6.2} ms",
        ms(cold),
        ms(clone),
        cold.as_secs_f64() / clone.as_secs_f64(),
        ms(cached)
    );
    drop(server);
    if std::env::var_os("REPO_READS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        println!("kept {}", work.display());
    }
    Ok(())
}
