//! CSRF defence for REST: a state-changing call that a browser could have
//! sent cross-site (anything not authenticated by a bearer token) must carry
//! an allowed `Content-Type`. A cross-site form or `fetch` without CORS
//! preflight can only send `text/plain`, form or multipart bodies, so it is
//! refused before any handler runs. The media type is compared without
//! parameters (`application/json; charset=utf-8` is JSON).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::Method;

use crate::auth::Carrier;
use crate::error::AppError;
use crate::principal::{Caller, Credentials};
use crate::server::protocol::media_type;
use crate::server::state::AppState;

use super::extract::AuthInfo;

pub async fn enforce_content_type(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    // Only a bearer token that verified exempts the call: a browser cannot
    // be made to send one, but anyone can send a bogus one.
    let bearer = req
        .extensions()
        .get::<AuthInfo>()
        .is_some_and(|a| a.carrier == Some(Carrier::Bearer))
        && req
            .extensions()
            .get::<Caller>()
            .is_some_and(|c| matches!(c.credentials, Credentials::Valid(_)));
    if safe || bearer || state.api_content_types.is_empty() || !req.uri().path().starts_with("/api/") {
        return next.run(req).await;
    }
    let media = media_type(req.headers());
    if media
        .as_deref()
        .is_some_and(|m| state.api_content_types.iter().any(|a| a == m))
    {
        return next.run(req).await;
    }
    AppError::UnsupportedMediaType(format!(
        "unsupported content type {}: use {}",
        media
            .as_deref()
            .map_or_else(|| "(none)".to_owned(), |m| format!("{m:?}")),
        state.api_content_types.join(" or ")
    ))
    .into_response()
}
