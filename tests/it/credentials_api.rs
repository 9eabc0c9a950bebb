//! What the cluster, repository and credential-template tests share: a plaintext server with
//! local accounts and a policy, a REST client that keeps every body it received (to prove no
//! secret was ever sent back), and a fresh secret per test.

use bytes::Bytes;
use http_body_util::Full;
use serde_json::Value;

use crate::support::TestServer;
use crate::support::client::{self, Proto, connect};

pub const PASSWORD: &str = "correct-horse-1";

/// A value that is in no response unless a credential leaked: `s3cr3t-<random>`.
pub fn secret() -> String {
    format!("s3cr3t-{}", uuid::Uuid::new_v4().simple())
}

/// Percent-encodes a whole value for one path segment (as the UI's `encodeURIComponent`).
pub fn enc(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// A plaintext server with `admin` and the local `accounts` (login only), all with
/// [`PASSWORD`], the `policy.csv` lines given, and extra `argocd-cm` data lines (indented).
pub fn start(accounts: &[&str], policy: &[&str], cm_extra: &str) -> (TestServer, tempfile::TempDir) {
    let config = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let write = |name: &str, text: String| std::fs::write(config.path().join(name), text).unwrap();
    let mut cm = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n");
    let mut secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  admin.password: '{hash}'\n"
    );
    for account in accounts {
        cm.push_str(&format!("  accounts.{account}: login\n"));
        secret.push_str(&format!("  accounts.{account}.password: '{hash}'\n"));
    }
    cm.push_str(cm_extra);
    write("argocd-cm.yaml", cm);
    write("argocd-secret.yaml", secret);
    let mut rbac =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n");
    if policy.is_empty() {
        rbac.push_str("  policy.csv: ''\n");
    } else {
        rbac.push_str("  policy.csv: |\n");
        for line in policy {
            rbac.push_str(&format!("    {line}\n"));
        }
    }
    write("argocd-rbac-cm.yaml", rbac);
    let server = TestServer::start(&["--insecure", "--config-dir", config.path().to_str().unwrap()]);
    (server, config)
}

/// One answer: status, raw body and its JSON (`Null` when not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub text: String,
    pub body: Value,
}

pub struct Rest {
    port: u16,
    addr: std::net::SocketAddr,
    token: Option<String>,
    /// Every body received, for [`Rest::assert_never_sent`].
    seen: std::sync::Mutex<Vec<String>>,
}

impl Rest {
    pub fn anonymous(server: &TestServer) -> Self {
        Self {
            port: server.port,
            addr: server.addr(),
            token: None,
            seen: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub async fn login(server: &TestServer, user: &str) -> Self {
        let mut rest = Self::anonymous(server);
        let body = serde_json::json!({"username": user, "password": PASSWORD});
        let r = rest.call("POST", "/api/v1/session", Some(&body)).await;
        assert_eq!(r.status, 200, "login {user}: {r:?}");
        rest.token = Some(r.body["token"].as_str().unwrap().to_owned());
        rest
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let mut conn = connect(self.addr, false, Proto::H1).await;
        let mut req = client::request(method, &format!("http://127.0.0.1:{}{path}", self.port));
        if let Some(token) = &self.token {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        if method != "GET" {
            req = req.header("content-type", "application/json");
        }
        let bytes = body.map_or_else(Bytes::new, |b| Bytes::from(serde_json::to_vec(b).unwrap()));
        let r = conn.send(req.body(Full::new(bytes)).unwrap()).await;
        let text = r.text();
        self.seen.lock().unwrap().push(format!("{method} {path}: {text}"));
        Answer {
            status: r.status,
            body: serde_json::from_slice(&r.body).unwrap_or(Value::Null),
            text,
        }
    }

    /// The call, which must answer 200; its JSON.
    pub async fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let r = self.call(method, path, body).await;
        assert_eq!(r.status, 200, "{method} {path}: {r:?}");
        r.body
    }

    /// The call, which must answer `status`; the answer.
    pub async fn expect(&self, status: u16, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let r = self.call(method, path, body).await;
        assert_eq!(r.status, status, "{method} {path}: {r:?}");
        r
    }

    /// No body this client received contains `needle`.
    #[track_caller]
    pub fn assert_never_sent(&self, needle: &str) {
        let seen = self.seen.lock().unwrap();
        assert!(!seen.is_empty());
        for body in seen.iter() {
            assert!(!body.contains(needle), "a response carried the secret: {body}");
        }
    }
}

/// Every `field` of the list's items.
pub fn items_field<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list["items"]
        .as_array()
        .map(|items| items.iter().filter_map(|i| i[field].as_str()).collect())
        .unwrap_or_default()
}

/// The server log holds no `needle` (credentials are never logged).
#[track_caller]
pub fn assert_not_logged(server: &TestServer, needle: &str) {
    let logs = server.logs();
    assert!(!logs.is_empty(), "the server logged nothing at all");
    assert!(!logs.contains(needle), "the server logged a secret:\n{logs}");
}
