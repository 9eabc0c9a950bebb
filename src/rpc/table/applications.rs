//! `application.ApplicationService`.

use std::sync::Arc;

use super::{delete, get, patch, post, put, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::application as app;
use crate::service::application::source;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/application.ApplicationService/List",
            [get("/api/v1/applications")],
            call(app::list),
        ),
        rpc(
            "/application.ApplicationService/Watch",
            [get("/api/v1/stream/applications")],
            call(app::watch),
        ),
        rpc(
            "/application.ApplicationService/Create",
            [post("/api/v1/applications", Body::Field("application"))],
            call(app::create),
        ),
        rpc(
            "/application.ApplicationService/Get",
            [get("/api/v1/applications/{name}")],
            call(app::get),
        ),
        rpc(
            "/application.ApplicationService/GetApplicationSyncWindows",
            [get("/api/v1/applications/{name}/syncwindows")],
            call(app::sync_windows),
        ),
        rpc(
            "/application.ApplicationService/Update",
            [put(
                "/api/v1/applications/{application.metadata.name}",
                Body::Field("application"),
            )],
            call(app::update),
        ),
        rpc(
            "/application.ApplicationService/UpdateSpec",
            [put("/api/v1/applications/{name}/spec", Body::Field("spec"))],
            call(app::update_spec),
        ),
        rpc(
            "/application.ApplicationService/Patch",
            [patch("/api/v1/applications/{name}", Body::All)],
            call(app::patch),
        ),
        rpc(
            "/application.ApplicationService/Delete",
            [delete("/api/v1/applications/{name}")],
            call(app::delete),
        ),
        rpc(
            "/application.ApplicationService/Sync",
            [post("/api/v1/applications/{name}/sync", Body::All)],
            call(app::sync),
        ),
        rpc(
            "/application.ApplicationService/TerminateOperation",
            [delete("/api/v1/applications/{name}/operation")],
            call(app::terminate_operation),
        ),
        rpc(
            "/application.ApplicationService/ResourceTree",
            [get("/api/v1/applications/{applicationName}/resource-tree")],
            call(app::resource_tree),
        ),
        rpc(
            "/application.ApplicationService/WatchResourceTree",
            [get("/api/v1/stream/applications/{applicationName}/resource-tree")],
            call(app::watch_resource_tree),
        ),
        rpc(
            "/application.ApplicationService/ListResourceEvents",
            [get("/api/v1/applications/{name}/events")],
            call(app::list_events),
        ),
        rpc(
            "/application.ApplicationService/ListLinks",
            [get("/api/v1/applications/{name}/links")],
            call(app::list_links),
        ),
        rpc(
            "/application.ApplicationService/RevisionMetadata",
            [get("/api/v1/applications/{name}/revisions/{revision}/metadata")],
            call(source::revision_metadata),
        ),
        rpc(
            "/application.ApplicationService/RevisionChartDetails",
            [get(
                "/api/v1/applications/{name}/revisions/{revision}/chartdetails",
            )],
            call(source::revision_chart_details),
        ),
        rpc(
            "/application.ApplicationService/GetOCIMetadata",
            [get(
                "/api/v1/applications/{name}/revisions/{revision}/ocimetadata",
            )],
            call(source::oci_metadata),
        ),
        rpc(
            "/application.ApplicationService/GetManifests",
            [get("/api/v1/applications/{name}/manifests")],
            call(source::manifests),
        ),
        rpc(
            "/application.ApplicationService/GetManifestsWithFiles",
            [post("/api/v1/applications/manifestsWithFiles", Body::All)],
            call(source::manifests_with_files),
        ),
        rpc(
            "/application.ApplicationService/ManagedResources",
            [get("/api/v1/applications/{applicationName}/managed-resources")],
            call(app::managed_resources),
        ),
        rpc(
            "/application.ApplicationService/ServerSideDiff",
            [get("/api/v1/applications/{appName}/server-side-diff")],
            call(app::server_side_diff),
        ),
        rpc(
            "/application.ApplicationService/Rollback",
            [post("/api/v1/applications/{name}/rollback", Body::All)],
            call(app::rollback),
        ),
        rpc(
            "/application.ApplicationService/GetResource",
            [get("/api/v1/applications/{name}/resource")],
            call(app::get_resource),
        ),
        rpc(
            "/application.ApplicationService/PatchResource",
            [post("/api/v1/applications/{name}/resource", Body::Field("patch"))],
            call(app::patch_resource),
        ),
        rpc(
            "/application.ApplicationService/ListResourceActions",
            [get("/api/v1/applications/{name}/resource/actions")],
            call(app::list_resource_actions),
        ),
        rpc(
            "/application.ApplicationService/RunResourceAction",
            [post(
                "/api/v1/applications/{name}/resource/actions",
                Body::Field("action"),
            )],
            call(app::run_resource_action),
        ),
        rpc(
            "/application.ApplicationService/RunResourceActionV2",
            [post("/api/v1/applications/{name}/resource/actions/v2", Body::All)],
            call(app::run_resource_action_v2),
        ),
        rpc(
            "/application.ApplicationService/DeleteResource",
            [delete("/api/v1/applications/{name}/resource")],
            call(app::delete_resource),
        ),
        rpc(
            "/application.ApplicationService/PodLogs",
            [
                get("/api/v1/applications/{name}/pods/{podName}/logs"),
                get("/api/v1/applications/{name}/logs"),
            ],
            call(app::pod_logs),
        ),
        rpc(
            "/application.ApplicationService/ListResourceLinks",
            [get("/api/v1/applications/{name}/resource/links")],
            call(app::list_resource_links),
        ),
    ]
}
