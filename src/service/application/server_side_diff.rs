//! ServerSideDiff: what the destination's API server would make of the application's target
//! manifests, asked with a server-side apply dry run, beside the live objects the caller sends
//! (upstream's `ServerSideDiff` in server/application/application.go, with the diff of
//! gitops-engine's `ServerSideDiff` in pkg/diff/diff.go that argo-cd's util/argo/diff
//! `StateDiffs` runs).
//!
//! The caller (the CLI's `argocd app diff --server-side-diff`) sends the live resources and the
//! target manifests aligned: entry `i` of each is one resource, either side may be empty (a
//! resource to create, or one to prune). A caller that sends no live resources (REST, whose
//! query cannot carry them; upstream fails on such a request) gets them read from the cluster. Each must be one the application manages (its managed
//! resources as the controller last wrote them), which is checked before the cluster is asked
//! anything. For a resource on both sides the target is applied in dry run as the controller's
//! field manager (`argocd-controller`) would apply it (conflicts forced, fields not validated);
//! unless the application's compare options include `IncludeMutationWebhook=true`, what the
//! API server adds on its own is reverted to the live values (`mutation.rs`). Both sides are
//! then normalized (no `creationTimestamp`, no `managedFields`, a Secret's `stringData` in
//! `data`, the application's `ignoreDifferences` JSON pointers removed) and compared as text;
//! a Secret's values are masked on both sides together.

use std::collections::BTreeSet;

use kube::api::{Api, DynamicObject, Patch, PatchParams, ValidationDirective};
use serde::Deserialize;
use serde_json::{Value, json};

use super::live::{Live, destination, explained, field, unreached};
use super::resources::{cache, instance, read_or_refresh};
use super::{authorized, masking, mutation};
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::Refusal;
use crate::registry::DocRef;
use crate::service::{Ctx, Reply};

/// The field manager of upstream's controller (`ArgoCDSSAManager`), whose dry run this is.
const MANAGER: &str = "argocd-controller";
const COMPARE_OPTIONS: &str = "argocd.argoproj.io/compare-options";
/// argocd-cm's diff options (YAML), of which `ignoreResourceStatusField` is read here.
const COMPARE_SETTINGS: &str = "resource.compareoptions";

/// Whose `status` the comparison leaves out (argocd-cm's `ignoreResourceStatusField`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StatusIgnored {
    All,
    Crds,
    None,
}

impl StatusIgnored {
    fn covers(self, p: &Pair) -> bool {
        match self {
            StatusIgnored::All => true,
            StatusIgnored::Crds => p.group == "apiextensions.k8s.io" && p.kind == "CustomResourceDefinition",
            StatusIgnored::None => false,
        }
    }
}

/// Upstream's reading of `ignoreResourceStatusField`: `crd`, `none` (or `off`, `false`), and
/// anything else (absent included) is all. An argocd-cm value that is not YAML leaves the
/// default.
fn ignores_status(setting: Option<&str>) -> StatusIgnored {
    let value = setting
        .and_then(|text| serde_yaml_ng::from_str::<Value>(text).ok())
        .and_then(|v| v.get("ignoreResourceStatusField").cloned());
    let text = match value {
        Some(Value::String(s)) => s,
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    };
    match text.as_str() {
        "crd" => StatusIgnored::Crds,
        "none" | "off" | "false" => StatusIgnored::None,
        _ => StatusIgnored::All,
    }
}

/// What the comparison of one resource leaves out besides the bookkeeping.
struct Rules<'a> {
    ignores: &'a [Value],
    status: bool,
}

/// `ApplicationServerSideDiffQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct DiffQuery {
    pub app_name: String,
    pub app_namespace: String,
    pub project: String,
    pub live_resources: Vec<LiveResource>,
    pub target_manifests: Vec<String>,
}

/// The parts of a `ResourceDiff` the caller sends as a live resource.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct LiveResource {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub live_state: String,
    pub hook: bool,
    pub resource_version: String,
}

/// One resource of the request, read and checked.
struct Pair {
    group: String,
    kind: String,
    namespace: String,
    name: String,
    hook: bool,
    resource_version: String,
    live: Option<Value>,
    target: Option<Value>,
}

pub async fn server_side_diff(ctx: Ctx, q: DiffQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(
        &ctx.app,
        principal,
        &q.app_namespace,
        &q.app_name,
        &q.project,
        "get",
    )?;
    let mut pairs = pairs(&q)?;
    check_managed(&ctx, principal, &doc, &q.app_name, &pairs).await?;
    // Without live resources (REST, whose query cannot carry them), the live side is read from
    // the cluster.
    if q.live_resources.is_empty() {
        for p in &mut pairs {
            if let Some(target) = &p.target {
                p.live = read_live(&ctx, &doc, p, target).await?;
                if let Some(live) = &p.live {
                    meta(live, "resourceVersion").clone_into(&mut p.resource_version);
                }
            }
        }
    }
    let how = Comparison::of(&ctx, &doc.value());
    let mut items = Vec::with_capacity(pairs.len());
    let mut any_modified = false;
    for p in pairs {
        let (item, modified) = diff_one(&ctx, &doc, &p, &how).await?;
        any_modified |= modified;
        items.push(item);
    }
    let mut out = json!({"modified": any_modified});
    if !items.is_empty() {
        out["items"] = Value::Array(items);
    }
    Ok(Reply::Message(out))
}

/// Refuses a request naming a resource the application does not manage (its managed
/// resources as the controller last wrote them), before the cluster is asked anything.
async fn check_managed(
    ctx: &Ctx,
    principal: &Principal,
    doc: &DocRef,
    app_name: &str,
    pairs: &[Pair],
) -> Result<(), AppError> {
    let managed = match cache(&ctx.app)? {
        Some(cache) => {
            let name = instance(&ctx.app, doc);
            match read_or_refresh(&ctx.app, doc, "managed resources", || {
                cache.managed_resources(&name)
            })
            .await
            {
                Ok(found) => found,
                Err(err) => return Err(explained(&ctx.app, doc, err).await),
            }
        }
        None => Vec::new(),
    };
    let Some(p) = pairs.iter().find(|p| {
        !managed.iter().any(|m| {
            field(m, "kind") == p.kind
                && field(m, "group") == p.group
                && field(m, "namespace") == p.namespace
                && field(m, "name") == p.name
        })
    }) else {
        return Ok(());
    };
    // Upstream asks the cluster first: an unreachable one is what it answers.
    if let Some(unavailable) = unreached(&ctx.app, doc).await {
        return Err(unavailable);
    }
    Err(crate::service::access::refuse(
        &ctx.app,
        principal,
        Refusal::NotInApp,
        &super::doc_object(&ctx.app, doc),
        format!(
            "{} {} {} not found as part of application {app_name}",
            p.kind, p.group, p.name
        ),
    ))
}

/// How the application's resources are compared: its compare options and `ignoreDifferences`,
/// and argocd-cm's status rule and sensitive annotations.
struct Comparison {
    webhooks_kept: bool,
    ignores: Vec<Value>,
    status: StatusIgnored,
    sensitive: BTreeSet<String>,
}

impl Comparison {
    fn of(ctx: &Ctx, app: &Value) -> Self {
        let config = ctx.app.config.peek();
        let setting = |key: &str| config.cm.get(key).map(String::as_str);
        Comparison {
            webhooks_kept: app
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(COMPARE_OPTIONS))
                .and_then(Value::as_str)
                .is_some_and(|o| {
                    o.split(',')
                        .any(|opt| opt.trim() == "IncludeMutationWebhook=true")
                }),
            ignores: app
                .pointer("/spec/ignoreDifferences")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            status: ignores_status(setting(COMPARE_SETTINGS)),
            sensitive: masking::sensitive_annotations(setting("resource.sensitive.mask.annotations")),
        }
    }
}

/// The `ResourceDiff` of one resource, and whether it is modified.
async fn diff_one(ctx: &Ctx, doc: &DocRef, p: &Pair, how: &Comparison) -> Result<(Value, bool), AppError> {
    let (predicted, live, modified) = match (&p.target, &p.live) {
        (Some(target), Some(live)) => {
            let predicted = dry_run(ctx, doc, p, target).await?;
            let predicted = if how.webhooks_kept {
                predicted
            } else {
                let owned = mutation::owned_by(&predicted, MANAGER).ok_or_else(|| {
                    AppError::FailedPrecondition(format!(
                        "error removing non config mutations for resource {}/{}: no managed fields found for manager: {MANAGER}",
                        p.kind, p.name
                    ))
                })?;
                mutation::without_mutations(&predicted, live, &owned)
            };
            let rules = Rules {
                ignores: &how.ignores,
                status: how.status.covers(p),
            };
            let predicted = normalized(predicted, p, &rules);
            let live = normalized(live.clone(), p, &rules);
            let modified = predicted != live;
            (Some(predicted), Some(live), modified)
        }
        // Created or pruned: no call, the one side without its creation time (upstream's
        // shallow diff).
        (target, live) => {
            let bare = |v: &Option<Value>| {
                v.clone().map(|mut v| {
                    prepare(&mut v);
                    v
                })
            };
            (bare(target), bare(live), target.is_some())
        }
    };
    let (predicted, live) = if p.kind == "Secret" && p.group.is_empty() {
        masking::masked_pair(predicted, live, &how.sensitive)
    } else {
        (predicted, live)
    };
    Ok((item(p, predicted, live, modified), modified))
}

/// The request's resources, each side parsed; refused when they do not line up.
fn pairs(q: &DiffQuery) -> Result<Vec<Pair>, AppError> {
    // No live resources at all is how REST asks (they are read from the cluster then).
    if !q.live_resources.is_empty() && q.live_resources.len() != q.target_manifests.len() {
        return Err(AppError::InvalidArgument(format!(
            "liveResources ({}) and targetManifests ({}) must be aligned: entry i of each is the same resource",
            q.live_resources.len(),
            q.target_manifests.len()
        )));
    }
    let count = q.target_manifests.len();
    let mut pairs = Vec::with_capacity(count);
    for i in 0..count {
        let live = match q.live_resources.get(i) {
            Some(r) => live_of(r)?,
            None => None,
        };
        let target = match q.target_manifests.get(i) {
            Some(text) => target_of(i, text)?,
            None => None,
        };
        let pair = match (q.live_resources.get(i), &target) {
            (Some(r), _) => Pair {
                group: r.group.clone(),
                kind: r.kind.clone(),
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                hook: r.hook,
                resource_version: r.resource_version.clone(),
                live,
                target,
            },
            (None, Some(t)) => Pair {
                group: group_of(t).to_owned(),
                kind: field(t, "kind").to_owned(),
                namespace: meta(t, "namespace").to_owned(),
                name: meta(t, "name").to_owned(),
                hook: false,
                resource_version: String::new(),
                live,
                target,
            },
            (None, None) => {
                return Err(AppError::InvalidArgument(format!(
                    "target manifest {i} is empty and there is no live resource beside it"
                )));
            }
        };
        pairs.push(pair);
    }
    Ok(pairs)
}

/// A live resource's state, which must be the object the entry names.
fn live_of(r: &LiveResource) -> Result<Option<Value>, AppError> {
    if r.live_state.is_empty() || r.live_state == "null" {
        return Ok(None);
    }
    let obj: Value = serde_json::from_str(&r.live_state).map_err(|e| {
        AppError::InvalidArgument(format!(
            "error unmarshaling live state for {}/{}: {e}",
            r.kind, r.name
        ))
    })?;
    if !obj.is_object() {
        return Err(AppError::InvalidArgument(format!(
            "error unmarshaling live state for {}/{}: not an object",
            r.kind, r.name
        )));
    }
    let checks = [
        ("name", &r.name, meta(&obj, "name")),
        ("namespace", &r.namespace, meta(&obj, "namespace")),
        ("group", &r.group, group_of(&obj)),
        ("kind", &r.kind, field(&obj, "kind")),
    ];
    for (what, expected, got) in checks {
        if expected != got {
            return Err(AppError::InvalidArgument(format!(
                "{what} mismatch: expected {expected}, got {got}"
            )));
        }
    }
    Ok(Some(obj))
}

/// A target manifest (JSON or YAML); empty or `null` for a resource to prune.
fn target_of(i: usize, text: &str) -> Result<Option<Value>, AppError> {
    if text.is_empty() || text == "null" {
        return Ok(None);
    }
    let bad =
        |why: String| AppError::InvalidArgument(format!("error unmarshaling target manifest {i}: {why}"));
    let obj: Value = serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?;
    if !obj.is_object() {
        return Err(bad("not an object".to_owned()));
    }
    if field(&obj, "apiVersion").is_empty() || field(&obj, "kind").is_empty() || meta(&obj, "name").is_empty()
    {
        return Err(bad("apiVersion, kind and metadata.name are required".to_owned()));
    }
    Ok(Some(obj))
}

fn meta<'v>(obj: &'v Value, name: &str) -> &'v str {
    obj.get("metadata").map_or("", |m| field(m, name))
}

/// The API group of `apiVersion` (`group/version`, or a core `version`).
fn group_of(obj: &Value) -> &str {
    field(obj, "apiVersion").rsplit_once('/').map_or("", |(g, _)| g)
}

/// The live object `target` names, if the cluster has one.
async fn read_live(ctx: &Ctx, doc: &DocRef, p: &Pair, target: &Value) -> Result<Option<Value>, AppError> {
    let (clusters, cluster, server) = destination(&ctx.app, doc)?;
    let live = Live::new(
        clusters,
        cluster,
        server,
        &p.group,
        version_of(target),
        &p.kind,
        &namespace_for(p, target),
        &p.name,
    );
    match live.fetch().await {
        Ok(obj) => Ok(Some(obj)),
        Err(AppError::NotFound(_)) => Ok(None),
        Err(err) => Err(err),
    }
}

fn version_of(target: &Value) -> &str {
    let api_version = field(target, "apiVersion");
    api_version.rsplit_once('/').map_or(api_version, |(_, v)| v)
}

/// Where the target is applied: its own namespace, else its live resource's.
fn namespace_for(p: &Pair, target: &Value) -> String {
    match meta(target, "namespace") {
        "" => p.namespace.clone(),
        ns => ns.to_owned(),
    }
}

/// The object the destination's API server predicts from applying `target` (managedFields
/// included), changing nothing.
async fn dry_run(ctx: &Ctx, doc: &DocRef, p: &Pair, target: &Value) -> Result<Value, AppError> {
    let (clusters, cluster, server) = destination(&ctx.app, doc)?;
    let mut body = target.clone();
    prepare(&mut body);
    let live = Live::new(
        clusters,
        cluster,
        server,
        &p.group,
        version_of(target),
        &p.kind,
        &namespace_for(p, target),
        &p.name,
    );
    let what = format!(
        "error running server side apply in dryrun mode for resource {}/{}",
        p.kind, p.name
    );
    let outcome = live
        .run("patch", &what, |api, name| apply(api, name, body.clone()))
        .await;
    match outcome {
        // The API server's message may quote the Secret's values.
        Err(err) if p.kind == "Secret" && p.group.is_empty() => Err(super::live::with_message(
            err,
            format!("{what}: the API server refused it (its message is not shown: it may quote the values)"),
        )),
        other => other,
    }
}

/// The target as it is applied (and a shallow diff's side): without its creation time, as
/// upstream normalizes it first.
fn prepare(obj: &mut Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("creationTimestamp");
    }
}

async fn apply(api: Api<DynamicObject>, name: String, body: Value) -> Result<Value, kube::Error> {
    let mut params = PatchParams::apply(MANAGER).force();
    params.dry_run = true;
    params.field_validation = Some(ValidationDirective::Ignore);
    let request = kube::core::Request::new(api.resource_url());
    let req = request
        .patch(&name, &params, &Patch::Apply(&body))
        .map_err(kube::Error::BuildRequest)?;
    api.into_client().request::<Value>(req).await
}

/// One side as it is compared: no creation time, no managed fields, no `status` (unless
/// argocd-cm says otherwise), a Secret's `stringData` in `data`, and what the application's
/// `ignoreDifferences` names for this resource removed.
fn normalized(mut obj: Value, p: &Pair, rules: &Rules<'_>) -> Value {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("creationTimestamp");
        m.remove("managedFields");
    }
    if rules.status
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    if p.kind == "Secret" && p.group.is_empty() {
        masking::string_data_into_data(&mut obj);
    }
    for ignore in rules.ignores.iter().filter(|i| ignored(i, p)) {
        for pointer in ignore
            .get("jsonPointers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            remove_pointer(&mut obj, pointer);
        }
    }
    obj
}

/// Whether an `ignoreDifferences` entry is about `p` (an empty name or namespace: any).
fn ignored(entry: &Value, p: &Pair) -> bool {
    let f = |name: &str| field(entry, name);
    f("group") == p.group
        && f("kind") == p.kind
        && (f("name").is_empty() || f("name") == p.name)
        && (f("namespace").is_empty() || f("namespace") == p.namespace)
}

fn remove_pointer(obj: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match obj.pointer_mut(parent) {
        Some(Value::Object(m)) => {
            m.remove(&last);
        }
        Some(Value::Array(a)) => {
            if let Ok(i) = last.parse::<usize>()
                && i < a.len()
            {
                a.remove(i);
            }
        }
        _ => {}
    }
}

/// A `ResourceDiff` of the answer: the prediction as the target state, the normalized live
/// object as the live state (JSON text, `null` for a missing side), as upstream fills them.
fn item(p: &Pair, predicted: Option<Value>, live: Option<Value>, modified: bool) -> Value {
    let text = |v: Option<Value>| v.map_or_else(|| "null".to_owned(), |v| v.to_string());
    let mut out = json!({
        "group": p.group,
        "kind": p.kind,
        "namespace": p.namespace,
        "name": p.name,
        "targetState": text(predicted),
        "liveState": text(live),
        "hook": p.hook,
        "modified": modified,
        "resourceVersion": p.resource_version,
    });
    // Empty fields are left out, as upstream's JSON leaves them.
    if let Some(m) = out.as_object_mut() {
        m.retain(|_, v| !matches!(v, Value::String(s) if s.is_empty()) && *v != Value::Bool(false));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(lives: Vec<LiveResource>, targets: &[&str]) -> DiffQuery {
        DiffQuery {
            app_name: "a".into(),
            live_resources: lives,
            target_manifests: targets.iter().map(|s| (*s).to_owned()).collect(),
            ..DiffQuery::default()
        }
    }

    fn cm_live(name: &str, state: &str) -> LiveResource {
        LiveResource {
            kind: "ConfigMap".into(),
            namespace: "n".into(),
            name: name.into(),
            live_state: state.into(),
            ..LiveResource::default()
        }
    }

    fn message(err: AppError) -> String {
        match err {
            AppError::InvalidArgument(m) => m,
            other => panic!("not a 400: {other:?}"),
        }
    }

    #[test]
    fn bad_input_is_named() {
        let live = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"n"}}"#;
        let target = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: n}\n";
        assert_eq!(
            pairs(&query(vec![cm_live("c", live)], &[target])).unwrap().len(),
            1
        );
        let e = message(
            pairs(&query(vec![cm_live("c", live)], &["kind: [unclosed"]))
                .err()
                .unwrap(),
        );
        assert!(e.starts_with("error unmarshaling target manifest 0:"), "{e}");
        let e = message(
            pairs(&query(vec![cm_live("c", live)], &["- a list"]))
                .err()
                .unwrap(),
        );
        assert_eq!(e, "error unmarshaling target manifest 0: not an object");
        let e = message(
            pairs(&query(vec![cm_live("c", live)], &["kind: ConfigMap"]))
                .err()
                .unwrap(),
        );
        assert!(
            e.ends_with("apiVersion, kind and metadata.name are required"),
            "{e}"
        );
        let e = message(
            pairs(&query(vec![cm_live("other", live)], &[target]))
                .err()
                .unwrap(),
        );
        assert_eq!(e, "name mismatch: expected other, got c");
        let e = message(
            pairs(&query(vec![cm_live("c", "{not json")], &[target]))
                .err()
                .unwrap(),
        );
        assert!(
            e.starts_with("error unmarshaling live state for ConfigMap/c:"),
            "{e}"
        );
        let e = message(
            pairs(&query(vec![cm_live("c", live), cm_live("d", "")], &[target]))
                .err()
                .unwrap(),
        );
        assert!(e.contains("must be aligned"), "{e}");
    }

    #[test]
    fn created_and_pruned_resources_are_named_by_their_side() {
        let target =
            r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","namespace":"n"}}"#;
        let p = pairs(&query(vec![], &[target])).unwrap();
        assert_eq!(
            (p[0].group.as_str(), p[0].kind.as_str(), p[0].name.as_str()),
            ("apps", "Deployment", "d")
        );
        let p = pairs(&query(vec![cm_live("c", "")], &["null"])).unwrap();
        assert!(p[0].live.is_none() && p[0].target.is_none());
    }

    #[test]
    fn normalization_removes_bookkeeping_and_ignored_fields() {
        let p = Pair {
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: "n".into(),
            name: "c".into(),
            hook: false,
            resource_version: String::new(),
            live: None,
            target: None,
        };
        let ignores = [json!({"kind": "ConfigMap", "jsonPointers": ["/data/skip", "/metadata/labels/a~1b"]})];
        let rules = Rules {
            ignores: &ignores,
            status: true,
        };
        let out = normalized(
            json!({"metadata": {"creationTimestamp": "t", "managedFields": [], "labels": {"a/b": "1", "c": "2"}},
                   "data": {"skip": "x", "keep": "y"}, "status": {"s": 1}}),
            &p,
            &rules,
        );
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"c": "2"}}, "data": {"keep": "y"}})
        );
    }

    #[test]
    fn status_is_ignored_as_argocd_cm_says() {
        assert_eq!(ignores_status(None), StatusIgnored::All);
        for (setting, ignored) in [
            ("ignoreAggregatedRoles: true", StatusIgnored::All),
            ("ignoreResourceStatusField: crd", StatusIgnored::Crds),
            ("ignoreResourceStatusField: none", StatusIgnored::None),
            ("ignoreResourceStatusField: false", StatusIgnored::None),
            ("ignoreResourceStatusField: off", StatusIgnored::None),
            ("ignoreResourceStatusField: bogus", StatusIgnored::All),
        ] {
            assert_eq!(ignores_status(Some(setting)), ignored, "{setting}");
        }
    }
}
