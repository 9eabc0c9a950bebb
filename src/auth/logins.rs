//! Password logins: the check of a username and password under the brute-force rules
//! (`throttle`), bcrypt on its own threads (`password`), the first start's admin password,
//! and password changes.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::accounts::Accounts;
use super::password::{PasswordPool, PoolError};
use super::throttle::{LoginGuard, Refused, ThrottlePolicy};
use super::tokens::Tokens;
use crate::clock::Clock;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::registry::SecretsKeys;
use crate::store::{Expect, Op, Store};

/// File beside the store holding the generated admin password until it is changed.
pub const INITIAL_PASSWORD_FILE: &str = "initial-admin-password";
/// Store key of the generated admin password until it is changed, for `tiphys admin
/// initial-password` when the store is shared (etcd): no replica's data dir is the place.
const INITIAL_PASSWORD_KEY: &str = "server/initial-admin-password";

/// The generated admin password, while it is the one in force: sealed like the other
/// credentials at rest (`registry::sealing`), or in clear as versions before sealing wrote it.
pub async fn initial_password(store: &dyn Store, keys: &SecretsKeys) -> anyhow::Result<Option<String>> {
    let Some(entry) = store.get(INITIAL_PASSWORD_KEY).await? else {
        return Ok(None);
    };
    if let Ok(clear) = serde_json::from_slice::<String>(&entry.value) {
        return Ok(Some(clear));
    }
    let plain = keys
        .open(INITIAL_PASSWORD_KEY, 0, &entry.value)
        .map_err(|e| anyhow::anyhow!("the initial admin password in the store: {e}"))?;
    String::from_utf8(plain)
        .map(Some)
        .map_err(|_| anyhow::anyhow!("the initial admin password in the store is not text"))
}

/// The store record of a generated admin password, sealed: written by a first start on a
/// shared store, and by `tiphys admin migrate` from a data dir's file.
pub fn initial_password_record(password: &str, keys: &SecretsKeys, expect: Expect) -> Op {
    Op::Put {
        key: INITIAL_PASSWORD_KEY.to_owned(),
        value: keys.seal(INITIAL_PASSWORD_KEY, 0, password.as_bytes()),
        expect,
    }
}

/// Longest username accepted (upstream's limit).
pub const MAX_USERNAME_BYTES: usize = 32;
/// A failed password check is answered no sooner than this after it began.
const FAILURE_FLOOR: Duration = Duration::from_millis(500);

/// Limits of password logins.
#[derive(Clone, Debug)]
pub struct LoginLimits {
    pub throttle: ThrottlePolicy,
    /// Logins in progress at once; more are refused with RESOURCE_EXHAUSTED.
    pub max_concurrent: usize,
    /// bcrypt threads.
    pub hash_threads: usize,
}

impl Default for LoginLimits {
    fn default() -> Self {
        Self {
            throttle: ThrottlePolicy::default(),
            max_concurrent: 256,
            hash_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1).max(1)),
        }
    }
}

/// Why a login did not produce a token.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("Invalid username or password")]
    Invalid,
    #[error("too many login attempts; retry in {} s", .0.as_secs().max(1))]
    Throttled(Duration),
    #[error(transparent)]
    Other(#[from] AppError),
}

impl From<LoginError> for AppError {
    fn from(err: LoginError) -> Self {
        match err {
            LoginError::Invalid => AppError::Unauthenticated(err.to_string()),
            LoginError::Throttled(wait) => AppError::Throttled(err.to_string(), wait),
            LoginError::Other(e) => e,
        }
    }
}

/// Password logins by outcome (a metric).
#[derive(Default, Debug)]
pub struct LoginOutcomes {
    pub success: AtomicU64,
    pub failure: AtomicU64,
    pub throttled: AtomicU64,
}

pub struct Logins {
    clock: Clock,
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    accounts: Arc<Accounts>,
    tokens: Arc<Tokens>,
    data_dir: Option<PathBuf>,
    /// Seal the generated admin password kept in a shared store.
    secrets: Arc<SecretsKeys>,
    pool: PasswordPool,
    guard: LoginGuard,
    /// Logins in progress.
    slots: Semaphore,
    pub outcomes: LoginOutcomes,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Logins").finish_non_exhaustive()
    }
}

impl Logins {
    /// Starts the bcrypt threads and drops the failed-login records that no longer count.
    #[expect(
        clippy::too_many_arguments,
        reason = "the wiring of the parts it uses, done once, by Auth::open"
    )]
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        accounts: Arc<Accounts>,
        tokens: Arc<Tokens>,
        data_dir: Option<PathBuf>,
        secrets: Arc<SecretsKeys>,
        limits: LoginLimits,
        clock: Clock,
    ) -> anyhow::Result<Self> {
        let guard = LoginGuard::new(limits.throttle, Arc::clone(&store));
        guard.purge(clock.now_ms()).await?;
        Ok(Self {
            clock,
            pool: PasswordPool::start(limits.hash_threads, limits.max_concurrent)?,
            guard,
            slots: Semaphore::new(limits.max_concurrent),
            store,
            config,
            accounts,
            tokens,
            data_dir,
            secrets,
            outcomes: LoginOutcomes::default(),
        })
    }

    /// Password login: a new session token.
    pub async fn login(&self, username: &str, password: &str, ip: IpAddr) -> Result<String, LoginError> {
        let checked = self.check_password(username, password, ip).await;
        let counter = match &checked {
            Ok(()) => &self.outcomes.success,
            Err(LoginError::Throttled(_)) => &self.outcomes.throttled,
            Err(_) => &self.outcomes.failure,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        checked?;
        let account = self.accounts.get(username).await?.ok_or(LoginError::Invalid)?;
        // Only someone who knows the password learns why they cannot log in.
        if !account.enabled {
            return Err(AppError::Unauthenticated(format!("Account {username} is disabled")).into());
        }
        if !account.login {
            return Err(AppError::Unauthenticated(format!(
                "Account {username} does not have login capability"
            ))
            .into());
        }
        Ok(self.tokens.issue_login(username))
    }

    /// Checks a username and password under the brute-force rules.
    pub async fn check_password(&self, username: &str, password: &str, ip: IpAddr) -> Result<(), LoginError> {
        if username.len() > MAX_USERNAME_BYTES {
            return Err(AppError::InvalidArgument(format!(
                "Username is too long ({MAX_USERNAME_BYTES} bytes max)"
            ))
            .into());
        }
        let started = tokio::time::Instant::now();
        let slot = self
            .slots
            .try_acquire()
            .map_err(|_| LoginError::Throttled(Duration::from_secs(1)))?;
        let account = self.accounts.get(username).await?;
        let attempt = match self
            .guard
            .admit(username, ip, account.is_some(), self.clock.now_ms())
            .await
        {
            Ok(attempt) => attempt,
            Err(Refused::Throttled(t)) => return Err(LoginError::Throttled(t.retry_after)),
            Err(Refused::Store(e)) => {
                return Err(AppError::Unavailable(format!("logins cannot be checked now: {e}")).into());
            }
        };
        if !attempt.pause.is_zero() {
            tokio::time::sleep(attempt.pause).await;
        }
        let hash = account.as_ref().and_then(|a| a.password_hash.as_deref());
        let matched = match self.pool.verify(password, hash).await {
            Ok(m) => m,
            Err(PoolError::Busy) => {
                self.guard.release(attempt).await;
                return Err(LoginError::Throttled(Duration::from_secs(1)));
            }
            Err(PoolError::Failed(e)) => {
                self.guard.release(attempt).await;
                return Err(AppError::Internal(anyhow::anyhow!(e)).into());
            }
        };
        if !matched {
            // Durable before the answer: a crash must not reset the count.
            let delay = match self.guard.failed(&attempt, self.clock.now_ms()).await {
                Ok(delay) => delay,
                Err(err) => {
                    tracing::error!(error = %err, "cannot persist failed-login state");
                    FAILURE_FLOOR
                }
            };
            self.guard.release(attempt).await;
            drop(slot);
            // Every failure takes at least FAILURE_FLOOR plus a random part, whatever the
            // stored hash's cost: timing tells nothing about whether the username exists.
            let jitter = Duration::from_millis(u64::from(crate::random::bytes(1)[0]) * 2);
            tokio::time::sleep_until(started + delay.max(FAILURE_FLOOR) + jitter).await;
            return Err(LoginError::Invalid);
        }
        if let Err(err) = self.guard.succeeded(&attempt).await {
            tracing::error!(error = %err, "cannot record a successful login");
        }
        self.guard.release(attempt).await;
        Ok(())
    }

    /// Failed-login records held (a metric: counted at each purge, plus this process's since).
    pub fn failure_entries(&self) -> usize {
        self.guard.held()
    }

    /// Forgets failed logins past their window.
    pub async fn purge(&self) -> Result<(), AppError> {
        self.guard
            .purge(self.clock.now_ms())
            .await
            .map(|_| ())
            .map_err(|e| AppError::Internal(e.into()))
    }

    /// Hashes and sets account `name`'s password; tokens issued before now stop working.
    pub async fn set_password(&self, name: &str, password: &str) -> Result<(), AppError> {
        let hash = self.pool.hash(password).await.map_err(|e| match e {
            PoolError::Busy => AppError::Throttled(
                "too many password changes in progress".into(),
                Duration::from_secs(1),
            ),
            PoolError::Failed(e) => AppError::Internal(anyhow::anyhow!(e)),
        })?;
        let was_initial = self
            .accounts
            .update_with(name, |record| {
                let was_initial = record.initial;
                record.password_hash = Some(hash.clone());
                record.password_mtime_ms = Some(self.clock.now_ms());
                record.initial = false;
                // The generated password goes with the record that made it the one in force.
                let forget = was_initial.then(|| Op::Delete {
                    key: INITIAL_PASSWORD_KEY.to_owned(),
                    expect: Expect::Any,
                });
                Ok((was_initial, forget.into_iter().collect()))
            })
            .await?;
        if was_initial {
            self.remove_initial_password_file();
        }
        Ok(())
    }

    /// On the first start, gives the admin account a random password and writes it where
    /// `tiphys admin initial-password` finds it. The server runs this beside serving (bcrypt
    /// takes a while): until it is done the admin account has no password, which nobody
    /// could know yet anyway. Replicas starting at once on one store agree on one password:
    /// the record is written only if still without one (a conditional write), with the store
    /// key of the password in the same commit.
    pub async fn ensure_initial_admin(&self) -> anyhow::Result<()> {
        if !self.needs_initial_admin().await? {
            return Ok(());
        }
        let password = crate::random::token(20);
        let hash = self.pool.hash(&password).await?;
        // With a data dir the password is kept only in its file, never in the store (SEC-28); a
        // shared store (etcd) has no other place for it yet.
        let keep = match self.data_dir {
            None => Some(initial_password_record(&password, &self.secrets, Expect::Any)),
            Some(_) => None,
        };
        let set = self
            .accounts
            .update_with("admin", |record| {
                // The configuration, or another replica, may have set a password meanwhile.
                if record.password_hash.is_some() {
                    return Ok((false, Vec::new()));
                }
                record.password_hash = Some(hash.clone());
                record.password_mtime_ms = Some(self.clock.now_ms());
                record.initial = true;
                Ok((true, keep.iter().cloned().collect()))
            })
            .await?;
        if !set {
            return Ok(());
        }
        // Written only once the password is in force. With a data dir, only there (mode 0600);
        // the store keeps it (in the record's commit above) only without one (SEC-28).
        let again = match &self.data_dir {
            Some(dir) => {
                crate::fsutil::write_private(&dir.join(INITIAL_PASSWORD_FILE), password.as_bytes())?;
                format!("--data-dir {}", dir.display())
            }
            None => "and the server's --etcd-* options".to_owned(),
        };
        tracing::warn!(
            "generated the initial password of the admin account: {password} \
             (print it again with `tiphys admin initial-password {again}`; it is deleted once the password is changed)"
        );
        Ok(())
    }

    async fn needs_initial_admin(&self) -> anyhow::Result<bool> {
        Ok(self.config.peek().admin_enabled
            && self
                .accounts
                .get("admin")
                .await?
                .is_none_or(|a| a.password_hash.is_none()))
    }

    /// At start and after a configuration reload: the generated password's file goes once the
    /// admin password in force is another (set through the API or adopted from
    /// `argocd-secret`), or admin is gone.
    pub async fn after_reload(&self) {
        match self.accounts.has_initial_password("admin").await {
            Ok(true) => {}
            Ok(false) => self.forget_initial_password().await,
            Err(err) => tracing::error!(error = %err, "cannot read the admin account's record"),
        }
    }

    async fn forget_initial_password(&self) {
        let forgotten = match self.store.get(INITIAL_PASSWORD_KEY).await {
            Ok(None) => Ok(()),
            Ok(Some(entry)) => self
                .store
                .commit(vec![Op::Delete {
                    key: entry.key,
                    expect: Expect::ModRevision(entry.mod_revision),
                }])
                .await
                .map(|_| ()),
            Err(err) => Err(err),
        };
        if let Err(err) = forgotten {
            tracing::error!(error = %err, "cannot forget the initial admin password");
        }
        self.remove_initial_password_file();
    }

    fn remove_initial_password_file(&self) {
        let Some(dir) = &self.data_dir else { return };
        let path = dir.join(INITIAL_PASSWORD_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(
                "the initial admin password was changed; removed {}",
                path.display()
            ),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => tracing::error!(error = %err, "cannot remove {}", path.display()),
        }
    }
}
