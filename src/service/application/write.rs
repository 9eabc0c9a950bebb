//! Create, Update, UpdateSpec, Patch and Delete: every write of an application is checked
//! against the object it replaces (see [`rechecked`](super::rechecked)).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{
    AppView, RESOURCE, authorized, client_fields, default_project, deletion, doc_object, keep_server_fields,
    namespace_of, rbac_object, rechecked, source, validate,
};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef};
use crate::service::access::Access;
use crate::service::resource::parse_resource_version;
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub application: Value,
    pub upsert: Option<bool>,
    pub validate: Option<bool>,
}

pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let (value, app) = AppView::canonical(client_fields(req.application))?;
    // RBAC first: whether a project exists is not told to a caller who may not create in it.
    let ns = namespace_of(&ctx.app, &app.metadata.namespace);
    let object = rbac_object(&ctx.app.namespace, app.project(), &ns, &app.metadata.name);
    let access = Access::detailed(RESOURCE, "create");
    access.check(&ctx.app, principal, &object)?;
    let key = validate(&ctx.app, principal, &app)?;
    // Only an explicit `validate: true` (what Argo CD's CLI and tiphys's send unless told
    // otherwise): the request's JSON form cannot tell an explicit `false` from an absent field.
    if req.validate == Some(true) {
        let spec = value.get("spec").cloned().unwrap_or(Value::Null);
        source::check_sources(&ctx.app, &app.metadata.name, &spec).await?;
    }
    if let Some(existing) = ctx.app.registry.get(&key) {
        access.check_taken(&ctx.app, principal, &object, &doc_object(&ctx.app, &existing))?;
        let stored = existing.value();
        let stored_app = AppView::read(&stored)?;
        if stored.get("spec") == value.get("spec")
            && stored_app.metadata.annotations == app.metadata.annotations
        {
            return Ok(Reply::Doc(existing));
        }
        if !req.upsert.unwrap_or(false) {
            return Err(AppError::InvalidArgument(
                "existing application spec is different, use upsert flag to force update".to_owned(),
            ));
        }
        let update = access.to("update");
        update.check(&ctx.app, principal, &doc_object(&ctx.app, &existing))?;
        update.check(&ctx.app, principal, &object)?;
        let value = keep_server_fields(value, &stored);
        return write(
            &ctx.app,
            principal,
            &app,
            Change::Update {
                key,
                value,
                expect: Some(existing.rv),
            },
        )
        .await;
    }
    write(&ctx.app, principal, &app, Change::Create { key, value }).await
}

/// Writes an application after checking it against its project again under the registry's
/// write lock: a project changed or deleted since `validate` cannot strand an invalid one.
pub(super) async fn write(
    state: &ServerState,
    principal: &Principal,
    app: &AppView,
    change: Change,
) -> Result<Reply, AppError> {
    let still_valid = |_: &crate::registry::Registry| validate(state, principal, app).map(|_| ());
    Ok(Reply::written(
        state.registry.apply_one_if(still_valid, change).await?,
    ))
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct UpdateRequest {
    pub application: Value,
    pub validate: Option<bool>,
    pub project: String,
}

/// Update: the body's spec, labels, annotations and finalizers applied to the latest stored
/// application, as upstream's `updateApp` (server/application/application.go) does. The
/// client's `resourceVersion` is no precondition: a write that another one overtook is read
/// and applied again (see [`rechecked`]). Each attempt is checked against the stored and the
/// resulting object (SEC-15): moving an application to another project needs `update` in both.
pub async fn update(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let (value, app) = AppView::canonical(client_fields(req.application))?;
    // Not a precondition, but one that is not a version at all is a mistake worth reporting.
    parse_resource_version(&app.metadata.resource_version)?;
    let target = (
        app.metadata.namespace.as_str(),
        app.metadata.name.as_str(),
        req.project.as_str(),
    );
    edit(&ctx.app, principal, target, |stored| {
        Ok(onto_latest(stored, &value))
    })
    .await
}

/// `stored` with what an update takes from the caller's `body`: the spec, and the labels,
/// annotations and finalizers (each removed when the body has none).
pub(super) fn onto_latest(mut stored: Value, body: &Value) -> Value {
    let Some(object) = stored.as_object_mut() else {
        return stored;
    };
    match body.get("spec") {
        Some(spec) => object.insert("spec".to_owned(), spec.clone()),
        None => object.remove("spec"),
    };
    let meta = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        for field in ["labels", "annotations", "finalizers"] {
            match body.get("metadata").and_then(|m| m.get(field)) {
                Some(v) => meta.insert(field.to_owned(), v.clone()),
                None => meta.remove(field),
            };
        }
    }
    stored
}

/// Writes `app` over `existing` once the caller may update the result too, on the condition
/// that `existing` is still the stored version (see [`rechecked`]).
pub(super) async fn replace(
    state: &ServerState,
    principal: &Principal,
    existing: &DocRef,
    (value, app): (Value, AppView),
) -> Result<Reply, AppError> {
    let key = validate(state, principal, &app)?;
    if key != existing.key {
        return Err(AppError::InvalidArgument(
            "an application's name and namespace cannot change".to_owned(),
        ));
    }
    let object = rbac_object(&state.namespace, app.project(), &key.namespace, &key.name);
    Access::hidden(RESOURCE, "update").check(state, principal, &object)?;
    let value = keep_server_fields(value, &existing.value());
    let expect = Some(existing.rv);
    write(state, principal, &app, Change::Update { key, value, expect }).await
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct UpdateSpecRequest {
    pub name: String,
    pub spec: Value,
    pub validate: Option<bool>,
    pub app_namespace: String,
    pub project: String,
}

/// Replaces the spec; answers with the spec as stored.
pub async fn update_spec(ctx: Ctx, req: UpdateSpecRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let target = (
        req.app_namespace.as_str(),
        req.name.as_str(),
        req.project.as_str(),
    );
    let written = edit(&ctx.app, principal, target, |mut value| {
        if let Some(object) = value.as_object_mut() {
            object.insert("spec".to_owned(), req.spec.clone());
        }
        default_project(&mut value);
        Ok(value)
    })
    .await?;
    let Reply::Doc(doc) = written else {
        return Err(AppError::Internal(anyhow::anyhow!("update gave no object")));
    };
    Ok(Reply::Message(
        doc.value().get("spec").cloned().unwrap_or(Value::Null),
    ))
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct PatchRequest {
    pub name: String,
    pub patch: String,
    pub patch_type: String,
    pub app_namespace: String,
    pub project: String,
}

/// A JSON patch (`json`, the default, as upstream's `Patch` in server/application/application.go)
/// or a JSON merge patch (`merge`) of the application.
pub async fn patch(ctx: Ctx, req: PatchRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let patch: Value = serde_json::from_str(&req.patch)
        .map_err(|e| AppError::InvalidArgument(format!("the patch is not valid JSON: {e}")))?;
    let target = (
        req.app_namespace.as_str(),
        req.name.as_str(),
        req.project.as_str(),
    );
    edit(&ctx.app, principal, target, |value| {
        Ok(client_fields(patched(value, &patch, &req.patch_type)?))
    })
    .await
}

/// Replaces application `(namespace, name, project hint)` with `change` of its stored value:
/// read, authorized and changed again on every attempt (see [`rechecked`]).
pub(super) async fn edit(
    state: &ServerState,
    principal: &Principal,
    (app_ns, name, project): (&str, &str, &str),
    change: impl Fn(Value) -> Result<Value, AppError>,
) -> Result<Reply, AppError> {
    rechecked(|| async {
        let existing = authorized(state, principal, app_ns, name, project, "update")?;
        let new = AppView::canonical(change(existing.value())?)?;
        replace(state, principal, &existing, new).await
    })
    .await
}

/// `value` with a JSON patch (`json`, the default) or a merge patch (`merge`) applied.
pub(super) fn patched(mut value: Value, patch: &Value, patch_type: &str) -> Result<Value, AppError> {
    match patch_type {
        "merge" => json_patch::merge(&mut value, patch),
        "" | "json" => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| AppError::InvalidArgument(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut value, &ops)
                .map_err(|e| AppError::InvalidArgument(format!("the JSON patch cannot be applied: {e}")))?;
        }
        other => {
            return Err(AppError::InvalidArgument(format!(
                "unsupported patch type {other:?}: use merge or json"
            )));
        }
    }
    Ok(value)
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct DeleteRequest {
    pub name: String,
    pub cascade: Option<bool>,
    pub propagation_policy: String,
    pub app_namespace: String,
    pub project: String,
}

pub async fn delete(ctx: Ctx, req: DeleteRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    rechecked(|| async {
        let existing = authorized(
            &ctx.app,
            principal,
            &req.app_namespace,
            &req.name,
            &req.project,
            "get",
        )?;
        Access::detailed(RESOURCE, "delete").check(&ctx.app, principal, &doc_object(&ctx.app, &existing))?;
        let finalizers = deletion::finalizers(&existing.value(), req.cascade, &req.propagation_policy)?;
        let mut expect = existing.rv;
        // Only Kubernetes holds an object back for its finalizers (the controller deletes the
        // application's resources, then lets it go); elsewhere the deletion is immediate.
        if let Some(finalizers) = finalizers
            && ctx.app.registry.beside_controller()
        {
            let mut value = existing.value();
            value["metadata"]["finalizers"] = Value::from(finalizers);
            let written = ctx
                .app
                .registry
                .apply_one(Change::Update {
                    key: existing.key.clone(),
                    value,
                    expect: Some(existing.rv),
                })
                .await?;
            expect = written.map_or(expect, |doc| doc.rv);
        }
        ctx.app
            .registry
            .apply(vec![Change::Delete {
                key: existing.key.clone(),
                expect: Some(expect),
            }])
            .await?;
        Ok(Reply::Message(Value::Object(Map::new())))
    })
    .await
}
