//! What the application-controller reports of an application, read from its cache in Redis as
//! upstream's argocd-server reads it (server/application/application.go): the resource tree
//! (ResourceTree, WatchResourceTree), the managed resources with their diffs (ManagedResources),
//! and each resource's health in `status.resources` when the controller keeps it in the tree
//! (`status.resourceHealthSource: appTree`). Each needs `applications, get` on the application.
//!
//! Where they come from:
//! - beside the controller (the Kubernetes backend) with `--redis`: its cache. A read that finds
//!   nothing asks the controller to refresh the application and reads again, as upstream's
//!   `getCachedAppState` does;
//! - beside the controller without `--redis`: a clear error, the cache not being configured;
//! - without a controller (the embedded store, etcd): nothing is reported, and the answers are
//!   the empty ones upstream gives an application without resources.
//!
//! Secret values: the controller masks them (`hideSecretData` in controller/appcontroller.go)
//! before it writes the managed resources, so what is served is already masked, as upstream's.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt as _;
use futures_util::stream;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::authorized;
use super::watch::RECHECK;
use crate::controller_cache::{ControllerCache, instance_name};
use crate::error::AppError;
use crate::registry::DocRef;
use crate::service::{Ctx, Reply, StreamItem};
use crate::state::ServerState;

const NOT_CONFIGURED: &str = "the application controller's cache is not configured: start tiphys with \
     --redis <host:port of Argo CD's Redis> to serve resource trees and managed resources";

/// `ResourcesQuery`: an application, and for ManagedResources which of its resources.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourcesQuery {
    pub application_name: String,
    pub app_namespace: String,
    pub project: String,
    pub namespace: String,
    pub name: String,
    pub version: String,
    pub group: String,
    pub kind: String,
}

impl ResourcesQuery {
    /// The application, if the caller may `get` it.
    fn application(&self, state: &ServerState, ctx: &Ctx) -> Result<DocRef, AppError> {
        let principal = ctx.caller.require()?;
        authorized(
            state,
            principal,
            &self.app_namespace,
            &self.application_name,
            &self.project,
            "get",
        )
    }

    /// Upstream's `isMatchingResource`: each field given must match (the version is not
    /// compared).
    fn selects(&self, item: &Value) -> bool {
        let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or("");
        [
            (&self.name, "name"),
            (&self.namespace, "namespace"),
            (&self.group, "group"),
            (&self.kind, "kind"),
        ]
        .iter()
        .all(|(want, name)| want.is_empty() || field(name) == want.as_str())
    }
}

/// The controller's cache, when there is a controller; see the module comment.
pub(super) fn cache(state: &ServerState) -> Result<Option<Arc<ControllerCache>>, AppError> {
    if !state.registry.beside_controller() {
        return Ok(None);
    }
    state
        .controller_cache
        .clone()
        .map(Some)
        .ok_or_else(|| AppError::FailedPrecondition(NOT_CONFIGURED.to_owned()))
}

/// The name the controller files `doc` under.
pub(super) fn instance(state: &ServerState, doc: &DocRef) -> String {
    instance_name(&doc.key.namespace, &doc.key.name, &state.namespace)
}

pub async fn resource_tree(ctx: Ctx, q: ResourcesQuery) -> Result<Reply, AppError> {
    let doc = q.application(&ctx.app, &ctx)?;
    let Some(cache) = cache(&ctx.app)? else {
        return Ok(Reply::empty());
    };
    let name = instance(&ctx.app, &doc);
    let tree = read_or_refresh(&ctx.app, &doc, "resource tree", || cache.resource_tree(&name)).await?;
    Ok(Reply::Message(tree))
}

/// The managed resources the query selects, hooks left out, as upstream's ManagedResources.
pub async fn managed_resources(ctx: Ctx, q: ResourcesQuery) -> Result<Reply, AppError> {
    let doc = q.application(&ctx.app, &ctx)?;
    let Some(cache) = cache(&ctx.app)? else {
        return Ok(Reply::empty());
    };
    let name = instance(&ctx.app, &doc);
    let items = read_or_refresh(&ctx.app, &doc, "managed resources", || {
        cache.managed_resources(&name)
    })
    .await?;
    let items = selected(items, &q);
    let mut out = Map::new();
    if !items.is_empty() {
        out.insert("items".to_owned(), Value::Array(items));
    }
    Ok(Reply::Message(Value::Object(out)))
}

/// The managed resources `q` selects, hooks left out.
fn selected(items: Vec<Value>, q: &ResourcesQuery) -> Vec<Value> {
    items
        .into_iter()
        .filter(|item| item.get("hook") != Some(&Value::Bool(true)) && q.selects(item))
        .collect()
}

/// What `read` finds; when it finds nothing, the application's error conditions if it has any
/// (the controller will not write until they are gone), else what it finds once the controller
/// has refreshed the application.
pub(super) async fn read_or_refresh<T, Fut>(
    state: &ServerState,
    doc: &DocRef,
    what: &str,
    read: impl Fn() -> Fut,
) -> Result<T, AppError>
where
    Fut: Future<Output = Result<Option<T>, AppError>>,
{
    if let Some(found) = read().await? {
        return Ok(found);
    }
    if let Some(conditions) = blocking_conditions(&doc.value()) {
        return Err(AppError::FailedPrecondition(format!(
            "error getting cached app {what}: {conditions}"
        )));
    }
    super::refresh::refreshed(state, doc, "normal").await?;
    read().await?.ok_or_else(|| {
        AppError::Unavailable(format!(
            "the application controller has not written the {what} of {:?} to its cache, even after a refresh",
            doc.key.name
        ))
    })
}

/// The application's ComparisonError and InvalidSpecError conditions, as upstream's
/// `FormatAppConditions` writes them (`<type>: <message>`, joined by `;`).
fn blocking_conditions(app: &Value) -> Option<String> {
    let conditions = app.pointer("/status/conditions")?.as_array()?;
    let found: Vec<String> = conditions
        .iter()
        .filter_map(|c| {
            let kind = c.get("type")?.as_str()?;
            matches!(kind, "ComparisonError" | "InvalidSpecError").then(|| {
                let message = c.get("message").and_then(Value::as_str).unwrap_or("");
                format!("{kind}: {message}")
            })
        })
        .collect();
    (!found.is_empty()).then(|| found.join(";"))
}

/// The tree as a stream: the current tree first when the controller has written one, then the
/// tree each time the controller announces a new one. (Upstream sends only the announced ones;
/// the first spares a client the race between its ResourceTree call and its subscription.) The
/// caller's session and access are checked before each tree and every [`RECHECK`] while quiet.
pub async fn watch_resource_tree(ctx: Ctx, q: ResourcesQuery) -> Result<Reply, AppError> {
    let doc = q.application(&ctx.app, &ctx)?;
    let Some(cache) = cache(&ctx.app)? else {
        // No controller: the empty tree, then nothing; the stream stays open as the UI expects.
        let first = stream::once(async { Ok(StreamItem::Message(Value::Object(Map::new()))) });
        return Ok(Reply::Stream(first.chain(stream::pending()).boxed()));
    };
    let name = instance(&ctx.app, &doc);
    let changes = cache.tree_changes(&name).await?.boxed();
    let current = cache.resource_tree(&name).await?;
    let state = Arc::clone(&ctx.app);
    let expires = super::watch::session_end(&ctx.caller);
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + RECHECK, RECHECK);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let follow = Follow {
        state,
        ctx,
        query: q,
        cache,
        name,
        changes,
        recheck,
        expires,
    };
    let first = stream::iter(current.map(|tree| Ok(StreamItem::Message(tree))));
    let live = stream::unfold(Some(follow), |follow| async move {
        let mut follow = follow?;
        let next = follow.next().await;
        let go_on = next.is_ok();
        Some((next.map(StreamItem::Message), go_on.then_some(follow)))
    });
    Ok(Reply::Stream(first.chain(live).boxed()))
}

/// A tree stream after its first message.
struct Follow {
    state: Arc<ServerState>,
    ctx: Ctx,
    query: ResourcesQuery,
    cache: Arc<ControllerCache>,
    name: String,
    changes: stream::BoxStream<'static, Result<(), AppError>>,
    recheck: tokio::time::Interval,
    expires: Option<tokio::time::Instant>,
}

impl Follow {
    /// The next tree to send, or why the stream ends.
    async fn next(&mut self) -> Result<Value, AppError> {
        loop {
            let expiry = super::watch::until(self.expires);
            tokio::select! {
                change = self.changes.next() => {
                    change.unwrap_or_else(|| Err(AppError::Unavailable("the tree stream ended".to_owned())))?;
                    self.still_allowed().await?;
                    if let Some(tree) = self.cache.resource_tree(&self.name).await? {
                        return Ok(tree);
                    }
                }
                () = expiry => return Err(AppError::Unauthenticated("session expired: log in again".to_owned())),
                _ = self.recheck.tick() => self.still_allowed().await?,
            }
        }
    }

    /// The session is still valid and the caller may still `get` the application (a denial is
    /// audited as any). (Of the fields it needs: the stream of changes is not `Sync`.)
    async fn still_allowed(&mut self) -> Result<(), AppError> {
        let (state, ctx) = (&self.state, &self.ctx);
        state.auth.authenticator.revalidate(&ctx.caller).await?;
        self.query.application(state, ctx).map(drop)
    }
}

/// `doc` as Get answers it: with each resource's health from the tree when the controller keeps
/// it there (`status.resourceHealthSource: appTree`), as upstream's `inferResourcesStatusHealth`.
/// Without the tree (not written yet, Redis unreachable) the resources stay as stored, as
/// upstream leaves them.
pub(crate) async fn with_tree_health(state: &ServerState, doc: DocRef) -> Reply {
    let from_tree = doc
        .value()
        .pointer("/status/resourceHealthSource")
        .and_then(Value::as_str)
        == Some("appTree");
    let Ok(Some(cache)) = cache(state) else {
        return Reply::Doc(doc);
    };
    if !from_tree {
        return Reply::Doc(doc);
    }
    let tree = match cache.resource_tree(&instance(state, &doc)).await {
        Ok(Some(tree)) => tree,
        Ok(None) => return Reply::Doc(doc),
        Err(e) => {
            tracing::debug!(app = doc.key.name, "resource health left as stored: {e}");
            return Reply::Doc(doc);
        }
    };
    let mut value = doc.value();
    fill_health(&mut value, &tree);
    Reply::Message(value)
}

/// Sets `status.resources[].health` of `app` from the nodes of `tree`: a node's health, or
/// Missing for a node of a resource not created yet; none for a resource without a node.
fn fill_health(app: &mut Value, tree: &Value) {
    let key = |v: &Value| {
        let field = |name: &str| v.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
        (field("group"), field("kind"), field("namespace"), field("name"))
    };
    let mut health = HashMap::new();
    for node in tree.get("nodes").and_then(Value::as_array).into_iter().flatten() {
        let blank = |field: &str| node.get(field).is_none_or(|v| v.as_str() == Some(""));
        if let Some(h) = node.get("health").filter(|h| !h.is_null()) {
            health.insert(key(node), h.clone());
        } else if blank("resourceVersion") && blank("uid") && node.get("createdAt").is_none_or(Value::is_null)
        {
            health.insert(
                key(node),
                serde_json::json!({"status": "Missing", "message": "Resource has not been created"}),
            );
        }
    }
    let Some(resources) = app.pointer_mut("/status/resources").and_then(Value::as_array_mut) else {
        return;
    };
    for resource in resources {
        let found = health.get(&key(resource)).cloned();
        if let Some(resource) = resource.as_object_mut() {
            match found {
                Some(h) => resource.insert("health".to_owned(), h),
                None => resource.remove("health"),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn health_comes_from_the_tree_and_missing_nodes_are_missing() {
        let mut app = json!({"status": {"resourceHealthSource": "appTree", "resources": [
            {"kind": "ConfigMap", "namespace": "n", "name": "a", "status": "Synced"},
            {"group": "apps", "kind": "Deployment", "namespace": "n", "name": "d", "health": {"status": "Old"}},
            {"kind": "Secret", "namespace": "n", "name": "gone"},
        ]}});
        let tree = json!({"nodes": [
            {"kind": "ConfigMap", "namespace": "n", "name": "a", "uid": "1", "health": {"status": "Healthy"}},
            {"group": "apps", "kind": "Deployment", "namespace": "n", "name": "d", "uid": "2"},
            {"kind": "Secret", "namespace": "n", "name": "gone"},
        ]});
        fill_health(&mut app, &tree);
        let resources = &app["status"]["resources"];
        assert_eq!(resources[0]["health"], json!({"status": "Healthy"}));
        assert_eq!(resources[0]["status"], "Synced");
        // Created (it would have a uid) but without health: none, as upstream.
        assert_eq!(resources[1].get("health"), None);
        assert_eq!(
            resources[2]["health"],
            json!({"status": "Missing", "message": "Resource has not been created"})
        );
    }

    #[test]
    fn queries_select_as_upstreams_is_matching_resource() {
        let item = json!({"group": "apps", "kind": "Deployment", "namespace": "n", "name": "d"});
        let q = |f: fn(&mut ResourcesQuery)| {
            let mut q = ResourcesQuery::default();
            f(&mut q);
            q.selects(&item)
        };
        assert!(q(|_| {}));
        assert!(q(|q| q.kind = "Deployment".into()));
        assert!(q(|q| q.version = "v2".into()));
        assert!(!q(|q| q.group = "batch".into()));
        assert!(!q(|q| q.name = "e".into()));
        assert!(!q(|q| q.namespace = "m".into()));
    }

    /// On what the real controller wrote (see `controller_cache::decode`'s tests), with a hook
    /// added: hooks are never listed, and each filter narrows.
    #[test]
    fn managed_resources_leave_hooks_out_and_filter() {
        let captured = include_bytes!("../../controller_cache/testdata/managed.json.gz");
        let (Value::Array(mut items), _) =
            crate::controller_cache::decode::decode(captured, 1 << 20).unwrap()
        else {
            panic!("not a list");
        };
        let count = items.len();
        items.push(json!({"kind": "Pod", "namespace": "n", "name": "pre-sync", "hook": true}));
        let names = |q: ResourcesQuery| -> Vec<String> {
            selected(items.clone(), &q)
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(names(ResourcesQuery::default()).len(), count);
        let kind = |kind: &str| ResourcesQuery {
            kind: kind.to_owned(),
            ..ResourcesQuery::default()
        };
        assert!(names(kind("Pod")).is_empty());
        assert_eq!(names(kind("Secret")), ["tree-secret"]);
        assert_eq!(
            names(ResourcesQuery {
                group: "apps".to_owned(),
                ..kind("Deployment")
            }),
            ["tree"]
        );
    }

    #[test]
    fn only_comparison_and_spec_errors_block_a_refresh() {
        let app = json!({"status": {"conditions": [
            {"type": "ComparisonError", "message": "repo unreachable"},
            {"type": "SyncError", "message": "x"},
            {"type": "InvalidSpecError", "message": "bad"},
        ]}});
        assert_eq!(
            blocking_conditions(&app).as_deref(),
            Some("ComparisonError: repo unreachable;InvalidSpecError: bad")
        );
        assert_eq!(
            blocking_conditions(&json!({"status": {"conditions": [{"type": "SyncError"}]}})),
            None
        );
    }
}
