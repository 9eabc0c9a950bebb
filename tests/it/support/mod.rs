//! A tiphys process per test, on an ephemeral loopback port, and small HTTP
//! clients that control the protocol version exactly.

pub mod client;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    child: Child,
    pub port: u16,
    pub metrics_port: u16,
    pub dir: tempfile::TempDir,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tiphys")
}

impl TestServer {
    /// Starts `tiphys server` with `args` (plus loopback, ephemeral ports and a temp data dir).
    pub fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, args)
    }

    pub fn start_in(dir: tempfile::TempDir, args: &[&str]) -> Self {
        match Self::spawn(dir, args) {
            Ok(server) => server,
            Err(log) => panic!("server did not start:\n{log}"),
        }
    }

    /// Starts the server, or returns what it logged before exiting.
    pub fn spawn(dir: tempfile::TempDir, args: &[&str]) -> Result<Self, String> {
        let ready = dir.path().join("ready.json");
        let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
        let has = |flag: &str| args.iter().any(|a| a.starts_with(flag));
        let mut cmd = Command::new(bin());
        cmd.arg("server");
        if !has("--address") {
            cmd.args(["--address", "127.0.0.1"]);
        }
        if !has("--port") {
            cmd.args(["--port", "0"]);
        }
        if !has("--data-dir") {
            cmd.arg("--data-dir").arg(dir.path().join("data"));
        }
        cmd.args(["--metrics-address", "127.0.0.1", "--metrics-port", "0"])
            .arg("--ready-file")
            .arg(&ready)
            .args(args)
            .env("RUST_LOG", "tiphys=debug")
            .env("NO_COLOR", "1")
            // Stops are immediate unless a test gives --shutdown-delay (the flag wins).
            .env("TIPHYS_SHUTDOWN_DELAY", "0")
            // Tests store repositories at made-up URLs: none is contacted unless a test gives
            // --repo-access on.
            .env("TIPHYS_REPO_ACCESS", "off")
            // ... and no cluster at them unless a test gives --cluster-access on.
            .env("TIPHYS_CLUSTER_ACCESS", "off")
            .stdout(Stdio::null())
            .stderr(log);
        let mut child = cmd.spawn().unwrap();
        // Generous: on a loaded machine the first start's bcrypt hash can take seconds.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&ready)
                && let Ok(json) = serde_json::from_str::<serde_json::Value>(&text)
            {
                let port = u16::try_from(json["port"].as_u64().unwrap()).unwrap();
                let metrics_port = u16::try_from(json["metrics_port"].as_u64().unwrap()).unwrap();
                return Ok(Self {
                    child,
                    port,
                    metrics_port,
                    dir,
                });
            }
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
                return Err(format!("exit {status}\n{log}"));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let log = std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default();
                return Err(format!("not ready within 60 s\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The generated self-signed certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("data/tls/tls.crt")
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal_term();
        self.wait_exit(Duration::from_secs(30))
    }

    /// Sends SIGTERM to this server (and only to it, by its pid).
    pub fn signal_term(&self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
    }

    /// Waits for the server to exit; fails the test if it runs on for `within`.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Self::wait_exit`] for a test that still holds client connections: it sleeps on the
    /// test's runtime, not its thread, so that those connections can answer the server's goodbye
    /// and close (a blocked thread would hold them open, and the server would wait for them).
    pub async fn exited(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit within {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs the CLI; returns (success, stdout, stderr).
pub fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs the CLI isolated from the caller's environment (no `TIPHYS_*`
/// variables, `--config` when given), feeding `stdin`.
pub fn cli_with(args: &[&str], config: Option<&Path>, stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut cmd = Command::new(bin());
    cmd.args(args);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("TIPHYS_") {
            cmd.env_remove(var);
        }
    }
    let mut child = cmd
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // The CLI may exit before reading everything; a broken pipe is fine.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().unwrap()
}

/// Writes a certificate and key for `names` (ECDSA P-256 or RSA 2048) into `dir`.
pub fn write_cert(dir: &Path, stem: &str, rsa: bool) -> (PathBuf, PathBuf) {
    let mut params =
        rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, stem);
    let key = if rsa {
        rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap_or_else(|_| rsa_key_via_openssl())
    } else {
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
    };
    let cert = params.self_signed(&key).unwrap();
    let cert_path = dir.join(format!("{stem}.crt"));
    let key_path = dir.join(format!("{stem}.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

/// ring cannot generate RSA keys; openssl can, and rcgen signs with them.
fn rsa_key_via_openssl() -> rcgen::KeyPair {
    let out = Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .output()
        .expect("openssl is needed to make an RSA test key");
    assert!(out.status.success());
    let pem = String::from_utf8(out.stdout).unwrap();
    rcgen::KeyPair::from_pem_and_sign_algo(&pem, &rcgen::PKCS_RSA_SHA256).unwrap()
}
