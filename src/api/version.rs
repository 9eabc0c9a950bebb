use axum::Extension;
use axum::Json;

use crate::principal::Principal;
use crate::service::version::{VersionInfo, version};

/// `GET /api/version`
pub async fn get_version(principal: Option<Extension<Principal>>) -> Json<VersionInfo> {
    let principal = principal.map(|Extension(p)| p).unwrap_or_default();
    Json(version(&principal))
}
