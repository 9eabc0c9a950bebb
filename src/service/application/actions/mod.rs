//! Resource actions, as upstream's argocd-server serves them (server/application/application.go:
//! ListResourceActions, RunResourceAction, RunResourceActionV2, getAvailableActions; util/lua/lua.go:
//! discovery, merging with the built-in actions, the shape of a script's result).
//!
//! Listing needs `applications, get`; running needs `applications, action/<group>/<kind>/<name>`.
//! Both require the resource to be in the application's tree and read it live from its
//! cluster (`live.rs`). A kind's actions are argocd-cm's (Lua, `lua.rs`, read at each call by
//! `settings.rs`) and, unless argocd-cm defines some without `mergeBuiltinActions`, the built-in
//! ones (`builtin.rs`); a custom action of the same name wins. Running an action patches the
//! resource with the merge patch from the live object to the script's result, made conditional
//! on the live object's resourceVersion (upstream's patch is not: a change made between the read
//! and the patch would be lost); a result in the list form may also create objects (dry-run
//! first, all of them, before any is created).

mod builtin;
mod lua;
mod settings;

use std::collections::BTreeMap;

use kube::api::PostParams;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::authorized;
use super::live::{Live, ResourceRequest, authorize, locate};
use crate::error::AppError;
use crate::service::{Ctx, Reply};

/// `ResourceAction`, as the list answers it (Go's `omitempty` on every field but the name).
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
#[serde(default, rename_all = "camelCase")]
pub struct Action {
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<Param>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub icon_class: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub display_name: String,
}

impl Action {
    fn named(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            ..Self::default()
        }
    }
}

/// `ResourceActionParam`.
#[derive(Serialize, Deserialize, Default, Debug, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct Param {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    #[serde(rename = "type", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub default: String,
}

/// What a run does to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Patch,
    Create,
}

/// One object a run changes or makes.
#[derive(Debug)]
pub struct Impacted {
    pub operation: Operation,
    pub resource: Value,
}

impl Impacted {
    fn patch(resource: Value) -> Self {
        Self {
            operation: Operation::Patch,
            resource,
        }
    }
}

/// `ResourceActionParameters`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct Parameter {
    pub name: String,
    pub value: String,
}

/// `ResourceActionRunRequestV2` (and, without parameters, `ResourceActionRunRequest`).
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct RunRequest {
    #[serde(flatten)]
    pub resource: ResourceRequest,
    pub action: String,
    pub resource_action_parameters: Vec<Parameter>,
}

/// The actions available on one of the application's resources.
pub async fn list_resource_actions(ctx: Ctx, q: ResourceRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorize(&ctx.app, principal, &q, "get")?;
    let live = locate(&ctx.app, &doc, &q).await?;
    let obj = live.fetch().await?;
    let key = settings::key(&live.group, &live.kind);
    let custom = settings::custom(&ctx.app.config.peek().cm, &key)?;
    let mut found: BTreeMap<String, Action> = BTreeMap::new();
    let mut builtin = true;
    if let Some(custom) = custom {
        builtin = custom.merge_builtin_actions;
        let (source, input, now) = (custom.discovery, obj.clone(), now_s(&ctx));
        let table = blocking(move || lua::run(&source, &input, &[], now))
            .await?
            .map_err(|e| {
                AppError::InvalidArgument(format!("error executing Lua discovery script for {key}: {e}"))
            })?;
        for action in discovered(table).map_err(|e| {
            AppError::InvalidArgument(format!("the Lua discovery script for {key} returned {e}"))
        })? {
            found.entry(action.name.clone()).or_insert(action);
        }
    }
    if builtin {
        for action in builtin::discover(&key, &obj).unwrap_or_default() {
            found.entry(action.name.clone()).or_insert(action);
        }
    }
    let actions: Vec<Action> = found.into_values().collect();
    Ok(Reply::Message(json!({ "actions": actions })))
}

/// `RunResourceAction`: V2 without parameters.
pub async fn run_resource_action(ctx: Ctx, q: RunRequest) -> Result<Reply, AppError> {
    run_resource_action_v2(
        ctx,
        RunRequest {
            resource_action_parameters: Vec::new(),
            ..q
        },
    )
    .await
}

/// Runs an action on one of the application's resources.
pub async fn run_resource_action_v2(ctx: Ctx, q: RunRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let r = &q.resource;
    let rbac_action = format!("action/{}/{}/{}", r.group, r.kind, q.action);
    let doc = authorized(
        &ctx.app,
        principal,
        &r.app_namespace,
        &r.name,
        &r.project,
        &rbac_action,
    )?;
    let live = locate(&ctx.app, &doc, r).await?;
    let obj = live.fetch().await?;
    let key = settings::key(&live.group, &live.kind);
    let params: Vec<(String, String)> = q
        .resource_action_parameters
        .iter()
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect();
    let custom = settings::custom(&ctx.app.config.peek().cm, &key)?;
    let script = custom
        .and_then(|c| c.definitions.into_iter().find(|d| d.name == q.action))
        .map(|d| d.script);
    let failed = |why: String| {
        AppError::InvalidArgument(format!("error running action {:?} on {key}: {why}", q.action))
    };
    let impacted = match script {
        Some(source) => {
            let (input, now) = (obj.clone(), now_s(&ctx));
            let params = params.clone();
            let out = blocking(move || lua::run(&source, &input, &params, now))
                .await?
                .map_err(&failed)?;
            impacted_of(out, &obj).map_err(&failed)?
        }
        None => {
            let now = jiff::Timestamp::from_second(now_s(&ctx)).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            builtin::run(&key, &q.action, obj.clone(), &params, now)
                .ok_or_else(|| {
                    AppError::InvalidArgument(format!(
                        "there is no action {:?} for {key}: list the resource's actions to see which there are",
                        q.action
                    ))
                })?
                .map_err(&failed)?
        }
    };
    apply(&live, &obj, impacted).await?;
    Ok(Reply::Message(json!({})))
}

/// Makes the changes of a run: every creation is tried (dry run) before anything is changed.
async fn apply(live: &Live<'_>, obj: &Value, impacted: Vec<Impacted>) -> Result<(), AppError> {
    let mut creations = Vec::new();
    for one in &impacted {
        if one.operation == Operation::Create {
            let target = created(live, &one.resource)?;
            create(&target, &one.resource, true).await?;
            creations.push(target);
        }
    }
    let mut creations = creations.into_iter();
    for one in impacted {
        match one.operation {
            Operation::Patch => {
                let mut patch = merge_diff(obj, &one.resource);
                if patch.as_object().is_some_and(Map::is_empty) {
                    continue;
                }
                // Conditional on what was read: a change made since is a conflict, not lost.
                if let Some(version) = obj.pointer("/metadata/resourceVersion") {
                    patch["metadata"]["resourceVersion"] = version.clone();
                }
                let body = patch.to_string().into_bytes();
                live.run("patch", "error patching resource", |api, name| {
                    super::live::raw_patch(api, name, "application/merge-patch+json", body.clone())
                })
                .await?;
            }
            Operation::Create => {
                if let Some(target) = creations.next() {
                    create(&target, &one.resource, false).await?;
                }
            }
        }
    }
    Ok(())
}

/// Where an object a run creates goes: the resource's cluster, a namespaced kind in the
/// resource's own namespace (tiphys does not check the project's resource lists for a created
/// object, so it keeps it beside the resource the caller may act on).
fn created<'a>(live: &Live<'a>, obj: &Value) -> Result<Live<'a>, AppError> {
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (group, version) = match text("/apiVersion").split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", text("/apiVersion")),
    };
    let (kind, name, namespace) = (text("/kind"), text("/metadata/name"), text("/metadata/namespace"));
    if version.is_empty() || kind.is_empty() || name.is_empty() {
        return Err(AppError::InvalidArgument(
            "an object the action creates needs apiVersion, kind and metadata.name".to_owned(),
        ));
    }
    if namespace != live.namespace || namespace.is_empty() {
        return Err(AppError::InvalidArgument(format!(
            "the action creates {kind} {name} in namespace {namespace:?}: it may create objects only in the resource's namespace {:?}",
            live.namespace
        )));
    }
    Ok(live.sibling(group, version, kind, namespace, name))
}

async fn create(target: &Live<'_>, obj: &Value, dry_run: bool) -> Result<(), AppError> {
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    let object: kube::api::DynamicObject = serde_json::from_value(obj.clone()).map_err(|e| {
        AppError::InvalidArgument(format!("the action's object is not a Kubernetes object: {e}"))
    })?;
    target
        .run("create", "error creating resource", |api, _| {
            let (params, object) = (params.clone(), object.clone());
            async move { api.create(&params, &object).await.map(drop) }
        })
        .await
}

/// A script's result as upstream reads it: a table is the patched object; a list holds
/// `{operation = "create" | "patch", resource = …}`.
fn impacted_of(out: Value, live: &Value) -> Result<Vec<Impacted>, String> {
    let items = match out {
        Value::Object(_) => vec![Impacted::patch(out)],
        Value::Array(items) => {
            let mut all = Vec::with_capacity(items.len());
            for item in items {
                let operation = match item.get("operation").and_then(Value::as_str) {
                    Some("patch") => Operation::Patch,
                    Some("create") => Operation::Create,
                    other => {
                        return Err(format!(
                            "unsupported operation {}: use \"create\" or \"patch\"",
                            other.map_or_else(|| "(none)".to_owned(), |o| format!("{o:?}"))
                        ));
                    }
                };
                let Some(resource) = item.get("resource").filter(|r| r.is_object()) else {
                    return Err("an entry of the returned list has no resource".to_owned());
                };
                all.push(Impacted {
                    operation,
                    resource: resource.clone(),
                });
            }
            all
        }
        _ => return Err("the result is neither an object nor a list".to_owned()),
    };
    Ok(items
        .into_iter()
        .map(|mut one| {
            if one.operation == Operation::Patch {
                restore_empty_objects(&mut one.resource, live);
            }
            one
        })
        .collect())
}

/// Lua has one empty table for `{}` and `[]`, read back as `[]`: where the live object has an
/// object, an empty array in the result is that object left empty (upstream's cleanReturnedObj).
fn restore_empty_objects(new: &mut Value, old: &Value) {
    match (new, old) {
        (Value::Object(n), Value::Object(o)) => {
            for (k, nv) in n.iter_mut() {
                let Some(ov) = o.get(k) else { continue };
                if ov.is_object() && nv.as_array().is_some_and(Vec::is_empty) {
                    *nv = json!({});
                } else {
                    restore_empty_objects(nv, ov);
                }
            }
        }
        (Value::Array(n), Value::Array(o)) => {
            for (nv, ov) in n.iter_mut().zip(o) {
                restore_empty_objects(nv, ov);
            }
        }
        _ => {}
    }
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`.
fn merge_diff(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, ov) in o {
                match n.get(k) {
                    None => {
                        patch.insert(k.clone(), Value::Null);
                    }
                    Some(nv) if nv != ov => {
                        patch.insert(k.clone(), merge_diff(ov, nv));
                    }
                    Some(_) => {}
                }
            }
            for (k, nv) in n {
                if !o.contains_key(k) {
                    patch.insert(k.clone(), nv.clone());
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// A discovery script's table as actions: each key an action, its value (if a table with
/// fields) the action's `params`, `disabled`, `iconClass` and `displayName`.
fn discovered(table: Value) -> Result<Vec<Action>, String> {
    let fields = match table {
        Value::Array(items) if items.is_empty() => return Ok(Vec::new()),
        Value::Object(fields) => fields,
        _ => return Err("a list, not a table of actions by name".to_owned()),
    };
    let mut actions = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        let mut action = match value {
            Value::Object(_) => serde_json::from_value::<Action>(value)
                .map_err(|e| format!("an action {name:?} that is not valid: {e}"))?,
            _ => Action::default(),
        };
        if action.name.is_empty() {
            action.name = name;
        }
        actions.push(action);
    }
    Ok(actions)
}

fn now_s(ctx: &Ctx) -> i64 {
    i64::try_from(ctx.app.clock.now_us() / 1_000_000).unwrap_or(i64::MAX)
}

/// Runs a script off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, AppError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AppError::Internal(anyhow::anyhow!("the Lua script's task failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_diffs_turn_old_into_new() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
        let new = json!({"a": 1, "b": {"c": 4}, "e": [2], "f": true});
        assert_eq!(
            merge_diff(&old, &new),
            json!({"b": {"c": 4, "d": null}, "e": [2], "f": true})
        );
        assert_eq!(merge_diff(&old, &old), json!({}));
    }

    #[test]
    fn results_read_as_upstream_reads_them() {
        let live = json!({"metadata": {"labels": {}}, "spec": {}});
        let out = impacted_of(json!({"metadata": {"labels": []}, "spec": {"x": 1}}), &live).unwrap();
        assert_eq!(
            out[0].resource,
            json!({"metadata": {"labels": {}}, "spec": {"x": 1}})
        );
        let list = json!([{"operation": "create", "resource": {"kind": "Job"}}, {"operation": "patch", "resource": {}}]);
        let out = impacted_of(list, &live).unwrap();
        assert_eq!(
            (out[0].operation, out[1].operation),
            (Operation::Create, Operation::Patch)
        );
        let err = impacted_of(json!([{"operation": "delete", "resource": {}}]), &live).unwrap_err();
        assert!(err.contains("\"delete\""), "{err}");
    }

    #[test]
    fn discovery_tables_become_actions() {
        let table = json!({"a": [], "b": {"disabled": true, "iconClass": "i", "params": [{"name": "p"}]}});
        let actions = discovered(table).unwrap();
        assert_eq!(actions[0], Action::named("a"));
        assert!(actions[1].disabled);
        assert_eq!(actions[1].params[0].name, "p");
        assert!(discovered(json!([])).unwrap().is_empty());
        assert!(discovered(json!({"b": {"disabled": "yes"}})).is_err());
    }
}
