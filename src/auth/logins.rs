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
use super::throttle::{Attempt, Failures, LoginGuard, ThrottlePolicy};
use super::tokens::Tokens;
use crate::clock::now_ms;
use crate::config::ConfigWatch;
use crate::error::AppError;
use crate::store::{self, Expect, Op, Store, StoreError};

/// File beside the store holding the generated admin password until it is changed.
pub const INITIAL_PASSWORD_FILE: &str = "initial-admin-password";
/// Store key of the generated admin password until it is changed, for `tiphys admin
/// initial-password` when the store is shared (etcd): no replica's data dir is the place.
const INITIAL_PASSWORD_KEY: &str = "server/initial-admin-password";

/// The generated admin password, while it is the one in force.
pub async fn initial_password(store: &dyn Store) -> Result<Option<String>, StoreError> {
    Ok(store::get_json::<String>(store, INITIAL_PASSWORD_KEY)
        .await?
        .map(|(p, _)| p))
}

/// The store record of a generated admin password kept in a data dir's file, for `tiphys admin
/// migrate` (a shared store keeps it in the store).
pub fn initial_password_record(password: &str) -> Result<Op, StoreError> {
    store::put_json(INITIAL_PASSWORD_KEY, &password, Expect::Absent)
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
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    accounts: Arc<Accounts>,
    tokens: Arc<Tokens>,
    data_dir: Option<PathBuf>,
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
    /// Starts the bcrypt threads and loads the failed-login state that still counts.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        accounts: Arc<Accounts>,
        tokens: Arc<Tokens>,
        data_dir: Option<PathBuf>,
        limits: LoginLimits,
    ) -> anyhow::Result<Self> {
        let now = now_ms();
        let probe = LoginGuard::new(limits.throttle.clone(), [], now);
        let failures = store::load_live(store.as_ref(), LoginGuard::STORE_PREFIX, |f: &Failures| {
            !probe.is_stale(f, now)
        })
        .await?;
        Ok(Self {
            pool: PasswordPool::start(limits.hash_threads, limits.max_concurrent)?,
            guard: LoginGuard::new(limits.throttle, failures, now),
            slots: Semaphore::new(limits.max_concurrent),
            store,
            config,
            accounts,
            tokens,
            data_dir,
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
        let account = self.accounts.get(username).ok_or(LoginError::Invalid)?;
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
        let account = self.accounts.get(username);
        let attempt = self
            .guard
            .admit(username, ip, account.is_some(), now_ms())
            .await
            .map_err(|t| LoginError::Throttled(t.retry_after))?;
        if !attempt.pause.is_zero() {
            tokio::time::sleep(attempt.pause).await;
        }
        let hash = account.as_ref().and_then(|a| a.password_hash.as_deref());
        let matched = match self.pool.verify(password, hash).await {
            Ok(m) => m,
            Err(PoolError::Busy) => return Err(LoginError::Throttled(Duration::from_secs(1))),
            Err(PoolError::Failed(e)) => return Err(AppError::Internal(anyhow::anyhow!(e)).into()),
        };
        if !matched {
            let delay = self.record_failure(&attempt).await;
            drop(slot);
            // Every failure takes at least FAILURE_FLOOR plus a random part, whatever the
            // stored hash's cost: timing tells nothing about whether the username exists.
            let jitter = Duration::from_millis(u64::from(crate::random::bytes(1)[0]) * 2);
            tokio::time::sleep_until(started + delay.max(FAILURE_FLOOR) + jitter).await;
            return Err(LoginError::Invalid);
        }
        let ops = self.guard.succeeded(&attempt);
        if !ops.is_empty()
            && let Err(err) = self.store.commit(ops).await
        {
            tracing::error!(error = %err, "cannot record a successful login");
        }
        Ok(())
    }

    /// Records a failure durably; returns how long to hold the answer back.
    async fn record_failure(&self, attempt: &Attempt) -> Duration {
        let (delay, ops) = self.guard.failed(attempt, now_ms());
        // Durable before the answer: a crash must not reset the count.
        if let Err(err) = self.store.commit(ops).await {
            tracing::error!(error = %err, "cannot persist failed-login state");
        }
        delay
    }

    /// Failed-login records held (a metric).
    pub fn failure_entries(&self) -> usize {
        self.guard.len()
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
            .update(name, |record| {
                let was_initial = record.initial;
                record.password_hash = Some(hash);
                record.password_mtime_ms = Some(now_ms());
                record.initial = false;
                Ok(was_initial)
            })
            .await?;
        if was_initial {
            self.forget_initial_password().await;
        }
        Ok(())
    }

    /// On the first start, gives the admin account a random password and writes it where
    /// `tiphys admin initial-password` finds it. The server runs this beside serving (bcrypt
    /// takes a while): until it is done the admin account has no password, which nobody
    /// could know yet anyway.
    pub async fn ensure_initial_admin(&self) -> anyhow::Result<()> {
        if !self.needs_initial_admin() {
            return Ok(());
        }
        let password = crate::random::token(20);
        let hash = self.pool.hash(&password).await?;
        let set = self
            .accounts
            .update("admin", |record| {
                // The configuration may have set a password while bcrypt ran.
                if record.password_hash.is_some() {
                    return Ok(false);
                }
                record.password_hash = Some(hash);
                record.password_mtime_ms = Some(now_ms());
                record.initial = true;
                Ok(true)
            })
            .await?;
        if !set {
            return Ok(());
        }
        // Written only once the password is in force. With a data dir, only there (mode 0600),
        // never in the store (SEC-28); a shared store (etcd) has no other place for it yet.
        if self.data_dir.is_none() {
            self.store
                .commit(vec![store::put_json(
                    INITIAL_PASSWORD_KEY,
                    &password,
                    Expect::Any,
                )?])
                .await?;
        }
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

    fn needs_initial_admin(&self) -> bool {
        self.config.peek().admin_enabled
            && self
                .accounts
                .get("admin")
                .is_none_or(|a| a.password_hash.is_none())
    }

    /// At start and after a configuration reload: the generated password's file goes once the
    /// admin password in force is another (set through the API or adopted from
    /// `argocd-secret`), or admin is gone.
    pub async fn after_reload(&self) {
        if !self.accounts.has_initial_password("admin").await {
            self.forget_initial_password().await;
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
