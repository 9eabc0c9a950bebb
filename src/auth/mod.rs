//! Authentication: who a request comes from, and the state that decides it. One file and one
//! type per responsibility, each holding only the state it needs:
//!
//! - [`authenticator`]: reads a request's credentials (the one place), and revalidates them;
//! - [`keys`]: the signing key of local tokens; [`jwt`]: the token format;
//! - [`tokens`]: the check of every local token, dispatched by subject, and login tokens;
//! - [`accounts`]: local accounts (configuration merged with the store's records);
//! - [`logins`]: password logins under the brute-force rules ([`throttle`], [`password`]),
//!   the first start's admin password, password changes;
//! - [`api_keys`], [`project_tokens`], [`sso_sessions`], [`personal_tokens`] (of SSO users):
//!   the other kinds of local token;
//! - [`revocations`]: logged-out token ids;
//! - [`service_accounts`]: Kubernetes ServiceAccount tokens, reviewed by the `--kube` API
//!   server ([`review_cache`] keeps its recent answers);
//! - [`rate_limits`]: requests per caller and class ([`buckets`], and [`shared_buckets`] in
//!   Redis for logins);
//! - [`mirror`]: on a store this process alone writes, what it wrote, for checks without a read;
//! - [`cookie`]: Argo CD's session cookie format.
//!
//! [`Auth`] opens them together over one store.

pub mod accounts;
pub mod api_keys;
pub mod authenticator;
pub mod buckets;
pub mod cookie;
pub mod jwt;
pub mod keys;
pub mod logins;
pub mod mirror;
pub mod password;
pub mod personal_tokens;
pub mod project_tokens;
pub mod rate_limits;
pub mod review_cache;
pub mod revocations;
pub mod service_accounts;
pub mod shared_buckets;
pub mod shared_revocations;
pub mod sso_sessions;
pub mod throttle;
pub mod tokens;

use std::path::PathBuf;
use std::sync::Arc;

pub use self::authenticator::{Ambiguous, Authenticator, Channel, Identified};
pub use self::logins::{LoginError, LoginLimits};
pub use self::project_tokens::{ProjectTokenClaims, ProjectTokenSource};
use crate::config::{ConfigWatch, Settings};
use crate::error::AppError;
use crate::oidc::Oidc;
pub use crate::principal::Carrier;
use crate::store::Store;

/// Every part of authentication, opened over one store.
pub struct Auth {
    /// Private: tokens are issued by the parts that know what a token of theirs is.
    keys: Arc<keys::TokenKeys>,
    pub accounts: Arc<accounts::Accounts>,
    pub revocations: Arc<revocations::Revocations>,
    pub sso_sessions: Arc<sso_sessions::SsoSessions>,
    pub project_tokens: Arc<project_tokens::ProjectTokens>,
    pub personal_tokens: Arc<personal_tokens::PersonalTokens>,
    pub tokens: Arc<tokens::Tokens>,
    pub logins: logins::Logins,
    pub api_keys: api_keys::ApiKeys,
    pub authenticator: Authenticator,
    pub rate_limits: rate_limits::RateLimiter,
}

/// What [`Auth::open`] needs besides the store and the configuration.
pub struct AuthOptions {
    /// Where the generated admin password is also written on a first start, beside a store
    /// only this server opens (a running server locks redb, so the CLI reads the file); with
    /// a shared store (etcd) `None`: the CLI reads the store.
    pub data_dir: Option<PathBuf>,
    /// This process is the store's only writer (redb, `store::Backend::is_exclusive`): token
    /// checks answer from the mirrors of its own writes ([`mirror`]) instead of reading the
    /// store. `false` on a shared store (etcd), where other replicas write too.
    pub exclusive: bool,
    pub limits: LoginLimits,
    /// Where presented project-role tokens are checked (the AppProjects).
    pub projects: Arc<dyn ProjectTokenSource>,
    /// Single sign-on, for ID tokens presented as bearer tokens; `None` in tools.
    pub oidc: Option<Arc<Oidc>>,
    /// The keys sealing credentials at rest (the generated admin password on a shared store).
    pub secrets: Arc<crate::registry::SecretsKeys>,
    /// `--redis`: Argo CD's Redis, where logouts are shared with argocd-server (and login rate
    /// limits between replicas).
    pub redis: Option<String>,
    /// What every part reads time from.
    pub clock: crate::clock::Clock,
    /// `--kube`: the API server that reviews ServiceAccount tokens.
    pub kube: Option<crate::kubernetes::Connection>,
}

impl Auth {
    /// Loads what the store holds and adopts the configuration's passwords.
    pub async fn open(
        store: Arc<dyn Store>,
        config: Arc<ConfigWatch>,
        options: AuthOptions,
    ) -> anyhow::Result<Self> {
        let keys = Arc::new(keys::TokenKeys::open(store.as_ref(), &config.current()).await?);
        let exclusive = options.exclusive;
        let accounts = Arc::new(
            accounts::Accounts::open(
                Arc::clone(&store),
                Arc::clone(&config),
                exclusive,
                options.clock.clone(),
            )
            .await?,
        );
        let revocations = Arc::new(
            revocations::Revocations::open(
                Arc::clone(&store),
                Arc::clone(&config),
                exclusive,
                options.clock.clone(),
            )
            .await?
            .sharing(match &options.redis {
                Some(addr) => Some(shared_revocations::SharedRevocations::connect(addr).await?),
                None => None,
            }),
        );
        let sso_sessions = Arc::new(
            sso_sessions::SsoSessions::open(
                Arc::clone(&store),
                Arc::clone(&config),
                Arc::clone(&keys),
                exclusive,
                options.clock.clone(),
            )
            .await?,
        );
        let project_tokens = Arc::new(project_tokens::ProjectTokens::new(
            Arc::clone(&keys),
            Arc::clone(&revocations),
            options.projects,
            options.clock.clone(),
        ));
        let personal_tokens = Arc::new(personal_tokens::PersonalTokens::new(
            Arc::clone(&store),
            Arc::clone(&config),
            Arc::clone(&keys),
            options.clock.clone(),
        ));
        let tokens = Arc::new(tokens::Tokens::new(
            Arc::clone(&keys),
            Arc::clone(&store),
            Arc::clone(&accounts),
            Arc::clone(&revocations),
            Arc::clone(&sso_sessions),
            Arc::clone(&project_tokens),
            Arc::clone(&personal_tokens),
            Arc::clone(&config),
            options.clock.clone(),
        ));
        let logins = logins::Logins::open(
            store,
            Arc::clone(&config),
            Arc::clone(&accounts),
            Arc::clone(&tokens),
            options.data_dir,
            options.secrets,
            options.limits,
            options.clock.clone(),
        )
        .await?;
        // The password may have changed while the server was down.
        logins.after_reload().await;
        let api_keys =
            api_keys::ApiKeys::new(Arc::clone(&keys), Arc::clone(&accounts), options.clock.clone());
        let shared_buckets = match &options.redis {
            Some(addr) => Some(shared_buckets::SharedBuckets::connect(addr).await?),
            None => None,
        };
        let service_accounts = service_accounts::ServiceAccounts::new(options.kube, options.clock.clone());
        let rate_limits = rate_limits::RateLimiter::new(Arc::clone(&config), options.clock, shared_buckets);
        let authenticator = Authenticator::new(Arc::clone(&tokens), config, options.oidc, service_accounts);
        Ok(Self {
            keys,
            accounts,
            revocations,
            sso_sessions,
            project_tokens,
            personal_tokens,
            tokens,
            logins,
            api_keys,
            authenticator,
            rate_limits,
        })
    }

    /// Readies authentication for a new configuration, before it takes effect: the signing
    /// key, passwords from the secret, accounts added, removed or losing access. The
    /// accounts' records are written first, so that once any replica refuses a token for
    /// the new configuration, every replica does.
    pub async fn prepare_config(&self, next: &Settings) -> anyhow::Result<()> {
        self.keys.reload(next);
        self.accounts.reload(next).await?;
        self.logins.after_reload().await;
        Ok(())
    }

    /// The server key in force under `settings` (what credentials at rest are sealed under
    /// when no `--secrets-key-file` is given).
    pub fn server_key_of<'a>(&'a self, settings: &'a Settings) -> &'a str {
        self.keys.server_key_of(settings)
    }

    /// The key sealing values for `purpose`, derived from the server key (the signing key
    /// itself is never handed out).
    pub fn sealing_key(&self, purpose: &'static str, id: u8) -> crate::seal::SealKey {
        self.keys.sealing_key(purpose, id)
    }

    /// Forgets what has expired: SSO sessions, revocations of tokens expired anyway, failed
    /// logins past their window.
    pub async fn purge_expired(&self) -> Result<(), AppError> {
        self.sso_sessions.purge().await?;
        self.revocations.purge().await?;
        self.logins.purge().await?;
        self.rate_limits.purge();
        Ok(())
    }

    /// Ends the session a caller's token belongs to, at once: a login token is revoked
    /// (an API key is left alone; it is deleted through the account API), a dashboard SSO
    /// session ends on the server (a presented ID token is the provider's to revoke).
    pub async fn end_session(&self, caller: &crate::principal::Caller) -> Result<(), AppError> {
        use crate::principal::{Credentials, TokenKind};
        if let (Credentials::Valid(_), Some(account)) = (&caller.credentials, caller.principal.account())
            && account.kind == TokenKind::Login
        {
            self.revocations.revoke(&account.jti, account.expires_at).await?;
        }
        if let (Credentials::Valid(_), Some(sso)) = (&caller.credentials, caller.principal.sso())
            && let Some(sid) = &sso.session
        {
            self.sso_sessions.end(sid).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
