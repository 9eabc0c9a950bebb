//! Sync and TerminateOperation. tiphys records the sync `operation` on the Application, as
//! argocd-server does; a controller carries it out and reports in `status.operationState`.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{AppView, assigned_windows, authorized, doc_object, validate};
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::Refusal;
use crate::registry::{Change, DocRef};
use crate::service::access::{Access, refuse};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct SyncRequest {
    pub name: String,
    pub app_namespace: String,
    pub project: String,
    pub revision: String,
    pub revisions: Vec<String>,
    pub source_positions: Vec<i64>,
    pub dry_run: bool,
    pub prune: bool,
    pub strategy: Option<Value>,
    pub resources: Vec<Value>,
    pub manifests: Vec<String>,
    pub infos: Vec<Value>,
    pub retry_strategy: Option<Value>,
    pub sync_options: Option<SyncOptions>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct SyncOptions {
    pub items: Vec<String>,
}

pub async fn sync(ctx: Ctx, req: SyncRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    super::rechecked(|| sync_once(&ctx.app, principal, &req)).await
}

/// One attempt of [`sync`], on the application as it is now.
async fn sync_once(state: &ServerState, principal: &Principal, req: &SyncRequest) -> Result<Reply, AppError> {
    let (existing, object) = may_sync(state, principal, &req.app_namespace, &req.name, &req.project)?;
    // Local manifests replace what the repository says: they need `override` (SEC-23).
    if !req.manifests.is_empty() {
        Access::detailed("applications", "override").check(state, principal, &object)?;
    }
    let mut value = existing.value();
    let app = AppView::read(&value)?;
    // The project may have changed since the application was written.
    validate(state, principal, &app)?;
    check_sync_windows(state, principal, &app, &object)?;
    check_auto_sync(&value, req)?;
    if value.get("operation").is_some() {
        return Err(AppError::FailedPrecondition(
            "another operation is already in progress".to_owned(),
        ));
    }
    let mut sync = Map::new();
    let mut put = |key: &str, v: Value, present: bool| {
        if present {
            sync.insert(key.to_owned(), v);
        }
    };
    put(
        "revision",
        Value::from(req.revision.clone()),
        !req.revision.is_empty(),
    );
    put(
        "revisions",
        Value::from(req.revisions.clone()),
        !req.revisions.is_empty(),
    );
    put(
        "sourcePositions",
        Value::from(req.source_positions.clone()),
        !req.source_positions.is_empty(),
    );
    put("prune", Value::Bool(true), req.prune);
    put("dryRun", Value::Bool(true), req.dry_run);
    put(
        "syncStrategy",
        req.strategy.clone().unwrap_or(Value::Null),
        req.strategy.is_some(),
    );
    put(
        "resources",
        Value::from(req.resources.clone()),
        !req.resources.is_empty(),
    );
    put(
        "manifests",
        Value::from(req.manifests.clone()),
        !req.manifests.is_empty(),
    );
    // As upstream's Sync (server/application/application.go): the application's own sync
    // options and retry strategy, unless the request gives its own.
    let policy = value.pointer("/spec/syncPolicy");
    let options: Vec<Value> = match &req.sync_options {
        Some(o) => o.items.iter().cloned().map(Value::from).collect(),
        None => policy
            .and_then(|p| p.get("syncOptions"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    };
    let retry = req
        .retry_strategy
        .clone()
        .or_else(|| policy.and_then(|p| p.get("retry")).cloned());
    put("syncOptions", Value::from(options.clone()), !options.is_empty());
    let mut operation = Map::new();
    operation.insert("sync".to_owned(), Value::Object(sync));
    operation.insert(
        "initiatedBy".to_owned(),
        serde_json::json!({"username": principal.subject()}),
    );
    if !req.infos.is_empty() {
        operation.insert("info".to_owned(), Value::from(req.infos.clone()));
    }
    if let Some(retry) = retry {
        operation.insert("retry".to_owned(), retry);
    }
    set_operation(state, &existing, &mut value, Value::Object(operation)).await
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct RollbackRequest {
    pub name: String,
    /// The history entry's `id` (an int64: a number, or a string in REST's JSON).
    pub id: Value,
    pub dry_run: bool,
    pub prune: bool,
    pub app_namespace: String,
    pub project: String,
}

/// Rollback: a sync to what history entry `id` deployed, as upstream's `Rollback`
/// (server/application/application.go) builds it, refused while the application is being
/// deleted, while auto-sync would undo it, and while another operation runs.
pub async fn rollback(ctx: Ctx, req: RollbackRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let id = match &req.id {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        Value::Null => Some(0),
        _ => None,
    }
    .ok_or_else(|| AppError::InvalidArgument(format!("invalid history id {}: expected a number", req.id)))?;
    super::rechecked(|| rollback_once(&ctx.app, principal, &req, id)).await
}

/// One attempt of [`rollback`], on the application as it is now.
async fn rollback_once(
    state: &ServerState,
    principal: &Principal,
    req: &RollbackRequest,
    id: i64,
) -> Result<Reply, AppError> {
    let (existing, _) = may_sync(state, principal, &req.app_namespace, &req.name, &req.project)?;
    let mut value = existing.value();
    let refuse = |why: &str| Err(AppError::FailedPrecondition(why.to_owned()));
    if !value["metadata"]["deletionTimestamp"].is_null() {
        return refuse("application is deleting");
    }
    let automated = value.pointer("/spec/syncPolicy/automated");
    if automated.is_some_and(|a| a.get("enabled").and_then(Value::as_bool) != Some(false)) {
        return refuse("rollback cannot be initiated when auto-sync is enabled");
    }
    let entry = value
        .pointer("/status/history")
        .and_then(Value::as_array)
        .and_then(|history| history.iter().find(|h| h["id"].as_i64().unwrap_or(0) == id))
        .cloned()
        .ok_or_else(|| {
            AppError::InvalidArgument(format!(
                "application {} does not have deployment with id {id}",
                existing.key.name
            ))
        })?;
    let zero = |v: &Value| v.is_null() || v.as_object().is_some_and(|o| o.values().all(is_empty));
    if zero(&entry["source"]) && entry["sources"].as_array().is_none_or(Vec::is_empty) {
        return refuse(
            "cannot rollback to revision deployed with Argo CD v0.11 or lower. sync to revision instead.",
        );
    }
    if value.get("operation").is_some() {
        return refuse("another operation is already in progress");
    }
    let mut sync = Map::new();
    for field in ["revision", "revisions", "source", "sources"] {
        if let Some(v) = entry.get(field).filter(|v| !is_empty(v)) {
            sync.insert(field.to_owned(), v.clone());
        }
    }
    if req.dry_run {
        sync.insert("dryRun".to_owned(), Value::Bool(true));
    }
    if req.prune {
        sync.insert("prune".to_owned(), Value::Bool(true));
    }
    if let Some(options) = value
        .pointer("/spec/syncPolicy/syncOptions")
        .filter(|v| !is_empty(v))
    {
        sync.insert("syncOptions".to_owned(), options.clone());
    }
    sync.insert("syncStrategy".to_owned(), serde_json::json!({"apply": {}}));
    let operation = serde_json::json!({
        "sync": Value::Object(sync),
        "initiatedBy": {"username": principal.subject()},
    });
    set_operation(state, &existing, &mut value, operation).await
}

/// Writes `operation` on the application (`value`, read as `existing`) and, as upstream's
/// `SetAppOperation` (util/argo/argo.go) does, drops the last operation's state, so that
/// nobody takes the previous outcome for this one's.
async fn set_operation(
    state: &ServerState,
    existing: &DocRef,
    value: &mut Value,
    operation: Value,
) -> Result<Reply, AppError> {
    if let Some(object) = value.as_object_mut() {
        object.insert("operation".to_owned(), operation);
    }
    if let Some(status) = value.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("operationState");
    }
    let change = Change::Update {
        key: existing.key.clone(),
        value: value.take(),
        expect: Some(existing.rv),
    };
    let doc = state.registry.apply_one(change).await?;
    doc.map(Reply::Doc).ok_or_else(|| {
        AppError::Internal(anyhow::anyhow!(
            "the operation was written, but no object came back"
        ))
    })
}

/// Whether a JSON value is Go's zero value of its type (what `omitempty` leaves out).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct TerminateRequest {
    pub name: String,
    pub app_namespace: String,
    pub project: String,
}

/// Asks the controller to stop the running operation (`phase: Terminating`); an operation no
/// controller has started yet is simply withdrawn.
pub async fn terminate_operation(ctx: Ctx, req: TerminateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    super::rechecked(|| terminate_once(&ctx.app, principal, &req)).await
}

/// One attempt of [`terminate_operation`], on the application as it is now.
async fn terminate_once(
    state: &ServerState,
    principal: &Principal,
    req: &TerminateRequest,
) -> Result<Reply, AppError> {
    let (existing, _) = may_sync(state, principal, &req.app_namespace, &req.name, &req.project)?;
    let mut value = existing.value();
    let running = value
        .pointer("/status/operationState/phase")
        .and_then(Value::as_str)
        .is_some_and(|p| p == "Running");
    if running {
        if let Some(phase) = value.pointer_mut("/status/operationState/phase") {
            *phase = Value::from("Terminating");
        }
    } else if value.get("operation").is_some() {
        if let Some(object) = value.as_object_mut() {
            object.remove("operation");
        }
    } else {
        return Err(AppError::FailedPrecondition(
            "Unable to terminate operation. No operation is in progress".to_owned(),
        ));
    }
    let change = Change::Update {
        key: existing.key.clone(),
        value,
        expect: Some(existing.rv),
    };
    state.registry.apply(vec![change]).await?;
    Ok(Reply::Message(Value::Object(Map::new())))
}

/// With automated sync on, only a dry run may use local manifests or another revision than the
/// one the application tracks: anything else would be undone by the next automatic sync.
fn check_auto_sync(app: &Value, req: &SyncRequest) -> Result<(), AppError> {
    let Some(automated) = app.pointer("/spec/syncPolicy/automated") else {
        return Ok(());
    };
    if automated.get("enabled").and_then(Value::as_bool) == Some(false) || req.dry_run {
        return Ok(());
    }
    if !req.manifests.is_empty() {
        return Err(AppError::FailedPrecondition(
            "cannot use local sync when Automatic Sync Policy is enabled unless for dry run".to_owned(),
        ));
    }
    let tracked = app
        .pointer("/spec/source/targetRevision")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !req.revision.is_empty() && req.revision != tracked {
        let tracked = if tracked.is_empty() { "HEAD" } else { tracked };
        return Err(AppError::FailedPrecondition(format!(
            "Cannot sync to {}: auto-sync currently set to {tracked}",
            req.revision
        )));
    }
    Ok(())
}

/// The application if the caller may see it and `sync` it, with its RBAC object; the same
/// fixed denial as a missing one otherwise.
/// A manual sync the project's sync windows forbid now is refused, as upstream refuses it
/// (`PermissionDenied`, "cannot sync: blocked by sync window"), naming the window; so is one
/// that an invalid window of the project blocks ("the project has an invalid sync window").
/// `object` is the application's RBAC object, for the audit line.
fn check_sync_windows(
    state: &ServerState,
    principal: &Principal,
    app: &AppView,
    object: &str,
) -> Result<(), AppError> {
    match assigned_windows(state, app).refusal(jiff::Timestamp::now()) {
        None => Ok(()),
        Some(why) => Err(refuse(state, principal, Refusal::SyncWindow, object, why)),
    }
}

fn may_sync(
    state: &ServerState,
    principal: &Principal,
    app_ns: &str,
    name: &str,
    project: &str,
) -> Result<(DocRef, String), AppError> {
    let existing = authorized(state, principal, app_ns, name, project, "get")?;
    let object = doc_object(state, &existing);
    Access::hidden("applications", "sync").check(state, principal, &object)?;
    Ok((existing, object))
}
