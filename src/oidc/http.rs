//! The HTTP client that talks to the identity provider: TLS always verified
//! (system roots plus `rootCA`) unless `oidc.tls.insecure.skip.verify` says
//! otherwise, a time limit on every call and a cap on every answer.

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls_pki_types::CertificateDer;
use serde::de::DeserializeOwned;

/// Longest any call to the provider may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read from the provider.
const MAX_BODY_BYTES: usize = 1024 * 1024;

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
            crate::tlsclient::insecure().map_err(|e| e.to_string())?
        } else {
            let roots = crate::tlsclient::roots(extra_roots)
                .map_err(|e| format!("rootCA holds an unusable certificate: {e}"))?;
            crate::tlsclient::verifying(roots).map_err(|e| e.to_string())?
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

    /// GET a JSON document, with an optional bearer token.
    pub async fn get_json<T: DeserializeOwned>(
        &self,
        url: &str,
        bearer: Option<&str>,
    ) -> Result<T, HttpError> {
        let mut req = Request::builder().method(Method::GET).uri(url);
        if let Some(token) = bearer {
            req = req.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = self.call(url, req, Bytes::new()).await?;
        json(url, &body)
    }

    /// POST a form (`application/x-www-form-urlencoded`) and read a JSON answer;
    /// `basic` authenticates a confidential client (RFC 6749 §2.3.1).
    pub async fn post_form<T: DeserializeOwned>(
        &self,
        url: &str,
        form: &[(&str, &str)],
        basic: Option<(&str, &str)>,
    ) -> Result<T, HttpError> {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(url)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some((id, secret)) = basic {
            let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(id), enc(secret));
            let value = base64::engine::general_purpose::STANDARD.encode(pair);
            req = req.header(AUTHORIZATION, format!("Basic {value}"));
        }
        let answer = self.call(url, req, Bytes::from(body)).await?;
        json(url, &answer)
    }

    async fn call(&self, url: &str, req: http::request::Builder, body: Bytes) -> Result<Bytes, HttpError> {
        let req = req
            .header(ACCEPT, "application/json")
            .header(USER_AGENT, crate::buildinfo::USER_AGENT)
            .body(Full::new(body))
            .map_err(|_| HttpError::Url(url.to_owned()))?;
        let work = async {
            let response = self.client.request(req).await.map_err(|e| HttpError::Connect {
                url: url.to_owned(),
                reason: crate::error::with_causes(&e),
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| HttpError::Connect {
                    url: url.to_owned(),
                    reason: format!("reading the answer: {e}"),
                })?
                .to_bytes();
            if status != StatusCode::OK {
                return Err(HttpError::Status {
                    url: url.to_owned(),
                    status: status.as_u16(),
                    detail: oauth_error(&body),
                });
            }
            Ok(body)
        };
        tokio::time::timeout(CALL_TIMEOUT, work)
            .await
            .map_err(|_| HttpError::Timeout { url: url.to_owned() })?
    }
}

fn json<T: DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, HttpError> {
    serde_json::from_slice(body).map_err(|e| HttpError::Json {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

/// `: invalid_grant` from an OAuth error answer (RFC 6749 §5.2), for logs.
fn oauth_error(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct OAuthError {
        error: String,
    }
    serde_json::from_slice::<OAuthError>(body)
        .ok()
        .filter(|e| e.error.len() < 64 && e.error.chars().all(|c| c.is_ascii_graphic()))
        .map(|e| format!(" ({})", e.error))
        .unwrap_or_default()
}
