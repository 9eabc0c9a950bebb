//! The HTTP router for everything that is not gRPC: REST (`/api/…`), health and
//! `/auth/…`; the server adds the dashboard as its fallback.

pub mod auth;
mod badge;
pub mod cookies;
pub(crate) mod dynamic;
pub mod extract;
mod fields;
mod health;
pub(crate) mod openapi;
mod swagger;
pub mod webhook;

use std::sync::Arc;

use axum::Router;
use axum::response::Response;
use axum::routing::{any, get, post};
use http::StatusCode;

use crate::error::rest_error;
use crate::state::ServerState;

/// The REST API, `/auth/…`, `/healthz`, `/swagger.json` and `/swagger-ui` (for a server under
/// `rootpath`); the caller adds the fallback (the dashboard).
pub fn router(state: Arc<ServerState>, rootpath: &str) -> Router {
    // Written out, as FIXED_ROUTES lists them (the e2e route census reads these lines).
    let api = Router::new()
        .route("/auth/logout", get(auth::logout).post(auth::logout))
        .route("/auth/login", get(auth::login))
        .route("/auth/callback", get(auth::callback))
        .route("/healthz", get(health::healthz))
        .route("/api/badge", get(badge::badge))
        .route("/api/webhook", post(webhook::webhook));
    dynamic::routes(api, &crate::rpc::table())
        .route("/api", any(not_found))
        .route("/api/{*rest}", any(not_found))
        .route("/auth/{*rest}", any(not_found))
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .merge(swagger::router(rootpath))
}

/// The routes written in [`router`]; the method table has the rest.
const FIXED_ROUTES: [&str; 6] = [
    "/auth/logout",
    "/auth/login",
    "/auth/callback",
    "/healthz",
    "/api/badge",
    webhook::PATH,
];

/// Every REST route as the router matches it (an axum template), with its label: the
/// template as the method table writes it. The catch-alls are left out: they are `other`.
pub fn route_templates(rpcs: &[Arc<crate::rpc::Rpc>]) -> Vec<(String, &'static str)> {
    let fixed = FIXED_ROUTES.iter().map(|path| ((*path).to_owned(), *path));
    fixed.chain(dynamic::templates(rpcs)).collect()
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
