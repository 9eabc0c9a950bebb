//! `cluster.ClusterService`.

use std::sync::Arc;

use super::{delete, get, post, put, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::cluster;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/cluster.ClusterService/List",
            [get("/api/v1/clusters")],
            call(cluster::list_clusters),
        ),
        rpc(
            "/cluster.ClusterService/Create",
            [post("/api/v1/clusters", Body::Field("cluster"))],
            call(cluster::create),
        ),
        rpc(
            "/cluster.ClusterService/Get",
            [get("/api/v1/clusters/{id.value}")],
            call(cluster::get),
        ),
        rpc(
            "/cluster.ClusterService/Update",
            [put("/api/v1/clusters/{id.value}", Body::Field("cluster"))],
            call(cluster::update),
        ),
        rpc(
            "/cluster.ClusterService/Delete",
            [delete("/api/v1/clusters/{id.value}")],
            call(cluster::delete),
        ),
        rpc(
            "/cluster.ClusterService/RotateAuth",
            [post("/api/v1/clusters/{id.value}/rotate-auth", Body::None)],
            call(cluster::rotate_auth),
        ),
        rpc(
            "/cluster.ClusterService/InvalidateCache",
            [post("/api/v1/clusters/{id.value}/invalidate-cache", Body::None)],
            call(cluster::invalidate_cache),
        ),
    ]
}
