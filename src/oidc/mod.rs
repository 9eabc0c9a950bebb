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
//! The provider clients follow the configuration: a change of `oidc.config`, of an entry of
//! `tiphys.oidc.providers` (or of `oidc.tls.insecure.skip.verify`) builds that provider's
//! client again on next use, without touching the listener, any connection or the other
//! providers. A bearer ID token is matched to its provider by its `iss`.

pub mod device;
pub mod http;
pub mod login;
pub mod provider;
pub mod verify;

use std::collections::BTreeMap;
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
    /// One client per configured provider, by provider name.
    active: Mutex<BTreeMap<String, Active>>,
    /// Logins in progress: the sealed cookie's format and the used states in the store.
    pub logins: LoginStates,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc").finish_non_exhaustive()
    }
}

/// A provider in force and the configuration it was built from.
#[derive(Clone)]
pub struct Current {
    pub config: Arc<OidcConfig>,
    pub provider: Arc<Provider>,
}

/// What an API caller is told when its ID token cannot be checked because
/// the provider is unavailable (no internal URLs).
pub const PROVIDER_UNAVAILABLE: &str =
    "the identity provider cannot be reached; the token cannot be verified now";
/// What a caller is told about an ID token whose issuer is none of the configured providers
/// (the configured ones are not named).
pub const UNTRUSTED_ISSUER: &str = "token issuer is not trusted";

/// Why a provider could not be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Single sign-on is off.
    Off,
    /// No provider goes by that name.
    Unknown,
    /// The client for it cannot be built (the reason is for the log).
    Broken(String),
}

impl Oidc {
    /// `store`: where accepted login states are remembered (shared by every server that
    /// shares the server key).
    pub fn new(config: Arc<ConfigWatch>, store: Arc<dyn Store>, clock: crate::clock::Clock) -> Self {
        Self {
            config,
            clock,
            active: Mutex::new(BTreeMap::new()),
            logins: LoginStates::new(store),
        }
    }

    /// Whether single sign-on is configured right now.
    pub fn enabled(&self) -> bool {
        !self.config.current().oidc_providers.is_empty()
    }

    /// The provider named `name` (the default one for `None`).
    pub fn choose(&self, name: Option<&str>) -> Result<Current, Choice> {
        let settings = self.config.current();
        let config = match name {
            None => settings.oidc_providers.first(),
            Some(name) => settings.oidc_providers.iter().find(|p| p.id == name),
        };
        let Some(config) = config else {
            return Err(if settings.oidc_providers.is_empty() {
                Choice::Off
            } else {
                Choice::Unknown
            });
        };
        self.client(config, settings.oidc_tls_insecure_skip_verify)
            .map_err(Choice::Broken)
    }

    /// The provider whose issuer is `issuer`, exactly.
    pub fn by_issuer(&self, issuer: &str) -> Result<Current, Choice> {
        let settings = self.config.current();
        let config = settings.oidc_providers.iter().find(|p| p.issuer == issuer);
        let Some(config) = config else {
            return Err(Choice::Unknown);
        };
        self.client(config, settings.oidc_tls_insecure_skip_verify)
            .map_err(Choice::Broken)
    }

    /// The client of `config`. Built again only when its settings changed, so its caches
    /// (discovery, keys) survive unrelated configuration edits; clients of providers no
    /// longer configured are dropped.
    fn client(&self, config: &Arc<OidcConfig>, skip_verify: bool) -> Result<Current, String> {
        let mut active = self
            .active
            .lock()
            .map_err(|_| "OIDC state is unavailable".to_owned())?;
        if let Some(a) = active.get(&config.id)
            && a.skip_verify == skip_verify
            && (Arc::ptr_eq(&a.config, config) || *a.config == **config)
        {
            return Ok(Current {
                config: Arc::clone(&a.config),
                provider: Arc::clone(&a.provider),
            });
        }
        if skip_verify {
            tracing::warn!(
                "oidc.tls.insecure.skip.verify is true: the identity provider's certificate is not checked"
            );
        }
        let http = http::Http::new(&config.root_ca, skip_verify)?;
        let provider = Arc::new(Provider::new(&config.issuer, http));
        tracing::info!(provider = %config.id, issuer = %config.issuer, client_id = %config.client_id, "single sign-on provider configured");
        let settings = self.config.current();
        active.retain(|id, _| settings.oidc_providers.iter().any(|p| &p.id == id));
        active.insert(
            config.id.clone(),
            Active {
                config: Arc::clone(config),
                skip_verify,
                provider: Arc::clone(&provider),
            },
        );
        Ok(Current {
            config: Arc::clone(config),
            provider,
        })
    }

    /// Verifies a provider ID token presented on the API (no nonce: it was
    /// not obtained through our dashboard login). The token's `iss` picks the provider; the
    /// verification then checks that claim too, with the signature.
    pub async fn verify_bearer(&self, token: &str) -> Result<SsoPrincipal, String> {
        let parsed = verify::parse(token);
        let issuer = parsed.as_ref().ok().and_then(|t| t.claimed_issuer());
        let found = match issuer {
            Some(issuer) => self.by_issuer(&issuer),
            None => Err(Choice::Unknown),
        };
        let current = match found {
            Ok(current) => current,
            Err(Choice::Broken(why)) => return Err(why),
            // With one provider, its own verification names what is wrong, as before there
            // could be several.
            Err(Choice::Off | Choice::Unknown) if self.config.current().oidc_providers.len() == 1 => {
                match self.choose(None) {
                    Ok(current) => current,
                    Err(Choice::Broken(why)) => return Err(why),
                    Err(_) => return Err(UNTRUSTED_ISSUER.to_owned()),
                }
            }
            Err(Choice::Off | Choice::Unknown) => {
                return Err(match parsed {
                    Err(err) => ProviderError::Token(err).to_string(),
                    Ok(_) => UNTRUSTED_ISSUER.to_owned(),
                });
            }
        };
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
                Ok(of_provider(
                    SsoPrincipal::from_claims(Arc::new(claims), iat, exp, None),
                    &current.config,
                ))
            }
            Err(err @ ProviderError::Token(_)) => Err(err.to_string()),
            Err(err) => {
                // The details (URLs, addresses) stay in the log; the caller
                // is not authenticated yet.
                tracing::warn!(provider = %current.config.id, error = %err, "cannot verify an ID token: the identity provider is unavailable");
                Err(PROVIDER_UNAVAILABLE.to_owned())
            }
        }
    }
}

/// `principal` as provider `config`'s: qualified (`<name>:`) when several providers may be
/// configured (`tiphys.oidc.providers` is set), as upstream's otherwise.
pub fn of_provider(principal: SsoPrincipal, config: &OidcConfig) -> SsoPrincipal {
    if config.qualified {
        principal.qualified(&config.id, &config.groups_claim)
    } else {
        SsoPrincipal {
            provider: config.id.clone(),
            ..principal
        }
    }
}
