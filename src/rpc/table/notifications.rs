//! `notification.NotificationService`: the names in `argocd-notifications-cm`.

use std::sync::Arc;

use super::{get, rpc};
use crate::rpc::{Rpc, call};
use crate::service::notification;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/notification.NotificationService/ListTriggers",
            [get("/api/v1/notifications/triggers")],
            call(notification::list_triggers),
        ),
        rpc(
            "/notification.NotificationService/ListServices",
            [get("/api/v1/notifications/services")],
            call(notification::list_services),
        ),
        rpc(
            "/notification.NotificationService/ListTemplates",
            [get("/api/v1/notifications/templates")],
            call(notification::list_templates),
        ),
    ]
}
