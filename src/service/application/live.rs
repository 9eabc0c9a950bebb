//! An application's live resources in its destination cluster, as upstream's argocd-server
//! serves them (server/application/application.go: `getAppLiveResource`, GetResource,
//! PatchResource, DeleteResource, ListResourceEvents).
//!
//! Each call first authorizes (`get` to read; `update` or `delete` to change, with upstream
//! 3.x's fine-grained `<action>/<group>/<kind>/<namespace>/<name>`, see [`authorize`]), then
//! requires the resource to be in the application's tree as the controller last wrote it (a
//! caller may only reach what the application manages), then asks the cluster the application
//! deploys to: its kind resolved by discovery, every call bounded by the cluster timeout. A
//! Secret is answered masked (`masking.rs`), and a Secret's failed patch says nothing of why: the
//! API server's message could quote the values.

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, DynamicObject, GetParams, ListParams, PatchParams, PropagationPolicy};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use serde::Deserialize;
use serde_json::{Value, json};

use super::masking;
use super::resources::{cache, instance, read_or_refresh};
use super::{RESOURCE, authorized, doc_object, namespace_of};
use crate::clusters::{ClusterError, Clusters, Target};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{DocRef, Key, Kind};
use crate::service::access::Access;
use crate::service::cluster::connection;
use crate::service::cluster::lookup::{self, Lookup};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// argocd-cm's switch between upstream 3.x's two ways of authorizing a change of a resource.
const INHERITANCE_KEY: &str = "server.rbac.disableApplicationFineGrainedRBACInheritance";
/// The patch types upstream's clients send; the API server knows no others that apply here
/// (server-side apply needs a field manager upstream never gives).
const PATCH_TYPES: [&str; 3] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
/// How long a read of the control cluster's events may take (with `--cluster-access off` there
/// is no cluster timeout to borrow).
const CONTROL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `ApplicationResourceRequest`.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
pub struct ResourceRequest {
    pub name: String,
    pub app_namespace: String,
    pub namespace: String,
    pub resource_name: String,
    pub version: String,
    pub group: String,
    pub kind: String,
    pub project: String,
}

/// `ApplicationResourcePatchRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct PatchRequest {
    #[serde(flatten)]
    pub resource: ResourceRequest,
    pub patch: String,
    pub patch_type: String,
}

/// `ApplicationResourceDeleteRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct DeleteRequest {
    #[serde(flatten)]
    pub resource: ResourceRequest,
    pub force: Option<bool>,
    pub orphan: Option<bool>,
}

/// `ApplicationResourceEventsQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct EventsQuery {
    pub name: String,
    pub app_namespace: String,
    pub project: String,
    pub resource_namespace: String,
    pub resource_name: String,
    #[serde(rename = "resourceUID")]
    pub resource_uid: String,
}

/// The live manifest of one of the application's resources.
pub async fn get_resource(ctx: Ctx, q: ResourceRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorize(&ctx.app, principal, &q, "get")?;
    let obj = live_object(&ctx.app, &doc, &q).await?;
    Ok(manifest(&ctx.app, obj))
}

/// The live object `q` names, read from the cluster, if the application's tree has it (not
/// masked: see [`masked`]).
pub(super) async fn live_object(
    state: &ServerState,
    doc: &DocRef,
    q: &ResourceRequest,
) -> Result<Value, AppError> {
    let mut live = locate(state, doc, q).await?;
    if !q.version.is_empty() {
        live.version.clone_from(&q.version);
    }
    live.fetch().await
}

/// A patch of the live resource, answered with what the cluster made of it.
pub async fn patch_resource(ctx: Ctx, q: PatchRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let request = &q.resource;
    let doc = authorize(&ctx.app, principal, request, "update")?;
    let Some(patch_type) = PATCH_TYPES.iter().copied().find(|t| *t == q.patch_type) else {
        return Err(AppError::InvalidArgument(format!(
            "unknown patchType {:?}: use one of {}",
            q.patch_type,
            PATCH_TYPES.join(", ")
        )));
    };
    let live = locate(&ctx.app, &doc, request).await?;
    let body = q.patch.as_bytes().to_vec();
    let secret = live.kind == "Secret" && live.group.is_empty();
    let outcome = live
        .run("patch", "error patching resource", |api, name| {
            raw_patch(api, name, patch_type, body.clone())
        })
        .await;
    let obj = match outcome {
        // The API server's message may quote the Secret's values: say only what failed, as
        // upstream does (in the code the failure would have had).
        Err(err) if secret => {
            return Err(with_message(
                err,
                format!("failed to patch Secret {}/{}", live.namespace, live.name),
            ));
        }
        other => other?,
    };
    Ok(manifest(&ctx.app, obj))
}

/// Deletes the live resource: `orphan` leaves its dependents, `force` deletes at once (in the
/// background), otherwise the dependents go first (Foreground), as upstream chooses.
pub async fn delete_resource(ctx: Ctx, q: DeleteRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let request = &q.resource;
    let doc = authorize(&ctx.app, principal, request, "delete")?;
    let live = locate(&ctx.app, &doc, request).await?;
    let params = delete_params(q.orphan == Some(true), q.force == Some(true));
    live.run("delete", "error deleting resource", |api, name| {
        let params = params.clone();
        async move { api.delete(&name, &params).await.map(drop) }
    })
    .await?;
    Ok(Reply::Message(json!({})))
}

/// Upstream's choice of deletion options (orphan wins over force).
fn delete_params(orphan: bool, force: bool) -> DeleteParams {
    if orphan {
        DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..DeleteParams::default()
        }
    } else if force {
        DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        }
    } else {
        DeleteParams::foreground()
    }
}

/// The events of the application (from the cluster tiphys keeps it in) or, when a resource is
/// named, of that resource (from the destination; it must be in the tree, by uid too).
pub async fn list_events(ctx: Ctx, q: EventsQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.app_namespace, &q.name, &q.project, "get")?;
    if q.resource_name.is_empty() && q.resource_uid.is_empty() {
        // Without the API server (the embedded store, etcd) an application has no events.
        let Some(control) = ctx.app.kube.clone() else {
            return Ok(Reply::Message(json!({"metadata": {}})));
        };
        let value = doc.value();
        let uid = value
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let selector = involving(&doc.key.name, uid, &doc.key.namespace);
        let listed = tokio::time::timeout(
            CONTROL_TIMEOUT,
            events(control, doc.key.namespace.clone(), selector),
        )
        .await
        .map_err(|_| {
            AppError::Unavailable(format!(
                "listing the application's events took over {CONTROL_TIMEOUT:?}"
            ))
        })?
        .map_err(|e| AppError::Unavailable(format!("error listing resource events: {e}")))?;
        return Ok(Reply::Message(listed));
    }
    let tree = match tree(&ctx.app, &doc).await {
        Ok(tree) => tree,
        Err(err) => return Err(explained(&ctx.app, &doc, err).await),
    };
    let found = nodes(&tree).any(|n| {
        field(n, "uid") == q.resource_uid
            && field(n, "name") == q.resource_name
            && field(n, "namespace") == q.resource_namespace
    });
    if !found {
        let err = AppError::InvalidArgument(format!(
            "{} not found as part of application {}",
            q.resource_name, q.name
        ));
        return Err(explained(&ctx.app, &doc, err).await);
    }
    let (clusters, target, server) = destination(&ctx.app, &doc)?;
    let selector = involving(&q.resource_name, &q.resource_uid, &q.resource_namespace);
    let namespace = q.resource_namespace.clone();
    let listed = clusters
        .call(&target, |client| {
            events(client, namespace.clone(), selector.clone())
        })
        .await
        .map_err(|e| cluster_failure(&server, &target, "error listing resource events", &e))?;
    Ok(Reply::Message(listed))
}

/// Upstream's field selector of an object's events (keys in order, values escaped as
/// apimachinery's `fields.EscapeValue`).
fn involving(name: &str, uid: &str, namespace: &str) -> String {
    let escape = |v: &str| v.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=");
    format!(
        "involvedObject.name={},involvedObject.namespace={},involvedObject.uid={}",
        escape(name),
        escape(namespace),
        escape(uid)
    )
}

async fn events(client: kube::Client, namespace: String, selector: String) -> Result<Value, kube::Error> {
    let request = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/events"));
    let list = request
        .list(&ListParams::default().fields(&selector))
        .map_err(kube::Error::BuildRequest)?;
    let mut listed = client.request::<Value>(list).await?;
    // The list's own type fields are not part of upstream's EventList message.
    if let Some(obj) = listed.as_object_mut() {
        obj.remove("kind");
        obj.remove("apiVersion");
    }
    Ok(listed)
}

/// Authorizes `action` on the application `q` names. A change (`update`, `delete`) is allowed
/// by the fine-grained `<action>/<group>/<kind>/<namespace>/<name>`; unless argocd-cm disables
/// the inheritance (it does when the key is absent, as upstream 3.x's default), the plain action
/// allows it too. Only the last check made can deny, so a denial is audited once.
pub(super) fn authorize(
    state: &ServerState,
    principal: &Principal,
    q: &ResourceRequest,
    action: &str,
) -> Result<DocRef, AppError> {
    let ask = |action: &str| authorized(state, principal, &q.app_namespace, &q.name, &q.project, action);
    if action == "get" {
        return ask(action);
    }
    if !inheritance_disabled(state)? && plain_allows(state, principal, q, action) {
        return ask(action);
    }
    ask(&fine_grained(action, q))
}

/// Whether the plain `action` on the application is allowed (no audit: a check follows).
fn plain_allows(state: &ServerState, principal: &Principal, q: &ResourceRequest, action: &str) -> bool {
    let ns = namespace_of(state, &q.app_namespace);
    state
        .registry
        .get(&Key::new(Kind::Application, &ns, &q.name))
        .filter(|doc| q.project.is_empty() || doc.summary.project == q.project)
        .is_some_and(|doc| {
            Access::hidden(RESOURCE, action).allows(state, principal, &doc_object(state, &doc))
        })
}

/// The fine-grained action of a change of the resource `q` names.
pub fn fine_grained(action: &str, q: &ResourceRequest) -> String {
    format!(
        "{action}/{}/{}/{}/{}",
        q.group, q.kind, q.namespace, q.resource_name
    )
}

/// argocd-cm's switch: absent or empty means disabled, as upstream's
/// `ApplicationFineGrainedRBACInheritanceDisabled` reads it; otherwise a Go boolean.
fn inheritance_disabled(state: &ServerState) -> Result<bool, AppError> {
    parse_switch(state.config.peek().cm.get(INHERITANCE_KEY).map(String::as_str))
}

fn parse_switch(value: Option<&str>) -> Result<bool, AppError> {
    match value.unwrap_or("") {
        "" | "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(AppError::FailedPrecondition(format!(
            "argocd-cm {INHERITANCE_KEY} is {other:?}, which is not a boolean"
        ))),
    }
}

/// One of the application's resources, where to reach it.
pub(super) struct Live<'a> {
    clusters: &'a Clusters,
    target: Target,
    server: String,
    pub(super) group: String,
    version: String,
    pub(super) kind: String,
    pub(super) namespace: String,
    name: String,
}

/// The resource `q` names, if the application's tree has it (with a uid: created), and the
/// cluster it lives in.
pub(super) async fn locate<'a>(
    state: &'a ServerState,
    doc: &DocRef,
    q: &ResourceRequest,
) -> Result<Live<'a>, AppError> {
    let tree = match tree(state, doc).await {
        Ok(tree) => tree,
        Err(err) => return Err(explained(state, doc, err).await),
    };
    let found = nodes(&tree)
        .find(|n| {
            field(n, "group") == q.group
                && field(n, "kind") == q.kind
                && field(n, "namespace") == q.namespace
                && field(n, "name") == q.resource_name
        })
        .filter(|n| !field(n, "uid").is_empty());
    let Some(node) = found else {
        let err = AppError::InvalidArgument(format!(
            "{} {} {} not found as part of application {}",
            q.kind, q.group, q.resource_name, q.name
        ));
        return Err(explained(state, doc, err).await);
    };
    let (clusters, target, server) = destination(state, doc)?;
    Ok(Live {
        clusters,
        target,
        server,
        group: field(node, "group").to_owned(),
        version: field(node, "version").to_owned(),
        kind: field(node, "kind").to_owned(),
        namespace: field(node, "namespace").to_owned(),
        name: field(node, "name").to_owned(),
    })
}

/// `err` (the application's cache entry could not be read, or lacks the resource), unless the
/// destination cannot be reached: the controller then has no view of it, and the cluster, which
/// the caller can act on, is named instead.
pub(super) async fn explained(state: &ServerState, doc: &DocRef, err: AppError) -> AppError {
    unreached(state, doc).await.unwrap_or(err)
}

/// UNAVAILABLE naming the application's destination, if it does not answer (its credentials
/// never shown); None when it answers, or has no destination to ask.
pub(super) async fn unreached(state: &ServerState, doc: &DocRef) -> Option<AppError> {
    let (clusters, target, server) = destination(state, doc).ok()?;
    match clusters.server_version(&target).await {
        Err(
            failure @ (ClusterError::Refused(_)
            | ClusterError::Unreachable(_)
            | ClusterError::Timeout(_)
            | ClusterError::Certificate(_)),
        ) => Some(AppError::Unavailable(format!(
            "cluster {server} cannot be reached: {}",
            failure.message_without(&[
                target.config.bearer_token.as_str(),
                target.config.password.as_str()
            ])
        ))),
        _ => None,
    }
}

/// The application's tree as the controller last wrote it (asking for one if there is none).
pub(super) async fn tree(state: &ServerState, doc: &DocRef) -> Result<Value, AppError> {
    Ok(match cache(state)? {
        Some(cache) => {
            let name = instance(state, doc);
            read_or_refresh(state, doc, "resource tree", || cache.resource_tree(&name)).await?
        }
        // No controller: no tree, so nothing is part of the application.
        None => json!({}),
    })
}

fn nodes(tree: &Value) -> impl Iterator<Item = &Value> {
    ["nodes", "orphanedNodes"]
        .into_iter()
        .filter_map(|f| tree.get(f).and_then(Value::as_array))
        .flatten()
}

pub(super) fn field<'v>(v: &'v Value, name: &str) -> &'v str {
    v.get(name).and_then(Value::as_str).unwrap_or("")
}

/// The cluster the application deploys to, and the client that reaches it.
pub(super) fn destination<'a>(
    state: &'a ServerState,
    doc: &DocRef,
) -> Result<(&'a Clusters, Target, String), AppError> {
    let clusters = state.clusters.as_deref().ok_or_else(|| {
        AppError::FailedPrecondition(format!(
            "{}: live resources are not served",
            connection::NOT_CONTACTED
        ))
    })?;
    let value = doc.value();
    let dest = |f: &str| {
        value
            .pointer(&format!("/spec/destination/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let lookup = Lookup::from_parts(None, &dest("server"), &dest("name"))?.ok_or_else(|| {
        AppError::FailedPrecondition(
            "error getting application cluster config: the application has no destination".to_owned(),
        )
    })?;
    let entry = lookup::find(state, &lookup).ok_or_else(|| {
        AppError::FailedPrecondition(format!(
            "error getting application cluster config: {} is not configured",
            lookup.describe()
        ))
    })?;
    let mut target = Target::read(&entry.value).map_err(|e| {
        AppError::FailedPrecondition(format!("error getting application cluster config: {e}"))
    })?;
    target.impersonate = super::impersonation::user(state, &value, &target.server)?;
    let server = crate::service::redact::url(&target.server);
    Ok((clusters, target, server))
}

impl<'a> Live<'a> {
    /// An object of the destination `clusters`/`target` (named `server` in messages) that the
    /// caller has checked the application manages.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        clusters: &'a Clusters,
        target: Target,
        server: String,
        group: &str,
        version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Self {
        Live {
            clusters,
            target,
            server,
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// Another object in the same cluster.
    pub(super) fn sibling(
        &self,
        group: &str,
        version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Live<'a> {
        Live {
            clusters: self.clusters,
            target: self.target.clone(),
            server: self.server.clone(),
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The live object, as the cluster has it now.
    pub(super) async fn fetch(&self) -> Result<Value, AppError> {
        self.run("get", "error getting resource", |api, name| async move {
            let request = kube::core::Request::new(api.resource_url());
            let get = request
                .get(&name, &GetParams::default())
                .map_err(kube::Error::BuildRequest)?;
            api.into_client().request::<Value>(get).await
        })
        .await
    }

    /// Runs `call` on the resource's API (found by discovery, which must offer `verb`), with
    /// the resource's name, in the destination, bounded by the cluster timeout.
    pub(super) async fn run<T, F, Fut>(&self, verb: &str, what: &str, call: F) -> Result<T, AppError>
    where
        F: Fn(Api<DynamicObject>, String) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let gvk = GroupVersionKind::gvk(&self.group, &self.version, &self.kind);
        let outcome = self
            .clusters
            .call(&self.target, |client| {
                let gvk = gvk.clone();
                let call = &call;
                async move {
                    let (resource, caps) = match kube::discovery::pinned_kind(&client, &gvk).await {
                        Ok(found) => found,
                        Err(kube::Error::Discovery(e)) => return Ok(Err(Unserved::Kind(e.to_string()))),
                        Err(e) => return Err(e),
                    };
                    if !caps.operations.is_empty() && !caps.operations.iter().any(|o| o == verb) {
                        return Ok(Err(Unserved::Verb));
                    }
                    let api = api_of(client, &resource, &caps, &self.namespace);
                    call(api, self.name.clone()).await.map(Ok)
                }
            })
            .await
            .map_err(|e| cluster_failure(&self.server, &self.target, what, &e))?;
        outcome.map_err(|unserved| match unserved {
            Unserved::Kind(e) => AppError::NotFound(format!("{what}: failed to get api resource: {e}")),
            Unserved::Verb => AppError::Unimplemented(format!(
                "{what}: failed to get api resource: {} does not support {verb}",
                self.kind
            )),
        })
    }
}

/// What discovery found the cluster cannot do.
enum Unserved {
    Kind(String),
    Verb,
}

fn api_of(
    client: kube::Client,
    resource: &ApiResource,
    caps: &ApiCapabilities,
    namespace: &str,
) -> Api<DynamicObject> {
    match caps.scope {
        Scope::Namespaced if !namespace.is_empty() => Api::namespaced_with(client, namespace, resource),
        _ => Api::all_with(client, resource),
    }
}

/// A patch sent as it came, with its own content type: the API server applies it (and says
/// why one does not apply), as upstream's dynamic client lets it.
pub(super) async fn raw_patch(
    api: Api<DynamicObject>,
    name: String,
    patch_type: &'static str,
    body: Vec<u8>,
) -> Result<Value, kube::Error> {
    let request = kube::core::Request::new(api.resource_url());
    let mut req = request
        .patch(
            &name,
            &PatchParams::default(),
            &kube::api::Patch::Merge(json!({})),
        )
        .map_err(kube::Error::BuildRequest)?;
    req.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(patch_type),
    );
    *req.body_mut() = body;
    api.into_client().request::<Value>(req).await
}

/// `ApplicationResourceResponse`: the object as JSON text, a Secret masked.
fn manifest(state: &ServerState, obj: Value) -> Reply {
    Reply::Message(json!({"manifest": masked(state, obj).to_string()}))
}

/// `obj` with its values masked when it is a Secret (and the annotations argocd-cm names).
pub(super) fn masked(state: &ServerState, obj: Value) -> Value {
    let sensitive: BTreeSet<String> = masking::sensitive_annotations(
        state
            .config
            .peek()
            .cm
            .get("resource.sensitive.mask.annotations")
            .map(String::as_str),
    );
    masking::masked(obj, &sensitive)
}

/// A failed call to the destination, in the error table: the API server's refusals with the
/// code upstream's `kubeErrToGRPC` (util/grpc/errors.go) gives them, prefixed with what was
/// being done; a cluster that cannot be reached or used names its server.
pub(super) fn cluster_failure(server: &str, target: &Target, what: &str, err: &ClusterError) -> AppError {
    if let ClusterError::Refusal { code, message } = err {
        let message = format!("{what}: {message}");
        return match code {
            404 => AppError::NotFound(message),
            409 => AppError::Aborted(message),
            422 | 415 => AppError::InvalidArgument(message),
            400 => AppError::FailedPrecondition(message),
            405 => AppError::Unimplemented(message),
            429 => AppError::Exhausted(message),
            _ => AppError::Unavailable(message),
        };
    }
    let secrets = [
        target.config.bearer_token.as_str(),
        target.config.password.as_str(),
    ];
    connection::refusal(
        err,
        format!("{what}: cluster {server}: {}", err.message_without(&secrets)),
    )
}

/// `err` with `message` instead of its own, in the same code.
pub(super) fn with_message(err: AppError, message: String) -> AppError {
    match err {
        AppError::NotFound(_) => AppError::NotFound(message),
        AppError::Aborted(_) => AppError::Aborted(message),
        AppError::InvalidArgument(_) => AppError::InvalidArgument(message),
        AppError::FailedPrecondition(_) => AppError::FailedPrecondition(message),
        AppError::Unimplemented(_) => AppError::Unimplemented(message),
        AppError::Exhausted(_) => AppError::Exhausted(message),
        AppError::Unavailable(_) => AppError::Unavailable(message),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fine_grained_actions_name_the_resource() {
        let q = ResourceRequest {
            group: "apps".into(),
            kind: "Deployment".into(),
            namespace: "n".into(),
            resource_name: "d".into(),
            ..ResourceRequest::default()
        };
        assert_eq!(fine_grained("update", &q), "update/apps/Deployment/n/d");
        let core = ResourceRequest {
            kind: "ConfigMap".into(),
            namespace: "n".into(),
            resource_name: "c".into(),
            ..ResourceRequest::default()
        };
        assert_eq!(fine_grained("delete", &core), "delete//ConfigMap/n/c");
    }

    #[test]
    fn the_inheritance_switch_reads_as_upstream() {
        assert!(parse_switch(None).unwrap());
        assert!(parse_switch(Some("")).unwrap());
        assert!(parse_switch(Some("true")).unwrap());
        assert!(!parse_switch(Some("false")).unwrap());
        assert!(!parse_switch(Some("0")).unwrap());
        assert!(parse_switch(Some("yes")).is_err());
    }

    #[test]
    fn deletion_options_as_upstream_chooses() {
        let orphan = delete_params(true, true);
        assert_eq!(orphan.propagation_policy, Some(PropagationPolicy::Orphan));
        assert_eq!(orphan.grace_period_seconds, None);
        let force = delete_params(false, true);
        assert_eq!(force.propagation_policy, Some(PropagationPolicy::Background));
        assert_eq!(force.grace_period_seconds, Some(0));
        assert_eq!(
            delete_params(false, false).propagation_policy,
            Some(PropagationPolicy::Foreground)
        );
    }

    #[test]
    fn event_selectors_escape_their_values() {
        assert_eq!(
            involving("a,b", "u=1", "n\\s"),
            "involvedObject.name=a\\,b,involvedObject.namespace=n\\\\s,involvedObject.uid=u\\=1"
        );
    }
}
