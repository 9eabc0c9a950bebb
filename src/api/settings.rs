use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use super::extract::Who;
use crate::app::App;
use crate::service::settings::{PublicSettings, SettingsSource, settings};

/// `GET /api/v1/settings`
pub async fn get_settings(State(state): State<Arc<App>>, Who(caller, _): Who) -> Json<PublicSettings> {
    Json(settings(&SettingsSource::of(&state), &caller.principal))
}
