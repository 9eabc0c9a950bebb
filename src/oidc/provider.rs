//! One identity provider: its discovery document and signing keys, cached;
//! token verification; the authorization request, the code exchange, the
//! refresh grant, user info and the end-session URL.
//!
//! `openidconnect` speaks the protocol: discovery (with its exact issuer
//! check), the authorization URL (PKCE S256 and the nonce; the values are
//! tiphys's own, see `login`), the token requests with client
//! authentication, the user-info request with its subject check, and the
//! RP-initiated logout URL. Its requests go through [`Http`]. tiphys keeps the
//! caching around it (discovery for an hour, fail fast for 5 s after a
//! failure; the key set fetched again for an unknown key at most every 5 s)
//! and verifies every ID token itself, through `verify` (see there why not
//! with `openidconnect`'s verifier).

use std::borrow::Cow;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthenticationFlow, CoreClaimName, CoreClaimType, CoreClient, CoreClientAuthMethod,
    CoreErrorResponseType, CoreGenderClaim, CoreGrantType, CoreIdToken, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJweKeyManagementAlgorithm, CoreResponseMode, CoreResponseType,
    CoreSubjectIdentifierType, CoreTokenResponse,
};
use openidconnect::{
    AccessToken, AdditionalClaims, AdditionalProviderMetadata, AuthorizationCode, ClientId, ClientSecret,
    ConfigurationError, CsrfToken, DeviceAuthorizationUrl, DiscoveryError, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, IssuerUrl, LogoutProviderMetadata, LogoutRequest, Nonce, OAuth2TokenResponse as _,
    PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl, ProviderMetadata, RedirectUrl, RefreshToken,
    RequestTokenError, Scope, StandardErrorResponse, SubjectIdentifier, TokenResponse as _, UserInfoClaims,
    UserInfoError, UserInfoUrl,
};
use serde::{Deserialize, Serialize};

use super::http::{Http, HttpError, safe_code};
use super::verify::{self, Claims, Expect, Jwks, VerifyError};

/// How long a discovery document is trusted before it is fetched again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// After a failed discovery, calls fail fast for this long (no request storm on a down provider).
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// The key set is fetched again at most this often for an unknown key.
pub const JWKS_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// ... and, whatever happens, at least this often.
const JWKS_TTL: Duration = Duration::from_secs(3600);

/// The discovery document, with the `end_session_endpoint` of RP-initiated logout and the
/// `device_authorization_endpoint` of RFC 8628 (`DeviceEndpoint`).
pub type Discovery = ProviderMetadata<
    LogoutProviderMetadata<DeviceEndpoint>,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// RFC 8628's entry of a discovery document, which `openidconnect`'s core metadata leaves out:
/// where the CLI's device-code login starts (`device.rs`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct DeviceEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_authorization_endpoint: Option<DeviceAuthorizationUrl>,
}

impl AdditionalProviderMetadata for DeviceEndpoint {}

/// `openidconnect`'s client as built from a discovery document.
pub(super) type OidcClient = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What the token endpoint answered.
#[derive(Clone)]
pub struct Tokens {
    /// The ID token as the provider wrote it, not yet verified.
    pub id_token: Option<String>,
    pub access_token: String,
    pub refresh_token: Option<String>,
}

/// Names the tokens present, never their values.
impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("id_token", &self.id_token.is_some())
            .field("refresh_token", &self.refresh_token.is_some())
            .finish_non_exhaustive()
    }
}

/// The part of a user-info answer tiphys reads besides `sub`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
struct GroupsClaim {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    groups: Option<serde_json::Value>,
}

impl AdditionalClaims for GroupsClaim {}

/// An authorization request, with the login's own random values.
#[derive(Debug)]
pub struct AuthorizationRequest<'a> {
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    /// `openid` included.
    pub scopes: &'a [String],
    pub state: &'a str,
    pub nonce: &'a str,
    /// The PKCE verifier; the request carries its S256 challenge.
    pub pkce_verifier: &'a str,
    /// More query parameters (`claims`, `domain_hint`).
    pub extra: Vec<(&'static str, String)>,
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
    #[error("the identity provider refused the request ({0})")]
    Refused(String),
    #[error("the identity provider's answer is not usable: {0}")]
    BadAnswer(String),
    #[error(transparent)]
    Token(#[from] VerifyError),
    #[error(
        "the identity provider offers no device-code login (its discovery document has no \
         device_authorization_endpoint); log in without --device"
    )]
    NoDeviceLogin,
    #[error("the login was denied at the identity provider")]
    DeviceLoginDenied,
    #[error("the login code expired before the login was approved; run the login again")]
    DeviceLoginExpired,
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
        let issuer = IssuerUrl::new(self.issuer.clone()).map_err(|e| {
            ProviderError::BadAnswer(format!("the issuer {:?} is not a URL: {e}", self.issuer))
        })?;
        // `openidconnect` compares the issuers as written, and fetches the key set too.
        Discovery::discover_async(issuer, &self.http)
            .await
            .map_err(|err| self.discovery_error(err))
    }

    fn discovery_error(&self, err: DiscoveryError<HttpError>) -> ProviderError {
        match err {
            DiscoveryError::Request(err) => ProviderError::Unreachable(err),
            DiscoveryError::Validation(message) => match discovered_issuer(&message, &self.issuer) {
                Some(discovered) => issuer_mismatch(&self.issuer, discovered),
                None => ProviderError::BadAnswer(message),
            },
            DiscoveryError::Response(_, _, message) => ProviderError::BadAnswer(message),
            DiscoveryError::Parse(err) => {
                ProviderError::BadAnswer(format!("the discovery document is not the JSON expected: {err}"))
            }
            other => ProviderError::BadAnswer(other.to_string()),
        }
    }

    fn cached_keys(&self) -> Option<Arc<Jwks>> {
        let cached = self.jwks.read().ok()?;
        let c = cached.as_ref()?;
        (c.at.elapsed() < JWKS_TTL).then(|| Arc::clone(&c.value))
    }

    /// The key set (in `jsonwebtoken`'s form): cached, or fetched. `force`
    /// fetches again although keys are cached, at most once per
    /// [`JWKS_REFRESH_INTERVAL`] (an unknown key must not let anyone make us
    /// hammer the provider).
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
        let keys: Jwks = self.http.get_json(discovery.jwks_uri().url().as_str()).await?;
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
    /// rate-limited, when no cached key verifies it: key rotation), then the
    /// claims.
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
        match parsed.verify(&keys, expect) {
            Err(VerifyError::UnknownKey(_) | VerifyError::Signature) => {
                Ok(parsed.verify(&*self.keys(true).await?, expect)?)
            }
            other => Ok(other?),
        }
    }

    /// `openidconnect`'s client for `client_id` (confidential with a secret).
    pub(super) fn client(
        &self,
        discovery: &Discovery,
        client_id: &str,
        client_secret: Option<&str>,
    ) -> OidcClient {
        CoreClient::from_provider_metadata(
            discovery.clone(),
            ClientId::new(client_id.to_owned()),
            client_secret.map(|s| ClientSecret::new(s.to_owned())),
        )
    }

    /// The URL to send the browser to.
    pub async fn authorization_url(
        &self,
        request: AuthorizationRequest<'_>,
    ) -> Result<String, ProviderError> {
        let discovery = self.discovery().await?;
        let redirect = redirect_url(request.redirect_uri)?;
        // The scopes come configured with `openid`; do not let the library add it twice.
        let client = self
            .client(&discovery, request.client_id, None)
            .set_redirect_uri(redirect)
            .disable_openid_scope();
        let (state, nonce) = (request.state.to_owned(), request.nonce.to_owned());
        let verifier = PkceCodeVerifier::new(request.pkce_verifier.to_owned());
        let mut url = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                move || CsrfToken::new(state),
                move || Nonce::new(nonce),
            )
            .add_scopes(request.scopes.iter().cloned().map(Scope::new))
            .set_pkce_challenge(PkceCodeChallenge::from_code_verifier_sha256(&verifier));
        for (name, value) in request.extra {
            url = url.add_extra_param(name, value);
        }
        Ok(url.url().0.to_string())
    }

    /// Redeems an authorization code (with its PKCE verifier).
    pub async fn exchange_code(
        &self,
        code: &str,
        verifier: &str,
        redirect_uri: &str,
        client_id: &str,
        client_secret: Option<&str>,
    ) -> Result<Tokens, ProviderError> {
        let discovery = self.discovery().await?;
        let redirect = redirect_url(redirect_uri)?;
        let response = self
            .client(&discovery, client_id, client_secret)
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(configuration_error)?
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.to_owned()))
            .set_redirect_uri(Cow::Owned(redirect))
            .request_async(&self.http)
            .await
            .map_err(token_error)?;
        Ok(tokens(&response))
    }

    /// Redeems a refresh token (a public client: no secret).
    pub async fn refresh(&self, refresh_token: &str, client_id: &str) -> Result<Tokens, ProviderError> {
        let discovery = self.discovery().await?;
        let refresh_token = RefreshToken::new(refresh_token.to_owned());
        let response = self
            .client(&discovery, client_id, None)
            .exchange_refresh_token(&refresh_token)
            .map_err(configuration_error)?
            .request_async(&self.http)
            .await
            .map_err(token_error)?;
        Ok(tokens(&response))
    }

    /// The `groups` the user-info endpoint at `url` gives for an access
    /// token, which must be `subject`'s (`openidconnect` checks the `sub`).
    pub async fn user_info_groups(
        &self,
        url: &str,
        access_token: &str,
        subject: &str,
        client_id: &str,
    ) -> Result<Option<serde_json::Value>, ProviderError> {
        let discovery = self.discovery().await?;
        let url = UserInfoUrl::new(url.to_owned())
            .map_err(|e| ProviderError::BadAnswer(format!("the user-info URL {url:?} is not a URL: {e}")))?;
        let info: UserInfoClaims<GroupsClaim, CoreGenderClaim> = self
            .client(&discovery, client_id, None)
            .set_user_info_url(url)
            .user_info(
                AccessToken::new(access_token.to_owned()),
                Some(SubjectIdentifier::new(subject.to_owned())),
            )
            .request_async(&self.http)
            .await
            .map_err(|err| match err {
                UserInfoError::Request(err) => ProviderError::Unreachable(err),
                other => ProviderError::BadAnswer(format!("user info: {other}{}", source_text(&other))),
            })?;
        Ok(info.additional_claims().groups.clone())
    }

    /// The provider's end-session URL for RP-initiated logout, with the ID
    /// token as hint and where to come back to; `None` when it has none.
    pub async fn end_session_url(
        &self,
        id_token: &str,
        post_logout_redirect_uri: &str,
    ) -> Result<Option<String>, ProviderError> {
        let discovery = self.discovery().await?;
        let Some(endpoint) = discovery.additional_metadata().end_session_endpoint.clone() else {
            return Ok(None);
        };
        let mut request = LogoutRequest::from(endpoint);
        if let Ok(hint) = CoreIdToken::from_str(id_token) {
            request = request.set_id_token_hint(&hint);
        }
        if let Ok(back) = PostLogoutRedirectUrl::new(post_logout_redirect_uri.to_owned()) {
            request = request.set_post_logout_redirect_uri(back);
        }
        Ok(Some(request.http_get_url().to_string()))
    }

    /// Whether `offline_access` may be asked for (no `scopes_supported`, or listed there).
    pub async fn offers_offline_access(&self) -> Result<bool, ProviderError> {
        let discovery = self.discovery().await?;
        Ok(discovery
            .scopes_supported()
            .is_none_or(|scopes| scopes.is_empty() || scopes.iter().any(|s| s.as_str() == "offline_access")))
    }
}

fn redirect_url(uri: &str) -> Result<RedirectUrl, ProviderError> {
    RedirectUrl::new(uri.to_owned())
        .map_err(|e| ProviderError::BadAnswer(format!("the redirect URI {uri:?} is not a URL: {e}")))
}

pub(super) fn tokens(response: &CoreTokenResponse) -> Tokens {
    Tokens {
        id_token: response.id_token().map(ToString::to_string),
        access_token: response.access_token().secret().clone(),
        refresh_token: response.refresh_token().map(|t| t.secret().clone()),
    }
}

pub(super) fn configuration_error(err: ConfigurationError) -> ProviderError {
    ProviderError::BadAnswer(format!("the discovery document lacks what is needed: {err}"))
}

/// A token request's failure; of an OAuth error answer only its code (its
/// description is the provider's free text).
pub(super) fn token_error(
    err: RequestTokenError<HttpError, StandardErrorResponse<CoreErrorResponseType>>,
) -> ProviderError {
    match err {
        RequestTokenError::Request(err) => ProviderError::Unreachable(err),
        RequestTokenError::ServerResponse(answer) => ProviderError::Refused(
            safe_code(answer.error().as_ref()).unwrap_or_else(|| "an error".to_owned()),
        ),
        RequestTokenError::Parse(err, _) => {
            ProviderError::BadAnswer(format!("the token answer is not the JSON expected: {err}"))
        }
        RequestTokenError::Other(message) => ProviderError::BadAnswer(message),
    }
}

/// `: cause` of an error whose `Display` leaves its cause out.
fn source_text(err: &dyn std::error::Error) -> String {
    err.source().map(|s| format!(": {s}")).unwrap_or_default()
}

/// The issuer a discovery document named, from `openidconnect`'s mismatch
/// error (`unexpected issuer URI `<discovered>` (expected `<configured>`)`),
/// for the diagnostic below.
fn discovered_issuer<'a>(message: &'a str, configured: &str) -> Option<&'a str> {
    message
        .strip_prefix("unexpected issuer URI `")?
        .strip_suffix(&format!("` (expected `{configured}`)"))
}

/// The error for a discovery document naming another issuer, with a hint for
/// the two usual causes (AUTH-01).
fn issuer_mismatch(configured: &str, discovered: &str) -> ProviderError {
    let hint = if discovered.trim_end_matches('/') == configured.trim_end_matches('/') {
        " (they differ only in a trailing slash: write the issuer exactly as the provider does)"
    } else if discovered.split_once("://").map(|x| x.1) == configured.split_once("://").map(|x| x.1) {
        " (they differ in http vs https: a proxy in front of the provider may be rewriting the scheme)"
    } else {
        ""
    };
    ProviderError::IssuerMismatch {
        configured: configured.to_owned(),
        discovered: discovered.to_owned(),
        hint,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::convert::Infallible;

    use bytes::Bytes;
    use http_body_util::Full;
    use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
    use tokio::net::TcpListener;

    use super::*;

    /// Answers by path: status, content type, body; and counts the requests.
    #[derive(Default)]
    struct Routes {
        answers: HashMap<String, (u16, &'static str, String)>,
        hits: HashMap<String, usize>,
    }

    /// A loopback HTTP server playing the provider; returns its base URL.
    async fn serve(routes: Arc<Mutex<Routes>>) -> String {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let routes = Arc::clone(&routes);
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                            let routes = Arc::clone(&routes);
                            async move {
                                let mut routes = routes.lock().unwrap();
                                let path = req.uri().path().to_owned();
                                *routes.hits.entry(path.clone()).or_default() += 1;
                                let (status, content_type, body) = routes
                                    .answers
                                    .get(&path)
                                    .cloned()
                                    .unwrap_or((404, "text/plain", "not found".to_owned()));
                                let mut response = http::Response::new(Full::new(Bytes::from(body)));
                                *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
                                response
                                    .headers_mut()
                                    .insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
                                Ok::<_, Infallible>(response)
                            }
                        });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        base
    }

    fn discovery_doc(base: &str, issuer: &str) -> String {
        serde_json::json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{base}/auth?tenant=t1"),
            "token_endpoint": format!("{base}/token"),
            "jwks_uri": format!("{base}/jwks"),
            "userinfo_endpoint": format!("{base}/me"),
            "end_session_endpoint": format!("{base}/session/end"),
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
            "scopes_supported": ["openid", "email"],
        })
        .to_string()
    }

    struct Key {
        encoding: EncodingKey,
        kid: String,
        jwk: serde_json::Value,
    }

    fn key(kid: &str) -> Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let encoding = EncodingKey::from_ec_der(pkcs8.as_ref());
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.to_owned());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        Key {
            encoding,
            kid: kid.to_owned(),
            jwk: serde_json::to_value(jwk).unwrap(),
        }
    }

    fn token(key: &Key, issuer: &str) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        let now = jsonwebtoken::get_current_timestamp();
        let claims = serde_json::json!({"iss": issuer, "aud": "cd", "sub": "u", "iat": now, "exp": now + 60});
        jsonwebtoken::encode(&header, &claims, &key.encoding).unwrap()
    }

    async fn provider(issuer_path: &str, keys: &[&Key]) -> (Provider, Arc<Mutex<Routes>>, String) {
        let routes = Arc::new(Mutex::new(Routes::default()));
        let base = serve(Arc::clone(&routes)).await;
        let issuer = format!("{base}{issuer_path}");
        set_keys(&routes, keys);
        routes.lock().unwrap().answers.insert(
            "/.well-known/openid-configuration".into(),
            (200, "application/json", discovery_doc(&base, &base)),
        );
        (
            Provider::new(&issuer, Http::new(&[], false).unwrap()),
            routes,
            base,
        )
    }

    fn set_keys(routes: &Mutex<Routes>, keys: &[&Key]) {
        let jwks = serde_json::json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()});
        routes
            .lock()
            .unwrap()
            .answers
            .insert("/jwks".into(), (200, "application/json", jwks.to_string()));
    }

    fn hits(routes: &Mutex<Routes>, path: &str) -> usize {
        routes.lock().unwrap().hits.get(path).copied().unwrap_or(0)
    }

    fn expect<'a>(issuer: &'a str, aud: &'a [String]) -> Expect<'a> {
        Expect {
            issuer,
            audiences: aud,
            skip_audience_when_absent: false,
            nonce: None,
            now: jsonwebtoken::get_current_timestamp() as i64,
        }
    }

    #[tokio::test]
    async fn the_issuer_must_match_exactly_and_a_failure_is_remembered() {
        let k1 = key("k1");
        // Configured with a trailing slash the provider does not write.
        let (provider, routes, base) = provider("/", &[&k1]).await;
        let err = provider.discovery().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "the identity provider's discovery document names issuer \"{base}\", but oidc.config says \"{base}/\" \
                 (they differ only in a trailing slash: write the issuer exactly as the provider does)"
            )
        );
        // Within 5 s of the failure, no new request.
        assert!(matches!(
            provider.discovery().await,
            Err(ProviderError::RecentlyFailed)
        ));
        assert_eq!(hits(&routes, "/.well-known/openid-configuration"), 1);
        assert!(matches!(
            issuer_mismatch("https://idp", "http://idp"),
            ProviderError::IssuerMismatch { hint, .. } if hint.contains("http vs https")
        ));
    }

    #[tokio::test]
    async fn discovery_and_keys_are_cached_and_an_unknown_key_fetches_them_again_at_most_every_5_s() {
        let (k1, k2) = (key("k1"), key("k2"));
        let (provider, routes, base) = provider("", &[&k1]).await;
        let aud = vec!["cd".to_owned()];
        let claims = provider
            .verify(&token(&k1, &base), &expect(&base, &aud))
            .await
            .unwrap();
        assert_eq!(claims["sub"], "u");
        provider
            .verify(&token(&k1, &base), &expect(&base, &aud))
            .await
            .unwrap();
        assert_eq!(hits(&routes, "/.well-known/openid-configuration"), 1);
        // openidconnect's discovery reads the key set once, tiphys's cache once.
        assert_eq!(hits(&routes, "/jwks"), 2);

        // The provider rotates to k2. The fetch just made is too recent to repeat.
        set_keys(&routes, &[&k2]);
        let rotated = token(&k2, &base);
        let err = provider.verify(&rotated, &expect(&base, &aud)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "no signing key of the provider matches the token (kid \"k2\")"
        );
        assert_eq!(hits(&routes, "/jwks"), 2);
        tokio::time::sleep(JWKS_REFRESH_INTERVAL).await;
        provider.verify(&rotated, &expect(&base, &aud)).await.unwrap();
        assert_eq!(hits(&routes, "/jwks"), 3);

        // A foreign issuer costs no request at all.
        let err = provider
            .verify(&token(&k2, "https://evil"), &expect(&base, &aud))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ProviderError::Token(VerifyError::Issuer { .. })),
            "{err}"
        );
        assert_eq!(hits(&routes, "/jwks"), 3);
    }

    #[tokio::test]
    async fn the_authorization_url_carries_our_values_and_the_s256_challenge() {
        let k1 = key("k1");
        let (provider, _routes, base) = provider("", &[&k1]).await;
        let scopes = vec!["openid".to_owned(), "groups".to_owned()];
        let verifier = "v".repeat(64);
        let url = provider
            .authorization_url(AuthorizationRequest {
                client_id: "cd",
                redirect_uri: "https://cd.example/auth/callback",
                scopes: &scopes,
                state: "state-1",
                nonce: "nonce-1",
                pkce_verifier: &verifier,
                extra: vec![("domain_hint", "example.com".to_owned())],
            })
            .await
            .unwrap();
        assert!(url.starts_with(&format!("{base}/auth?tenant=t1&")), "{url}");
        let query: HashMap<String, String> = url::Url::parse(&url)
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
        let challenge = PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier));
        for (name, value) in [
            ("response_type", "code"),
            ("client_id", "cd"),
            ("redirect_uri", "https://cd.example/auth/callback"),
            ("scope", "openid groups"),
            ("state", "state-1"),
            ("nonce", "nonce-1"),
            ("code_challenge_method", "S256"),
            ("code_challenge", challenge.as_str()),
            ("domain_hint", "example.com"),
        ] {
            assert_eq!(
                query.get(name).map(String::as_str),
                Some(value),
                "{name} in {url}"
            );
        }
        assert!(!provider.offers_offline_access().await.unwrap());
        let logout = provider
            .end_session_url(&token(&k1, &base), "https://cd.example/")
            .await
            .unwrap()
            .unwrap();
        assert!(
            logout.starts_with(&format!("{base}/session/end?id_token_hint=eyJ")),
            "{logout}"
        );
        assert!(
            logout.ends_with("&post_logout_redirect_uri=https%3A%2F%2Fcd.example%2F"),
            "{logout}"
        );
    }

    #[tokio::test]
    async fn token_and_user_info_answers_are_read_and_their_errors_named() {
        let k1 = key("k1");
        let (provider, routes, base) = provider("", &[&k1]).await;
        let id_token = token(&k1, &base);
        let answer = serde_json::json!({"access_token": "at", "token_type": "Bearer", "id_token": id_token, "refresh_token": "rt"});
        routes
            .lock()
            .unwrap()
            .answers
            .insert("/token".into(), (200, "application/json", answer.to_string()));
        let tokens = provider
            .exchange_code(
                "code",
                &"v".repeat(64),
                "https://cd/auth/callback",
                "cd",
                Some("secret"),
            )
            .await
            .unwrap();
        assert_eq!(
            tokens.id_token.as_deref(),
            Some(id_token.as_str()),
            "the ID token as written"
        );
        assert_eq!(
            (tokens.access_token.as_str(), tokens.refresh_token.as_deref()),
            ("at", Some("rt"))
        );

        routes.lock().unwrap().answers.insert(
            "/token".into(),
            (
                400,
                "application/json",
                r#"{"error":"invalid_grant","error_description":"<b>nope</b>"}"#.into(),
            ),
        );
        let err = provider.refresh("rt", "cd-cli").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the identity provider refused the request (invalid_grant)"
        );

        let me = serde_json::json!({"sub": "u", "groups": ["extra"]}).to_string();
        routes
            .lock()
            .unwrap()
            .answers
            .insert("/me".into(), (200, "application/json", me));
        let url = format!("{base}/me");
        let groups = provider.user_info_groups(&url, "at", "u", "cd").await.unwrap();
        assert_eq!(groups, Some(serde_json::json!(["extra"])));
        // An answer about someone else is refused.
        assert!(provider.user_info_groups(&url, "at", "v", "cd").await.is_err());

        // Answers are capped.
        routes.lock().unwrap().answers.insert(
            "/big".into(),
            (
                200,
                "application/json",
                format!("\"{}\"", "x".repeat(super::super::http::MAX_BODY_BYTES)),
            ),
        );
        let err = provider
            .http()
            .get_json::<serde_json::Value>(&format!("{base}/big"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("reading the answer"), "{err}");
    }

    #[tokio::test]
    async fn a_provider_that_is_down_is_unreachable() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let issuer = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        drop(listener);
        let provider = Provider::new(&issuer, Http::new(&[], false).unwrap());
        let err = provider.discovery().await.unwrap_err();
        assert!(matches!(err, ProviderError::Unreachable(_)), "{err}");
        assert!(
            err.to_string().starts_with(&format!(
                "the identity provider cannot be reached: {issuer}/.well-known/openid-configuration: "
            )),
            "{err}"
        );
    }
}
