//! `/swagger.json` (the OpenAPI document, `super::openapi`) and `/swagger-ui` (Swagger UI,
//! embedded from npm's `swagger-ui-dist` by `build.rs`), served without a session, as upstream
//! serves its own. The page loads everything from files beside it, so it works under the
//! default Content-Security-Policy (no inline script) and under `--rootpath` (relative URLs).

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, StatusCode};

use crate::error::rest_error;

const PAGE: &str = include_str!("swagger-ui/index.html");
const INIT: &str = include_str!("swagger-ui/init.js");
const BUNDLE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/swagger-ui/swagger-ui-bundle.js"));
const CSS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/swagger-ui/swagger-ui.css"));

/// The routes, with the document built once, now, for a server under `rootpath`.
pub fn router(rootpath: &str) -> Router {
    let doc = Bytes::from(
        serde_json::to_vec(&super::openapi::document(&crate::rpc::table(), rootpath)).unwrap_or_default(),
    );
    Router::new()
        .route(
            "/swagger.json",
            get(move || {
                let doc = doc.clone();
                async move { file("application/json", doc) }
            }),
        )
        .route(
            "/swagger-ui",
            get(|| async { file("text/html; charset=utf-8", Bytes::from_static(PAGE.as_bytes())) }),
        )
        .route(
            "/swagger-ui/init.js",
            get(|| async { file("text/javascript", Bytes::from_static(INIT.as_bytes())) }),
        )
        .route(
            "/swagger-ui/swagger-ui-bundle.js",
            get(|| async { file("text/javascript", Bytes::from_static(BUNDLE)) }),
        )
        .route(
            "/swagger-ui/swagger-ui.css",
            get(|| async { file("text/css", Bytes::from_static(CSS)) }),
        )
}

fn file(content_type: &'static str, body: Bytes) -> Response {
    // A build without npm (a prebuilt UI in TIPHYS_WEB_DIST) has no Swagger UI files.
    if body.is_empty() {
        return rest_error(
            tonic::Code::NotFound,
            StatusCode::NOT_FOUND,
            "this build of tiphys has no Swagger UI (built without npm); /swagger.json is served",
        );
    }
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
