//! `applicationset.ApplicationSetService`: ApplicationSets in the registry, authorised with
//! upstream's RBAC objects (`applicationsets`, `<project>/<name>`, the project being the
//! template's `spec.project`), and the Applications they generate ([`generate`]), answered but
//! never created: tiphys runs no ApplicationSet controller.
//!
//! As upstream (server/applicationset/applicationset.go): a templated project is refused, the
//! project must exist, a create of an existing set with the same spec answers it unchanged, a
//! different one needs `upsert` (and `applicationsets, update`; moving it to another project
//! also needs `update` on the old one). Stricter than upstream: the set's Applications are
//! generated on every create, so a template or generator error is a 400 and nothing is stored;
//! a create with a stale `metadata.resourceVersion` is a conflict, never a lost write.

mod generate;
mod render;
mod watch;

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Map, Value, json};

pub use self::watch::watch;
use super::access::{Access, Missing};
use super::application::{rbac_object, served};
use super::limits::{check_annotations, check_labels, check_namespace, check_object_name, string_map};
use super::resource::parse_resource_version;
use super::sensitive::{canonical, check_no_password};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key, Kind};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

const RESOURCE: &str = "applicationsets";

/// The RBAC object of a stored set.
fn doc_object(state: &ServerState, doc: &DocRef) -> String {
    rbac_object(
        &state.namespace,
        &doc.summary.project,
        &doc.key.namespace,
        &doc.key.name,
    )
}

/// The namespace a request names (none: the server's), if ApplicationSets may live there: the
/// server's namespace and those `--application-namespaces` enables, as upstream's argocd-server
/// serves ApplicationSets in the same namespaces as Applications (server/applicationset:
/// `isNamespaceEnabled`). Upstream answers any other with an unknown error (500) saying
/// "namespace '…' is not permitted"; tiphys says the same as a 400.
fn namespace_of(state: &ServerState, requested: &str) -> Result<String, AppError> {
    if requested.is_empty() {
        return Ok(state.namespace.clone());
    }
    check_namespace(requested)?;
    if served(state, requested) {
        Ok(requested.to_owned())
    } else {
        Err(AppError::InvalidArgument(format!(
            "namespace '{requested}' is not permitted"
        )))
    }
}

/// The namespace a list or watch names, if any. Any well-formed one: upstream lists the sets
/// of the namespace asked for and then drops those of namespaces not served, so a namespace not
/// served lists nothing, without an error.
fn listed_namespace(requested: &str) -> Result<Option<String>, AppError> {
    if requested.is_empty() {
        return Ok(None);
    }
    check_namespace(requested)?;
    Ok(Some(requested.to_owned()))
}

/// Whether a set in `ns` is shown by a list of `listed` ([`listed_namespace`]): only from a
/// namespace sets are served in.
fn shown(state: &ServerState, listed: Option<&str>, ns: &str) -> bool {
    served(state, ns) && listed.is_none_or(|wanted| wanted == ns)
}

fn not_found(name: &str) -> AppError {
    AppError::NotFound(format!("applicationsets.argoproj.io {name:?} not found"))
}

/// The set `name` if the caller may perform `action` on it; a missing set and one the caller may
/// not see answer alike (SEC-13).
fn authorized(
    state: &ServerState,
    principal: &Principal,
    ns: &str,
    name: &str,
    action: &str,
) -> Result<DocRef, AppError> {
    let ns = namespace_of(state, ns)?;
    Access::hidden(RESOURCE, action).load(
        state,
        principal,
        state.registry.get(&Key::new(Kind::ApplicationSet, &ns, name)),
        |doc| doc_object(state, doc),
        || Missing::at(rbac_object(&state.namespace, "*", &ns, name), not_found(name)),
    )
}

/// `ApplicationSetGetQuery`, `ApplicationSetDeleteRequest`, `ApplicationSetTreeQuery`,
/// `ApplicationSetResourceEventsQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct NameQuery {
    pub name: String,
    pub appset_namespace: String,
}

/// `ApplicationSetListQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct ListQuery {
    pub projects: Vec<String>,
    pub selector: String,
    pub appset_namespace: String,
}

/// The sets the caller may `get`, of the given projects, matching the label selector, by name.
pub async fn list(ctx: Ctx, q: ListQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let selector = super::application::selector::Selector::parse(&q.selector)?;
    let ns = listed_namespace(&q.appset_namespace)?;
    let (resource_version, docs) = ctx.app.registry.list(Kind::ApplicationSet);
    let items = Access::hidden(RESOURCE, "get").visible(
        &ctx.app,
        principal,
        docs.into_iter().filter(|doc| {
            shown(&ctx.app, ns.as_deref(), &doc.key.namespace)
                && (q.projects.is_empty() || q.projects.contains(&doc.summary.project))
                && selector.matches(&doc.summary.labels)
        }),
        |doc| doc_object(&ctx.app, doc),
    );
    Ok(Reply::List {
        resource_version,
        items,
        page: None,
    })
}

pub async fn get(ctx: Ctx, q: NameQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    authorized(&ctx.app, principal, &q.appset_namespace, &q.name, "get").map(Reply::Doc)
}

/// `ApplicationSetCreateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct CreateRequest {
    pub applicationset: Option<Value>,
    pub upsert: bool,
    pub dry_run: bool,
}

/// `ApplicationSetGenerateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct GenerateRequest {
    pub application_set: Option<Value>,
}

/// What the use cases read of a set.
#[derive(Debug)]
struct Checked {
    value: Value,
    name: String,
    project: String,
    resource_version: String,
    key: Key,
}

/// A caller's set, checked as upstream does before anything else (generators, templated
/// project, name, labels), in its canonical form, in the server's namespace, without `status`.
fn checked(state: &ServerState, sent: Option<Value>) -> Result<Checked, AppError> {
    let Some(mut value @ Value::Object(_)) = sent else {
        return Err(AppError::InvalidArgument(
            "the request has no applicationset".to_owned(),
        ));
    };
    generate::check_generators(&value)?;
    let project = value
        .pointer("/spec/template/spec/project")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if project.contains("{{") {
        return Err(AppError::InvalidArgument(
            "spec.template.spec.project: the API does not support ApplicationSets with a templated project"
                .to_owned(),
        ));
    }
    let ns = namespace_of(
        state,
        value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    )?;
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
        let metadata = object.entry("metadata").or_insert_with(|| json!({}));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("namespace".to_owned(), Value::String(ns.clone()));
        }
    }
    let value = canonical(Kind::ApplicationSet.message(), &value).map_err(|e| match e {
        AppError::InvalidArgument(m) => AppError::InvalidArgument(format!("invalid applicationset: {m}")),
        other => other,
    })?;
    let meta = |field: &str| {
        value
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let name = meta("name");
    check_object_name("applicationset", &name)?;
    check_repo_urls(value.get("spec").unwrap_or(&Value::Null), "spec")?;
    let metadata = value.get("metadata").cloned().unwrap_or(Value::Null);
    check_labels("metadata.labels", string_map(&metadata, "labels"))?;
    check_annotations("metadata.annotations", string_map(&metadata, "annotations"))?;
    Ok(Checked {
        project: if project.is_empty() {
            "default".to_owned()
        } else {
            project
        },
        resource_version: meta("resourceVersion"),
        key: Key::new(Kind::ApplicationSet, &ns, &name),
        name,
        value,
    })
}

/// Every `repoURL` under `value` (templates, generated applications) must hold no password, as
/// an application's must not: credentials belong in repositories, and a set is shown to anyone
/// who may `get` it.
fn check_repo_urls(value: &Value, path: &str) -> Result<(), AppError> {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                let at = format!("{path}.{key}");
                match (key.as_str(), item) {
                    ("repoURL", Value::String(url)) => check_no_password(&at, url)?,
                    _ => check_repo_urls(item, &at)?,
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_repo_urls(item, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `applicationsets, create` on the set, and its project must exist (upstream's
/// `checkCreatePermissions`); then its Applications, each of whose projects must exist and allow
/// the caller the same.
fn check_create(state: &ServerState, principal: &Principal, set: &Checked) -> Result<Vec<Value>, AppError> {
    let object = rbac_object(&state.namespace, &set.project, &set.key.namespace, &set.name);
    Access::detailed(RESOURCE, "create").check(state, principal, &object)?;
    check_project_exists(state, &set.project)?;
    let apps = generate::applications(state, &set.value)?;
    for (i, app) in apps.iter().enumerate() {
        check_repo_urls(app, &format!("generated application {i}"))?;
    }
    let projects: BTreeSet<&str> = apps
        .iter()
        .map(|a| {
            a.pointer("/spec/project")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .unwrap_or("default")
        })
        .collect();
    for project in projects.into_iter().filter(|p| *p != set.project) {
        if project.contains("{{") {
            return Err(AppError::InvalidArgument(format!(
                "a generated application's spec.project {project:?} is templated: the API does not support that"
            )));
        }
        let object = rbac_object(&state.namespace, project, &set.key.namespace, &set.name);
        Access::detailed(RESOURCE, "create").check(state, principal, &object)?;
        check_project_exists(state, project)?;
    }
    Ok(apps)
}

fn check_project_exists(state: &ServerState, project: &str) -> Result<(), AppError> {
    if state
        .registry
        .get(&Key::new(Kind::AppProject, &state.namespace, project))
        .is_none()
    {
        return Err(AppError::InvalidArgument(format!(
            "ApplicationSet references project {project} which does not exist"
        )));
    }
    Ok(())
}

/// The Applications as `status.resources` of a dry run (upstream's `buildResourceStatus`).
fn with_resources(mut value: Value, apps: &[Value]) -> Value {
    let resources: Vec<Value> = apps
        .iter()
        .map(|app| {
            json!({
                "group": "argoproj.io",
                "version": "v1alpha1",
                "kind": "Application",
                "namespace": app.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
                "name": app.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    if let Some(object) = value.as_object_mut() {
        object.insert("status".to_owned(), json!({ "resources": resources }));
    }
    value
}

/// What a create compares with the stored set: spec, labels, annotations, finalizers.
fn comparable(value: &Value) -> [Option<&Value>; 4] {
    [
        value.get("spec"),
        value.pointer("/metadata/labels"),
        value.pointer("/metadata/annotations"),
        value.pointer("/metadata/finalizers"),
    ]
}

/// Creates (or, with `upsert`, replaces) a set; with `dryRun`, answers what would be stored with
/// its Applications in `status.resources`, and stores nothing.
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let state = &ctx.app;
    let set = checked(state, req.applicationset)?;
    let apps = check_create(state, principal, &set)?;
    let existing = state.registry.get(&set.key);
    if let Some(existing) = &existing {
        let requested = rbac_object(&state.namespace, &set.project, &set.key.namespace, &set.name);
        Access::detailed(RESOURCE, "create").check_taken(
            state,
            principal,
            &requested,
            &doc_object(state, existing),
        )?;
    }
    if req.dry_run {
        return Ok(Reply::Message(with_resources(set.value, &apps)));
    }
    let Some(existing) = existing else {
        let change = Change::Create {
            key: set.key,
            value: set.value,
        };
        return Ok(Reply::written(state.registry.apply_one(change).await?));
    };
    let stored = existing.value();
    if comparable(&stored) == comparable(&set.value) {
        return Ok(Reply::Doc(existing));
    }
    if !req.upsert {
        return Err(AppError::InvalidArgument(
            "existing ApplicationSet spec is different, use upsert flag to force update".to_owned(),
        ));
    }
    let requested = rbac_object(&state.namespace, &set.project, &set.key.namespace, &set.name);
    let update = Access::detailed(RESOURCE, "update");
    update.check(state, principal, &requested)?;
    if existing.summary.project != set.project {
        update.check(state, principal, &doc_object(state, &existing))?;
    }
    let expect = parse_resource_version(&set.resource_version)?.or(Some(existing.rv));
    let change = Change::Update {
        key: set.key,
        value: upserted(&stored, set.value),
        expect,
    };
    Ok(Reply::written(state.registry.apply_one(change).await?))
}

/// The stored set with the caller's spec and finalizers, labels and annotations merged into the
/// stored ones (upstream merges them on an upsert), and its status kept.
fn upserted(stored: &Value, mut value: Value) -> Value {
    for field in ["labels", "annotations"] {
        let mut merged: Map<String, Value> = stored
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(sent) = value
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        {
            merged.extend(sent.clone());
        }
        if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut)
            && !merged.is_empty()
        {
            metadata.insert(field.to_owned(), Value::Object(merged));
        }
    }
    if let (Some(object), Some(status)) = (value.as_object_mut(), stored.get("status")) {
        object.insert("status".to_owned(), status.clone());
    }
    value
}

/// The Applications a set would generate (`applicationsets, create` on it, as upstream), without
/// storing anything.
pub async fn generate(ctx: Ctx, req: GenerateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let set = checked(&ctx.app, req.application_set)?;
    let apps = check_create(&ctx.app, principal, &set)?;
    let mut out = Map::new();
    if !apps.is_empty() {
        out.insert("applications".to_owned(), Value::Array(apps));
    }
    Ok(Reply::Message(Value::Object(out)))
}

pub async fn delete(ctx: Ctx, q: NameQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let existing = authorized(&ctx.app, principal, &q.appset_namespace, &q.name, "delete")?;
    let change = Change::Delete {
        key: existing.key.clone(),
        expect: Some(existing.rv),
    };
    ctx.app.registry.apply_one(change).await?;
    Ok(Reply::empty())
}

/// The set's Applications as reported in `status.resources` (by a controller), each a node whose
/// parent is the set.
pub async fn resource_tree(ctx: Ctx, q: NameQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.appset_namespace, &q.name, "get")?;
    let value = doc.value();
    let parent = json!({
        "group": "argoproj.io",
        "version": "v1alpha1",
        "kind": "ApplicationSet",
        "namespace": doc.key.namespace,
        "name": doc.key.name,
        "uid": value.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
    });
    let mut nodes: Vec<Value> = value
        .pointer("/status/resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let field = |f: &str| r.get(f).cloned().unwrap_or(Value::Null);
            json!({
                "group": field("group"),
                "version": field("version"),
                "kind": field("kind"),
                "namespace": doc.key.namespace,
                "name": field("name"),
                "health": field("health"),
                "parentRefs": [parent.clone()],
            })
        })
        .collect();
    nodes.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let mut out = Map::new();
    if !nodes.is_empty() {
        out.insert("nodes".to_owned(), Value::Array(nodes));
    }
    Ok(Reply::Message(Value::Object(out)))
}

/// Kubernetes events about the set: none, as tiphys watches no cluster.
pub async fn list_events(ctx: Ctx, q: NameQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    authorized(&ctx.app, principal, &q.appset_namespace, &q.name, "get")?;
    Ok(Reply::Message(json!({"metadata": {}})))
}
