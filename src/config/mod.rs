//! Run-time configuration in Argo CD's form: `argocd-cm`, `argocd-rbac-cm` and
//! `argocd-secret` read from `--config-dir`, validated into [`Settings`], and
//! re-read while the server runs. A bad edit never replaces a good config.

pub mod deep_links;
pub mod duration;
pub mod http_url;
mod kube;
mod kube_init;
pub mod oidc;
pub mod rate_limits;
pub mod service_account_login;
pub mod settings;
pub mod source;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use duration::{parse_go_duration, parse_go_duration_or_days};
pub use settings::{ADMIN, AccountConfig, Settings, TokenRecord};
pub use source::{ARGOCD_CM, ARGOCD_RBAC_CM, ARGOCD_SECRET, ConfigError, Input, Location, RawObject};

/// How often the watcher looks; a change takes effect within about this plus [`SETTLE`].
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// A changed read is confirmed by a second read this much later (see `poll_once`).
const SETTLE: Duration = Duration::from_millis(100);

/// The bytes of all three objects: equal bytes mean equal settings.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Inputs([Input; 3]);

fn read_inputs(dir: &Path) -> Result<Inputs, ConfigError> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(ConfigError::new(dir.display(), "config dir is not a directory")),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(ConfigError::new(dir.display(), "config dir does not exist"));
        }
        Err(err) => return Err(ConfigError::new(dir.display(), err.to_string())),
    }
    Ok(Inputs([
        source::read_input(dir, ARGOCD_CM)?,
        source::read_input(dir, ARGOCD_RBAC_CM)?,
        source::read_input(dir, ARGOCD_SECRET)?,
    ]))
}

/// Settings from `inputs`; the policy of `previous` is kept (not compiled
/// again, its decision cache kept) when `argocd-rbac-cm` did not change.
fn build(inputs: &Inputs, previous: Option<&Settings>) -> Result<Settings, ConfigError> {
    let [cm, rbac, secret] = &inputs.0;
    Settings::from_raw_reusing(
        &source::parse_input(ARGOCD_CM, cm)?,
        &source::parse_input(ARGOCD_RBAC_CM, rbac)?,
        &source::parse_input(ARGOCD_SECRET, secret)?,
        previous,
    )
}

/// Says which policy is in force, and what in it looks wrong.
pub fn log_policy(settings: &Settings) {
    let policy = &settings.policy;
    tracing::info!(
        lines = policy.user_lines(),
        default_role = policy.default_role(),
        match_mode = policy.mode().as_str(),
        scopes = ?policy.scopes(),
        "RBAC policy loaded"
    );
    for warning in policy.warnings() {
        tracing::warn!("RBAC policy: {warning}");
    }
}

/// Reads and validates the configuration in `dir`, which must exist.
pub fn load(dir: &Path) -> Result<Settings, ConfigError> {
    build(&read_inputs(dir)?, None)
}

/// [`load`], or the defaults when no config dir was given.
pub fn load_optional(dir: Option<&Path>) -> Result<Settings, ConfigError> {
    dir.map_or_else(|| Ok(Settings::default()), load)
}

/// The current settings, swapped atomically when the config dir changes.
pub struct ConfigWatch {
    dir: Option<PathBuf>,
    /// Where the objects are watched instead, on an installation (`kube.rs`).
    kube: Option<kube::KubeSettings>,
    current: ArcSwap<Settings>,
    /// Bumped on every change that takes effect.
    generation: watch::Sender<u64>,
    reload_errors: AtomicU64,
    /// Of those, the ones caused by `argocd-rbac-cm`.
    policy_errors: AtomicU64,
    /// The outcome of the last read acted upon (good, rejected, or unreadable),
    /// so an unchanged broken file is reported once rather than every poll.
    last_seen: Mutex<Result<Inputs, ConfigError>>,
}

impl crate::rbac::PolicySource for ConfigWatch {
    fn policy(&self) -> Arc<crate::rbac::Policy> {
        Arc::clone(&self.current().policy)
    }

    fn rollback_enforced(&self) -> bool {
        self.current()
            .cm
            .get("server.rbac.rollback.enforce.enable")
            .is_some_and(|v| v.trim() == "true")
    }

    fn policy_errors(&self) -> u64 {
        ConfigWatch::policy_errors(self)
    }
}

impl ConfigWatch {
    /// Loads the initial configuration; an error means the server must not start.
    pub fn new(dir: Option<PathBuf>) -> Result<Arc<Self>, ConfigError> {
        let (settings, seen) = match &dir {
            Some(dir) => {
                let inputs = read_inputs(dir)?;
                (build(&inputs, None)?, Ok(inputs))
            }
            None => (
                Settings::default(),
                Ok(Inputs([Input::Absent, Input::Absent, Input::Absent])),
            ),
        };
        Ok(Arc::new(Self::assemble(dir, None, settings, seen)))
    }

    /// A watch of `dir` or `kube` whose settings in force are `settings`, built from `seen`.
    fn assemble(
        dir: Option<PathBuf>,
        kube: Option<kube::KubeSettings>,
        settings: Settings,
        seen: Result<Inputs, ConfigError>,
    ) -> Self {
        Self {
            dir,
            kube,
            current: ArcSwap::from_pointee(settings),
            generation: watch::Sender::new(0),
            reload_errors: AtomicU64::new(0),
            policy_errors: AtomicU64::new(0),
            last_seen: Mutex::new(seen),
        }
    }

    /// The config dir, when one was given: objects read at each use (such as
    /// `argocd-notifications-cm`) come from there.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// ConfigMap `name` as it is now, for objects read at each use (such as
    /// `argocd-notifications-cm`): from the config dir, else from the installation; `None`
    /// when there is neither.
    pub async fn read_object(&self, name: &'static str) -> Option<Result<RawObject, String>> {
        if let Some(dir) = self.dir() {
            return Some(source::read_object(dir, name).map_err(|e| e.to_string()));
        }
        let kube = self.kube.as_ref()?;
        Some(match kube.read(name, false).await {
            Ok(input) => source::parse_input(name, &input).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        })
    }

    /// Whether the settings are the installation's (`--kube` without `--config-dir`): then what
    /// upstream keeps in `argocd-secret` is written there ([`Self::save_secret_keys`]).
    pub fn on_installation(&self) -> bool {
        self.dir.is_none() && self.kube.is_some()
    }

    /// Writes `keys` into the installation's `argocd-secret` (`None` removes a key); nothing
    /// when the settings are not the installation's.
    pub async fn save_secret_keys(
        &self,
        keys: &std::collections::BTreeMap<String, Option<String>>,
    ) -> anyhow::Result<()> {
        match &self.kube {
            Some(kube) if self.dir.is_none() => kube.patch_secret(keys).await,
            _ => Ok(()),
        }
    }

    pub fn current(&self) -> Arc<Settings> {
        self.current.load_full()
    }

    /// The current settings without taking a reference count: for a quick look on every
    /// request. Do not hold it across an `await`.
    pub fn peek(&self) -> arc_swap::Guard<Arc<Settings>> {
        self.current.load()
    }

    /// Yields the generation number each time new settings take effect.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Reloads rejected so far (for a metric).
    pub fn reload_errors(&self) -> u64 {
        self.reload_errors.load(Ordering::Relaxed)
    }

    /// Reloads rejected because of the RBAC policy (`argocd-rbac-cm`).
    pub fn policy_errors(&self) -> u64 {
        self.policy_errors.load(Ordering::Relaxed)
    }

    /// Re-reads the config dir and puts changed settings into effect; returns
    /// whether it did. See [`Self::read_change`].
    pub fn poll_once(&self) -> Result<bool, ConfigError> {
        let Some(settings) = self.read_change()? else {
            return Ok(false);
        };
        self.publish(Arc::new(settings));
        Ok(true)
    }

    /// Re-reads the config dir; returns the new settings, not yet in effect, when they
    /// differ from those in force. On a bad config the last good one stays, and the error
    /// is counted and logged once per distinct bad content. Blocking (file reads and a
    /// short sleep).
    ///
    /// Change detection compares the full bytes rather than sizes and mtimes:
    /// the files are tiny, reading them is cheap, and it is exact (no mtime
    /// granularity to hide a quick rewrite; a `..data` symlink swap is just new
    /// bytes). A changed read is applied only if a second read [`SETTLE`] later
    /// agrees, so a file caught half-written (an editor truncating, then
    /// writing) is never applied, not even briefly: an empty argocd-cm would
    /// mean defaults such as an enabled admin.
    pub fn read_change(&self) -> Result<Option<Settings>, ConfigError> {
        let Some(dir) = &self.dir else { return Ok(None) };
        let mut last_seen = self.last_seen.lock().unwrap_or_else(PoisonError::into_inner);
        let first = read_inputs(dir);
        if first == *last_seen {
            return Ok(None);
        }
        std::thread::sleep(SETTLE);
        let read = read_inputs(dir);
        if read != first {
            return Ok(None); // still being written: the next poll looks again
        }
        *last_seen = read.clone();
        drop(last_seen);
        self.consider(read, &dir.display().to_string())
    }

    /// What a read of the objects (`read`, from `origin`) puts into effect: see
    /// [`Self::read_change`].
    fn consider(
        &self,
        read: Result<Inputs, ConfigError>,
        origin: &str,
    ) -> Result<Option<Settings>, ConfigError> {
        let current = self.current.load();
        match read.and_then(|inputs| build(&inputs, Some(&current))) {
            Ok(settings) => {
                // Settings are a function of the three maps alone, so equal maps
                // (a comment edit, or a revert after a rejected edit) change nothing.
                if settings.cm == current.cm
                    && settings.rbac == current.rbac
                    && settings.secret == current.secret
                {
                    tracing::info!(origin, "configuration re-read; nothing changed");
                    return Ok(None);
                }
                if !Arc::ptr_eq(&settings.policy, &current.policy) {
                    log_policy(&settings);
                }
                Ok(Some(settings))
            }
            Err(err) => {
                self.reload_errors.fetch_add(1, Ordering::Relaxed);
                if err.object == Some(ARGOCD_RBAC_CM) {
                    self.policy_errors.fetch_add(1, Ordering::Relaxed);
                }
                tracing::error!(
                    location = %err.location, reason = %err.reason,
                    "configuration rejected ({err}); keeping the last good configuration"
                );
                Err(err)
            }
        }
    }

    /// Puts settings from [`Self::read_change`] into effect.
    pub fn publish(&self, settings: Arc<Settings>) {
        self.current.store(settings);
        self.generation.send_modify(|g| *g += 1);
        tracing::info!(generation = *self.generation.borrow(), "configuration reloaded");
    }

    /// Polls every [`POLL_INTERVAL`] until `cancel`; nothing to do without a config dir.
    /// `prepare` runs with each changed configuration before it takes effect, so that what
    /// it writes for other replicas (an account's lost access) is there before this
    /// replica acts on the change.
    pub fn spawn_watcher<F, Fut>(self: &Arc<Self>, cancel: CancellationToken, prepare: F)
    where
        F: Fn(Arc<Settings>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if let Some(kube) = &self.kube {
            tokio::spawn(kube::follow(Arc::clone(self), kube.clone(), cancel, prepare));
            return;
        }
        if self.dir.is_none() {
            return;
        }
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(POLL_INTERVAL);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    _ = ticker.tick() => {}
                }
                let watch = Arc::clone(&this);
                // read_change reads files and sleeps: keep that off the async workers.
                // Its own errors are already counted and logged.
                let next = match tokio::task::spawn_blocking(move || watch.read_change()).await {
                    Ok(Ok(Some(next))) => Arc::new(next),
                    Ok(_) => continue,
                    Err(err) => {
                        tracing::error!(error = %err, "configuration poll failed");
                        continue;
                    }
                };
                prepare(Arc::clone(&next)).await;
                this.publish(next);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CM: &str = "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  users.session.duration: 1h\n";

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn load_requires_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = load(&missing).unwrap_err();
        assert_eq!(err.reason, "config dir does not exist");
        assert!(load_optional(None).unwrap().admin_enabled);
        assert!(ConfigWatch::new(Some(missing)).is_err());
        // An empty dir is all defaults.
        assert_eq!(
            load(dir.path()).unwrap().session_duration,
            Duration::from_secs(86400)
        );
    }

    #[test]
    fn load_all_three_objects() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("argocd-cm.yaml"), CM);
        write(&dir.path().join("argocd-rbac-cm/policy.default"), "role:readonly");
        write(
            &dir.path().join("argocd-secret.yml"),
            "kind: Secret\nstringData:\n  server.secretkey: s\n",
        );
        let s = load(dir.path()).unwrap();
        assert_eq!(s.session_duration, Duration::from_secs(3600));
        assert_eq!(s.rbac["policy.default"], "role:readonly");
        assert_eq!(s.server_secret_key.as_deref(), Some("s"));
    }

    #[test]
    fn no_dir_watch_is_static() {
        let watch = ConfigWatch::new(None).unwrap();
        assert!(!watch.poll_once().unwrap());
        assert!(watch.current().accounts[ADMIN].enabled);
    }

    #[test]
    fn manifest_reload_and_broken_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("argocd-cm.yaml");
        write(&path, CM);
        let watch = ConfigWatch::new(Some(dir.path().to_path_buf())).unwrap();
        let mut generation = watch.subscribe();
        assert!(!watch.poll_once().unwrap());

        write(&path, &CM.replace("1h", "2h"));
        assert!(watch.poll_once().unwrap());
        assert_eq!(watch.current().session_duration, Duration::from_secs(7200));
        assert!(generation.has_changed().unwrap());
        assert_eq!(*generation.borrow_and_update(), 1);

        // Broken: the last good settings stay; the error is counted once.
        write(&path, &CM.replace("1h", "0s"));
        let err = watch.poll_once().unwrap_err();
        assert!(err.location.ends_with("argocd-cm.yaml:5"), "{err}");
        assert!(!watch.poll_once().unwrap());
        assert_eq!(watch.reload_errors(), 1);
        assert_eq!(watch.current().session_duration, Duration::from_secs(7200));

        write(&path, "kind: ConfigMap\ndata: [\n");
        assert!(watch.poll_once().is_err());
        assert_eq!(watch.reload_errors(), 2);
        assert!(!generation.has_changed().unwrap());

        // Fixed back to the current content: valid, but nothing new takes effect.
        write(&path, &format!("# comment\n{}", CM.replace("1h", "2h")));
        assert!(!watch.poll_once().unwrap());
        write(&path, CM);
        assert!(watch.poll_once().unwrap());
        assert_eq!(*generation.borrow_and_update(), 2);
    }

    const RBAC: &str = "kind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.csv: |\n    p, alice, clusters, get, *, allow\n";

    fn alice_may_get_clusters(watch: &ConfigWatch) -> bool {
        let policy = &watch.current().policy;
        let projects = crate::rbac::FixedProjects::default();
        let alice = crate::rbac::Subject::Claims {
            user: "alice",
            claims: None,
        };
        policy.decide(&projects, alice, "clusters", "get", "https://k")
    }

    #[test]
    fn bad_policy_refused_at_start_with_its_line() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("argocd-rbac-cm.yaml"),
            &format!("{RBAC}    p, bob, clusters, get\n"),
        );
        let Err(err) = ConfigWatch::new(Some(dir.path().to_path_buf())) else {
            panic!("a bad policy must not load")
        };
        // The bad rule's own line (the key is on line 5), as `rbac validate` says it.
        assert!(err.location.ends_with("argocd-rbac-cm.yaml:7"), "{err}");
        assert!(
            err.reason
                .starts_with("policy.csv line 2: a 'p' line has 6 fields"),
            "{err}"
        );
        assert_eq!(err.object, Some(ARGOCD_RBAC_CM));

        // Volume form: the key's own file.
        std::fs::remove_file(dir.path().join("argocd-rbac-cm.yaml")).unwrap();
        write(&dir.path().join("argocd-rbac-cm/policy.extra.csv"), "g, x\n");
        let err = load(dir.path()).unwrap_err();
        assert!(err.location.ends_with("policy.extra.csv:1"), "{err}");
        assert!(err.reason.starts_with("policy.extra.csv line 1:"), "{err}");
    }

    #[test]
    fn policy_reload_and_broken_policy_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("argocd-rbac-cm.yaml");
        write(&path, RBAC);
        let watch = ConfigWatch::new(Some(dir.path().to_path_buf())).unwrap();
        assert!(alice_may_get_clusters(&watch));

        write(&path, &RBAC.replace("allow", "deny"));
        assert!(watch.poll_once().unwrap());
        assert!(!alice_may_get_clusters(&watch));

        // An unbalanced quote: refused, counted as a policy error, last valid policy stays.
        write(&path, &RBAC.replace("p, alice", "p, \"alice"));
        let err = watch.poll_once().unwrap_err();
        assert!(err.reason.contains("not closed"), "{err}");
        assert_eq!((watch.reload_errors(), watch.policy_errors()), (1, 1));
        assert!(!alice_may_get_clusters(&watch));

        // Other objects failing is not a policy error.
        write(&dir.path().join("argocd-cm.yaml"), &CM.replace("1h", "nope"));
        assert!(watch.poll_once().is_err());
        assert_eq!((watch.reload_errors(), watch.policy_errors()), (2, 1));

        // A change elsewhere keeps the compiled policy (and its cache).
        write(&dir.path().join("argocd-cm.yaml"), CM);
        write(&path, RBAC);
        assert!(watch.poll_once().unwrap());
        let before = Arc::clone(&watch.current().policy);
        write(&dir.path().join("argocd-cm.yaml"), &CM.replace("1h", "3h"));
        assert!(watch.poll_once().unwrap());
        assert!(Arc::ptr_eq(&before, &watch.current().policy));
    }

    #[cfg(unix)]
    #[test]
    fn volume_data_symlink_swap() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("argocd-cm");
        write(&vol.join("..2024_01/admin.enabled"), "true");
        symlink("..2024_01", vol.join("..data")).unwrap();
        symlink("..data/admin.enabled", vol.join("admin.enabled")).unwrap();
        let watch = ConfigWatch::new(Some(dir.path().to_path_buf())).unwrap();
        assert!(watch.current().admin_enabled);

        // What the kubelet does: new timestamped dir, then rename a new `..data` over the old.
        write(&vol.join("..2024_02/admin.enabled"), "false");
        symlink("..2024_02", vol.join("..data_tmp")).unwrap();
        std::fs::rename(vol.join("..data_tmp"), vol.join("..data")).unwrap();
        std::fs::remove_dir_all(vol.join("..2024_01")).unwrap();
        assert!(watch.poll_once().unwrap());
        assert!(!watch.current().admin_enabled);

        // A bad value in volume form is located at the key's file.
        write(&vol.join("..2024_02/admin.enabled"), "nope");
        let err = watch.poll_once().unwrap_err();
        assert_eq!(err.location, vol.join("admin.enabled").display().to_string());
        assert!(!watch.current().admin_enabled);
    }

    #[tokio::test]
    async fn watcher_applies_changes_within_two_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("argocd-cm.yaml");
        write(&path, CM);
        let watch = ConfigWatch::new(Some(dir.path().to_path_buf())).unwrap();
        let mut generation = watch.subscribe();
        let cancel = CancellationToken::new();
        watch.spawn_watcher(cancel.clone(), |_| async {});
        write(&path, &CM.replace("1h", "3h"));
        tokio::time::timeout(Duration::from_secs(2), generation.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(watch.current().session_duration, Duration::from_secs(3 * 3600));
        cancel.cancel();
    }
}
