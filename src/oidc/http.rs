//! The HTTP client that talks to the identity provider: TLS always verified
//! (system roots plus `rootCA`) unless `oidc.tls.insecure.skip.verify` says
//! otherwise, a time limit on every call and a cap on every answer.
//!
//! It is the only HTTP client of the OIDC code: `openidconnect` makes its
//! requests (discovery, token, user info) through it as its
//! [`AsyncHttpClient`], so there is no reqwest and no second TLS stack, and
//! the same trust settings apply to logins and to API token checks (SEC-03).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use openidconnect::{AsyncHttpClient, HttpRequest, HttpResponse};
use rustls_pki_types::CertificateDer;
use serde::de::DeserializeOwned;

use crate::tlsclient;

/// Longest any call to the provider may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read from the provider.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Why a call failed. The texts name the URL and the cause, never a
/// credential (those travel in headers and bodies, which are not quoted).
#[derive(Debug, Clone, thiserror::Error)]
pub enum HttpError {
    #[error("{url}: no answer within {} s", CALL_TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("{url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("{url}: HTTP {status}{detail}")]
    Status {
        url: String,
        status: u16,
        detail: String,
    },
    #[error("{url}: the answer is not the JSON expected: {reason}")]
    Json { url: String, reason: String },
    #[error("{0:?} is not a usable URL")]
    Url(String),
}

#[derive(Clone)]
pub struct Http {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http").finish_non_exhaustive()
    }
}

impl Http {
    /// A client trusting the system's roots plus `extra_roots`; with
    /// `skip_verify`, none at all (the operator asked for it by name).
    pub fn new(extra_roots: &[CertificateDer<'static>], skip_verify: bool) -> Result<Self, String> {
        let tls = if skip_verify {
            tlsclient::insecure().map_err(|e| e.to_string())?
        } else {
            let roots = tlsclient::roots(extra_roots)
                .map_err(|e| format!("rootCA holds an unusable certificate: {e}"))?;
            tlsclient::verifying(roots).map_err(|e| e.to_string())?
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(https);
        Ok(Self { client })
    }

    /// GET a JSON document (the provider's key set); anything but 200 is an error.
    pub async fn get_json<T: DeserializeOwned>(&self, url: &str) -> Result<T, HttpError> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(url)
            .header(ACCEPT, "application/json")
            .body(Vec::new())
            .map_err(|_| HttpError::Url(url.to_owned()))?;
        let response = self.send(request).await?;
        if response.status() != StatusCode::OK {
            return Err(HttpError::Status {
                url: url.to_owned(),
                status: response.status().as_u16(),
                detail: oauth_error(response.body()),
            });
        }
        serde_json::from_slice(response.body()).map_err(|e| HttpError::Json {
            url: url.to_owned(),
            reason: e.to_string(),
        })
    }

    /// One call, whatever the status of its answer (OAuth errors come as
    /// 400s with a body `openidconnect` reads): at most [`MAX_BODY_BYTES`],
    /// within [`CALL_TIMEOUT`].
    pub async fn send(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let url = request.uri().to_string();
        let (mut parts, body) = request.into_parts();
        parts.headers.insert(
            USER_AGENT,
            http::HeaderValue::from_static(crate::buildinfo::USER_AGENT),
        );
        let request = Request::from_parts(parts, Full::new(Bytes::from(body)));
        let work = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| HttpError::Connect {
                    url: url.clone(),
                    reason: crate::error::with_causes(&e),
                })?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| HttpError::Connect {
                    url: url.clone(),
                    reason: format!("reading the answer: {e}"),
                })?
                .to_bytes();
            Ok(http::Response::from_parts(parts, body.to_vec()))
        };
        tokio::time::timeout(CALL_TIMEOUT, work)
            .await
            .map_err(|_| HttpError::Timeout { url: url.clone() })?
    }
}

/// `openidconnect` sends its requests through [`Http::send`].
impl<'c> AsyncHttpClient<'c> for Http {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

/// ` (invalid_grant)` from an OAuth error answer (RFC 6749 §5.2), for logs.
pub fn oauth_error(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct OAuthError {
        error: String,
    }
    serde_json::from_slice::<OAuthError>(body)
        .ok()
        .and_then(|e| safe_code(&e.error))
        .map(|code| format!(" ({code})"))
        .unwrap_or_default()
}

/// An error code fit for a log line or a terminal: short and plain.
pub fn safe_code(code: &str) -> Option<String> {
    (code.len() < 64 && code.chars().all(|c| c.is_ascii_graphic())).then(|| code.to_owned())
}
