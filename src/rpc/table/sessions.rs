//! `version.VersionService`, `cluster.SettingsService` and `session.SessionService`: what a
//! client asks before and while logging in.

use std::sync::Arc;

use super::{delete, get, post, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::{session, settings, version};

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/version.VersionService/Version",
            [get("/api/version")],
            call(version::version),
        ),
        rpc(
            "/cluster.SettingsService/Get",
            [get("/api/v1/settings")],
            call(settings::get),
        ),
        rpc(
            "/cluster.SettingsService/GetPlugins",
            [get("/api/v1/settings/plugins")],
            call(settings::get_plugins),
        ),
        rpc(
            "/session.SessionService/GetUserInfo",
            [get("/api/v1/session/userinfo")],
            call(session::get_user_info),
        ),
        rpc(
            "/session.SessionService/Create",
            [post("/api/v1/session", Body::All)],
            call(session::create),
        ),
        rpc(
            "/session.SessionService/Delete",
            [delete("/api/v1/session")],
            call(session::delete),
        ),
    ]
}
