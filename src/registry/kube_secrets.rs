//! Clusters, repositories, credential templates and their write-side counterparts on an
//! installation (`--kube`): Secrets in the control namespace labelled
//! `argocd.argoproj.io/secret-type`, exactly as upstream keeps them (util/db/cluster.go
//! clusterToSecret and SecretToCluster, util/db/repository_secrets.go repositoryToSecret and
//! repoCredsToSecret, util/db/secrets.go addSecretMetadata and deleteSecret), so that the
//! application-controller and the repo-server read what tiphys writes, and the reverse.
//!
//! The keys of each Secret are mapped by [`super::argocd_secrets`], which `tiphys apply` and
//! `tiphys admin export` use too. What only a write to a live installation needs is here:
//!
//! - A new Secret is named as upstream names it (`cluster-<host>-<hash>`, `repo-<hash>` ...)
//!   unless the object names its own (`secretName`), and carries upstream's `managed-by`
//!   annotation.
//! - An update starts from the Secret as the API server has it, so that what tiphys does not
//!   know (owner references, finalizers, other labels of a repository's Secret, keys of its
//!   data it has no field for) stays, and is sent with the `resourceVersion` the view had.
//! - A deletion removes a Secret tiphys or argocd-server made (`managed-by`), and otherwise
//!   only takes the label off, as upstream does: a Secret someone applied stays theirs.
//! - A Secret's `resourceVersion` is the object's revision; its name is the object's
//!   `secretName`, so an object whose URL changes under the same Secret is one update of it.

use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams, Preconditions};
use serde_json::{Map, Value};

use super::argocd_secrets::{
    self, SECRET_NAME, SECRET_TYPE_LABEL, SecretType, cluster_from_secret, cluster_to_secret,
    repo_from_secret, repo_to_secret,
};
use super::doc::{Doc, DocRef, Draft};
use super::kind::{Key, Kind};
use super::{Planned, RegistryError};
use crate::schema::{Schema, SchemaError};
use crate::store::{Expect, StoreError};

/// upstream's `managed-by` annotation: the Secret was made through the API, so deleting the
/// object deletes it.
const MANAGED_BY: &str = "managed-by";
const MANAGED_BY_ARGOCD: &str = "argocd.argoproj.io";
/// upstream's cluster refresh annotation (`RefreshRequestedAt`).
const REFRESH: &str = "argocd.argoproj.io/refresh";

/// The kinds kept as Secrets, and the label value of each.
pub(super) const SECRET_KINDS: [(Kind, SecretType); 5] = [
    (Kind::Cluster, SecretType::Cluster),
    (Kind::Repository, SecretType::Repository),
    (Kind::RepoCreds, SecretType::RepoCreds),
    (Kind::WriteRepository, SecretType::RepositoryWrite),
    (Kind::WriteRepoCreds, SecretType::RepoCredsWrite),
];

/// Secrets, addressed as the dynamic objects the watches deliver.
pub(super) fn secret_resource() -> ApiResource {
    ApiResource::erase::<Secret>(&())
}

/// The label selector of one kind's Secrets.
pub(super) fn selector(secret_type: SecretType) -> String {
    format!("{SECRET_TYPE_LABEL}={}", secret_type.label())
}

/// The field that holds the object's URL, its key in the registry.
fn url_field(kind: Kind) -> &'static str {
    match kind {
        Kind::Cluster => "server",
        Kind::Repository | Kind::WriteRepository => "repo",
        _ => "url",
    }
}

fn rv_of(object: &DynamicObject) -> Result<u64, SchemaError> {
    object
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(|_| SchemaError::new("metadata.resourceVersion", "not a number"))
}

/// The view's document of a Secret of `kind`: the object it declares, keyed by its URL, with
/// the Secret's name as `secretName`, at the Secret's `resourceVersion`.
pub(super) fn doc_of_secret(kind: Kind, object: DynamicObject) -> Result<DocRef, SchemaError> {
    let rv = rv_of(&object)?;
    let name = object.metadata.name.clone().unwrap_or_default();
    let secret =
        serde_json::to_value(&object).map_err(|e| SchemaError::new("", format!("cannot be read: {e}")))?;
    let read = match kind {
        Kind::Cluster => cluster_from_secret(&secret),
        _ => repo_from_secret(&secret, kind),
    }
    .map_err(|e| SchemaError::new("data", e))?;
    for warning in &read.warnings {
        tracing::debug!("Secret {name}: {warning}");
    }
    let mut value = read.object;
    if let Some(map) = value.as_object_mut() {
        map.insert(SECRET_NAME.to_owned(), Value::from(name));
        if kind == Kind::Cluster
            && let Some(at) = object.metadata.annotations.as_ref().and_then(|a| a.get(REFRESH))
            && crate::schema::time::parse(at).is_ok()
        {
            map.insert("refreshRequestedAt".to_owned(), Value::from(at.as_str()));
        }
    }
    let url = value
        .get(url_field(kind))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let schema = Schema::get();
    let canonical = schema.to_json(&schema.from_json(&schema.message(kind.message())?, &value)?);
    let draft = Draft::new(Key::new(kind, "", &url), &canonical)?;
    Ok(Arc::new(Doc::at(&draft, rv)?))
}

/// The key of the object a deleted Secret declared, when it still decodes.
pub(super) fn key_of_secret(kind: Kind, object: &DynamicObject) -> Option<Key> {
    doc_of_secret(kind, object.clone())
        .ok()
        .map(|doc| doc.key.clone())
}

/// One write of a Secret: what a plan (or, for an object that moves to another URL under the
/// same Secret, a deletion and a creation) comes to.
pub(super) struct SecretWrite {
    pub kind: Kind,
    /// The key the new state is at (the deleted one's for a deletion).
    pub key: Key,
    pub name: String,
    /// The Secret's revision the view had (`None`: a creation).
    pub current_rv: Option<u64>,
    /// The new state (`None`: a deletion).
    pub draft: Option<Draft>,
}

impl SecretWrite {
    /// The write `planned` comes to: one plan, or a deletion and a creation of the same kind
    /// under one Secret name (a move).
    pub(super) fn of(planned: Vec<Planned>) -> Result<Self, String> {
        let mut planned = planned.into_iter();
        let (first, second) = (planned.next(), planned.next());
        if planned.next().is_some() {
            return Err("a write to Kubernetes changes one object at a time".to_owned());
        }
        match (first, second) {
            (Some(plan), None) => {
                let name = match (&plan.current, &plan.draft) {
                    (Some(current), _) => name_of(&current.value()),
                    (None, Some(draft)) => name_of_draft(plan.key.kind, draft),
                    (None, None) => String::new(),
                };
                Ok(SecretWrite {
                    kind: plan.key.kind,
                    key: plan.key,
                    name,
                    current_rv: plan.current.map(|c| c.rv),
                    draft: plan.draft,
                })
            }
            (Some(a), Some(b)) => {
                let (gone, new) = if a.draft.is_none() { (a, b) } else { (b, a) };
                let (Some(current), None, Some(draft)) = (&gone.current, &new.current, &new.draft) else {
                    return Err("a write to Kubernetes changes one object at a time".to_owned());
                };
                let name = name_of(&current.value());
                if gone.key.kind != new.key.kind
                    || name.is_empty()
                    || name != name_of_draft(new.key.kind, draft)
                {
                    return Err("a write to Kubernetes changes one object at a time".to_owned());
                }
                Ok(SecretWrite {
                    kind: new.key.kind,
                    key: new.key,
                    name,
                    current_rv: Some(current.rv),
                    draft: new.draft,
                })
            }
            _ => Err("nothing to write".to_owned()),
        }
    }
}

fn name_of(value: &Value) -> String {
    value
        .get(SECRET_NAME)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The Secret a new object goes to: its own `secretName`, else upstream's name for its URL.
fn name_of_draft(kind: Kind, draft: &Draft) -> String {
    let value: Value = serde_json::from_slice(&draft.json).unwrap_or_default();
    let url = value
        .get(url_field(kind))
        .and_then(Value::as_str)
        .unwrap_or_default();
    argocd_secrets::name_for(secret_type_of(kind), &value, url)
}

fn secret_type_of(kind: Kind) -> SecretType {
    SECRET_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(SecretType::Repository, |(_, t)| *t)
}

/// What went wrong with one Secret request.
pub(super) enum SecretFailure {
    Api(kube::Error, crate::kubernetes::Verb),
    Registry(RegistryError),
}

impl From<RegistryError> for SecretFailure {
    fn from(e: RegistryError) -> Self {
        SecretFailure::Registry(e)
    }
}

/// Sends `write` to the Secrets of `api`; the Secret as the API server wrote it (`None`: it
/// was deleted, or no longer declares an object).
pub(super) async fn write_secret(
    api: &Api<DynamicObject>,
    write: SecretWrite,
) -> Result<Option<DynamicObject>, SecretFailure> {
    use crate::kubernetes::Verb;
    let SecretWrite {
        kind,
        key,
        name,
        current_rv,
        draft,
    } = write;
    let Some(rv) = current_rv else {
        let Some(draft) = draft else {
            return Err(RegistryError::NotFound(key).into());
        };
        let secret = new_secret(kind, &draft, None)?;
        return match api.create(&PostParams::default(), &secret).await {
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Err(RegistryError::AlreadyExists(key).into())
            }
            other => other.map(Some).map_err(|e| SecretFailure::Api(e, Verb::Create)),
        };
    };
    // The Secret as it is now: what an update keeps, and whether a deletion may remove it.
    let existing = match api.get(&name).await {
        Err(kube::Error::Api(status)) if status.code == 404 => {
            return Err(RegistryError::NotFound(key).into());
        }
        other => other.map_err(|e| SecretFailure::Api(e, Verb::Get))?,
    };
    let actual = rv_of(&existing).unwrap_or(0);
    if actual != rv {
        return Err(RegistryError::Store(StoreError::Conflict {
            key: format!("secrets/{name}"),
            expected: Expect::ModRevision(rv),
            actual: Some(actual),
        })
        .into());
    }
    let Some(draft) = draft else {
        let managed = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MANAGED_BY))
            .is_some_and(|v| v == MANAGED_BY_ARGOCD);
        if managed {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(rv.to_string()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            return match api.delete(&name, &params).await {
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    Err(RegistryError::NotFound(key).into())
                }
                other => other
                    .map(|_| None)
                    .map_err(|e| SecretFailure::Api(e, Verb::Delete)),
            };
        }
        let mut kept = existing;
        if let Some(labels) = kept.metadata.labels.as_mut() {
            labels.remove(SECRET_TYPE_LABEL);
        }
        kept.metadata.managed_fields = None;
        return match api.replace(&name, &PostParams::default(), &kept).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Err(RegistryError::NotFound(key).into()),
            other => other
                .map(|_| None)
                .map_err(|e| SecretFailure::Api(e, Verb::Update)),
        };
    };
    let secret = new_secret(kind, &draft, Some(existing))?;
    match api.replace(&name, &PostParams::default(), &secret).await {
        Err(kube::Error::Api(status)) if status.code == 404 => Err(RegistryError::NotFound(key).into()),
        other => other.map(Some).map_err(|e| SecretFailure::Api(e, Verb::Update)),
    }
}

/// The Secret for `draft`: new, or `existing` with the object's keys, labels and annotations
/// in it (upstream replaces a cluster Secret's data, labels and annotations, and overlays a
/// repository's keys on what its Secret has).
fn new_secret(
    kind: Kind,
    draft: &Draft,
    existing: Option<DynamicObject>,
) -> Result<DynamicObject, RegistryError> {
    let invalid = |e: String| RegistryError::Invalid {
        key: draft.key.clone(),
        err: SchemaError::new("", e),
    };
    let mut value: Value = serde_json::from_slice(&draft.json).map_err(|e| invalid(e.to_string()))?;
    let made = if kind == Kind::Cluster {
        // upstream: a cluster without a name is named by its server.
        if let Some(map) = value.as_object_mut()
            && map.get("name").and_then(Value::as_str).is_none_or(str::is_empty)
        {
            let server = map.get("server").cloned().unwrap_or_default();
            map.insert("name".to_owned(), server);
        }
        cluster_to_secret(&value, true)
    } else {
        repo_to_secret(&value, kind, true)
    };
    let mut secret = made.secret;
    let data = encoded(secret.get("stringData"));
    if let Some(map) = secret.as_object_mut() {
        map.remove("stringData");
        map.insert("data".to_owned(), Value::Object(data.clone()));
    }
    let Some(existing) = existing else {
        return serde_json::from_value(secret).map_err(|e| invalid(e.to_string()));
    };
    let mut merged = serde_json::to_value(&existing).map_err(|e| invalid(e.to_string()))?;
    let Some(target) = merged.as_object_mut() else {
        return Err(invalid("the Secret is not an object".to_owned()));
    };
    if let Some(meta) = target.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        let ours = secret.get("metadata").cloned().unwrap_or_default();
        for field in ["labels", "annotations"] {
            let new = ours
                .get(field)
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if kind == Kind::Cluster {
                meta.insert(field.to_owned(), Value::Object(new));
            } else {
                let mut kept = meta
                    .get(field)
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                kept.extend(new);
                meta.insert(field.to_owned(), Value::Object(kept));
            }
        }
    }
    let data = if kind == Kind::Cluster {
        data
    } else {
        overlay(kind, target.get("data"), data)
    };
    target.insert("data".to_owned(), Value::Object(data));
    target.remove("stringData");
    serde_json::from_value(merged).map_err(|e| invalid(e.to_string()))
}

/// A repository Secret's data after an update: the keys tiphys has no field for kept, the
/// object's keys as it has them now (a field it cleared is left out: upstream writes it
/// empty, which every reader takes as unset).
fn overlay(kind: Kind, existing: Option<&Value>, ours: Map<String, Value>) -> Map<String, Value> {
    let known = Schema::get().message(kind.message()).ok();
    let is_field = |key: &str| {
        key == "url"
            || known
                .as_ref()
                .is_some_and(|desc| desc.get_field_by_name(key).is_some())
    };
    let mut data: Map<String, Value> = existing
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !is_field(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    data.extend(ours);
    data
}

/// `stringData` as a Secret's `data` (base64).
fn encoded(string_data: Option<&Value>) -> Map<String, Value> {
    string_data
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    let b64 = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
                    (k.clone(), Value::from(b64))
                })
                .collect()
        })
        .unwrap_or_default()
}
