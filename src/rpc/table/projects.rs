//! `project.ProjectService`.

use std::sync::Arc;

use super::{delete, get, post, put, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::project;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/project.ProjectService/CreateToken",
            [post("/api/v1/projects/{project}/roles/{role}/token", Body::All)],
            call(project::create_token),
        ),
        rpc(
            "/project.ProjectService/DeleteToken",
            [delete("/api/v1/projects/{project}/roles/{role}/token/{iat}")],
            call(project::delete_token),
        ),
        rpc(
            "/project.ProjectService/Create",
            [post("/api/v1/projects", Body::All)],
            call(project::create),
        ),
        rpc(
            "/project.ProjectService/List",
            [get("/api/v1/projects")],
            call(project::list),
        ),
        rpc(
            "/project.ProjectService/GetDetailedProject",
            [get("/api/v1/projects/{name}/detailed")],
            call(project::get_detailed),
        ),
        rpc(
            "/project.ProjectService/Get",
            [get("/api/v1/projects/{name}")],
            call(project::get),
        ),
        rpc(
            "/project.ProjectService/GetGlobalProjects",
            [get("/api/v1/projects/{name}/globalprojects")],
            call(project::global_projects),
        ),
        rpc(
            "/project.ProjectService/Update",
            [put("/api/v1/projects/{project.metadata.name}", Body::All)],
            call(project::update),
        ),
        rpc(
            "/project.ProjectService/Delete",
            [delete("/api/v1/projects/{name}")],
            call(project::delete),
        ),
        rpc(
            "/project.ProjectService/ListEvents",
            [get("/api/v1/projects/{name}/events")],
            call(project::list_events),
        ),
        rpc(
            "/project.ProjectService/GetSyncWindowsState",
            [get("/api/v1/projects/{name}/syncwindows")],
            call(project::sync_windows_state),
        ),
        rpc(
            "/project.ProjectService/ListLinks",
            [get("/api/v1/projects/{name}/links")],
            call(project::list_links),
        ),
    ]
}
