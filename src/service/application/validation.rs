//! What the use cases read of an application (its views), and the checks an application
//! passes before it is written: names, labels, project rules, destination, source.

use serde::Deserialize;
use serde_json::Value;

use super::{namespace_of, not_served, rbac_object, served};
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::Refusal;
use crate::registry::{Key, Kind};
use crate::service::limits::{check_annotations, check_labels, check_namespace, check_object_name};
use crate::service::project_rules::ProjectRules;
use crate::service::resource::check_repo_url;
use crate::service::sensitive::check_no_password;
use crate::state::ServerState;

/// What the use cases read of an application.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub(super) struct AppView {
    pub(super) metadata: MetaView,
    pub(super) spec: SpecView,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
pub(super) struct MetaView {
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) resource_version: String,
    pub(super) labels: std::collections::BTreeMap<String, String>,
    pub(super) annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub(super) struct SpecView {
    pub(super) project: String,
    pub(super) source: Option<SourceView>,
    pub(super) sources: Vec<SourceView>,
    pub(super) destination: DestView,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub(super) struct SourceView {
    #[serde(rename = "repoURL")]
    pub(super) repo_url: String,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub(super) struct DestView {
    pub(super) server: String,
    pub(super) name: String,
    pub(super) namespace: String,
}

impl AppView {
    /// The view of a stored (canonical) application.
    pub(super) fn read(value: &Value) -> Result<Self, AppError> {
        Self::deserialize(value).map_err(|e| AppError::InvalidArgument(format!("invalid application: {e}")))
    }

    /// A caller's application as it would be stored (types checked, and a wrong one reported
    /// with its field; unknown fields dropped), with its view.
    pub(super) fn canonical(value: Value) -> Result<(Value, Self), AppError> {
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

    pub(super) fn project(&self) -> &str {
        if self.spec.project.is_empty() {
            "default"
        } else {
            &self.spec.project
        }
    }
}

/// Checks an application against its project and the server's rules; returns its key.
/// `principal` is who asks, for the record of a refusal by the project.
pub(super) fn validate(state: &ServerState, principal: &Principal, app: &AppView) -> Result<Key, AppError> {
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
            crate::service::access::refuse(state, principal, Refusal::ProjectRule, &object, message)
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
pub(super) fn check_cluster_configured(
    state: &ServerState,
    app_name: &str,
    server: &str,
) -> Result<(), AppError> {
    use crate::service::cluster::lookup::{Lookup, find, normalize_server};
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
pub(super) fn cluster_server_by_name(state: &ServerState, name: &str) -> Result<String, AppError> {
    use crate::service::cluster::lookup::{Lookup, find};
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
pub(super) fn client_fields(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("status");
        object.remove("operation");
    }
    default_project(&mut value);
    value
}

/// An empty or missing `spec.project` means `default`; a value of the wrong type is left for
/// the schema to refuse.
pub(super) fn default_project(value: &mut Value) {
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
pub(super) fn keep_server_fields(mut value: Value, stored: &Value) -> Value {
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
