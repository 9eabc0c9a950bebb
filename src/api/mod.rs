//! The HTTP router for everything that is not gRPC: REST (`/api/…`), health,
//! auth endpoints (later issues) and, as the fallback, the UI.

mod health;
mod settings;
mod version;

use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::{any, get};
use http::StatusCode;

use crate::error::rest_error;
use crate::server::state::AppState;
use crate::ui::Ui;

pub fn router(state: Arc<AppState>, ui: Arc<Ui>) -> Router {
    let api = Router::new()
        .route("/api/version", get(version::get_version))
        .route("/api/v1/settings", get(settings::get_settings))
        .route("/healthz", get(health::healthz))
        .route("/api", any(not_found))
        .route("/api/{*rest}", any(not_found))
        .route("/auth/{*rest}", any(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state);
    api.fallback_service(crate::ui::router(ui))
}

async fn not_found() -> Response {
    rest_error(tonic::Code::NotFound, StatusCode::NOT_FOUND, "Not Found")
}

async fn method_not_allowed() -> Response {
    rest_error(
        tonic::Code::Unimplemented,
        StatusCode::METHOD_NOT_ALLOWED,
        "Method Not Allowed",
    )
}
