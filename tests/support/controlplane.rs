//! The real Kubernetes and Argo CD parts for Rust tests and benchmarks: a kube-apiserver (with etcd),
//! Argo CD's CRDs and settings, Redis, argocd-repo-server, and, when asked, argocd-server and the
//! application-controller, on loopback.
//!
//! One implementation starts them, `tests/e2e/controlplane.py` (the Python fixtures use the same
//! module), and one description says where everything is: the `controlplane.json` it writes, read
//! here into [`State`]. [`ControlPlane::start`] runs `python3 tests/e2e/controlplane.py up ROOT` as
//! the leader of a process group of its own and waits, bounded, for that file; dropping the value
//! sends SIGTERM to that group (the script then ends every part by its PID) and waits for it.
//!
//! The controller binds 0.0.0.0 for its metrics, so it is only started inside a network
//! namespace of the run's own (`tools/upstream/isolated`); without one, start with
//! `controller: false`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// From `exec` to every part ready: the parts' own bounds, added up, and some.
const START_TIMEOUT: Duration = Duration::from_secs(600);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// What to start beside the API server, Redis and the repo-server.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    pub controller: bool,
    pub controller_manager: bool,
    pub argocd_server: bool,
}

/// `controlplane.json`: the fields Rust reads (the file has more).
#[derive(Clone, Debug, Deserialize)]
pub struct State {
    pub root: PathBuf,
    pub namespace: String,
    pub kubeconfig: PathBuf,
    pub apiserver: Endpoint,
    pub redis: Address,
    pub repo_server: Address,
    pub argocd: Argocd,
    pub pki: Pki,
    pub argocd_server: Option<ArgocdServer>,
    pub parts: BTreeMap<String, Part>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Endpoint {
    pub port: u16,
    pub url: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Address {
    pub address: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Argocd {
    pub admin_password: String,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Pki {
    pub ca: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ArgocdServer {
    pub port: u16,
    pub address: String,
    pub url: String,
    pub metrics_port: u16,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Part {
    pub pid: i32,
    pub log: PathBuf,
    pub ready_in_s: Option<f64>,
}

pub struct ControlPlane {
    pub state: State,
    supervisor: Child,
}

impl ControlPlane {
    /// Starts the plane under `root` (which must exist). The error names the part that failed and
    /// why, with the supervisor's last words.
    pub fn start(root: &Path, options: Options) -> Result<Self, String> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = repo.join("tests/e2e/controlplane.py");
        let mut cmd = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()));
        cmd.arg(&script).arg("up").arg(root);
        if !options.controller {
            cmd.arg("--no-controller");
        }
        if !options.controller_manager {
            cmd.arg("--no-controller-manager");
        }
        if options.argocd_server {
            cmd.arg("--argocd-server");
        }
        let log = root.join("supervisor.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let supervisor = {
            use std::os::unix::process::CommandExt as _;
            cmd.stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .process_group(0)
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", script.display()))?
        };
        let mut plane = Self {
            state: placeholder(root),
            supervisor,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let state_file = root.join("controlplane.json");
        loop {
            if let Some(status) = plane.supervisor.try_wait().map_err(|e| e.to_string())? {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!(
                    "the control plane exited with {status} before it was ready:\n{}",
                    tail(&said, 4000)
                ));
            }
            // The supervisor writes its PID last, once every part is up.
            if let Ok(text) = std::fs::read_to_string(&state_file) {
                let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                if value.get("supervisor_pid").is_some() {
                    plane.state = serde_json::from_value(value)
                        .map_err(|e| format!("{}: {e}", state_file.display()))?;
                    return Ok(plane);
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the control plane was not ready within {START_TIMEOUT:?}; see {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// How long each part took from exec to ready, in seconds, by name.
    pub fn start_times(&self) -> BTreeMap<String, f64> {
        self.state
            .parts
            .iter()
            .filter_map(|(name, part)| part.ready_in_s.map(|s| (name.clone(), s)))
            .collect()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let group = rustix::process::Pid::from_raw(self.supervisor.id() as i32);
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.supervisor.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.supervisor.kill();
        let _ = self.supervisor.wait();
    }
}

fn placeholder(root: &Path) -> State {
    let empty = |p: &str| root.join(p);
    State {
        root: root.to_path_buf(),
        namespace: String::new(),
        kubeconfig: empty("kubeconfig"),
        apiserver: Endpoint {
            port: 0,
            url: String::new(),
        },
        redis: Address {
            address: String::new(),
        },
        repo_server: Address {
            address: String::new(),
        },
        argocd: Argocd {
            admin_password: String::new(),
        },
        pki: Pki {
            ca: empty("pki/ca.crt"),
            admin_cert: empty("pki/admin.crt"),
            admin_key: empty("pki/admin.key"),
        },
        argocd_server: None,
        parts: BTreeMap::new(),
    }
}

fn tail(text: &str, n: usize) -> &str {
    let start = text.len().saturating_sub(n);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}
