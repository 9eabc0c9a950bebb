use axum::Json;

use super::extract::Who;
use crate::service::version::{VersionInfo, version};

/// `GET /api/version`
pub async fn get_version(Who(caller, _): Who) -> Json<VersionInfo> {
    Json(version(&caller.principal))
}
