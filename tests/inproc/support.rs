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
        Self::open_with_clock(cm, rbac, flags, tiphys::clock::Clock::system()).await
    }

    /// [`Server::open`] with the server reading time from `clock`.
    pub async fn open_with_clock(cm: &str, rbac: &str, flags: &[&str], clock: tiphys::clock::Clock) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::create_dir_all(&config).unwrap();
        write(&config, "argocd-cm", "ConfigMap", cm);
        write(&config, "argocd-rbac-cm", "ConfigMap", rbac);
        let mut all = vec!["--config-dir", config.to_str().unwrap()];
        all.extend_from_slice(flags);
        let server = InProcess::open_with_clock(&dir.path().join("data"), &all, clock)
            .await
            .unwrap();
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

impl Server {
    /// A unary native gRPC call (HTTP/2, trailers): the `grpc-status`, the `grpc-message`
    /// (percent-decoded) and the reply message's bytes.
    pub async fn grpc(&self, path: &str, token: &str, message: &[u8]) -> (String, String, Vec<u8>) {
        let req = Request::builder()
            .version(http::Version::HTTP_2)
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        let (headers, data, trailers) = self.unary(req, path, token, message).await;
        let field = |name: &str| field(trailers.get(name).or_else(|| headers.get(name)));
        let payload = data.get(5..).map(<[u8]>::to_vec).unwrap_or_default();
        (field("grpc-status"), field("grpc-message"), payload)
    }

    /// A unary gRPC-Web call (HTTP/1.1, binary): its status and message, read from the trailer
    /// frame at the end of the body (or the headers of a trailers-only answer).
    pub async fn grpc_web(&self, path: &str, token: &str, message: &[u8]) -> (String, String) {
        let req = Request::builder()
            .version(http::Version::HTTP_11)
            .header("content-type", "application/grpc-web+proto")
            .header("x-grpc-web", "1");
        let (mut fields, mut data, _) = self.unary(req, path, token, message).await;
        while data.len() >= 5 {
            let len = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
            let (frame, rest) = data[5..].split_at(len);
            if data[0] & 0x80 != 0 {
                for line in String::from_utf8_lossy(frame).split("\r\n") {
                    if let Some((name, value)) = line.split_once(':') {
                        let name = http::HeaderName::from_bytes(name.trim().as_bytes()).unwrap();
                        fields.insert(name, value.trim().parse().unwrap());
                    }
                }
            }
            data = rest.to_vec();
        }
        (
            field(fields.get("grpc-status")),
            field(fields.get("grpc-message")),
        )
    }

    /// `message` framed as gRPC's one length-prefixed message, sent to `path`: the answer's
    /// headers, body and trailers.
    async fn unary(
        &self,
        req: http::request::Builder,
        path: &str,
        token: &str,
        message: &[u8],
    ) -> (http::HeaderMap, Vec<u8>, http::HeaderMap) {
        let mut body = vec![0];
        body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
        body.extend_from_slice(message);
        let mut req = req.method("POST").uri(path);
        if !token.is_empty() {
            req = req.header("token", token);
        }
        let response = self
            .server
            .clone()
            .oneshot(req.body(axum::body::Body::from(body)).unwrap())
            .await
            .unwrap();
        let headers = response.headers().clone();
        let collected = response.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap_or_default();
        (headers, collected.to_bytes().to_vec(), trailers)
    }
}

/// A gRPC header's text, percent-decoded (as `grpc-message` is sent); empty when absent.
fn field(value: Option<&http::HeaderValue>) -> String {
    let text = value.map(|v| v.to_str().unwrap()).unwrap_or_default();
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .unwrap()
        .into_owned()
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
