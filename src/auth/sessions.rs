//! Sessions and API keys: issuing and checking local tokens, logging in,
//! revoking, and the account state the server manages in its store.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, Semaphore};

use super::accounts::{Account, AccountBook, AccountRecord};
use super::jwt::{self, Claims, ISSUER};
use super::password::{PasswordPool, PoolError};
use super::throttle::{Attempt, Failures, LoginGuard, ThrottlePolicy};
use crate::config::{ConfigWatch, Settings, TokenRecord};
use crate::error::AppError;
use crate::principal::{AccountPrincipal, Principal, ProjectPrincipal, SsoPrincipal, TokenKind};
use crate::store::{self, Expect, Op, Store};

const REVOKED_PREFIX: &str = "revoked/";
/// Dashboard sessions started through single sign-on, by session id.
const SSO_PREFIX: &str = "sso/";
/// The subject of an SSO session's cookie token is `sso:<session id>` (and its
/// `jti` the session id): it cannot be an account's `<name>:login` token.
const SSO_SUBJECT_PREFIX: &str = "sso:";
const SERVER_KEY: &str = "server/secretkey";
/// File beside the store holding the generated admin password until it is changed.
pub const INITIAL_PASSWORD_FILE: &str = "initial-admin-password";
/// Longest username accepted (upstream's limit).
pub const MAX_USERNAME_BYTES: usize = 32;
/// A failed password check is answered no sooner than this after it began.
const FAILURE_FLOOR: Duration = Duration::from_millis(500);
/// A login token is renewed when less than this (or half its lifetime) is left.
const RENEW_WITHIN: Duration = Duration::from_secs(5 * 60);

pub use crate::clock::now_ms;

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

/// What every token check reads, replaced whole when anything changes.
struct Snapshot {
    settings: Arc<Settings>,
    book: AccountBook,
    key: Arc<[u8]>,
}

/// Where project role tokens are looked up when they are presented: the AppProjects, which
/// the sessions do not own. Given to [`Sessions::set_project_tokens`] once the registry is
/// open; until then (and in tools without a registry) project tokens are refused.
pub trait ProjectTokens: Send + Sync {
    /// Ok when project `project` exists, has role `role`, and that role still lists the token
    /// (by `jti`, or by `iat` for a token without an id, with the same expiry); else why not.
    fn check(&self, project: &str, role: &str, claims: &ProjectTokenClaims<'_>) -> Result<(), String>;
}

/// What of a verified project token the registry check compares.
#[derive(Clone, Copy, Debug)]
pub struct ProjectTokenClaims<'a> {
    pub jti: &'a str,
    pub iat: i64,
    pub exp: Option<i64>,
}

/// A project token just signed, and what the role must record about it.
#[derive(Clone, Debug)]
pub struct IssuedProjectToken {
    pub token: String,
    pub iat: i64,
    pub exp: Option<i64>,
    pub jti: String,
}

/// A dashboard session started through single sign-on. The browser holds
/// only a short token naming it, however many groups the user has.
#[derive(Clone, Serialize, Deserialize)]
pub struct SsoSession {
    /// The verified ID token's claims.
    pub claims: serde_json::Map<String, serde_json::Value>,
    /// The ID token itself, for the provider's logout (`id_token_hint`, `{{token}}`).
    pub id_token: String,
    /// Unix seconds.
    pub iat: i64,
    pub exp: i64,
}

#[derive(Serialize, Deserialize)]
struct Revoked {
    /// Unix seconds the revoked token expires at; `None` never.
    exp: Option<i64>,
}

pub struct Sessions {
    store: Arc<dyn Store>,
    config: Arc<ConfigWatch>,
    data_dir: PathBuf,
    pool: PasswordPool,
    guard: LoginGuard,
    logins: Semaphore,
    snapshot: ArcSwap<Snapshot>,
    /// The store's account records; the lock serialises every change.
    records: Mutex<BTreeMap<String, AccountRecord>>,
    generated_key: String,
    revoked: RwLock<HashMap<String, Option<i64>>>,
    sso: RwLock<HashMap<String, Arc<SsoSession>>>,
    outcomes: LoginOutcomes,
    /// Checks project tokens against their project; unset: project tokens are refused.
    project_tokens: OnceLock<Arc<dyn ProjectTokens>>,
}

/// Counters of password logins, by outcome.
#[derive(Default)]
struct LoginOutcomes {
    success: AtomicU64,
    failure: AtomicU64,
    throttled: AtomicU64,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
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

impl Sessions {
    /// Loads the store's state, adopts passwords from the configuration and,
    /// on a first start, generates the admin password.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        data_dir: PathBuf,
        limits: LoginLimits,
    ) -> anyhow::Result<Self> {
        let now = now_ms();
        let generated_key = match store::get_json::<String>(&*store, SERVER_KEY).await? {
            Some((key, _)) => key,
            None => {
                let key = base64::engine::general_purpose::STANDARD.encode(super::random::bytes(32));
                store
                    .commit(vec![store::put_json(SERVER_KEY, &key, Expect::Absent)?])
                    .await?;
                key
            }
        };
        let mut records = BTreeMap::new();
        for entry in store.list(super::accounts::PREFIX).await? {
            let name = entry.key.trim_start_matches(super::accounts::PREFIX).to_owned();
            records.insert(name, serde_json::from_slice(&entry.value)?);
        }
        let mut revoked = HashMap::new();
        let mut expired = Vec::new();
        for entry in store.list(REVOKED_PREFIX).await? {
            let jti = entry.key.trim_start_matches(REVOKED_PREFIX).to_owned();
            let r: Revoked = serde_json::from_slice(&entry.value)?;
            if r.exp.is_some_and(|exp| exp * 1000 < now) {
                expired.push(Op::Delete {
                    key: entry.key,
                    expect: Expect::Any,
                });
            } else {
                revoked.insert(jti, r.exp);
            }
        }
        if !expired.is_empty() {
            store.commit(expired).await?;
        }
        let mut sso = HashMap::new();
        let mut ended = Vec::new();
        for entry in store.list(SSO_PREFIX).await? {
            let sid = entry.key.trim_start_matches(SSO_PREFIX).to_owned();
            match serde_json::from_slice::<SsoSession>(&entry.value) {
                Ok(session) if session.exp * 1000 >= now => {
                    sso.insert(sid, Arc::new(session));
                }
                _ => ended.push(Op::Delete {
                    key: entry.key,
                    expect: Expect::Any,
                }),
            }
        }
        if !ended.is_empty() {
            store.commit(ended).await?;
        }
        let probe = LoginGuard::new(limits.throttle.clone(), [], now);
        let mut failures = Vec::new();
        let mut stale = Vec::new();
        for entry in store.list(LoginGuard::STORE_PREFIX).await? {
            match serde_json::from_slice::<Failures>(&entry.value) {
                Ok(f) if !probe.is_stale(&f, now) => failures.push((entry.key, f)),
                _ => stale.push(Op::Delete {
                    key: entry.key,
                    expect: Expect::Any,
                }),
            }
        }
        if !stale.is_empty() {
            store.commit(stale).await?;
        }
        let settings = config.current();
        let sessions = Self {
            snapshot: ArcSwap::from_pointee(Snapshot {
                key: key_bytes(&settings, &generated_key),
                book: AccountBook::build(&settings, &records),
                settings,
            }),
            store,
            config,
            data_dir,
            pool: PasswordPool::start(limits.hash_threads, limits.max_concurrent)?,
            guard: LoginGuard::new(limits.throttle, failures, now),
            logins: Semaphore::new(limits.max_concurrent),
            records: Mutex::new(records),
            generated_key,
            revoked: RwLock::new(revoked),
            sso: RwLock::new(sso),
            outcomes: LoginOutcomes::default(),
            project_tokens: OnceLock::new(),
        };
        sessions.reload_config().await?;
        Ok(sessions)
    }

    /// `users.anonymous.enabled`, read without cloning the settings (per request).
    pub fn anonymous_enabled(&self) -> bool {
        self.snapshot.load().settings.anonymous_enabled
    }

    pub fn settings(&self) -> Arc<Settings> {
        Arc::clone(&self.snapshot.load().settings)
    }

    pub fn account(&self, name: &str) -> Option<Account> {
        self.snapshot.load().book.get(name).cloned()
    }

    pub fn accounts(&self) -> Vec<Account> {
        self.snapshot.load().book.all().cloned().collect()
    }

    pub fn logins_disabled(&self) -> bool {
        self.snapshot.load().book.logins_disabled()
    }

    /// Takes the current configuration into effect: adopts changed
    /// passwords from `argocd-secret`, then swaps the snapshot.
    pub async fn reload_config(&self) -> anyhow::Result<()> {
        let settings = self.config.current();
        let now = now_ms();
        let mut records = self.records.lock().await;
        let mut ops = Vec::new();
        for config in settings.accounts.values() {
            let record = records.entry(config.name.clone()).or_default();
            let adopted = record.adopt_secret(config, now);
            if adopted {
                tracing::info!(account = %config.name, "password taken from argocd-secret (newer than the one in force)");
            }
            if adopted | record.note_access(config, now) {
                ops.push(store::put_json(
                    &AccountRecord::store_key(&config.name),
                    &*record,
                    Expect::Any,
                )?);
            }
        }
        // An account removed from the configuration loses what the server
        // kept for it, so a later account of the same name starts clean.
        for (name, record) in records.iter_mut() {
            if !settings.accounts.contains_key(name) && !record.is_forgotten() {
                *record = AccountRecord::forgotten(now);
                tracing::info!(account = %name, "account removed from the configuration: its password and API keys are forgotten");
                ops.push(store::put_json(
                    &AccountRecord::store_key(name),
                    &*record,
                    Expect::Any,
                )?);
            }
        }
        if !ops.is_empty() {
            self.store.commit(ops).await?;
        }
        self.publish(&records, settings);
        if records.get("admin").is_some_and(|r| !r.initial) {
            self.remove_initial_password_file();
        }
        Ok(())
    }

    fn publish(&self, records: &BTreeMap<String, AccountRecord>, settings: Arc<Settings>) {
        self.snapshot.store(Arc::new(Snapshot {
            key: key_bytes(&settings, &self.generated_key),
            book: AccountBook::build(&settings, records),
            settings,
        }));
    }

    /// On the first start, gives the admin account a random password and
    /// writes it where `tiphys admin initial-password` finds it. The server
    /// runs this beside serving (bcrypt takes a while): until it is done the
    /// admin account has no password, which nobody could know yet anyway.
    pub async fn ensure_initial_admin(&self) -> anyhow::Result<()> {
        if !self.needs_initial_admin() {
            return Ok(());
        }
        let password = super::random::token(20);
        let hash = self.pool.hash(&password).await?;
        let mut records = self.records.lock().await;
        // The configuration may have set a password while bcrypt ran.
        if !self.needs_initial_admin() {
            return Ok(());
        }
        let settings = self.settings();
        let record = records.entry("admin".to_owned()).or_default();
        record.password_hash = Some(hash);
        record.password_mtime_ms = Some(now_ms());
        record.initial = true;
        let op = store::put_json(&AccountRecord::store_key("admin"), &*record, Expect::Any)?;
        self.store.commit(vec![op]).await?;
        self.publish(&records, settings);
        // Written only once the password is in force.
        let path = self.data_dir.join(INITIAL_PASSWORD_FILE);
        crate::fsutil::write_private(&path, password.as_bytes())?;
        tracing::warn!(
            "generated the initial password of the admin account: {password} \
             (print it again with `tiphys admin initial-password --data-dir {}`; it is deleted once the password is changed)",
            self.data_dir.display()
        );
        Ok(())
    }

    fn needs_initial_admin(&self) -> bool {
        self.settings().admin_enabled && self.account("admin").is_none_or(|a| a.password_hash.is_none())
    }

    fn remove_initial_password_file(&self) {
        let path = self.data_dir.join(INITIAL_PASSWORD_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(
                "the initial admin password was changed; removed {}",
                path.display()
            ),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => tracing::error!(error = %err, "cannot remove {}", path.display()),
        }
    }

    /// Lets project role tokens in, checked by `source` (the registry's projects). Set once;
    /// a second call is ignored.
    pub fn set_project_tokens(&self, source: Arc<dyn ProjectTokens>) {
        if self.project_tokens.set(source).is_err() {
            tracing::warn!("project token source set twice; keeping the first");
        }
    }

    // ---- tokens ----

    /// Checks a token. Returns the principal and, for a login token close to
    /// its expiry, a fresh token to hand back to the client.
    pub fn authenticate(&self, token: &str) -> Result<(Principal, Option<String>), String> {
        let snapshot = self.snapshot.load();
        let unverified = jwt::decode(token).map_err(|e| e.to_string())?;
        // Only this server signs HS256 tokens; anything else would be an
        // identity provider's token, which is not trusted here.
        if unverified.algorithm() != "HS256" {
            return match unverified.claimed_issuer().as_deref() {
                Some(ISSUER) => Err(format!(
                    "token algorithm {:?} is not accepted (only HS256)",
                    unverified.algorithm()
                )),
                Some(_) => Err("token issuer is not trusted".to_owned()),
                None => Err("token has no issuer".to_owned()),
            };
        }
        let claims = unverified
            .verify_hs256(&snapshot.key)
            .map_err(|e| e.to_string())?;
        let now = now_ms();
        let now_s = now / 1000;
        if claims.iss != ISSUER {
            return Err("token issuer is not trusted".to_owned());
        }
        if claims.exp.is_some_and(|exp| now_s >= exp) {
            return Err("token is expired".to_owned());
        }
        if claims.nbf > now_s {
            return Err("token is not valid yet".to_owned());
        }
        if let Some(sid) = claims.sub.strip_prefix(SSO_SUBJECT_PREFIX)
            && !sid.is_empty()
            && sid == claims.jti
        {
            return self.authenticate_sso(sid, now_s).map(|p| (p, None));
        }
        if let Some((project, role)) = crate::rbac::project::project_subject(&claims.sub) {
            return self
                .authenticate_project(project, role, &claims)
                .map(|p| (p, None));
        }
        let (name, kind) = match claims.sub.split_once(':') {
            Some((name, "login")) => (name, TokenKind::Login),
            Some((name, "apiKey")) => (name, TokenKind::ApiKey),
            Some(_) => return Err("token subject is invalid".to_owned()),
            None => (claims.sub.as_str(), TokenKind::ApiKey),
        };
        let account = snapshot
            .book
            .get(name)
            .ok_or_else(|| format!("account {name} does not exist"))?;
        check_account(account, kind, &claims)?;
        if self.is_revoked(&claims.jti) {
            return Err("token is revoked, please log in again".to_owned());
        }
        let principal = AccountPrincipal {
            name: name.to_owned(),
            kind,
            jti: claims.jti.clone(),
            issued_at_ms: claims.issued_at_ms(),
            expires_at: claims.exp,
        };
        let renewed = (kind == TokenKind::Login)
            .then(|| self.renewal(&snapshot, &claims, name, now))
            .flatten();
        Ok((Principal::Account(principal), renewed))
    }

    /// A verified SSO session token: valid while its session is (logout ends it).
    fn authenticate_sso(&self, sid: &str, now_s: i64) -> Result<Principal, String> {
        let session = self
            .sso
            .read()
            .ok()
            .and_then(|m| m.get(sid).cloned())
            .ok_or_else(|| "the single sign-on session has ended, please log in again".to_owned())?;
        if now_s >= session.exp {
            return Err("token is expired".to_owned());
        }
        // The session is only as good as the configuration that let it in:
        // SSO turned off, or another provider configured, ends it.
        let settings = self.config.current();
        let configured = settings.oidc.as_ref().map(|o| o.issuer.as_str());
        let stored = session.claims.get("iss").and_then(serde_json::Value::as_str);
        if configured.is_none() || configured != stored {
            return Err(
                "the single sign-on session's provider is no longer configured, please log in again"
                    .to_owned(),
            );
        }
        Ok(Principal::Sso(SsoPrincipal::from_claims(
            Arc::new(session.claims.clone()),
            session.iat,
            Some(session.exp),
            Some(sid.to_owned()),
        )))
    }

    /// Starts a dashboard session for a verified ID token; returns the small
    /// token that names it (the session cookie). It ends when the ID token
    /// expires, or after `users.session.duration`, whichever comes first.
    pub async fn start_sso(
        &self,
        claims: serde_json::Map<String, serde_json::Value>,
        id_token: String,
    ) -> Result<String, AppError> {
        let snapshot = self.snapshot.load();
        let now_s = now_ms() / 1000;
        let duration = i64::try_from(snapshot.settings.session_duration.as_secs()).unwrap_or(i64::MAX);
        let token_exp = claims
            .get("exp")
            .and_then(serde_json::Value::as_f64)
            .map_or(i64::MAX, |e| e as i64);
        let exp = token_exp.min(now_s.saturating_add(duration));
        let sid = super::random::token(32);
        let session = SsoSession {
            claims,
            id_token,
            iat: now_s,
            exp,
        };
        let op = store::put_json(&format!("{SSO_PREFIX}{sid}"), &session, Expect::Absent)
            .map_err(|e| AppError::Internal(e.into()))?;
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut sso) = self.sso.write() {
            sso.insert(sid.clone(), Arc::new(session));
        }
        let claims = Claims {
            iss: ISSUER.to_owned(),
            sub: format!("{SSO_SUBJECT_PREFIX}{sid}"),
            jti: sid,
            iat: now_s,
            nbf: now_s,
            exp: Some(exp),
            iat_ms: None,
        };
        Ok(jwt::sign(&claims, &snapshot.key))
    }

    /// The SSO session `sid`, while it lasts.
    pub fn sso_session(&self, sid: &str) -> Option<Arc<SsoSession>> {
        self.sso.read().ok()?.get(sid).cloned()
    }

    /// Ends an SSO session at once (logout). Durable before it returns.
    pub async fn end_sso(&self, sid: &str) -> Result<(), AppError> {
        let op = Op::Delete {
            key: format!("{SSO_PREFIX}{sid}"),
            expect: Expect::Any,
        };
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut sso) = self.sso.write() {
            sso.remove(sid);
        }
        Ok(())
    }

    /// Forgets SSO sessions that have expired.
    async fn purge_sso(&self, now_s: i64) -> Result<(), AppError> {
        let gone: Vec<String> = match self.sso.read() {
            Ok(m) => m
                .iter()
                .filter(|(_, s)| s.exp < now_s)
                .map(|(sid, _)| sid.clone())
                .collect(),
            Err(_) => return Ok(()),
        };
        for sid in gone {
            self.end_sso(&sid).await?;
        }
        Ok(())
    }

    /// A verified token whose subject is `proj:<project>:<role>`: valid while its project
    /// lists it on the role (SEC-08: deleting it there revokes it at once, whatever the
    /// policy would allow). Never renewed.
    fn authenticate_project(&self, project: &str, role: &str, claims: &Claims) -> Result<Principal, String> {
        if project.is_empty() || role.is_empty() {
            return Err("token subject is invalid".to_owned());
        }
        let source = self
            .project_tokens
            .get()
            .ok_or_else(|| "project tokens are not accepted".to_owned())?;
        source.check(
            project,
            role,
            &ProjectTokenClaims {
                jti: &claims.jti,
                iat: claims.iat,
                exp: claims.exp,
            },
        )?;
        if !claims.jti.is_empty() && self.is_revoked(&claims.jti) {
            return Err("token is revoked".to_owned());
        }
        Ok(Principal::Project(ProjectPrincipal::new(
            project,
            role,
            claims.iat,
            &claims.jti,
            claims.exp,
        )))
    }

    /// Signs a token for role `role` of `project` (`sub: proj:<project>:<role>`), with id `id`
    /// (a random one when `None`) and no expiry when `expires_in` is zero. Recording it on the
    /// role is the caller's job: until then the token is not accepted.
    pub fn issue_project_token(
        &self,
        project: &str,
        role: &str,
        id: Option<String>,
        expires_in: Duration,
    ) -> IssuedProjectToken {
        let snapshot = self.snapshot.load();
        let iat = now_ms() / 1000;
        let exp = (!expires_in.is_zero())
            .then(|| iat.saturating_add(i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX)));
        let jti = id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let claims = Claims {
            iss: ISSUER.to_owned(),
            sub: format!("proj:{project}:{role}"),
            jti: jti.clone(),
            iat,
            nbf: iat,
            exp,
            iat_ms: None,
        };
        IssuedProjectToken {
            token: jwt::sign(&claims, &snapshot.key),
            iat,
            exp,
            jti,
        }
    }

    fn renewal(&self, snapshot: &Snapshot, claims: &Claims, name: &str, now: i64) -> Option<String> {
        let exp = claims.exp?;
        let lifetime = u64::try_from(exp.saturating_sub(claims.iat)).ok()?;
        let left = u64::try_from(exp.saturating_sub(now / 1000)).ok()?;
        let within = RENEW_WITHIN.min(Duration::from_secs(lifetime / 2));
        // The renewed token keeps the session's id, so that revoking the
        // session (logout) revokes every token renewed from it.
        (Duration::from_secs(left) < within).then(|| {
            issue(
                &snapshot.key,
                name,
                TokenKind::Login,
                Some(claims.jti.clone()),
                &snapshot.settings.session_duration,
                now,
            )
        })
    }

    fn is_revoked(&self, jti: &str) -> bool {
        self.revoked.read().map(|r| r.contains_key(jti)).unwrap_or(true)
    }

    /// A new login token for `name`.
    pub fn issue_login(&self, name: &str) -> String {
        let snapshot = self.snapshot.load();
        issue(
            &snapshot.key,
            name,
            TokenKind::Login,
            None,
            &snapshot.settings.session_duration,
            now_ms(),
        )
    }

    /// Revokes a token until it expires. Durable before it returns.
    pub async fn revoke(&self, jti: &str, exp: Option<i64>) -> Result<(), AppError> {
        if jti.is_empty() {
            return Ok(());
        }
        // A token renewed from this session right now would expire one
        // session duration from now: the revocation must outlive it.
        let duration = i64::try_from(self.settings().session_duration.as_secs()).unwrap_or(i64::MAX);
        let horizon = (now_ms() / 1000).saturating_add(duration);
        let exp = exp.map(|e| e.max(horizon));
        let op = store::put_json(&format!("{REVOKED_PREFIX}{jti}"), &Revoked { exp }, Expect::Any)
            .map_err(|e| AppError::Internal(e.into()))?;
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut revoked) = self.revoked.write() {
            revoked.insert(jti.to_owned(), exp);
        }
        Ok(())
    }

    /// Forgets revocations of tokens that have expired anyway.
    pub async fn purge_revocations(&self) -> Result<usize, AppError> {
        let now_s = now_ms() / 1000;
        self.purge_sso(now_s).await?;
        let gone: Vec<String> = match self.revoked.read() {
            Ok(r) => r
                .iter()
                .filter(|(_, exp)| exp.is_some_and(|e| e < now_s))
                .map(|(jti, _)| jti.clone())
                .collect(),
            Err(_) => return Ok(0),
        };
        if gone.is_empty() {
            return Ok(0);
        }
        let ops = gone
            .iter()
            .map(|jti| Op::Delete {
                key: format!("{REVOKED_PREFIX}{jti}"),
                expect: Expect::Any,
            })
            .collect();
        self.store
            .commit(ops)
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        if let Ok(mut revoked) = self.revoked.write() {
            for jti in &gone {
                revoked.remove(jti);
            }
        }
        Ok(gone.len())
    }

    // ---- passwords ----

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
            .logins
            .try_acquire()
            .map_err(|_| LoginError::Throttled(Duration::from_secs(1)))?;
        let account = self.account(username);
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
            // Every failure takes at least FAILURE_FLOOR plus a random part,
            // whatever the stored hash's cost: timing tells nothing about
            // whether the username exists.
            let jitter = Duration::from_millis(u64::from(super::random::bytes(1)[0]) * 2);
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
        let account = self.account(username).ok_or(LoginError::Invalid)?;
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
        Ok(self.issue_login(username))
    }

    /// Prometheus lines for logins, revocations and throttling state.
    pub fn render_metrics(&self, out: &mut String) {
        let o = &self.outcomes;
        let _ = writeln!(
            out,
            "# HELP tiphys_login_request_total Password logins by outcome."
        );
        let _ = writeln!(out, "# TYPE tiphys_login_request_total counter");
        for (status, n) in [
            ("success", &o.success),
            ("failure", &o.failure),
            ("throttled", &o.throttled),
        ] {
            let _ = writeln!(
                out,
                "tiphys_login_request_total{{status=\"{status}\"}} {}",
                n.load(Ordering::Relaxed)
            );
        }
        let revoked = self.revoked.read().map(|r| r.len()).unwrap_or(0);
        let _ = writeln!(
            out,
            "# HELP tiphys_revoked_tokens Revoked tokens not yet expired."
        );
        let _ = writeln!(out, "# TYPE tiphys_revoked_tokens gauge");
        let _ = writeln!(out, "tiphys_revoked_tokens {revoked}");
        let _ = writeln!(
            out,
            "# HELP tiphys_login_failure_entries Failed-login records held."
        );
        let _ = writeln!(out, "# TYPE tiphys_login_failure_entries gauge");
        let _ = writeln!(out, "tiphys_login_failure_entries {}", self.guard.len());
        let _ = writeln!(
            out,
            "# HELP tiphys_config_reload_errors_total Configuration reloads refused as malformed."
        );
        let _ = writeln!(out, "# TYPE tiphys_config_reload_errors_total counter");
        let _ = writeln!(
            out,
            "tiphys_config_reload_errors_total {}",
            self.config.reload_errors()
        );
    }

    pub async fn hash_password(&self, password: &str) -> Result<String, AppError> {
        self.pool.hash(password).await.map_err(|e| match e {
            PoolError::Busy => AppError::Throttled(
                "too many password changes in progress".into(),
                Duration::from_secs(1),
            ),
            PoolError::Failed(e) => AppError::Internal(anyhow::anyhow!(e)),
        })
    }

    /// Sets a password (already hashed); tokens issued before now stop working.
    pub async fn set_password(&self, name: &str, hash: String) -> Result<(), AppError> {
        let changed_initial = self
            .update_record(name, |record| {
                let was_initial = record.initial;
                record.password_hash = Some(hash);
                record.password_mtime_ms = Some(now_ms());
                record.initial = false;
                Ok(was_initial)
            })
            .await?;
        if changed_initial {
            self.remove_initial_password_file();
        }
        Ok(())
    }

    /// Creates an API key for `name` and returns the token.
    pub async fn create_api_key(
        &self,
        name: &str,
        id: Option<String>,
        expires_in: Duration,
    ) -> Result<String, AppError> {
        let id = id
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let now = now_ms();
        let iat = now / 1000;
        let exp = (!expires_in.is_zero())
            .then(|| iat.saturating_add(i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX)));
        let record = TokenRecord {
            id: id.clone(),
            iat,
            exp: exp.unwrap_or(0),
        };
        let taken = self.account(name).is_some_and(|a| a.tokens.contains_key(&id));
        self.update_record(name, |r| {
            // An id is never reused: a deleted key's token must stay dead.
            if taken || r.deleted_tokens.contains(&id) || r.tokens.iter().any(|t| t.id == id) {
                return Err(AppError::InvalidArgument(format!(
                    "account '{name}' already has or had a token with id '{id}'; choose another id"
                )));
            }
            r.tokens.push(record);
            Ok(())
        })
        .await?;
        let snapshot = self.snapshot.load();
        let claims = Claims {
            iss: ISSUER.to_owned(),
            sub: format!("{name}:apiKey"),
            jti: id,
            iat,
            nbf: iat,
            exp,
            iat_ms: Some(now),
        };
        Ok(jwt::sign(&claims, &snapshot.key))
    }

    /// Deletes an API key; its token stops working at once.
    pub async fn delete_api_key(&self, name: &str, id: &str) -> Result<(), AppError> {
        let known = self.account(name).is_some_and(|a| a.tokens.contains_key(id));
        if !known {
            return Err(AppError::NotFound(format!(
                "token with id '{id}' of account '{name}' not found"
            )));
        }
        self.update_record(name, |r| {
            r.tokens.retain(|t| t.id != id);
            r.deleted_tokens.insert(id.to_owned());
            Ok(())
        })
        .await
    }

    /// Changes one account record durably, then publishes the new state.
    async fn update_record<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut AccountRecord) -> Result<T, AppError>,
    ) -> Result<T, AppError> {
        let mut records = self.records.lock().await;
        let mut record = records.get(name).cloned().unwrap_or_default();
        let out = change(&mut record)?;
        let op = store::put_json(&AccountRecord::store_key(name), &record, Expect::Any)
            .map_err(|e| AppError::Internal(e.into()))?;
        self.store
            .commit(vec![op])
            .await
            .map_err(|e| AppError::Internal(e.into()))?;
        records.insert(name.to_owned(), record);
        self.publish(&records, self.config.current());
        Ok(out)
    }
}

fn check_account(account: &Account, kind: TokenKind, claims: &Claims) -> Result<(), String> {
    let name = &account.name;
    if !account.enabled {
        return Err(format!("account {name} is disabled"));
    }
    match kind {
        TokenKind::Login if !account.login => {
            return Err(format!("account {name} does not have login capability"));
        }
        TokenKind::ApiKey if !account.api_key => {
            return Err(format!("account {name} does not have apiKey capability"));
        }
        _ => {}
    }
    if claims.jti.is_empty() {
        return Err("token has no id".to_owned());
    }
    if kind == TokenKind::Login && claims.exp.is_none() {
        return Err("token has no expiry".to_owned());
    }
    if kind == TokenKind::ApiKey
        && account
            .tokens
            .get(&claims.jti)
            .is_none_or(|t| t.iat != claims.iat)
    {
        return Err(format!("account {name} has no API key with id {}", claims.jti));
    }
    if account
        .password_mtime_ms
        .is_some_and(|m| claims.issued_at_ms() < m)
    {
        return Err("account password has changed since token issued".to_owned());
    }
    if account
        .revoked_before_ms
        .is_some_and(|m| claims.issued_at_ms() < m)
    {
        return Err(format!("account {name} was disabled after the token was issued"));
    }
    Ok(())
}

fn issue(
    key: &[u8],
    name: &str,
    kind: TokenKind,
    id: Option<String>,
    duration: &Duration,
    now: i64,
) -> String {
    let iat = now / 1000;
    let suffix = match kind {
        TokenKind::Login => "login",
        TokenKind::ApiKey => "apiKey",
    };
    let claims = Claims {
        iss: ISSUER.to_owned(),
        sub: format!("{name}:{suffix}"),
        jti: id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
        iat,
        nbf: iat,
        exp: Some(iat.saturating_add(i64::try_from(duration.as_secs()).unwrap_or(i64::MAX))),
        iat_ms: Some(now),
    };
    jwt::sign(&claims, key)
}

/// The HMAC key: the configured `server.secretkey` (its literal text, as
/// Argo CD uses it), else the key the server generated and stored.
fn key_bytes(settings: &Settings, generated: &str) -> Arc<[u8]> {
    let key = settings.server_secret_key.as_deref().unwrap_or(generated);
    Arc::from(key.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use super::*;
    use crate::store::FileStore;

    /// Project tokens listed by id; everything else refused.
    #[derive(Default)]
    struct Listed(Mutex<HashSet<String>>);

    impl ProjectTokens for Listed {
        fn check(&self, project: &str, role: &str, claims: &ProjectTokenClaims<'_>) -> Result<(), String> {
            let listed = self.0.lock().map(|l| l.contains(claims.jti)).unwrap_or(false);
            if project == "p1" && role == "ci" && listed {
                Ok(())
            } else {
                Err(format!("not a token of {project}:{role}"))
            }
        }
    }

    async fn sessions(dir: &std::path::Path) -> Sessions {
        sessions_with(dir, ConfigWatch::new(None).unwrap()).await
    }

    async fn sessions_with(dir: &std::path::Path, config: Arc<ConfigWatch>) -> Sessions {
        std::fs::create_dir_all(dir).unwrap();
        let store = Arc::new(FileStore::open(dir).unwrap());
        let sessions = Sessions::open(store, config, dir.to_path_buf(), LoginLimits::default())
            .await
            .unwrap();
        sessions.ensure_initial_admin().await.unwrap();
        sessions
    }

    #[tokio::test]
    async fn project_tokens_are_accepted_only_while_their_role_lists_them() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = sessions(dir.path()).await;
        let issued = sessions.issue_project_token("p1", "ci", Some("t1".into()), Duration::from_secs(3600));
        assert_eq!(issued.jti, "t1");
        assert_eq!(issued.exp, Some(issued.iat + 3600));

        // No source yet: refused.
        let err = sessions.authenticate(&issued.token).unwrap_err();
        assert_eq!(err, "project tokens are not accepted");

        let listed = Arc::new(Listed::default());
        sessions.set_project_tokens(Arc::clone(&listed) as Arc<dyn ProjectTokens>);
        assert!(
            sessions
                .authenticate(&issued.token)
                .unwrap_err()
                .contains("not a token")
        );

        listed.0.lock().unwrap().insert("t1".into());
        let (principal, renewed) = sessions.authenticate(&issued.token).unwrap();
        assert!(renewed.is_none(), "project tokens are never renewed");
        let Principal::Project(p) = principal else {
            panic!("not a project principal: {principal:?}")
        };
        assert_eq!(
            (
                p.project.as_str(),
                p.role.as_str(),
                p.subject.as_str(),
                p.jti.as_str()
            ),
            ("p1", "ci", "proj:p1:ci", "t1")
        );
        assert_eq!((p.iat, p.expires_at), (issued.iat, issued.exp));

        // Revoked by leaving the role's list.
        listed.0.lock().unwrap().clear();
        assert!(sessions.authenticate(&issued.token).is_err());

        // A random id when none is given, and no expiry for zero.
        let other = sessions.issue_project_token("p1", "ci", None, Duration::ZERO);
        assert_eq!(other.exp, None);
        assert_eq!(uuid::Uuid::parse_str(&other.jti).map(|_| ()), Ok(()));
    }

    /// A config dir whose `oidc.config` names `issuer` (none: SSO off).
    fn write_oidc(dir: &std::path::Path, issuer: Option<&str>) {
        let mut cm = "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n".to_owned();
        if let Some(issuer) = issuer {
            cm.push_str(&format!(
                "  oidc.config: |\n    name: IdP\n    issuer: {issuer}\n    clientID: cd\n"
            ));
        }
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("argocd-cm.yaml"), cm).unwrap();
    }

    fn oidc_config(dir: &std::path::Path, issuer: Option<&str>) -> Arc<ConfigWatch> {
        write_oidc(dir, issuer);
        ConfigWatch::new(Some(dir.to_path_buf())).unwrap()
    }

    async fn start(sessions: &Sessions, iss: &str) -> String {
        let claims = serde_json::json!({"iss": iss, "sub": "u1", "exp": now_ms() / 1000 + 600});
        sessions
            .start_sso(claims.as_object().unwrap().clone(), "id.token".into())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn sso_sessions_end_when_their_provider_is_no_longer_configured() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config");
        let config = oidc_config(&cfg, Some("https://idp"));
        let sessions = sessions_with(&dir.path().join("store"), Arc::clone(&config)).await;
        let token = start(&sessions, "https://idp").await;
        assert!(sessions.authenticate(&token).is_ok());
        // A session from some other issuer is refused under this configuration.
        let foreign = start(&sessions, "https://other").await;
        let gone = "the single sign-on session's provider is no longer configured, please log in again";
        assert_eq!(sessions.authenticate(&foreign).unwrap_err(), gone);

        // The admin switches provider.
        write_oidc(&cfg, Some("https://idp2"));
        assert!(config.poll_once().unwrap());
        assert_eq!(sessions.authenticate(&token).unwrap_err(), gone);
        // Switching back: the session is valid again (it was not ended).
        write_oidc(&cfg, Some("https://idp"));
        assert!(config.poll_once().unwrap());
        assert!(sessions.authenticate(&token).is_ok());
        // SSO turned off.
        write_oidc(&cfg, None);
        assert!(config.poll_once().unwrap());
        assert_eq!(sessions.authenticate(&token).unwrap_err(), gone);
    }

    #[tokio::test]
    async fn sso_sessions_name_their_server_side_state_and_end_at_logout() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config");
        let store = dir.path().join("store");
        let sessions = sessions_with(&store, oidc_config(&cfg, Some("https://idp"))).await;
        let now = now_ms() / 1000;
        let groups: Vec<String> = (0..500).map(|i| format!("group-with-a-long-name-{i}")).collect();
        let claims = serde_json::json!({
            "iss": "https://idp", "sub": "u1", "email": "u1@example.test", "exp": now + 600, "groups": groups,
        });
        let token = sessions
            .start_sso(claims.as_object().unwrap().clone(), "id.token.here".into())
            .await
            .unwrap();
        assert!(token.len() < 300, "the cookie token stays small: {}", token.len());
        let (principal, renewed) = sessions.authenticate(&token).unwrap();
        assert!(renewed.is_none());
        let Principal::Sso(sso) = &principal else {
            panic!("not an SSO principal: {principal:?}")
        };
        assert_eq!(
            (sso.user.as_str(), sso.username.as_str(), sso.issuer.as_str()),
            ("u1", "u1@example.test", "https://idp")
        );
        assert_eq!(sso.expires_at, Some(now + 600));
        let sid = sso.session.clone().unwrap();
        assert_eq!(sessions.sso_session(&sid).unwrap().id_token, "id.token.here");

        // The session survives a restart of the server.
        drop(sessions);
        let sessions = sessions_with(&store, oidc_config(&cfg, Some("https://idp"))).await;
        assert!(sessions.authenticate(&token).is_ok());
        sessions.end_sso(&sid).await.unwrap();
        assert_eq!(
            sessions.authenticate(&token).unwrap_err(),
            "the single sign-on session has ended, please log in again"
        );
        // An account named `sso` keeps its own login tokens.
        let err = sessions.authenticate(&sessions.issue_login("sso")).unwrap_err();
        assert_eq!(err, "account sso does not exist");
    }

    #[tokio::test]
    async fn malformed_project_subjects_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = sessions(dir.path()).await;
        sessions.set_project_tokens(Arc::new(Listed::default()));
        let key = Arc::clone(&sessions.snapshot.load().key);
        for sub in ["proj:p1", "proj:p1:ci:extra", "proj:", "proj:p1:"] {
            let claims = Claims {
                iss: ISSUER.to_owned(),
                sub: sub.to_owned(),
                jti: "x".into(),
                iat: now_ms() / 1000,
                nbf: 0,
                exp: None,
                iat_ms: None,
            };
            let err = sessions.authenticate(&jwt::sign(&claims, &key)).unwrap_err();
            assert_eq!(err, "token subject is invalid", "{sub}");
        }
        // `proj:login` is the login token of an account named `proj`, not a project token.
        let claims = Claims {
            iss: ISSUER.to_owned(),
            sub: "proj:login".to_owned(),
            jti: "x".into(),
            iat: now_ms() / 1000,
            nbf: 0,
            exp: Some(now_ms() / 1000 + 60),
            iat_ms: None,
        };
        let err = sessions.authenticate(&jwt::sign(&claims, &key)).unwrap_err();
        assert_eq!(err, "account proj does not exist");
    }
}
