//! Single sign-on with OpenID Connect: tiphys as a relying party of the
//! provider in `oidc.config` (dashboard and CLI logins), and verification of
//! the provider's ID tokens presented as bearer tokens.
//!
//! Who does what: `openidconnect` speaks the relying-party protocol
//! (discovery, authorization request, code exchange, refresh grant, user
//! info, logout URL; `provider`) over tiphys's own HTTP client (`http`:
//! hyper and rustls on ring, `rootCA`, 10 s, 1 MiB); `jsonwebtoken` does the
//! token crypto and the registered claims of every ID token, whether a login
//! or an API caller presents it (`verify`, one path for both); tiphys keeps
//! the state, nonce and browser binding of logins (`login`), the caches, and
//! the checks those libraries do not make.
//! Logins in progress live in a sealed cookie, not in this process (`login`).
//!
//! The provider client follows the configuration: a change of `oidc.config`
//! (or of `oidc.tls.insecure.skip.verify`) builds a new one on next use,
//! without touching the listener or any connection.

pub mod device;
pub mod http;
pub mod login;
pub mod provider;
pub mod verify;

use std::sync::{Arc, Mutex};

use crate::config::ConfigWatch;
use crate::config::oidc::OidcConfig;
use crate::principal::SsoPrincipal;
use crate::store::Store;
use login::LoginStates;
use provider::{Provider, ProviderError};
use verify::Expect;

struct Active {
    config: Arc<OidcConfig>,
    skip_verify: bool,
    provider: Arc<Provider>,
}

pub struct Oidc {
    config: Arc<ConfigWatch>,
    /// What token times are checked against.
    clock: crate::clock::Clock,
    active: Mutex<Option<Active>>,
    /// Logins in progress: the sealed cookie's format and the used states in the store.
    pub logins: LoginStates,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc").finish_non_exhaustive()
    }
}

/// The provider in force and the configuration it was built from.
#[derive(Clone)]
pub struct Current {
    pub config: Arc<OidcConfig>,
    pub provider: Arc<Provider>,
}

/// What an API caller is told when its ID token cannot be checked because
/// the provider is unavailable (no internal URLs).
pub const PROVIDER_UNAVAILABLE: &str =
    "the identity provider cannot be reached; the token cannot be verified now";

impl Oidc {
    /// `store`: where accepted login states are remembered (shared by every server that
    /// shares the server key).
    pub fn new(config: Arc<ConfigWatch>, store: Arc<dyn Store>, clock: crate::clock::Clock) -> Self {
        Self {
            config,
            clock,
            active: Mutex::new(None),
            logins: LoginStates::new(store),
        }
    }

    /// Whether single sign-on is configured right now.
    pub fn enabled(&self) -> bool {
        self.config.current().oidc.is_some()
    }

    /// The provider for the current configuration; `Ok(None)` when SSO is off.
    /// Built again only when the OIDC settings changed, so its caches
    /// (discovery, keys) survive unrelated configuration edits.
    pub fn current(&self) -> Result<Option<Current>, String> {
        let settings = self.config.current();
        let Some(config) = settings.oidc.clone() else {
            return Ok(None);
        };
        let skip_verify = settings.oidc_tls_insecure_skip_verify;
        let mut active = self
            .active
            .lock()
            .map_err(|_| "OIDC state is unavailable".to_owned())?;
        if let Some(a) = active.as_ref()
            && a.skip_verify == skip_verify
            && (Arc::ptr_eq(&a.config, &config) || *a.config == *config)
        {
            return Ok(Some(Current {
                config: Arc::clone(&a.config),
                provider: Arc::clone(&a.provider),
            }));
        }
        if skip_verify {
            tracing::warn!(
                "oidc.tls.insecure.skip.verify is true: the identity provider's certificate is not checked"
            );
        }
        let http = http::Http::new(&config.root_ca, skip_verify)?;
        let provider = Arc::new(Provider::new(&config.issuer, http));
        tracing::info!(issuer = %config.issuer, client_id = %config.client_id, "single sign-on provider configured");
        *active = Some(Active {
            config: Arc::clone(&config),
            skip_verify,
            provider: Arc::clone(&provider),
        });
        Ok(Some(Current { config, provider }))
    }

    /// Verifies a provider ID token presented on the API (no nonce: it was
    /// not obtained through our dashboard login).
    pub async fn verify_bearer(&self, token: &str) -> Result<SsoPrincipal, String> {
        let current = self
            .current()?
            .ok_or_else(|| "token issuer is not trusted".to_owned())?;
        let audiences = current.config.audiences();
        let expect = Expect {
            issuer: &current.config.issuer,
            audiences: &audiences,
            skip_audience_when_absent: current.config.skip_audience_check_when_token_has_no_audience,
            nonce: None,
            now: self.clock.now_s(),
        };
        match current.provider.verify(token, &expect).await {
            Ok(claims) => {
                let time = |k: &str| {
                    claims
                        .get(k)
                        .and_then(serde_json::Value::as_f64)
                        .map(|t| t as i64)
                };
                let (iat, exp) = (time("iat").unwrap_or_default(), time("exp"));
                Ok(SsoPrincipal::from_claims(Arc::new(claims), iat, exp, None))
            }
            Err(err @ ProviderError::Token(_)) => Err(err.to_string()),
            Err(err) => {
                // The details (URLs, addresses) stay in the log; the caller
                // is not authenticated yet.
                tracing::warn!(error = %err, "cannot verify an ID token: the identity provider is unavailable");
                Err(PROVIDER_UNAVAILABLE.to_owned())
            }
        }
    }
}
