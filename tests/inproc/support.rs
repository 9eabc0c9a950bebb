//! A server in this process (`tiphys::server::inprocess`) and REST calls to it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::Value;
use tiphys::server::inprocess::InProcess;
use tower::ServiceExt as _;

/// A data dir and config dir, and the server opened on them.
pub struct Server {
    pub server: InProcess,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// A server with `argocd-cm` data lines `cm` and `argocd-rbac-cm` data lines `rbac` (YAML,
    /// indented by two spaces), and `flags` of `tiphys server`.
    pub async fn open(cm: &str, rbac: &str, flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        write(&config, "argocd-cm", "ConfigMap", cm);
        write(&config, "argocd-rbac-cm", "ConfigMap", rbac);
        let mut all = vec!["--config-dir", config.to_str().unwrap()];
        all.extend_from_slice(flags);
        let server = InProcess::open(&dir.path().join("data"), &all).await.unwrap();
        Self { server, dir }
    }

    /// A login token of account `name` (which must exist and be allowed to log in).
    pub fn login(&self, name: &str) -> String {
        self.server.app.auth.tokens.issue_login(name)
    }

    /// A REST call with a bearer token (none when empty) and a JSON body (none when `Null`).
    pub async fn rest(&self, method: &str, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(path);
        if !token.is_empty() {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let body = if body.is_null() {
            axum::body::Body::empty()
        } else {
            req = req.header("content-type", "application/json");
            axum::body::Body::from(body.to_string())
        };
        let response = self
            .server
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let json = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, json)
    }
}

fn write(dir: &Path, name: &str, kind: &str, data: &str) {
    let text = format!("apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\ndata:\n{data}");
    std::fs::write(dir.join(format!("{name}.yaml")), text).unwrap();
}

/// Log lines written while it is installed on this thread (`#[tokio::test]` runs the server on
/// the test's thread), as JSON objects.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Captures this thread's log lines until the guard is dropped.
    pub fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(self.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// The lines of target `target` so far.
    pub fn of(&self, target: &str) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["target"] == target)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
