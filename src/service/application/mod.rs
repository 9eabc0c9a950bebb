//! `application.ApplicationService`: Applications in the registry, authorised per object with
//! upstream's RBAC objects (`<project>/<name>`, or `<project>/<namespace>/<name>` outside the
//! server's namespace) and checked against their project's restrictions.
//!
//! A missing application and one the caller may not see give the same answer (SEC-13): a
//! caller who could see an application of that name gets "not found", anyone else gets the
//! same fixed "permission denied" as for an existing application they may not see.

mod actions;
mod deletion;
mod links;
mod live;
mod logs;
mod masking;
mod refresh;
mod rendered;
mod resources;
pub(crate) mod selector;
pub mod source;
mod sync;
pub(crate) mod watch;

use serde::Deserialize;
use serde_json::{Map, Value};

pub use self::actions::{list_resource_actions, run_resource_action, run_resource_action_v2};
pub use self::links::{list_links, list_resource_links};
pub use self::live::{delete_resource, get_resource, list_events, patch_resource};
pub use self::logs::pod_logs;
pub use self::resources::{ResourcesQuery, managed_resources, resource_tree, watch_resource_tree};
use self::selector::Selector;
pub use self::sync::{rollback, sync, terminate_operation};
pub use self::watch::watch;
use super::access::{Access, Missing};
use super::limits::{check_annotations, check_labels, check_namespace, check_object_name};
use super::project_rules::ProjectRules;
use super::resource::{check_repo_url, parse_resource_version};
use super::sensitive::check_no_password;
use super::sync_windows::{Assignment, SyncWindow, Target};
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::{HIDDEN_DENIAL, Refusal};
use crate::registry::{Change, DocRef, Key, Kind};

use crate::app::App;
use crate::service::{Ctx, Reply};

const RESOURCE: &str = "applications";
/// How long a write whose application other writes keep changing between its check and its
/// commit goes on trying, and how many attempts it makes at most. Upstream's `updateApp`
/// (server/application/application.go) tries ten times against the API server; a writer here
/// can lose more often in a row (a busy writer's commits are grouped), so the bound is in time.
const RECHECK_FOR: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_ATTEMPTS: u32 = 1000;
/// The longest pause between attempts.
const MAX_PAUSE_MS: u64 = 8;

/// Runs `attempt` (read the application, authorize against what it read, write on the
/// condition that it is still that version) again when another write came in between, so the
/// check always judges the very object the write replaces: a move into another project cannot
/// slip between them.
pub(crate) async fn rechecked<T, Fut>(mut attempt: impl FnMut() -> Fut) -> Result<T, AppError>
where
    Fut: Future<Output = Result<T, AppError>>,
{
    let deadline = tokio::time::Instant::now() + RECHECK_FOR;
    let mut tried = 0;
    loop {
        tried += 1;
        match attempt().await {
            // A short random pause lets a writer that keeps winning the race finish its turn,
            // so the loser's next read is not already stale.
            Err(AppError::Aborted(_)) if tried < MAX_ATTEMPTS && tokio::time::Instant::now() < deadline => {
                let jitter = u64::from(crate::random::bytes(1)[0]) % MAX_PAUSE_MS + 1;
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
            done => return done,
        }
    }
}

/// `ApplicationQuery` (List, Get, Watch).
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct AppQuery {
    pub name: String,
    pub projects: Vec<String>,
    pub project: Vec<String>,
    pub resource_version: String,
    pub selector: String,
    pub repo: String,
    pub app_namespace: String,
    /// Get: `normal` or `hard` asks the controller to compare again, and answers once it has.
    pub refresh: Option<String>,
}

/// The RBAC object of an application (upstream's `RBACName`).
pub fn rbac_object(server_ns: &str, project: &str, app_ns: &str, name: &str) -> String {
    if app_ns.is_empty() || app_ns == server_ns {
        format!("{project}/{name}")
    } else {
        format!("{project}/{app_ns}/{name}")
    }
}

fn doc_object(state: &App, doc: &DocRef) -> String {
    rbac_object(
        &state.namespace,
        &doc.summary.project,
        &doc.key.namespace,
        &doc.key.name,
    )
}

fn namespace_of(state: &App, requested: &str) -> String {
    if requested.is_empty() {
        state.namespace.clone()
    } else {
        requested.to_owned()
    }
}

/// Whether applications in `ns` are served: the control namespace, or one that
/// `--application-namespaces` enables (upstream's `isNamespaceEnabled`).
pub(crate) fn served(state: &App, ns: &str) -> bool {
    state.app_namespaces.enabled(ns, &state.namespace)
}

/// The refusal of an application in a namespace that is not served, recorded once; `message`
/// is upstream's answer where it refuses the same request.
fn not_served(state: &App, principal: &Principal, object: &str, message: String) -> AppError {
    super::access::refuse(state, principal, Refusal::AppNamespace, object, message)
}

/// Does a query (projects, repo, selector, name) select this application?
struct Filter {
    /// The control namespace and the enabled ones: what is never shown outside them.
    control: String,
    enabled: crate::kubernetes::AppNamespaces,
    projects: Vec<String>,
    repo: String,
    selector: Selector,
    name: String,
    namespace: Option<String>,
}

impl Filter {
    fn new(state: &App, q: &AppQuery) -> Result<Self, AppError> {
        Ok(Self {
            control: state.namespace.clone(),
            enabled: state.app_namespaces.clone(),
            projects: q.projects.iter().chain(&q.project).cloned().collect(),
            repo: q.repo.clone(),
            selector: Selector::parse(&q.selector)?,
            name: q.name.clone(),
            namespace: (!q.app_namespace.is_empty()).then(|| q.app_namespace.clone()),
        })
    }

    fn matches(&self, doc: &DocRef) -> bool {
        self.enabled.enabled(&doc.key.namespace, &self.control)
            && (self.projects.is_empty() || self.projects.contains(&doc.summary.project))
            && (self.repo.is_empty() || doc.summary.repos.iter().any(|r| same_repo(r, &self.repo)))
            && (self.name.is_empty() || doc.key.name == self.name)
            && self.namespace.as_ref().is_none_or(|ns| &doc.key.namespace == ns)
            && self.selector.matches(&doc.summary.labels)
    }
}

/// Repository URLs compare without a trailing `/` or `.git` and case-insensitively.
fn same_repo(a: &str, b: &str) -> bool {
    let norm = |u: &str| {
        let u = u.trim_end_matches('/');
        u.strip_suffix(".git").unwrap_or(u).to_ascii_lowercase()
    };
    norm(a) == norm(b)
}

pub async fn list(ctx: Ctx, q: AppQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let filter = Filter::new(&ctx.app, &q)?;
    let (resource_version, docs) = ctx.app.registry.list(Kind::Application);
    let items = Access::hidden(RESOURCE, "get").visible(
        &ctx.app,
        principal,
        docs.into_iter().filter(|doc| filter.matches(doc)),
        |doc| doc_object(&ctx.app, doc),
    );
    Ok(Reply::List {
        resource_version,
        items,
    })
}

/// The application `name` in `app_ns` if the caller may perform `action` on it. See the module
/// comment for what a missing or hidden application answers.
fn authorized(
    state: &App,
    principal: &Principal,
    app_ns: &str,
    name: &str,
    project_hint: &str,
    action: &str,
) -> Result<DocRef, AppError> {
    let ns = namespace_of(state, app_ns);
    if !app_ns.is_empty() {
        check_namespace(&ns)?;
    }
    if !served(state, &ns) {
        // Upstream answers a namespace it does not serve as it answers a hidden application,
        // whoever asks and whatever project they name.
        let project = if project_hint.is_empty() {
            "*"
        } else {
            project_hint
        };
        let object = rbac_object(&state.namespace, project, &ns, name);
        return Err(not_served(state, principal, &object, HIDDEN_DENIAL.to_owned()));
    }
    // An application outside the project the caller named is answered as missing: the answer
    // must not depend on whether a same-named application exists elsewhere (SEC-13).
    let found = state
        .registry
        .get(&Key::new(Kind::Application, &ns, name))
        .filter(|doc| project_hint.is_empty() || doc.summary.project == project_hint);
    Access::hidden(RESOURCE, action).load(
        state,
        principal,
        found,
        |doc| doc_object(state, doc),
        || {
            let project = if project_hint.is_empty() {
                "*"
            } else {
                project_hint
            };
            Missing::at(
                rbac_object(&state.namespace, project, &ns, name),
                AppError::NotFound(format!("applications.argoproj.io \"{name}\" not found")),
            )
        },
    )
}

pub async fn get(ctx: Ctx, q: AppQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let project = q
        .projects
        .first()
        .or(q.project.first())
        .cloned()
        .unwrap_or_default();
    let doc = authorized(&ctx.app, principal, &q.app_namespace, &q.name, &project, "get")?;
    let doc = match &q.refresh {
        Some(kind) if ctx.app.registry.beside_controller() => {
            refresh::refreshed(&ctx.app, &doc, kind).await?
        }
        _ => doc,
    };
    Ok(resources::with_tree_health(&ctx.app, doc).await)
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub application: Value,
    pub upsert: Option<bool>,
    pub validate: Option<bool>,
}

/// What the use cases read of an application.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct AppView {
    metadata: MetaView,
    spec: SpecView,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
struct MetaView {
    name: String,
    namespace: String,
    resource_version: String,
    labels: std::collections::BTreeMap<String, String>,
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct SpecView {
    project: String,
    source: Option<SourceView>,
    sources: Vec<SourceView>,
    destination: DestView,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct SourceView {
    #[serde(rename = "repoURL")]
    repo_url: String,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct DestView {
    server: String,
    name: String,
    namespace: String,
}

impl AppView {
    /// The view of a stored (canonical) application.
    fn read(value: &Value) -> Result<Self, AppError> {
        Self::deserialize(value).map_err(|e| AppError::InvalidArgument(format!("invalid application: {e}")))
    }

    /// A caller's application as it would be stored (types checked, and a wrong one reported
    /// with its field; unknown fields dropped), with its view.
    fn canonical(value: Value) -> Result<(Value, Self), AppError> {
        let schema = crate::schema::Schema::get();
        let desc = schema
            .message(Kind::Application.message())
            .map_err(|e| AppError::Internal(e.into()))?;
        let msg = schema
            .from_json(&desc, &value)
            .map_err(|e| AppError::InvalidArgument(format!("invalid application: {e}")))?;
        let value = schema.to_json(&msg);
        let view = Self::read(&value)?;
        Ok((value, view))
    }

    fn project(&self) -> &str {
        if self.spec.project.is_empty() {
            "default"
        } else {
            &self.spec.project
        }
    }
}

/// Checks an application against its project and the server's rules; returns its key.
/// `principal` is who asks, for the record of a refusal by the project.
fn validate(state: &App, principal: &Principal, app: &AppView) -> Result<Key, AppError> {
    check_object_name("application", &app.metadata.name)?;
    let ns = namespace_of(state, &app.metadata.namespace);
    check_namespace(&ns)?;
    let meta = &app.metadata;
    check_labels(
        "metadata.labels",
        meta.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )?;
    check_annotations(
        "metadata.annotations",
        meta.annotations.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )?;
    let project = app.project();
    let rules = ProjectRules::load(&state.registry, &state.namespace, project)?;
    rules
        .check_app_namespace(project, &ns, &state.namespace)
        .map_err(|message| {
            let object = rbac_object(&state.namespace, project, &ns, &app.metadata.name);
            super::access::refuse(state, principal, Refusal::ProjectRule, &object, message)
        })?;
    // Each source with the field it is at, for messages.
    let sources: Vec<(String, &SourceView)> = (app.spec.source.iter())
        .map(|s| ("spec.source".to_owned(), s))
        .chain(
            app.spec
                .sources
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("spec.sources[{i}]"), s)),
        )
        .collect();
    if sources.is_empty() {
        return Err(AppError::InvalidArgument(
            "application spec is invalid: at least one source is required (spec.source or spec.sources)"
                .to_owned(),
        ));
    }
    for (at, source) in sources {
        if source.repo_url.is_empty() {
            return Err(AppError::InvalidArgument(format!(
                "application spec is invalid: a source has no repoURL ({at}.repoURL)"
            )));
        }
        check_repo_url(&format!("{at}.repoURL"), &source.repo_url)?;
        check_no_password("application source repoURL", &source.repo_url)?;
        rules.check_source(project, &source.repo_url)?;
    }
    let dest = &app.spec.destination;
    let server = match (dest.server.is_empty(), dest.name.is_empty()) {
        (false, false) => {
            return Err(AppError::InvalidArgument(
                "application destination can't have both name and server defined".to_owned(),
            ));
        }
        (true, true) => {
            return Err(AppError::InvalidArgument(
                "application destination has neither a server nor a name".to_owned(),
            ));
        }
        (false, true) => dest.server.clone(),
        (true, false) => cluster_server_by_name(state, &dest.name)?,
    };
    check_no_password("application destination server", &dest.server)?;
    rules.check_destination(project, &server, &dest.name, &dest.namespace)?;
    if dest.name.is_empty() {
        check_cluster_configured(state, &app.metadata.name, &server)?;
    }
    for (key, value) in &app.metadata.annotations {
        if key.starts_with("link.argocd.argoproj.io/") {
            let lower = value.trim().to_ascii_lowercase();
            if !(lower.starts_with("https://") || lower.starts_with("http://")) {
                return Err(AppError::InvalidArgument(format!(
                    "annotation {key}: only http and https links are accepted"
                )));
            }
        }
    }
    // Last, as upstream's Create checks it after the application itself.
    if !served(state, &ns) {
        let object = rbac_object(&state.namespace, project, &ns, &app.metadata.name);
        return Err(not_served(
            state,
            principal,
            &object,
            format!("namespace '{ns}' is not permitted"),
        ));
    }
    Ok(Key::new(Kind::Application, &ns, &app.metadata.name))
}

/// A destination server must be a cluster tiphys knows (the in-cluster destination included
/// while it is enabled), as upstream's `ValidatePermissions` (util/argo/argo.go) requires, with
/// its words.
fn check_cluster_configured(state: &App, app_name: &str, server: &str) -> Result<(), AppError> {
    use super::cluster::lookup::{Lookup, find, normalize_server};
    if find(state, &Lookup::Server(normalize_server(server))).is_some() {
        return Ok(());
    }
    Err(AppError::InvalidArgument(format!(
        "application spec for {app_name} is invalid: InvalidSpecError: cluster '{}' has not been configured",
        crate::urlmask::mask(server)
    )))
}

/// The server URL of the cluster named `name` (the in-cluster destination included while it is
/// enabled).
fn cluster_server_by_name(state: &App, name: &str) -> Result<String, AppError> {
    use super::cluster::lookup::{Lookup, find};
    find(state, &Lookup::Name(name.to_owned()))
        .map(|cluster| cluster.server)
        .ok_or_else(|| {
            AppError::InvalidArgument(format!(
                "unable to find destination server: there are no clusters with this name: {name}"
            ))
        })
}

/// Removes what callers may not set on create or update: the controller's `status` and,
/// unless kept from the stored object, the `operation`.
/// An empty `spec.project` is stored as `default`, the project it means.
fn client_fields(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
        object.remove("operation");
    }
    default_project(&mut value);
    value
}

/// An empty or missing `spec.project` means `default`; a value of the wrong type is left for
/// the schema to refuse.
fn default_project(value: &mut Value) {
    if let Some(spec) = value.get_mut("spec").and_then(Value::as_object_mut) {
        let empty = match spec.get("project") {
            None | Some(Value::Null) => true,
            Some(Value::String(p)) => p.is_empty(),
            Some(_) => false,
        };
        if empty {
            spec.insert("project".to_owned(), Value::from("default"));
        }
    }
}

/// `value` with `status` and `operation` taken from the stored object.
fn keep_server_fields(mut value: Value, stored: &Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        for field in ["status", "operation"] {
            match stored.get(field) {
                Some(v) => {
                    object.insert(field.to_owned(), v.clone());
                }
                None => {
                    object.remove(field);
                }
            }
        }
    }
    value
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
async fn write(state: &App, principal: &Principal, app: &AppView, change: Change) -> Result<Reply, AppError> {
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
fn onto_latest(mut stored: Value, body: &Value) -> Value {
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
async fn replace(
    state: &App,
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
async fn edit(
    state: &App,
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
fn patched(mut value: Value, patch: &Value, patch_type: &str) -> Result<Value, AppError> {
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
fn assigned_windows(state: &App, app: &AppView) -> Assignment {
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
