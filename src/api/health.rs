use std::sync::Arc;

use axum::extract::State;
use http::StatusCode;

use crate::state::ServerState;

/// `GET /healthz`: `ok` while serving; 503 with the reason once shutting down, so a load
/// balancer drains this replica. While a shared store (etcd) cannot be followed the replica
/// still answers reads, so it stays in rotation (200) and says what is degraded.
pub async fn healthz(State(state): State<Arc<ServerState>>) -> (StatusCode, String) {
    if !state.drain.is_serving() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".to_owned());
    }
    match state.registry.degraded() {
        Some(why) => (StatusCode::OK, format!("degraded: {why}\n")),
        None => (StatusCode::OK, "ok\n".to_owned()),
    }
}
