//! `project.ProjectService`: AppProjects in the registry, authorised by `projects, <action>,
//! <name>`, and the tokens of their roles ([`tokens`]).
//!
//! Every use case checks the caller's permission on the requested name before looking the
//! project up, so a caller who may not see a project gets the same denial whether it exists or
//! not (SEC-13); only a caller who may see it learns that it is missing.

mod tokens;
mod validate;

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::{Map, Value};

use self::tokens::{carry_tokens, strip_tokens};
pub use self::tokens::{create_token, delete_token};
use self::validate::{check_project, normalize_policies};
use super::access::{Access, Missing};
use super::deeplinks;
use super::limits::check_object_name;
use super::project_rules::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER, ProjectRules};
use super::redact;
use super::resource::parse_resource_version;
use super::sync_windows::SyncWindow;
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key, Kind};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

const RESOURCE: &str = "projects";
/// The project every server has; it cannot be deleted (upstream reserves the name).
const DEFAULT_PROJECT: &str = "default";

fn project_key(state: &ServerState, name: &str) -> Key {
    Key::new(Kind::AppProject, &state.namespace, name)
}

fn not_found(name: &str) -> AppError {
    AppError::NotFound(format!("appprojects.argoproj.io {name:?} not found"))
}

/// Project `name` if the caller may perform `action` on it. The permission is decided first,
/// on the requested name alone (see the module comment).
fn authorized(
    state: &ServerState,
    principal: &Principal,
    name: &str,
    action: &str,
) -> Result<DocRef, AppError> {
    Access::detailed(RESOURCE, action).load(
        state,
        principal,
        state.registry.get(&project_key(state, name)),
        |_| name.to_owned(),
        || Missing::at(name, not_found(name)),
    )
}

/// `ProjectQuery`, `SyncWindowsQuery`, `ListProjectLinksRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct ProjectQuery {
    pub name: String,
}

/// The projects the caller may `get`.
pub async fn list(ctx: Ctx, _q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let (resource_version, docs) = ctx.app.registry.list(Kind::AppProject);
    let items =
        Access::detailed(RESOURCE, "get").visible(&ctx.app, principal, docs, |doc| doc.key.name.clone());
    Ok(Reply::List {
        resource_version,
        items,
        page: None,
    })
}

pub async fn get(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    authorized(&ctx.app, principal, &q.name, "get").map(Reply::Doc)
}

/// The project with the repositories and clusters scoped to it, their credentials removed
/// (SEC-17). tiphys has no global projects (argocd-cm `globalProjects`), so none is listed.
pub async fn get_detailed(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.name, "get")?;
    let scoped = |kind: Kind, clean: fn(&mut Value)| -> Vec<Value> {
        let (_, docs) = ctx.app.registry.list(kind);
        docs.iter()
            .filter(|d| d.summary.project == q.name)
            .map(|d| {
                let mut value = d.value();
                clean(&mut value);
                value
            })
            .collect()
    };
    let repositories = scoped(Kind::Repository, redact::repository);
    let clusters = scoped(Kind::Cluster, redact::cluster);
    let mut out = Map::new();
    out.insert("project".to_owned(), doc.value());
    if !repositories.is_empty() {
        out.insert("repositories".to_owned(), Value::Array(repositories));
    }
    if !clusters.is_empty() {
        out.insert("clusters".to_owned(), Value::Array(clusters));
    }
    Ok(Reply::Message(Value::Object(out)))
}

/// Global projects (argocd-cm `globalProjects`) are not supported: none.
pub async fn global_projects(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    authorized(&ctx.app, principal, &q.name, "get")?;
    Ok(Reply::Message(Value::Object(Map::new())))
}

/// Kubernetes events about the project: none, as tiphys watches no cluster.
pub async fn list_events(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    authorized(&ctx.app, principal, &q.name, "get")?;
    Ok(Reply::Message(serde_json::json!({"metadata": {}})))
}

/// The project's deep links (argocd-cm `project.links`), over `project` (its status emptied),
/// as upstream's server/project/project.go ListLinks makes them.
pub async fn list_links(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.name, "get")?;
    let objects = deeplinks::Objects {
        project: Some(deeplinks::sanitized_project(doc.value())),
        ..deeplinks::Objects::default()
    };
    let settings = ctx.app.config.peek();
    Ok(Reply::Message(deeplinks::evaluate(
        &settings.deep_links.project,
        objects,
        &doc.key.name,
    )))
}

/// The project's sync windows that are active now (all of them, whichever applications they
/// select), as stored.
pub async fn sync_windows_state(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.name, "get")?;
    let now = jiff::Timestamp::now();
    let value = doc.value();
    let active: Vec<Value> = value
        .pointer("/spec/syncWindows")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|w| SyncWindow::deserialize(*w).is_ok_and(|w| w.active_at(now)))
        .cloned()
        .collect();
    let mut out = Map::new();
    if !active.is_empty() {
        out.insert("windows".to_owned(), Value::Array(active));
    }
    Ok(Reply::Message(Value::Object(out)))
}

// ---- writes ----

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
struct MetaView {
    name: String,
    resource_version: String,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct NameView {
    metadata: MetaView,
}

/// The project a client sent, as the use cases store it: in the server's namespace, with
/// normalized policy lines.
fn client_project(state: &ServerState, project: Option<Value>) -> Result<(Value, MetaView), AppError> {
    let mut value = match project {
        Some(v @ Value::Object(_)) => v,
        _ => {
            return Err(AppError::InvalidArgument("the request has no project".to_owned()));
        }
    };
    let meta = NameView::deserialize(&value)
        .map_err(|e| AppError::InvalidArgument(format!("invalid project: {e}")))?
        .metadata;
    if let Some(object) = value.as_object_mut() {
        let metadata = object
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(metadata) = metadata.as_object_mut() {
            metadata.insert("namespace".to_owned(), Value::String(state.namespace.clone()));
        }
    }
    normalize_policies(&mut value);
    Ok((value, meta))
}

/// The spec as it is stored, without the tokens (which the server keeps), for comparisons.
fn comparable_spec(value: &Value) -> Result<Value, AppError> {
    let schema = crate::schema::Schema::get();
    let desc = schema
        .message(Kind::AppProject.message())
        .map_err(|e| AppError::Internal(e.into()))?;
    let msg = schema
        .from_json(&desc, value)
        .map_err(|e| AppError::InvalidArgument(format!("invalid project: {e}")))?;
    let mut canonical = schema.to_json(&msg);
    strip_tokens(&mut canonical);
    Ok(canonical.get("spec").cloned().unwrap_or(Value::Null))
}

async fn write(state: &ServerState, change: Change) -> Result<Reply, AppError> {
    Ok(Reply::written(state.registry.apply_one(change).await?))
}

/// `ProjectCreateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub project: Option<Value>,
    pub upsert: bool,
}

/// Creates a project (`projects, create`). An existing project with the same spec is
/// answered as it is; a different one is replaced only with `upsert`, which also needs
/// `projects, update` (its tokens stay for the roles it keeps).
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let state = &ctx.app;
    let (mut value, meta) = client_project(state, req.project)?;
    check_object_name("project", &meta.name)?;
    let access = Access::detailed(RESOURCE, "create");
    access.check(state, principal, &meta.name)?;
    strip_tokens(&mut value);
    check_project(&meta.name, &value)?;
    let key = project_key(state, &meta.name);
    let Some(existing) = state.registry.get(&key) else {
        return write(state, Change::Create { key, value }).await;
    };
    access.check_taken(state, principal, &meta.name, &meta.name)?;
    let stored = existing.value();
    if comparable_spec(&stored)? == comparable_spec(&value)? {
        return Ok(Reply::Doc(existing));
    }
    if !req.upsert {
        return Err(AppError::InvalidArgument(format!(
            "project {:?} already exists with a different spec; use upsert to replace it",
            meta.name
        )));
    }
    access.to("update").check(state, principal, &meta.name)?;
    let mut replaced = stored.clone();
    if let Some(object) = replaced.as_object_mut() {
        object.insert(
            "spec".to_owned(),
            value.get("spec").cloned().unwrap_or(Value::Null),
        );
    }
    carry_tokens(&mut replaced, &stored, None);
    write(
        state,
        Change::Update {
            key,
            value: replaced,
            expect: Some(existing.rv),
        },
    )
    .await
}

/// `ProjectUpdateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct UpdateRequest {
    pub project: Option<Value>,
}

/// Replaces a project (`projects, update`). As upstream, adding or removing a destination
/// needs `clusters, update` on its server, adding or removing a source repository needs
/// `repositories, update` on its URL, and changing the resource allow/deny lists needs
/// `clusters, update` on every destination. An update that would make existing applications
/// of the project invalid is refused. `metadata.resourceVersion`, when given, must be the
/// stored one (else ABORTED). Tokens may be dropped, never added.
pub async fn update(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let state = &ctx.app;
    let (mut value, meta) = client_project(state, req.project)?;
    if meta.name.is_empty() {
        return Err(AppError::InvalidArgument(
            "the project has no metadata.name".to_owned(),
        ));
    }
    let existing = authorized(state, principal, &meta.name, "update")?;
    let stored = existing.value();
    let listed = value.clone();
    carry_tokens(&mut value, &stored, Some(&listed));
    check_project(&meta.name, &value)?;
    let old_spec = stored.get("spec").cloned().unwrap_or(Value::Null);
    let new_spec = value.get("spec").cloned().unwrap_or(Value::Null);
    let (old_clusters, new_clusters) = (destination_clusters(&old_spec), destination_clusters(&new_spec));
    let (clusters, repos) = (
        Access::detailed("clusters", "update"),
        Access::detailed("repositories", "update"),
    );
    for cluster in old_clusters.symmetric_difference(&new_clusters) {
        clusters.check(state, principal, cluster)?;
    }
    let (old_repos, new_repos) = (
        strings(&old_spec, "sourceRepos"),
        strings(&new_spec, "sourceRepos"),
    );
    for repo in old_repos.symmetric_difference(&new_repos) {
        repos.check(state, principal, repo)?;
    }
    let lists_changed = [
        "clusterResourceWhitelist",
        "clusterResourceBlacklist",
        "namespaceResourceBlacklist",
        "namespaceResourceWhitelist",
    ]
    .iter()
    .any(|field| comparable_field(&old_spec, field) != comparable_field(&new_spec, field));
    if lists_changed {
        for cluster in &new_clusters {
            clusters.check(state, principal, cluster)?;
        }
    }
    // Without a version from the caller, the version read here: a token issued meanwhile must
    // not be lost to tokens copied from this older state.
    let expect = parse_resource_version(&meta.resource_version)?.or(Some(existing.rv));
    let change = Change::Update {
        key: existing.key.clone(),
        value,
        expect,
    };
    // Under the registry's write lock, so no application can be written against the old spec.
    let stays_valid = |_: &crate::registry::Registry| {
        check_applications_stay_valid(state, &meta.name, &old_spec, &new_spec)
    };
    Ok(Reply::written(
        state.registry.apply_one_if(stays_valid, change).await?,
    ))
}

/// The cluster each destination names: its server URL, or its name when it has no server.
fn destination_clusters(spec: &Value) -> BTreeSet<String> {
    spec.get("destinations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let field = |f: &str| d.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
            field("server").or_else(|| field("name")).map(str::to_owned)
        })
        .collect()
}

fn strings(spec: &Value, field: &str) -> BTreeSet<String> {
    spec.get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// A list field, with absent and empty alike.
fn comparable_field<'a>(spec: &'a Value, field: &str) -> Option<&'a Value> {
    spec.get(field)
        .filter(|v| v.as_array().is_none_or(|a| !a.is_empty()))
}

/// Refuses an update after which applications of the project that its old rules permitted
/// would no longer be permitted (their sources or destinations), as upstream does.
fn check_applications_stay_valid(
    state: &ServerState,
    project: &str,
    old: &Value,
    new: &Value,
) -> Result<(), AppError> {
    let rules = |spec: &Value| ProjectRules::deserialize(spec).unwrap_or_default();
    let (old_rules, new_rules) = (rules(old), rules(new));
    let (_, apps) = state.registry.list(Kind::Application);
    let (_, clusters) = state.registry.list(Kind::Cluster);
    let server_of = |name: &str| -> Option<String> {
        if name == IN_CLUSTER_NAME {
            return Some(IN_CLUSTER_SERVER.to_owned());
        }
        clusters.iter().find_map(|c| {
            let v = c.value();
            (v.get("name").and_then(Value::as_str) == Some(name)).then(|| {
                v.get("server")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })
        })
    };
    let (mut bad_sources, mut bad_destinations) = (0, 0);
    for app in apps.iter().filter(|a| a.summary.project == project) {
        let s = &app.summary;
        let permits = |r: &ProjectRules| s.repos.iter().all(|repo| r.check_source(project, repo).is_ok());
        if !s.repos.is_empty() && permits(&old_rules) && !permits(&new_rules) {
            bad_sources += 1;
        }
        let server = if s.dest_server.is_empty() {
            match server_of(&s.dest_name) {
                Some(server) => server,
                None => continue,
            }
        } else {
            s.dest_server.clone()
        };
        let namespace = app
            .value()
            .pointer("/spec/destination/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let permits = |r: &ProjectRules| {
            r.check_destination(project, &server, &s.dest_name, &namespace)
                .is_ok()
        };
        if permits(&old_rules) && !permits(&new_rules) {
            bad_destinations += 1;
        }
    }
    let mut parts = Vec::new();
    if bad_sources > 0 {
        parts.push(format!("the source of {bad_sources} application(s)"));
    }
    if bad_destinations > 0 {
        parts.push(format!("the destination of {bad_destinations} application(s)"));
    }
    if parts.is_empty() {
        Ok(())
    } else {
        Err(AppError::InvalidArgument(format!(
            "the update would make {} of project {project:?} invalid",
            parts.join(" and ")
        )))
    }
}

/// Deletes a project no application uses (`projects, delete`). `default` cannot be deleted.
pub async fn delete(ctx: Ctx, q: ProjectQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let state = &ctx.app;
    if q.name == DEFAULT_PROJECT {
        return Err(AppError::InvalidArgument(
            "the default project cannot be deleted".to_owned(),
        ));
    }
    let existing = authorized(state, principal, &q.name, "delete")?;
    // Checked under the registry's write lock, so no application can join in between.
    let unused = |registry: &crate::registry::Registry| {
        let (_, apps) = registry.list(Kind::Application);
        let users = apps.iter().filter(|a| a.summary.project == q.name).count();
        if users > 0 {
            return Err(AppError::FailedPrecondition(format!(
                "project {:?} is used by {users} application(s); delete them or move them to another project first",
                q.name
            )));
        }
        Ok(())
    };
    let change = Change::Delete {
        key: existing.key.clone(),
        expect: Some(existing.rv),
    };
    state.registry.apply_if(unused, vec![change]).await?;
    Ok(Reply::Message(Value::Object(Map::new())))
}
