//! What the load benchmarks share: a server process that is stopped (by its PID) when dropped,
//! started and waited for through its ready file, and a plain HTTP/1.1 client connection.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::Value;

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

pub async fn http1(addr: &str) -> anyhow::Result<Http1> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// A `--config-dir` with one local account `bench` (password `password`, bcrypt cost 4) and
/// `policy` as `policy.csv`.
pub fn write_config(dir: &Path, password: &str, policy: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let manifest = |kind: &str, name: &str, key: &str, data: Value| {
        serde_yaml_ng::to_string(
            &serde_json::json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, key: data}),
        )
    };
    let files = [
        (
            "argocd-cm.yaml",
            "ConfigMap",
            "argocd-cm",
            "data",
            serde_json::json!({"accounts.bench": "login"}),
        ),
        (
            "argocd-rbac-cm.yaml",
            "ConfigMap",
            "argocd-rbac-cm",
            "data",
            serde_json::json!({"policy.csv": policy}),
        ),
        (
            "argocd-secret.yaml",
            "Secret",
            "argocd-secret",
            "stringData",
            serde_json::json!({"accounts.bench.password": bcrypt::hash(password, 4)?}),
        ),
    ];
    for (file, kind, name, key, data) in files {
        std::fs::write(dir.join(file), manifest(kind, name, key, data)?)?;
    }
    Ok(())
}
