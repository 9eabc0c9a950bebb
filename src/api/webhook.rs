//! `POST /api/webhook`: git push events from GitHub, GitLab, Bitbucket, Gogs and Azure DevOps
//! (`service::webhook` verifies and acts on them). A provider authenticates with the signature
//! over the body, not with a session, so the dispatcher lets this route read a body of up to
//! `--max-body-bytes` without one.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};

use crate::principal::BodyRefused;
use crate::service::webhook;
use crate::state::ServerState;

/// The route, as the dispatcher knows it (after the root path is stripped).
pub const PATH: &str = "/api/webhook";

pub async fn webhook(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: Body) -> Response {
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(err) => return BodyRefused::app_error(&err).into_response(),
    };
    let headers: webhook::Headers = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    match webhook::handle(&state, &headers, &body).await {
        Ok(outcome) => {
            if !outcome.refreshed.is_empty() {
                tracing::info!(applications = ?outcome.refreshed, "webhook: refresh requested");
            }
            StatusCode::OK.into_response()
        }
        Err(err) => {
            // Anyone may send these: at debug level, so that they cannot flood the log.
            tracing::debug!("webhook refused: {err}");
            err.into_response()
        }
    }
}
