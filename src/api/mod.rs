//! The HTTP router for everything that is not gRPC: REST (`/api/…`), health and
//! `/auth/…`; the server adds the dashboard as its fallback.

mod account;
pub mod auth;
pub mod cookies;
mod dynamic;
pub mod extract;
mod fields;
mod health;
mod session;
mod settings;
mod version;

use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::{any, delete, get, post, put};
use http::StatusCode;

use crate::app::App;
use crate::error::rest_error;

/// The REST API, `/auth/…` and `/healthz`; the caller adds the fallback (the dashboard).
pub fn router(state: Arc<App>) -> Router {
    let api = Router::new()
        .route("/api/version", get(version::get_version))
        .route("/api/v1/settings", get(settings::get_settings))
        .route("/api/v1/session", post(session::create).delete(session::delete))
        .route("/api/v1/session/userinfo", get(session::user_info))
        .route("/api/v1/account", get(account::list))
        .route("/api/v1/account/password", put(account::update_password))
        .route(
            "/api/v1/account/can-i/{resource}/{action}/{*subresource}",
            get(account::can_i),
        )
        .route(
            "/api/v1/account/can-i/{resource}/{action}",
            get(account::can_i_without_object),
        )
        .route(
            "/api/v1/account/can-i/{resource}/{action}/",
            get(account::can_i_without_object),
        )
        .route("/api/v1/account/{name}", get(account::get))
        .route("/api/v1/account/{name}/token", post(account::create_token))
        .route("/api/v1/account/{name}/token/{id}", delete(account::delete_token))
        .route("/auth/logout", get(auth::logout).post(auth::logout))
        .route("/auth/login", get(auth::login))
        .route("/auth/callback", get(auth::callback))
        .route("/healthz", get(health::healthz));
    dynamic::routes(api, &crate::rpc::table())
        .route("/api", any(not_found))
        .route("/api/{*rest}", any(not_found))
        .route("/auth/{*rest}", any(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
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
