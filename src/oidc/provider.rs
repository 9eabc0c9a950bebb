//! One identity provider: its discovery document and signing keys, cached;
//! token verification; the code exchange and user-info calls.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::http::{Http, HttpError};
use super::verify::{self, Claims, Expect, Jwks, VerifyError};

/// How long a discovery document is trusted before it is fetched again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// After a failed discovery, calls fail fast for this long (no request storm on a down provider).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// The key set is fetched again at most this often for an unknown key.
pub const JWKS_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// ... and, whatever happens, at least this often.
const JWKS_TTL: Duration = Duration::from_secs(3600);

/// The parts of the discovery document tiphys uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub authorization_endpoint: String,
    pub token_endpoint: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub userinfo_endpoint: Option<String>,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    #[serde(default)]
    pub scopes_supported: Vec<String>,
}

/// The token endpoint's answer.
#[derive(Clone, Deserialize)]
pub struct TokenResponse {
    #[serde(default)]
    pub id_token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    #[error("the identity provider cannot be reached: {0}")]
    Unreachable(#[from] HttpError),
    #[error(
        "the identity provider's discovery document names issuer {discovered:?}, but oidc.config says {configured:?}{hint}"
    )]
    IssuerMismatch {
        configured: String,
        discovered: String,
        hint: &'static str,
    },
    #[error("the identity provider cannot be reached (a recent attempt failed; retrying in a few seconds)")]
    RecentlyFailed,
    #[error(transparent)]
    Token(#[from] VerifyError),
}

struct Cached<T> {
    value: Arc<T>,
    at: Instant,
}

pub struct Provider {
    issuer: String,
    http: Http,
    discovery: RwLock<Option<Cached<Discovery>>>,
    discovery_failed: Mutex<Option<Instant>>,
    jwks: RwLock<Option<Cached<Jwks>>>,
    /// Serialises key set fetches; holds when the last one started.
    jwks_fetch: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl Provider {
    pub fn new(issuer: &str, http: Http) -> Self {
        Self {
            issuer: issuer.to_owned(),
            http,
            discovery: RwLock::new(None),
            discovery_failed: Mutex::new(None),
            jwks: RwLock::new(None),
            jwks_fetch: tokio::sync::Mutex::new(None),
        }
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn http(&self) -> &Http {
        &self.http
    }

    /// The discovery document, from the cache or fetched.
    pub async fn discovery(&self) -> Result<Arc<Discovery>, ProviderError> {
        if let Ok(cached) = self.discovery.read()
            && let Some(c) = cached.as_ref()
            && c.at.elapsed() < DISCOVERY_TTL
        {
            return Ok(Arc::clone(&c.value));
        }
        if let Ok(failed) = self.discovery_failed.lock()
            && failed.is_some_and(|at| at.elapsed() < RETRY_AFTER_FAILURE)
        {
            return Err(ProviderError::RecentlyFailed);
        }
        match self.fetch_discovery().await {
            Ok(doc) => {
                let doc = Arc::new(doc);
                if let Ok(mut slot) = self.discovery.write() {
                    *slot = Some(Cached {
                        value: Arc::clone(&doc),
                        at: Instant::now(),
                    });
                }
                Ok(doc)
            }
            Err(err) => {
                if let Ok(mut failed) = self.discovery_failed.lock() {
                    *failed = Some(Instant::now());
                }
                tracing::warn!(error = %err, "OIDC discovery failed");
                Err(err)
            }
        }
    }

    async fn fetch_discovery(&self) -> Result<Discovery, ProviderError> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let doc: Discovery = self.http.get_json(&url, None).await?;
        if doc.issuer != self.issuer {
            let hint = if doc.issuer.trim_end_matches('/') == self.issuer.trim_end_matches('/') {
                " (they differ only in a trailing slash: write the issuer exactly as the provider does)"
            } else if doc.issuer.split_once("://").map(|x| x.1) == self.issuer.split_once("://").map(|x| x.1)
            {
                " (they differ in http vs https: a proxy in front of the provider may be rewriting the scheme)"
            } else {
                ""
            };
            return Err(ProviderError::IssuerMismatch {
                configured: self.issuer.clone(),
                discovered: doc.issuer,
                hint,
            });
        }
        Ok(doc)
    }

    fn cached_keys(&self) -> Option<Arc<Jwks>> {
        let cached = self.jwks.read().ok()?;
        let c = cached.as_ref()?;
        (c.at.elapsed() < JWKS_TTL).then(|| Arc::clone(&c.value))
    }

    /// The key set: cached, or fetched. `force` fetches again although keys
    /// are cached, at most once per [`JWKS_REFRESH_INTERVAL`] (an unknown key
    /// must not let anyone make us hammer the provider).
    async fn keys(&self, force: bool) -> Result<Arc<Jwks>, ProviderError> {
        if !force && let Some(keys) = self.cached_keys() {
            return Ok(keys);
        }
        let mut last = self.jwks_fetch.lock().await;
        let recent = last.is_some_and(|at| at.elapsed() < JWKS_REFRESH_INTERVAL);
        match self.cached_keys() {
            // Fetched while we waited, or fetched too recently to ask again.
            Some(keys) if !force || recent => return Ok(keys),
            None if recent => return Err(ProviderError::RecentlyFailed),
            _ => {}
        }
        *last = Some(Instant::now());
        let discovery = self.discovery().await?;
        let keys: Jwks = self.http.get_json(&discovery.jwks_uri, None).await?;
        tracing::info!(
            keys = keys.keys.len(),
            "fetched the identity provider's signing keys"
        );
        let keys = Arc::new(keys);
        if let Ok(mut slot) = self.jwks.write() {
            *slot = Some(Cached {
                value: Arc::clone(&keys),
                at: Instant::now(),
            });
        }
        Ok(keys)
    }

    /// Verifies an ID token: algorithm, signature (fetching the keys again,
    /// rate-limited, when no cached key fits: key rotation), then the claims.
    pub async fn verify(&self, token: &str, expect: &Expect<'_>) -> Result<Claims, ProviderError> {
        let parsed = verify::parse(token)?;
        // A token that does not even claim our issuer costs no network call.
        let claimed = parsed.claimed_issuer().unwrap_or_default();
        if claimed != expect.issuer {
            return Err(VerifyError::Issuer {
                want: expect.issuer.to_owned(),
                got: verify::clip(&claimed),
            }
            .into());
        }
        let keys = self.keys(false).await?;
        match parsed.verify_signature(&keys) {
            Ok(()) => {}
            Err(VerifyError::UnknownKey(_) | VerifyError::Signature) => {
                parsed.verify_signature(&*self.keys(true).await?)?;
            }
            Err(other) => return Err(other.into()),
        }
        Ok(parsed.claims(expect)?)
    }

    /// Redeems an authorization code (with its PKCE verifier).
    pub async fn exchange_code(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
        client_id: &str,
        client_secret: Option<&str>,
    ) -> Result<TokenResponse, ProviderError> {
        let discovery = self.discovery().await?;
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
        ];
        let basic = match client_secret {
            Some(secret) => Some((client_id, secret)),
            None => {
                form.push(("client_id", client_id));
                None
            }
        };
        Ok(self
            .http
            .post_form(&discovery.token_endpoint, &form, basic)
            .await?)
    }

    /// Redeems a refresh token (a public client: no secret).
    pub async fn refresh(
        &self,
        refresh_token: &str,
        client_id: &str,
    ) -> Result<TokenResponse, ProviderError> {
        let discovery = self.discovery().await?;
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client_id),
        ];
        Ok(self
            .http
            .post_form(&discovery.token_endpoint, &form, None)
            .await?)
    }

    /// The user-info claims for an access token.
    pub async fn user_info(&self, url: &str, access_token: &str) -> Result<Claims, ProviderError> {
        Ok(self.http.get_json(url, Some(access_token)).await?)
    }
}
