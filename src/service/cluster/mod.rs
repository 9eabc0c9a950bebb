//! `cluster.ClusterService`: the clusters applications deploy to, stored in the registry under
//! their server URL, authorised with upstream's RBAC objects (`<server>`, or
//! `<project>/<server>` for a project-scoped cluster; a name is never an object).
//!
//! Clusters hold credentials: answers are built from the stored JSON with the credentials
//! removed (`crate::service::redact::cluster`), never sent as stored, and no message or log
//! line carries a cluster's configuration. A missing cluster and one the caller may not see
//! give the same answer (SEC-14): "not found" only to a caller allowed on the object
//! wherever it could live, the fixed "permission denied" to everyone else.
//!
//! A cluster's connection state and server version come from two places, combined in
//! `connection::combine`: what the application-controller wrote to its cache in Redis
//! (`controller_info`, the `info` upstream's argocd-server answers), and tiphys's own checks of
//! the cluster (`connection.rs`, `crate::clusters`). RotateAuth makes a new service-account token
//! inside the cluster (`rotate.rs`).

pub(crate) mod connection;
mod controller_info;
mod rotate;

pub use self::rotate::rotate_auth;
pub(crate) mod lookup;

use serde::Deserialize;
use serde_json::{Map, Value};

use self::lookup::{AppCounts, ClusterView, Entry, normalize_server};
pub use self::lookup::{ClusterId, Lookup, in_cluster_enabled, rbac_object};
use super::access::{Access, Missing};
use super::limits::{check_annotations, check_labels, string_map};
use super::project_rules::IN_CLUSTER_SERVER;
use super::redact;
use super::secret_name::{self, Claim};
use super::sensitive::{
    CLUSTER, CLUSTER_LIST, canonical, check_no_password, list, not_found, object_mut, write,
};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key, Kind};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

const RESOURCE: &str = "clusters";
const WHAT: &str = "cluster";

/// Fields callers may name in `updatedFields`, as upstream (plus `shard` and `config`).
const UPDATABLE: &[&str] = &[
    "name",
    "namespaces",
    "clusterResources",
    "labels",
    "annotations",
    "project",
    "shard",
    "config",
];

/// What the server owns in a cluster: never taken from a caller, never stored.
const SERVER_FIELDS: &[&str] = &["info", "connectionState", "serverVersion", "refreshRequestedAt"];

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `ClusterQuery` (List, Get, Delete, RotateAuth, InvalidateCache).
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct ClusterQuery {
    pub server: String,
    pub name: String,
    pub id: Option<ClusterId>,
    pub selector: String,
}

impl ClusterQuery {
    fn lookup(&self) -> Result<Lookup, AppError> {
        Lookup::from_parts(self.id.as_ref(), &self.server, &self.name)?
            .ok_or_else(|| AppError::InvalidArgument("name the cluster by server, name or id".to_owned()))
    }
}

/// The cluster `lookup` names if the caller may perform `action` on it; see the module
/// comment for what a missing or hidden cluster answers.
fn authorized(
    state: &ServerState,
    principal: &Principal,
    lookup: &Lookup,
    action: &str,
) -> Result<Entry, AppError> {
    Access::hidden(RESOURCE, action).load(
        state,
        principal,
        lookup::find(state, lookup),
        Entry::rbac_object,
        || {
            // Global or in any project: a name could be any cluster's.
            let objects = match lookup {
                Lookup::Server(server) => vec![server.clone(), format!("*/{server}")],
                Lookup::Name(_) => vec!["*".to_owned(), "*/*".to_owned()],
            };
            Missing::new(objects, not_found(&lookup.describe()))
        },
    )
}

/// A cluster as answered: credentials removed; its `info` the controller's (`cached`) if it
/// wrote one, else the application count; the connection state and server version combined
/// from the controller's and tiphys's own check (`shown`), and copied into the deprecated
/// top-level fields as upstream does.
fn answer(
    entry: &Entry,
    counts: &AppCounts,
    shown: connection::Shown,
    cached: Option<&Value>,
) -> Result<Value, AppError> {
    let mut value = entry.value.clone();
    redact::cluster(&mut value);
    if let Some(object) = value.as_object_mut() {
        for field in SERVER_FIELDS {
            object.remove(*field);
        }
        let info = connection::combine(cached, shown, counts.count(entry));
        controller_info::apply(object, &info);
    }
    canonical(CLUSTER, &value)
}

/// One cluster as answered; with `wait`, its connection is checked now if it never was.
async fn answer_one(state: &ServerState, entry: &Entry, wait: bool) -> Result<Reply, AppError> {
    // The controller's info (Redis) and tiphys's own check are independent: asked at once.
    let servers = [entry.server.as_str()];
    let (cached, shown) = tokio::join!(
        controller_info::load(state, &servers),
        connection::shown(state, entry, wait)
    );
    Ok(Reply::Message(answer(
        entry,
        &AppCounts::load(state),
        shown,
        cached.first().and_then(Option::as_ref),
    )?))
}

/// List: every cluster the caller may `get`, narrowed by the query's id, server and name.
pub async fn list_clusters(ctx: Ctx, q: ClusterQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let by_id = match q.id.as_ref().filter(|id| !id.value.is_empty()) {
        Some(id) => Some(Lookup::from_id(id)?),
        None => None,
    };
    let server = normalize_server(&q.server);
    let (resource_version, entries) = lookup::all(&ctx.app);
    let counts = AppCounts::load(&ctx.app);
    let visible: Vec<&Entry> = entries
        .iter()
        .filter(|e| by_id.as_ref().is_none_or(|l| l.matches(e)))
        .filter(|e| server.is_empty() || e.server == server)
        .filter(|e| q.name.is_empty() || e.name == q.name)
        .filter(|e| Access::hidden(RESOURCE, "get").allows(&ctx.app, principal, &e.rbac_object()))
        .collect();
    let servers: Vec<&str> = visible.iter().map(|e| e.server.as_str()).collect();
    let cached = controller_info::load(&ctx.app, &servers).await;
    let mut items = Vec::with_capacity(visible.len());
    for (entry, info) in visible.iter().zip(&cached) {
        // Never waits: a cluster not checked yet shows Unknown while it is.
        let own = connection::shown(&ctx.app, entry, false).await;
        items.push(answer(entry, &counts, own, info.as_ref())?);
    }
    Ok(Reply::Message(list(CLUSTER_LIST, resource_version, items)?))
}

pub async fn get(ctx: Ctx, q: ClusterQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let entry = authorized(&ctx.app, principal, &q.lookup()?, "get")?;
    answer_one(&ctx.app, &entry, true).await
}

/// InvalidateCache: drops the clients, credentials and connection state kept for the cluster,
/// and answers it checked anew, as upstream does, to a caller allowed to `update` it.
pub async fn invalidate_cache(ctx: Ctx, q: ClusterQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let entry = authorized(&ctx.app, principal, &q.lookup()?, "update")?;
    connection::forget(&ctx.app, &entry);
    answer_one(&ctx.app, &entry, true).await
}

/// What a caller sends, without what the server owns; the server URL without a trailing
/// slash; no `last-applied-configuration` (a full copy of the object, credentials included);
/// `namespaces` trimmed and without empty entries, gone when none is left: upstream keeps them
/// in the cluster's Secret as one comma-separated value and reads them back so
/// (`util/db/cluster.go`), and its CLI sends `[""]` for `cluster set --namespace '*'`, all
/// namespaces.
fn client_fields(mut value: Value) -> Value {
    if let Some(object) = object_mut(&mut value) {
        for field in SERVER_FIELDS {
            object.remove(*field);
        }
        if let Some(Value::String(server)) = object.get_mut("server") {
            *server = normalize_server(server);
        }
        if let Some(Value::Array(namespaces)) = object.get_mut("namespaces") {
            namespaces.retain_mut(|ns| match ns {
                Value::String(s) => {
                    *s = s.trim().to_owned();
                    !s.is_empty()
                }
                _ => true,
            });
            if namespaces.is_empty() {
                object.remove("namespaces");
            }
        }
        if let Some(annotations) = object.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(LAST_APPLIED);
        }
    }
    value
}

/// A cluster's server must be an http(s) URL with a host and without a password, its name
/// non-empty, and its labels and annotations within Kubernetes' limits (upstream keeps them on
/// the cluster's Secret).
fn validate(state: &ServerState, view: &ClusterView, value: &Value) -> Result<(), AppError> {
    let server = &view.server;
    if server.is_empty() {
        return Err(AppError::InvalidArgument(
            "server: cluster server is required".to_owned(),
        ));
    }
    check_no_password("cluster server", server)?;
    if let Err(why) = crate::config::http_url::parse(server) {
        return Err(AppError::InvalidArgument(format!(
            "server: invalid cluster server {server:?}: it {why}; it must be an http or https URL with a host"
        )));
    }
    check_labels("labels", string_map(value, "labels"))?;
    check_annotations("annotations", string_map(value, "annotations"))?;
    if view.name.trim().is_empty() {
        return Err(AppError::InvalidArgument("cluster name is required".to_owned()));
    }
    if view.name.chars().any(char::is_control) {
        return Err(AppError::InvalidArgument(
            "cluster name must not contain control characters".to_owned(),
        ));
    }
    if server == IN_CLUSTER_SERVER && !in_cluster_enabled(state) {
        return Err(AppError::FailedPrecondition(
            "the in-cluster destination is disabled (argocd-cm cluster.inClusterEnabled is \"false\")"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Names pick a cluster for applications, so two clusters cannot share one. `moving` is the
/// server of a cluster the write moves to `view.server`, whose name does not count.
fn check_name_free(entries: &[Entry], view: &ClusterView, moving: Option<&str>) -> Result<(), AppError> {
    if entries
        .iter()
        .any(|e| e.name == view.name && e.server != view.server && Some(e.server.as_str()) != moving)
    {
        Err(AppError::AlreadyExists(format!(
            "another cluster is named {:?}",
            view.name
        )))
    } else {
        Ok(())
    }
}

/// The change that stores `value` for `entry`'s server: an update of the stored cluster, or
/// the first write of the built-in one.
fn store(entry: &Entry, value: Value) -> Change {
    let key = Key::new(Kind::Cluster, "", &entry.server);
    match &entry.stored {
        Some(doc) => Change::Update {
            key,
            value,
            expect: Some(doc.rv),
        },
        None => Change::Create { key, value },
    }
}

async fn save(state: &ServerState, change: Change) -> Result<Reply, AppError> {
    let doc = write(state, WHAT, change).await?;
    answer_written(state, doc).await
}

async fn answer_written(state: &ServerState, doc: Option<DocRef>) -> Result<Reply, AppError> {
    let Some(doc) = doc else {
        return Ok(Reply::Message(Value::Object(Map::new())));
    };
    let entry = Entry::from_doc(doc);
    answer_one(state, &entry, false).await
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub cluster: Value,
    pub upsert: bool,
}

/// Create (`clusters, create`). An identical cluster is answered as is; a different one
/// needs `upsert` and `update` on both the stored and the new object. A body declared in the
/// Secret of a cluster at another server moves that cluster here (`secret_name`), with the
/// same needs.
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let mut value = client_fields(req.cluster);
    let view = ClusterView::read(&value);
    validate(&ctx.app, &view, &value)?;
    let access = Access::hidden(RESOURCE, "create");
    let object = rbac_object(&view.project, &view.server);
    access.check(&ctx.app, principal, &object)?;
    connection::reach_before_create(&ctx.app, &value).await?;
    let (_, entries) = lookup::all(&ctx.app);
    // Whoever holds the server or the name must be visible before either is said to be taken.
    for taken in entries
        .iter()
        .filter(|e| e.server == view.server || (!view.name.is_empty() && e.name == view.name))
    {
        access.check_taken(&ctx.app, principal, &object, &taken.rbac_object())?;
    }
    let existing = entries.iter().find(|e| e.server == view.server);
    secret_name::settle(&mut value, existing.map(|e| &e.value))?;
    let key = Key::new(Kind::Cluster, "", &view.server);
    let claim = secret_name::claim(
        &ctx.app,
        Kind::Cluster,
        &key,
        &value,
        existing.map(|e| &e.value),
        |holder| access.check_taken(&ctx.app, principal, &object, &stored_rbac_object(holder)),
    )?;
    if let Claim::Moves(from) = claim {
        check_name_free(&entries, &view, Some(&from.key.name))?;
        if !req.upsert {
            return Err(secret_name::move_needs_upsert(
                Kind::Cluster,
                &value,
                &from,
                &view.server,
            ));
        }
        let update = access.to("update");
        update.check(&ctx.app, principal, &stored_rbac_object(&from))?;
        update.check(&ctx.app, principal, &object)?;
        let doc = secret_name::move_to(&ctx.app, WHAT, &from, key, value).await?;
        return answer_written(&ctx.app, doc).await;
    }
    check_name_free(&entries, &view, None)?;
    let Some(existing) = existing else {
        return save(&ctx.app, Change::Create { key, value }).await;
    };
    if canonical(CLUSTER, &existing.value)? == canonical(CLUSTER, &value)? {
        return answer_one(&ctx.app, existing, false).await;
    }
    if !req.upsert {
        return Err(AppError::InvalidArgument(
            "existing cluster spec is different; use upsert flag to force update".to_owned(),
        ));
    }
    let update = access.to("update");
    update.check(&ctx.app, principal, &existing.rbac_object())?;
    update.check(&ctx.app, principal, &object)?;
    save(&ctx.app, store(existing, value)).await
}

/// The RBAC object of a stored cluster.
fn stored_rbac_object(doc: &DocRef) -> String {
    rbac_object(&doc.summary.project, &doc.key.name)
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct UpdateRequest {
    pub cluster: Value,
    pub updated_fields: Vec<String>,
    pub id: Option<ClusterId>,
}

/// Update: the cluster the id (else the body's server, else its name) names, replaced by the
/// body, or only in `updatedFields` when given. Checked on the stored object and on the
/// resulting one (SEC-15): a body naming another server, or moving the cluster to another
/// project, needs `update` there too, and a server URL never changes.
pub async fn update(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let body = client_fields(req.cluster);
    let body_view = ClusterView::read(&body);
    let lookup = Lookup::from_parts(req.id.as_ref(), &body_view.server, &body_view.name)?
        .ok_or_else(|| AppError::InvalidArgument("name the cluster by server, name or id".to_owned()))?;
    let existing = authorized(&ctx.app, principal, &lookup, "update")?;
    let update = Access::hidden(RESOURCE, "update");

    let mut value = if req.updated_fields.is_empty() {
        body
    } else {
        partial(&existing.value, &body, &req.updated_fields)?
    };
    if let Some(object) = object_mut(&mut value) {
        object.insert("server".to_owned(), Value::from(existing.server.clone()));
    }
    secret_name::settle(&mut value, Some(&existing.value))?;
    let view = ClusterView::read(&value);
    update.check(&ctx.app, principal, &rbac_object(&view.project, &view.server))?;
    if !body_view.server.is_empty() && body_view.server != existing.server {
        update.check(
            &ctx.app,
            principal,
            &rbac_object(&body_view.project, &body_view.server),
        )?;
        return Err(AppError::InvalidArgument(
            "a cluster's server URL cannot change: the body names another server than the cluster updated"
                .to_owned(),
        ));
    }
    validate(&ctx.app, &view, &value)?;
    let (_, entries) = lookup::all(&ctx.app);
    check_name_free(&entries, &view, None)?;
    let key = Key::new(Kind::Cluster, "", &existing.server);
    secret_name::check_free(&ctx.app, Kind::Cluster, &key, &value, |holder| {
        update.check_taken(
            &ctx.app,
            principal,
            &rbac_object(&view.project, &view.server),
            &stored_rbac_object(holder),
        )
    })?;
    save(&ctx.app, store(&existing, value)).await
}

/// The stored cluster with `fields` taken from `body` (a field absent there is cleared).
fn partial(stored: &Value, body: &Value, fields: &[String]) -> Result<Value, AppError> {
    let mut value = stored.clone();
    let Some(object) = object_mut(&mut value) else {
        return Ok(value);
    };
    for field in fields {
        if !UPDATABLE.contains(&field.as_str()) {
            return Err(AppError::InvalidArgument(format!(
                "updatedFields: {field:?} cannot be updated (one of {})",
                UPDATABLE.join(", ")
            )));
        }
        match body.get(field) {
            Some(v) => {
                object.insert(field.clone(), v.clone());
            }
            None => {
                object.remove(field);
            }
        }
    }
    Ok(value)
}

/// Delete (`clusters, delete` on the stored object). The built-in in-cluster destination is
/// not stored: it is turned off in argocd-cm, not deleted.
pub async fn delete(ctx: Ctx, q: ClusterQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let entry = authorized(&ctx.app, principal, &q.lookup()?, "delete")?;
    let Some(doc) = entry.stored else {
        return Err(AppError::FailedPrecondition(
            "the in-cluster destination is built in: set cluster.inClusterEnabled: \"false\" in argocd-cm to remove it"
                .to_owned(),
        ));
    };
    write(
        &ctx.app,
        WHAT,
        Change::Delete {
            key: doc.key.clone(),
            expect: Some(doc.rv),
        },
    )
    .await?;
    Ok(Reply::Message(Value::Object(Map::new())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn partial_updates_take_only_the_named_fields() {
        let stored = json!({"server": "https://x", "name": "a", "project": "p", "labels": {"k": "v"},
            "config": {"bearerToken": "t"}});
        let body = json!({"server": "https://other", "name": "b", "project": "q"});
        let value = partial(&stored, &body, &["name".to_owned(), "labels".to_owned()]).unwrap();
        assert_eq!(
            value,
            json!({"server": "https://x", "name": "b", "project": "p", "config": {"bearerToken": "t"}})
        );
        assert!(partial(&stored, &body, &["server".to_owned()]).is_err());
    }

    #[test]
    fn client_fields_drop_server_state_and_last_applied() {
        let value = client_fields(json!({
            "server": "https://x/", "info": {"applicationsCount": 9}, "connectionState": {"status": "Successful"},
            "annotations": {LAST_APPLIED: "{}", "a": "b"}
        }));
        assert_eq!(value, json!({"server": "https://x", "annotations": {"a": "b"}}));
    }

    #[test]
    fn client_fields_read_namespaces_as_upstreams_secret_does() {
        let value = client_fields(json!({"server": "https://x", "namespaces": [" a ", "", "b"]}));
        assert_eq!(value, json!({"server": "https://x", "namespaces": ["a", "b"]}));
        // `argocd cluster set --namespace '*'` sends one empty namespace: all of them.
        let value = client_fields(json!({"server": "https://x", "namespaces": [""]}));
        assert_eq!(value, json!({"server": "https://x"}));
    }
}
