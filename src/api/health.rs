use std::sync::Arc;

use axum::extract::State;
use http::StatusCode;

use crate::app::App;

/// `GET /healthz`: `ok` while serving; 503 with the reason once shutting down,
/// so a load balancer drains this replica.
pub async fn healthz(State(state): State<Arc<App>>) -> (StatusCode, &'static str) {
    if state.is_serving() {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    }
}
