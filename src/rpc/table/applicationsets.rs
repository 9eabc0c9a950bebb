//! `applicationset.ApplicationSetService`.

use std::sync::Arc;

use super::{delete, get, post, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::applicationset as appset;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/applicationset.ApplicationSetService/Get",
            [get("/api/v1/applicationsets/{name}")],
            call(appset::get),
        ),
        rpc(
            "/applicationset.ApplicationSetService/Generate",
            [post("/api/v1/applicationsets/generate", Body::All)],
            call(appset::generate),
        ),
        rpc(
            "/applicationset.ApplicationSetService/List",
            [get("/api/v1/applicationsets")],
            call(appset::list),
        ),
        rpc(
            "/applicationset.ApplicationSetService/Create",
            [post("/api/v1/applicationsets", Body::Field("applicationset"))],
            call(appset::create),
        ),
        rpc(
            "/applicationset.ApplicationSetService/Delete",
            [delete("/api/v1/applicationsets/{name}")],
            call(appset::delete),
        ),
        rpc(
            "/applicationset.ApplicationSetService/ResourceTree",
            [get("/api/v1/applicationsets/{name}/resource-tree")],
            call(appset::resource_tree),
        ),
        rpc(
            "/applicationset.ApplicationSetService/ListResourceEvents",
            [get("/api/v1/applicationsets/{name}/events")],
            call(appset::list_events),
        ),
        rpc(
            "/applicationset.ApplicationSetService/Watch",
            [get("/api/v1/stream/applicationsets")],
            call(appset::watch),
        ),
    ]
}
