//! Reading repositories without a repo server: the refs of a Git repository, the files of one
//! of its commits, and a Helm repository's `index.yaml`.
//!
//! Git goes through `gix` (pure Rust). Its HTTP transport runs on `reqwest`, configured here
//! with tiphys's own rustls settings (the repository's CA certificates, a TLS client
//! certificate, or no verification for `insecure`); SSH runs the `ssh` program with a key and a
//! `known_hosts` file written for the one call; `git://` is plain TCP.
//!
//! Every call runs on a blocking thread under a deadline, a limit on concurrent fetches and a
//! size limit per repository. Commits are fetched shallow into a bare repository per URL under
//! the cache directory, and what was read of them is kept in memory (bounded), shared by every
//! caller: a commit's files never change.
//!
//! Nothing here ever puts a credential into an error: errors are fixed messages that name the
//! host ([`GitError`]), whatever the library or the `ssh` program said.

mod error;
mod fetch;
pub mod helm;
mod snapshot;
mod transport;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls_pki_types::CertificateDer;
use tokio::sync::Semaphore;

pub use self::error::GitError;
pub use self::snapshot::{Commit, Snapshot};
pub use self::transport::endpoint;

/// How to reach one repository: its URL, credentials and trust. `Debug` leaves secrets out.
#[derive(Clone, Default)]
pub struct Remote {
    pub url: String,
    pub username: String,
    pub password: String,
    pub bearer_token: String,
    pub ssh_private_key: String,
    /// PEM certificate and key presented to the server.
    pub tls_client_cert: Option<(String, String)>,
    /// Skip the server's certificate and host key checks.
    pub insecure: bool,
    /// CA certificates to trust for the host, besides the system's.
    pub ca_certificates: Vec<CertificateDer<'static>>,
    /// OpenSSH `known_hosts` lines accepted for the host.
    pub known_hosts: Vec<String>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &crate::urlmask::mask(&self.url))
            .field("insecure", &self.insecure)
            .finish_non_exhaustive()
    }
}

impl Remote {
    /// What the credentials are, hashed: cached answers are shared only between callers that
    /// reach the repository the same way (a wrong password never sees a right one's refs).
    fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut hash = sha2::Sha256::new();
        for part in [
            self.url.as_str(),
            &self.username,
            &self.password,
            &self.bearer_token,
            &self.ssh_private_key,
            self.tls_client_cert.as_ref().map_or("", |c| c.0.as_str()),
            if self.insecure { "insecure" } else { "" },
        ] {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        for cert in &self.ca_certificates {
            hash.update(cert.as_ref());
        }
        for line in &self.known_hosts {
            hash.update(line.as_bytes());
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The host named in errors.
    pub fn host(&self) -> String {
        transport::host_of(&self.url)
    }

    /// What to warn of when this repository's credentials go over plain `http://`: upstream
    /// sends them there without a word, tiphys sends them too (a user who chose such a server
    /// has no other way in) and says so, in the log and in the connection state.
    pub fn cleartext_warning(&self) -> Option<String> {
        let plain = self
            .url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
        let credentials =
            !(self.username.is_empty() && self.password.is_empty() && self.bearer_token.is_empty());
        (plain && credentials).then(|| {
            format!(
                "the credentials of this repository go to {} unencrypted (plain http://); use https",
                self.host()
            )
        })
    }

    /// Logs [`Self::cleartext_warning`], if any, as a call is about to send the credentials.
    pub fn warn_if_cleartext(&self) {
        if let Some(warning) = self.cleartext_warning() {
            tracing::warn!(url = %crate::urlmask::mask(&self.url), "{warning}");
        }
    }
}

/// Limits of the repository client (`--repo-*` flags).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Where fetched commits are kept, one bare repository per URL.
    pub cache_dir: PathBuf,
    /// One call's deadline (connect, list, fetch).
    pub timeout: Duration,
    /// A repository's fetched objects at most, and a Helm index at most.
    pub max_bytes: u64,
    /// Fetches at once, over all repositories.
    pub max_fetches: usize,
    /// How long a repository's refs are reused.
    pub refs_ttl: Duration,
    /// Commits whose files are kept in memory.
    pub cached_commits: usize,
    /// How old a connection state may get before it is checked again.
    pub check_interval: Duration,
    /// Whether repositories are contacted at all (`--repo-access`).
    pub enabled: bool,
}

impl Limits {
    /// The defaults of `tiphys server`, with the cache in `cache_dir`.
    pub fn new(cache_dir: PathBuf) -> Self {
        Self {
            cache_dir,
            timeout: Duration::from_secs(60),
            max_bytes: 512 * 1024 * 1024,
            max_fetches: 8,
            refs_ttl: Duration::from_secs(180),
            cached_commits: 64,
            check_interval: Duration::from_secs(180),
            enabled: true,
        }
    }
}

/// A branch or tag and the commit it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRef {
    /// The full name (`refs/heads/main`, `refs/tags/v1`, `HEAD`).
    pub name: String,
    /// The commit (a tag's peeled target).
    pub commit: String,
}

/// The refs of a repository, as listed at one moment.
#[derive(Debug, Clone, Default)]
pub struct Refs {
    pub refs: Vec<RemoteRef>,
    /// Where `HEAD` points (`refs/heads/main`), when the server says.
    pub head_target: Option<String>,
}

impl Refs {
    pub fn branches(&self) -> Vec<String> {
        self.short_names("refs/heads/")
    }

    pub fn tags(&self) -> Vec<String> {
        self.short_names("refs/tags/")
    }

    fn short_names(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .refs
            .iter()
            .filter_map(|r| r.name.strip_prefix(prefix))
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The commit `revision` names: `HEAD` (or empty), a branch, a tag, a full ref name, or a
    /// commit id (full, or a prefix of a listed commit). `None`: no such revision.
    pub fn resolve(&self, revision: &str) -> Option<String> {
        let revision = revision.trim();
        let wanted = if revision.is_empty() { "HEAD" } else { revision };
        let by_name = |name: &str| {
            self.refs
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.commit.clone())
        };
        if let Some(found) = by_name(wanted)
            .or_else(|| by_name(&format!("refs/heads/{wanted}")))
            .or_else(|| by_name(&format!("refs/tags/{wanted}")))
        {
            return Some(found);
        }
        let hex = wanted.to_ascii_lowercase();
        if !(4..=40).contains(&hex.len()) || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        if hex.len() == 40 {
            return Some(hex);
        }
        let mut matches = self.refs.iter().filter(|r| r.commit.starts_with(&hex));
        let first = matches.next()?;
        matches
            .all(|r| r.commit == first.commit)
            .then(|| first.commit.clone())
    }

    /// The tags naming `commit`.
    pub fn tags_of(&self, commit: &str) -> Vec<String> {
        let mut tags: Vec<String> = self
            .refs
            .iter()
            .filter(|r| r.commit == commit)
            .filter_map(|r| r.name.strip_prefix("refs/tags/"))
            .map(str::to_owned)
            .collect();
        tags.sort();
        tags.dedup();
        tags
    }
}

/// Answers kept with the time they were fetched, by key.
type Reused<T> = Mutex<HashMap<String, (Instant, Arc<T>)>>;

/// The repository client: one per server, shared by every call.
pub struct Client {
    limits: Limits,
    fetches: Arc<Semaphore>,
    /// Blocking threads of calls, including those whose caller gave up at the deadline and
    /// that still wait for their transport's own timeout: bounded, so a repository that
    /// accepts connections and never answers cannot take every thread.
    threads: Arc<Semaphore>,
    refs: Reused<Refs>,
    commits: Mutex<snapshot::Lru>,
    /// One fetch per repository directory at a time.
    dirs: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// One listing of refs (or one Helm index) per repository access at a time.
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    indexes: Reused<Vec<u8>>,
    /// The last access check of each repository (keyed by the caller: URL and project).
    states: crate::checks::Checks<(), GitError>,
}

/// The outcome of one access check, and when it was made.
pub type Checked = crate::checks::Checked<(), GitError>;

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub fn new(limits: Limits) -> Self {
        Self {
            fetches: Arc::new(Semaphore::new(limits.max_fetches.max(1))),
            threads: Arc::new(Semaphore::new(4 * limits.max_fetches.max(1))),
            commits: Mutex::new(snapshot::Lru::new(limits.cached_commits.max(1))),
            refs: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            flights: Mutex::new(HashMap::new()),
            indexes: Mutex::new(HashMap::new()),
            states: crate::checks::Checks::new(limits.check_interval),
            limits,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The repository's refs; reused for `refs_ttl` unless `fresh`.
    pub async fn refs(&self, remote: &Remote, fresh: bool) -> Result<Arc<Refs>, GitError> {
        let limits = self.limits.clone();
        let remote_owned = remote.clone();
        let list = self.blocking(remote, move |stop| fetch::list_refs(&limits, &remote_owned, stop));
        self.reuse(&self.refs, remote.fingerprint(), fresh, list, |_| true)
            .await
    }

    /// A Helm repository's `index.yaml`; reused for `refs_ttl` unless `fresh`. Indexes above
    /// 8 MiB are not kept.
    pub async fn helm_index(&self, remote: &Remote, fresh: bool) -> Result<Arc<Vec<u8>>, GitError> {
        let fetch = helm::fetch_index(remote, &self.limits);
        self.reuse(&self.indexes, remote.fingerprint(), fresh, fetch, |index| {
            index.len() <= 8 * 1024 * 1024
        })
        .await
    }

    /// The answer kept in `cache` under `key` while younger than `refs_ttl` (unless `fresh`),
    /// else `fetch`'s, kept when `keep` says so. Callers arriving while one fetches for the same
    /// key wait and take its answer.
    async fn reuse<T>(
        &self,
        cache: &Reused<T>,
        key: String,
        fresh: bool,
        fetch: impl Future<Output = Result<T, GitError>>,
        keep: impl FnOnce(&T) -> bool,
    ) -> Result<Arc<T>, GitError> {
        let cached = |max_age: Duration| {
            lock(cache)
                .get(&key)
                .filter(|(at, _)| at.elapsed() < max_age)
                .map(|(_, value)| Arc::clone(value))
        };
        if !fresh && let Some(found) = cached(self.limits.refs_ttl) {
            return Ok(found);
        }
        let asked = Instant::now();
        let flight = self.flight(&key);
        let _one = flight.lock().await;
        if let Some(found) = cached(asked.elapsed()) {
            return Ok(found);
        }
        let value = Arc::new(fetch.await?);
        if keep(&value) {
            let mut entries = lock(cache);
            if entries.len() >= 1_000 {
                let ttl = self.limits.refs_ttl;
                entries.retain(|_, (at, _)| at.elapsed() < ttl);
            }
            entries.insert(key, (Instant::now(), Arc::clone(&value)));
        }
        Ok(value)
    }

    /// The lock that makes concurrent callers for `key` wait for one call.
    fn flight(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut flights = lock(&self.flights);
        if flights.len() >= 10_000 {
            flights.retain(|_, f| Arc::strong_count(f) > 1);
        }
        Arc::clone(flights.entry(key.to_owned()).or_default())
    }

    /// Checks that the repository answers with these credentials (lists its refs, uncached).
    pub async fn check_access(&self, remote: &Remote) -> Result<(), GitError> {
        self.refs(remote, true).await.map(|_| ())
    }

    /// Records the outcome of an access check of `remote` under `key`.
    pub fn record(&self, key: &str, remote: &Remote, outcome: Result<(), GitError>) -> Checked {
        self.states.record(key, outcome, remote.cleartext_warning())
    }

    /// The table of access checks, by key.
    pub fn states(&self) -> &crate::checks::Checks<(), GitError> {
        &self.states
    }

    /// The files of `commit` (a full id), fetched once and then shared.
    pub async fn snapshot(&self, remote: &Remote, commit: &str) -> Result<Arc<Snapshot>, GitError> {
        let key = format!("{}\0{commit}", remote.fingerprint());
        if let Some(found) = lock(&self.commits).get(&key) {
            return Ok(found);
        }
        let dir = self.repo_dir(remote);
        let guard = {
            let mut dirs = lock(&self.dirs);
            Arc::clone(dirs.entry(dir.clone()).or_default())
        };
        let _one_at_a_time = guard.lock().await;
        if let Some(found) = lock(&self.commits).get(&key) {
            return Ok(found);
        }
        let limits = self.limits.clone();
        let remote_owned = remote.clone();
        let commit_owned = commit.to_owned();
        let snapshot = Arc::new(
            self.blocking(remote, move |stop| {
                fetch::fetch_commit(&dir, &limits, &remote_owned, &commit_owned, stop)
            })
            .await?,
        );
        lock(&self.commits).put(key, Arc::clone(&snapshot));
        Ok(snapshot)
    }

    /// The bare repository of a URL under the cache directory.
    fn repo_dir(&self, remote: &Remote) -> PathBuf {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(remote.url.as_bytes());
        let name: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
        self.limits.cache_dir.join(name)
    }

    /// Runs `work` on a blocking thread under the deadline and the fetch limit. At the
    /// deadline the caller gets its answer and `stop` is raised; the thread ends at its next
    /// check (or when its transport's own timeout fires), without holding a fetch slot.
    async fn blocking<T: Send + 'static>(
        &self,
        remote: &Remote,
        work: impl FnOnce(&Arc<AtomicBool>) -> Result<T, GitError> + Send + 'static,
    ) -> Result<T, GitError> {
        if !self.limits.enabled {
            return Err(GitError::Disabled);
        }
        let host = remote.host();
        let deadline = tokio::time::Instant::now() + self.limits.timeout;
        let permit = tokio::time::timeout_at(deadline, Arc::clone(&self.fetches).acquire_owned())
            .await
            .map_err(|_| GitError::Busy { host: host.clone() })?
            .map_err(|_| GitError::Busy { host: host.clone() })?;
        let thread = Arc::clone(&self.threads)
            .try_acquire_owned()
            .map_err(|_| GitError::Busy { host: host.clone() })?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_thread = Arc::clone(&stop);
        let task = tokio::task::spawn_blocking(move || {
            let _thread = thread;
            work(&stop_thread)
        });
        let result = tokio::time::timeout_at(deadline, task).await;
        drop(permit);
        match result {
            // The transport's own timeout (set to the same deadline) may fire first.
            Ok(Ok(Err(GitError::Timeout { host, .. }))) => Err(GitError::Timeout {
                host,
                after: self.limits.timeout,
            }),
            Ok(Ok(done)) => done,
            Ok(Err(_panicked)) => Err(GitError::Failed { host }),
            Err(_elapsed) => {
                stop.store(true, Ordering::Relaxed);
                Err(GitError::Timeout {
                    host,
                    after: self.limits.timeout,
                })
            }
        }
    }
}

/// A poisoned cache lock only means another call panicked while holding it; the map is
/// still usable.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
