use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};

use crate::principal::Principal;
use crate::server::state::AppState;
use crate::service::settings::{PublicSettings, settings};

/// `GET /api/v1/settings`
pub async fn get_settings(
    State(state): State<Arc<AppState>>,
    principal: Option<Extension<Principal>>,
) -> Json<PublicSettings> {
    let principal = principal.map(|Extension(p)| p).unwrap_or_default();
    Json(settings(&state.settings, &principal))
}
