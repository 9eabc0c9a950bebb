//! Extractors shared by the REST handlers: the caller, how they
//! authenticated, and JSON bodies with errors in the API's own shape.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use serde::de::DeserializeOwned;

use crate::auth::cookie::CookieScope;
use crate::error::AppError;
pub use crate::principal::AuthInfo;
use crate::principal::Caller;
use crate::principal::{ClientScheme, RequestContext};

/// The caller of this request (anonymous if the dispatcher did not say).
pub struct Who(pub Caller, pub AuthInfo);

impl<S: Send + Sync> FromRequestParts<S> for Who {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let caller = RequestContext::caller_of(&parts.extensions);
        let info = parts
            .extensions
            .get::<RequestContext>()
            .map(|c| c.auth)
            .unwrap_or_default();
        Ok(Self(caller, info))
    }
}

/// Session cookies are scoped to the base href and `Secure` whenever the
/// client reached us over https (directly or through a trusted proxy).
pub struct Scope(pub CookieScope);

impl FromRequestParts<std::sync::Arc<crate::app::App>> for Scope {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &std::sync::Arc<crate::app::App>,
    ) -> Result<Self, Self::Rejection> {
        let secure = parts
            .extensions
            .get::<RequestContext>()
            .is_some_and(|c| c.scheme == ClientScheme::Https);
        Ok(Self(CookieScope {
            path: state.basehref.clone(),
            secure,
        }))
    }
}

/// A JSON body; a bad one is a 400 that says what is wrong.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rejection| {
                // The body limit is the only way reading can fail short of a broken connection.
                let status = rejection.status();
                if status == http::StatusCode::PAYLOAD_TOO_LARGE {
                    AppError::PayloadTooLarge("request body is too large".to_owned()).into_response()
                } else {
                    AppError::InvalidArgument(format!("cannot read the request body: {rejection}"))
                        .into_response()
                }
            })?;
        let body: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(body)
            .map(Self)
            .map_err(|err| AppError::InvalidArgument(format!("invalid JSON body: {err}")).into_response())
    }
}
