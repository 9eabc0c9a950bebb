//! A real etcd cluster for tests: members on loopback ports picked here, each with its own
//! data dir, started from the Debian packages `etcd-server` and `etcd-client` (`bash
//! .ci/test-all` installs them). Members can be killed (`kill -9`, by the PID started here) and
//! restarted; everything stops on drop. Every wait is bounded. [`EtcdCluster::start_tls`] starts
//! one whose client URLs are https and require a client certificate, from files generated here.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const STARTUP: Duration = Duration::from_secs(30);
const ATTEMPTS: usize = 3;

pub struct EtcdCluster {
    _dir: tempfile::TempDir,
    members: Vec<Member>,
    tls: Option<EtcdTls>,
}

/// PEM files of one certificate authority and what it signed. A cluster's members present
/// `server_cert` (SAN 127.0.0.1 and localhost) and accept only client certificates that `ca`
/// signed, such as `cert` (CN [`CLIENT_CN`], which is also its etcd user name once etcd's auth
/// is on).
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

pub const CLIENT_CN: &str = "tiphys-test-client";

struct Member {
    name: String,
    client: String,
    args: Vec<String>,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts `size` members and waits until each reports healthy.
    pub fn start(size: usize) -> Self {
        Self::start_with(size, false)
    }

    /// Starts `size` members whose client URLs are `https://127.0.0.1:PORT` and require a
    /// client certificate that [`Self::tls`]'s CA signed (peers talk plain http).
    pub fn start_tls(size: usize) -> Self {
        Self::start_with(size, true)
    }

    fn start_with(size: usize, tls: bool) -> Self {
        require("etcd", "etcd-server");
        require("etcdctl", "etcd-client");
        let mut last = String::new();
        // Ports are free when picked but may be taken before etcd binds them: start over.
        for _ in 0..ATTEMPTS {
            let mut cluster = Self::spawn(size, tls);
            match cluster.wait_all_healthy() {
                Ok(()) => return cluster,
                Err(why) => last = why,
            }
        }
        panic!("the etcd cluster did not start ({ATTEMPTS} attempts); last: {last}");
    }

    fn spawn(size: usize, tls: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tls = tls.then(|| EtcdTls::generate(dir.path(), "etcd"));
        let scheme = if tls.is_some() { "https" } else { "http" };
        let ports = free_ports(2 * size);
        let peer = |i: usize| format!("http://127.0.0.1:{}", ports[2 * i + 1]);
        let initial: Vec<String> = (0..size).map(|i| format!("m{i}={}", peer(i))).collect();
        let token = format!("tiphys-test-{}", std::process::id());
        let mut members = Vec::new();
        for i in 0..size {
            let name = format!("m{i}");
            let client = format!("{scheme}://127.0.0.1:{}", ports[2 * i]);
            let data_dir = dir.path().join(&name);
            let mut args: Vec<String> = [
                "--name",
                &name,
                "--data-dir",
                &data_dir.display().to_string(),
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
                "--listen-peer-urls",
                &peer(i),
                "--initial-advertise-peer-urls",
                &peer(i),
                "--initial-cluster",
                &initial.join(","),
                "--initial-cluster-token",
                &token,
                "--initial-cluster-state",
                "new",
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            if let Some(tls) = &tls {
                args.extend(tls.member_args());
            }
            let mut member = Member {
                log: dir.path().join(format!("{name}.log")),
                name,
                client,
                args,
                data_dir,
                child: None,
            };
            member.launch();
            members.push(member);
        }
        Self {
            _dir: dir,
            members,
            tls,
        }
    }

    /// The PIDs of the running members.
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter_map(|m| m.child.as_ref().map(Child::id))
            .collect()
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The client URLs of every member, running or not.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// The files of a cluster started by [`Self::start_tls`].
    pub fn tls(&self) -> &EtcdTls {
        self.tls
            .as_ref()
            .expect("the cluster was started without TLS (start_tls)")
    }

    /// The member that is the leader now, asked of every running member (bounded wait).
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + STARTUP;
        while Instant::now() < deadline {
            for (i, member) in self.members.iter().enumerate() {
                if member.child.is_none() {
                    continue;
                }
                let out = self.etcdctl_at(&member.client, &["endpoint", "status", "-w", "json"]);
                let Ok(status) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
                    continue;
                };
                let status = &status[0]["Status"];
                let leader = status["leader"].as_u64();
                if leader.is_some() && leader == status["header"]["member_id"].as_u64() {
                    return i;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no etcd member reported itself leader within {STARTUP:?}");
    }

    /// `kill -9` of one member (the process started here), waiting until it is gone.
    pub fn kill(&mut self, i: usize) {
        let member = &mut self.members[i];
        if let Some(mut child) = member.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// Starts a killed member again on its data dir and waits until it is healthy.
    pub fn restart(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is still running");
        self.members[i].launch();
        if let Err(why) = self.wait_healthy(i) {
            panic!("{why}");
        }
    }

    /// Starts every killed member again and waits until all are healthy (after the whole
    /// cluster was down: no member is healthy before a quorum is back).
    pub fn restart_all(&mut self) {
        for member in &mut self.members {
            if member.child.is_none() {
                member.launch();
            }
        }
        if let Err(why) = self.wait_all_healthy() {
            panic!("{why}");
        }
    }

    /// Turns on etcd's own authentication, with a `root` user of `password`.
    pub fn enable_auth(&self, password: &str) {
        let user = format!("--new-user-password={password}");
        for args in [
            &["user", "add", "root", user.as_str(), "--interactive=false"][..],
            &["auth", "enable"],
        ] {
            let out = self.etcdctl(args);
            assert!(
                out.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Runs etcdctl against every member.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        self.etcdctl_at(&self.endpoints().join(","), args)
    }

    /// Runs etcdctl against member `i` alone.
    pub fn etcdctl_on(&self, i: usize, args: &[&str]) -> Output {
        self.etcdctl_at(&self.members[i].client, args)
    }

    fn etcdctl_at(&self, endpoints: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new("etcdctl");
        if let Some(tls) = &self.tls {
            cmd.arg("--cacert").arg(&tls.ca);
            cmd.arg("--cert").arg(&tls.cert);
            cmd.arg("--key").arg(&tls.key);
        }
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .args(["--dial-timeout=2s", "--command-timeout=5s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn wait_all_healthy(&mut self) -> Result<(), String> {
        (0..self.members.len()).try_for_each(|i| self.wait_healthy(i))
    }

    fn wait_healthy(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP;
        let mut last = String::new();
        while Instant::now() < deadline {
            let member = &mut self.members[i];
            if let Some(child) = member.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                member.child = None;
                return Err(format!(
                    "etcd member {} exited at start ({status}); its log ends with:\n{}",
                    member.name,
                    tail(&member.log)
                ));
            }
            let client = member.client.clone();
            let out = self.etcdctl_at(&client, &["endpoint", "health"]);
            if out.status.success() {
                return Ok(());
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(Duration::from_millis(100));
        }
        let member = &self.members[i];
        Err(format!(
            "etcd member {} ({}) was not healthy within {STARTUP:?} ({last}); its log ends with:\n{}",
            member.name,
            member.client,
            tail(&member.log)
        ))
    }
}

impl Member {
    fn launch(&mut self) {
        std::fs::create_dir_all(&self.data_dir).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new("etcd")
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }
}

impl EtcdTls {
    /// A new CA (ECDSA P-256) and a server and a client certificate it signed, written into
    /// `dir` as `{name}-ca.pem`, `{name}-server.pem`, `{name}-client.pem` and their
    /// `…-key.pem`. A second call gives material the first one's cluster does not trust.
    pub fn generate(dir: &Path, name: &str) -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let write = |file: &str, pem: String| {
            let path = dir.join(format!("{name}-{file}"));
            std::fs::write(&path, pem).unwrap();
            path
        };
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().unwrap();
        let ca = write("ca.pem", params.self_signed(&ca_key).unwrap().pem());
        let issuer = Issuer::new(params, ca_key);
        let leaf = |cn: &str, sans: Vec<String>, usages: Vec<Eku>| {
            let mut params = CertificateParams::new(sans).unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            params.extended_key_usages = usages;
            let key = KeyPair::generate().unwrap();
            (
                params.signed_by(&key, &issuer).unwrap().pem(),
                key.serialize_pem(),
            )
        };
        // etcd's own gateway dials its members with the server certificate: it is a client too.
        let sans = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
        let (server, server_key) = leaf("etcd", sans, vec![Eku::ServerAuth, Eku::ClientAuth]);
        let (client, client_key) = leaf(CLIENT_CN, Vec::new(), vec![Eku::ClientAuth]);
        Self {
            ca,
            cert: write("client.pem", client),
            key: write("client-key.pem", client_key),
            server_cert: write("server.pem", server),
            server_key: write("server-key.pem", server_key),
        }
    }

    fn member_args(&self) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--cert-file".to_owned(),
            path(&self.server_cert),
            "--key-file".to_owned(),
            path(&self.server_key),
            "--client-cert-auth".to_owned(),
            "--trusted-ca-file".to_owned(),
            path(&self.ca),
        ]
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Fails the test (never skips it) when a tool is missing.
fn require(tool: &str, package: &str) {
    // Only whether it runs: `etcdctl --version` exits non-zero on some versions.
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "`{tool}` is not installed: install the Debian package {package} (`bash .ci/test-all`, \
         the README's test command, installs it)"
    );
}

/// Distinct free loopback ports: all bound at once, then released for etcd to take.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

fn tail(log: &Path) -> String {
    let Ok(mut file) = std::fs::File::open(log) else {
        return "(no log)".to_owned();
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(4000)));
    let mut text = Vec::new();
    let _ = file.read_to_end(&mut text);
    String::from_utf8_lossy(&text).into_owned()
}
