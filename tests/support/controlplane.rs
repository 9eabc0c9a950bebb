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
//! [`ControlPlane::apply`] server-side applies a JSON List of objects in batches (seeding), and
//! [`UpstreamServer::start`] runs another argocd-server beside the plane (`controlplane.py
//! argocd-server ROOT`), stopped when dropped, so that a benchmark can time its start more than
//! once.
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
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub controller: bool,
    pub controller_manager: bool,
    pub argocd_server: bool,
    /// A JSON file of keys for argocd-cm, argocd-rbac-cm and argocd-secret
    /// (`{"argocd-cm": {"accounts.bench": "login"}}`), applied before Argo CD starts.
    pub settings: Option<PathBuf>,
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
    _supervisor: Supervisor,
}

/// `python3 tests/e2e/controlplane.py ARGS...`
fn script(args: &[&std::ffi::OsStr]) -> Command {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()));
    cmd.arg(repo.join("tests/e2e/controlplane.py")).args(args);
    cmd
}

impl ControlPlane {
    /// Starts the plane under `root` (which must exist). The error names the part that failed and
    /// why, with the supervisor's last words.
    pub fn start(root: &Path, options: Options) -> Result<Self, String> {
        let mut cmd = script(&["up".as_ref(), root.as_ref()]);
        if let Some(settings) = &options.settings {
            cmd.arg("--settings").arg(settings);
        }
        if !options.controller {
            cmd.arg("--no-controller");
        }
        if !options.controller_manager {
            cmd.arg("--no-controller-manager");
        }
        if options.argocd_server {
            cmd.arg("--argocd-server");
        }
        let (supervisor, value) = Supervisor::spawn(cmd, root, "supervisor.log", "controlplane.json")?;
        let state = serde_json::from_value(value).map_err(|e| format!("controlplane.json: {e}"))?;
        Ok(Self {
            state,
            _supervisor: supervisor,
        })
    }

    /// Server-side applies the JSON List (or array) of objects in `file`, in batches
    /// (`controlplane.py apply`), within `timeout`.
    pub fn apply(&self, file: &Path, timeout: Duration) -> Result<(), String> {
        let mut child = script(&["apply".as_ref(), self.state.root.as_ref(), file.as_ref()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run controlplane.py apply: {e}"))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                if status.success() {
                    return Ok(());
                }
                let mut said = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut err, &mut said);
                }
                return Err(format!(
                    "controlplane.py apply {}: {status}: {said}",
                    file.display()
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "controlplane.py apply {}: not done within {timeout:?}",
                    file.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
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

/// An argocd-server beside a running plane (`controlplane.py argocd-server ROOT`), ended when
/// dropped. Each one has a state file of its own under the plane's root.
pub struct UpstreamServer {
    pub server: ArgocdServer,
    /// argocd-server's own process (for its RSS and CPU time).
    pub pid: i32,
    /// From its exec to its first `/healthz` answered (polled every 20 ms).
    pub ready_in_s: f64,
    _supervisor: Supervisor,
}

impl UpstreamServer {
    /// Starts it under the plane at `root`, its state in `root/NAME.json`, with `args` after
    /// the harness's own arguments (the last of a flag given twice wins).
    pub fn start(root: &Path, name: &str, args: &[&str]) -> Result<Self, String> {
        let state_file = format!("{name}.json");
        let mut cmd = script(&[
            "argocd-server".as_ref(),
            root.as_ref(),
            "--state-file".as_ref(),
            state_file.as_ref(),
        ]);
        for arg in args {
            cmd.arg(format!("--arg={arg}"));
        }
        let (supervisor, value) =
            Supervisor::spawn(cmd, root, &format!("{name}.supervisor.log"), &state_file)?;
        #[derive(Deserialize)]
        struct Own {
            argocd_server: ArgocdServer,
            parts: BTreeMap<String, Part>,
        }
        let own: Own = serde_json::from_value(value).map_err(|e| format!("{state_file}: {e}"))?;
        let part = own
            .parts
            .get("argocd-server")
            .ok_or_else(|| format!("{state_file}: no part argocd-server"))?;
        Ok(Self {
            server: own.argocd_server,
            pid: part.pid,
            ready_in_s: part.ready_in_s.unwrap_or_default(),
            _supervisor: supervisor,
        })
    }
}

/// The script, run as the leader of a process group of its own; dropping it sends SIGTERM to
/// that group (the script then ends every part it started by its PID) and waits for it.
struct Supervisor(Child);

impl Supervisor {
    /// Spawns `cmd` (its output to `root/log`) and waits, bounded, until it has written
    /// `root/state_file` with its `supervisor_pid` (it writes that last, once every part is up).
    fn spawn(
        mut cmd: Command,
        root: &Path,
        log: &str,
        state_file: &str,
    ) -> Result<(Self, serde_json::Value), String> {
        let log = root.join(log);
        let state_file = root.join(state_file);
        // A state file of an earlier run would look ready.
        let _ = std::fs::remove_file(&state_file);
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = {
            use std::os::unix::process::CommandExt as _;
            cmd.stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .process_group(0)
                .spawn()
                .map_err(|e| format!("cannot run controlplane.py: {e}"))?
        };
        let mut supervisor = Self(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = supervisor.0.try_wait().map_err(|e| e.to_string())? {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!(
                    "controlplane.py exited with {status} before it was ready:\n{}",
                    tail(&said, 4000)
                ));
            }
            if let Ok(text) = std::fs::read_to_string(&state_file) {
                let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                if value.get("supervisor_pid").is_some() {
                    return Ok((supervisor, value));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "controlplane.py was not ready within {START_TIMEOUT:?}; see {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let group = rustix::process::Pid::from_raw(self.0.id() as i32);
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn tail(text: &str, n: usize) -> &str {
    let start = text.len().saturating_sub(n);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    &text[start..]
}
