//! GetSyncWindows: the project's sync windows as they apply to one application.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{AppView, authorized};
use crate::error::AppError;
use crate::registry::{Key, Kind};
use crate::service::sync_windows::{Assignment, SyncWindow, Target};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct SyncWindowsQuery {
    pub name: String,
    pub app_namespace: String,
    pub project: String,
}

/// The project's sync windows that apply to the application (`assignedWindows`), those of them
/// active now (`activeWindows`), and whether a manual sync may start now (`canSync`). An invalid
/// window of the project that may apply to the application makes `canSync` false; it is listed
/// among the assigned windows when it reads as one, and is never active.
pub async fn sync_windows(ctx: Ctx, q: SyncWindowsQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.app_namespace, &q.name, &q.project, "get")?;
    let app = AppView::read(&doc.value())?;
    let assignment = assigned_windows(&ctx.app, &app);
    let assigned = &assignment.windows;
    let now = jiff::Timestamp::now();
    let view = |w: &SyncWindow| {
        serde_json::json!({
            "kind": w.kind,
            "schedule": w.schedule,
            "duration": w.duration,
            "manualSync": w.manual_sync,
        })
    };
    let active: Vec<Value> = assigned.iter().filter(|w| w.active_at(now)).map(view).collect();
    let mut out = Map::new();
    if !active.is_empty() {
        out.insert("activeWindows".to_owned(), Value::Array(active));
    }
    if !assigned.is_empty() {
        out.insert("assignedWindows".to_owned(), assigned.iter().map(view).collect());
    }
    out.insert("canSync".to_owned(), Value::Bool(assignment.can_sync(now, true)));
    Ok(Reply::Message(Value::Object(out)))
}

/// The sync windows of the application's project that match it (by name, destination
/// namespace, destination server or name), with the invalid ones that block it: those that
/// match it, and those that do not read as a window at all (see [`Assignment`]).
pub(super) fn assigned_windows(state: &ServerState, app: &AppView) -> Assignment {
    let Some(project) = state
        .registry
        .get(&Key::new(Kind::AppProject, &state.namespace, app.project()))
    else {
        return Assignment::default();
    };
    let value = project.value();
    let Some(windows) = value.pointer("/spec/syncWindows").and_then(Value::as_array) else {
        return Assignment::default();
    };
    let dest = &app.spec.destination;
    let target = Target {
        name: &app.metadata.name,
        namespace: &dest.namespace,
        server: &dest.server,
        cluster_name: &dest.name,
    };
    Assignment::of(windows, &target)
}
