//! Argo CD's declarative Secrets (`argocd.argoproj.io/secret-type: cluster | repository |
//! repo-creds`) and the API objects they stand for, both ways. Keys are upstream's: a cluster
//! Secret holds `name`, `server`, `config` (the ClusterConfig as JSON), `namespaces`
//! (comma-separated), `clusterResources`, `project` and `shard`; a repository or credential
//! template Secret holds one key per field of the object (`url` for the repository URL).

use std::collections::BTreeMap;

use base64::Engine as _;
use prost_reflect::Kind as FieldKind;
use serde_json::{Map, Value, json};

use super::Kind;
use crate::schema::Schema;

pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
const MANAGED_BY: &str = "managed-by";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Marks a Secret exported without its credentials (`tiphys admin export`): applied over an
/// existing object it would erase them, so `apply` leaves such an object as it is.
pub const CREDENTIALS_OMITTED: &str = "tiphys.io/credentials-omitted";
/// The field of a cluster, repository or template that keeps the name of the Secret it was
/// declared in (`crate::service::secret_name`).
pub const SECRET_NAME: &str = "secretName";

/// Credential keys of a repository or credential template Secret: the fields of a Repository
/// and of a RepoCreds (the same names in both messages) that the server never shows.
pub const REPO_SECRET_KEYS: &[&str] = &[
    "password",
    "sshPrivateKey",
    "tlsClientCertKey",
    "githubAppPrivateKey",
    "gcpServiceAccountKey",
    "bearerToken",
    "azureServicePrincipalClientSecret",
];

/// Credential fields of a cluster's `config`, as JSON pointers (what the server never shows:
/// an exec plugin's environment and arguments carry secrets as often as not).
pub const CLUSTER_SECRET_FIELDS: [&str; 5] = [
    "/password",
    "/bearerToken",
    "/tlsClientConfig/keyData",
    "/execProviderConfig/env",
    "/execProviderConfig/args",
];

/// Parts of a cluster's `config` the API may not show back (so a change to them cannot be
/// seen by comparing answers).
const CLUSTER_CREDENTIAL_FIELDS: [&str; 8] = [
    "/username",
    "/password",
    "/bearerToken",
    "/tlsClientConfig/keyData",
    "/tlsClientConfig/certData",
    "/tlsClientConfig/caData",
    "/execProviderConfig",
    "/awsAuthConfig",
];

/// What a Secret stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretType {
    Cluster,
    Repository,
    RepoCreds,
    /// A repository the source hydrator pushes to (`repository-write`).
    RepositoryWrite,
    /// A credential template for those (`repo-write-creds`).
    RepoCredsWrite,
}

/// The label values, as upstream names them.
const LABELS: &str = "cluster, repository, repo-creds, repository-write or repo-write-creds";

impl SecretType {
    pub fn label(self) -> &'static str {
        match self {
            SecretType::Cluster => "cluster",
            SecretType::Repository => "repository",
            SecretType::RepoCreds => "repo-creds",
            SecretType::RepositoryWrite => "repository-write",
            SecretType::RepoCredsWrite => "repo-write-creds",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            SecretType::Cluster => "cluster",
            SecretType::Repository => "repo",
            SecretType::RepoCreds => "creds",
            SecretType::RepositoryWrite => "repo-write",
            SecretType::RepoCredsWrite => "creds-write",
        }
    }

    /// The registry kind of a repository or template Secret (`None` for a cluster).
    pub fn repo_kind(self) -> Option<Kind> {
        match self {
            SecretType::Cluster => None,
            SecretType::Repository => Some(Kind::Repository),
            SecretType::RepoCreds => Some(Kind::RepoCreds),
            SecretType::RepositoryWrite => Some(Kind::WriteRepository),
            SecretType::RepoCredsWrite => Some(Kind::WriteRepoCreds),
        }
    }

    /// The Secret type of a repository or template of registry kind `kind`.
    fn of_kind(kind: Kind) -> Self {
        match kind {
            Kind::Repository => SecretType::Repository,
            Kind::WriteRepository => SecretType::RepositoryWrite,
            Kind::WriteRepoCreds => SecretType::RepoCredsWrite,
            _ => SecretType::RepoCreds,
        }
    }

    pub fn of(secret: &Value) -> Result<Self, String> {
        let label = secret
            .pointer("/metadata/labels")
            .and_then(|l| l.get(SECRET_TYPE_LABEL))
            .and_then(Value::as_str)
            .unwrap_or_default();
        match label {
            "cluster" => Ok(SecretType::Cluster),
            "repository" => Ok(SecretType::Repository),
            "repo-creds" => Ok(SecretType::RepoCreds),
            "repository-write" => Ok(SecretType::RepositoryWrite),
            "repo-write-creds" => Ok(SecretType::RepoCredsWrite),
            "" => Err(format!(
                "a Secret without the label {SECRET_TYPE_LABEL} ({LABELS}) is not Argo CD's"
            )),
            other => Err(format!(
                "unsupported {SECRET_TYPE_LABEL} {other:?}: expected {LABELS}"
            )),
        }
    }
}

/// A Secret read as an API object, with warnings about keys that mean nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct FromSecret {
    pub object: Value,
    pub warnings: Vec<String>,
    /// Whether the Secret holds credentials (which the API never shows back).
    pub has_credentials: bool,
}

/// The Secret's keys: `data` (base64) overlaid with `stringData`, as Kubernetes does.
fn secret_data(secret: &Value) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    if let Some(data) = secret.get("data").filter(|d| !d.is_null()) {
        let data = data.as_object().ok_or("data: expected a mapping")?;
        for (key, value) in data {
            let text = value
                .as_str()
                .ok_or(format!("data.{key}: expected a base64 string"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|e| format!("data.{key}: invalid base64: {e}"))?;
            let text = String::from_utf8(bytes).map_err(|_| format!("data.{key}: not UTF-8 text"))?;
            out.insert(key.clone(), text);
        }
    }
    if let Some(data) = secret.get("stringData").filter(|d| !d.is_null()) {
        let data = data.as_object().ok_or("stringData: expected a mapping")?;
        for (key, value) in data {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Bool(_) | Value::Number(_) => value.to_string(),
                _ => return Err(format!("stringData.{key}: expected a string")),
            };
            out.insert(key.clone(), text);
        }
    }
    Ok(out)
}

/// The Secret's labels and annotations, without the ones that only mark it as Argo CD's.
fn meta_map(secret: &Value, field: &str, skip: &[&str]) -> Map<String, Value> {
    secret
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !skip.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// Go's strconv.ParseBool.
fn parse_bool(key: &str, text: &str) -> Result<bool, String> {
    match text.trim() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(format!("{key}: {other:?} is not a boolean (true or false)")),
    }
}

fn parse_int(key: &str, text: &str) -> Result<i64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{key}: {text:?} is not a whole number"))
}

/// A cluster Secret as a Cluster.
pub fn cluster_from_secret(secret: &Value) -> Result<FromSecret, String> {
    let data = secret_data(secret)?;
    let mut cluster = Map::new();
    let mut warnings = Vec::new();
    let server = data.get("server").map(|s| s.trim()).unwrap_or_default();
    if server.is_empty() {
        return Err("a cluster Secret needs the key server".to_owned());
    }
    let mut config = Value::Object(Map::new());
    for (key, text) in &data {
        match key.as_str() {
            "server" | "name" | "project" => {
                cluster.insert(key.clone(), Value::from(text.trim()));
            }
            "config" => {
                config = serde_json::from_str(text).map_err(|e| format!("config: not JSON: {e}"))?;
                if !config.is_object() {
                    return Err("config: expected a JSON object".to_owned());
                }
            }
            "namespaces" => {
                let list: Vec<&str> = text.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
                cluster.insert(key.clone(), json!(list));
            }
            "clusterResources" => {
                cluster.insert(key.clone(), Value::Bool(parse_bool(key, text)?));
            }
            "shard" if !text.trim().is_empty() => {
                cluster.insert(key.clone(), Value::from(parse_int(key, text)?));
            }
            "shard" => {}
            other => warnings.push(format!("key {other} is not part of a cluster Secret; ignored")),
        }
    }
    let has_credentials = CLUSTER_CREDENTIAL_FIELDS
        .iter()
        .any(|p| config.pointer(p).is_some_and(|v| !v.is_null() && v != ""));
    cluster.insert("config".to_owned(), config);
    put_meta(&mut cluster, secret);
    Ok(FromSecret {
        object: Value::Object(cluster),
        warnings,
        has_credentials,
    })
}

fn put_meta(object: &mut Map<String, Value>, secret: &Value) {
    let labels = meta_map(secret, "labels", &[SECRET_TYPE_LABEL]);
    if !labels.is_empty() {
        object.insert("labels".to_owned(), Value::Object(labels));
    }
    let annotations = meta_map(
        secret,
        "annotations",
        &[MANAGED_BY, LAST_APPLIED, CREDENTIALS_OMITTED],
    );
    if !annotations.is_empty() {
        object.insert("annotations".to_owned(), Value::Object(annotations));
    }
}

/// The field that holds a repository's (`repo`) or a template's (`url`) URL.
fn url_field(kind: Kind) -> &'static str {
    if matches!(kind, Kind::Repository | Kind::WriteRepository) {
        "repo"
    } else {
        "url"
    }
}

/// A repository or repo-creds Secret as a Repository or RepoCreds: each key is the field of
/// that name (`url` is a Repository's `repo`), typed as the schema says.
pub fn repo_from_secret(secret: &Value, kind: Kind) -> Result<FromSecret, String> {
    let data = secret_data(secret)?;
    let desc = Schema::get().message(kind.message()).map_err(|e| e.to_string())?;
    let url_field = url_field(kind);
    let mut object = Map::new();
    let mut warnings = Vec::new();
    for (key, text) in &data {
        let field_name = if key == "url" { url_field } else { key.as_str() };
        let field = match desc.get_field_by_name(field_name) {
            Some(f) if !f.is_list() && !f.is_map() && key != "repo" && key != SECRET_NAME => f,
            _ => {
                warnings.push(format!("key {key} is not a field of {}; ignored", desc.name()));
                continue;
            }
        };
        let value = match field.kind() {
            FieldKind::String => Value::from(text.as_str()),
            FieldKind::Bool => Value::Bool(parse_bool(key, text)?),
            FieldKind::Int64 | FieldKind::Int32 | FieldKind::Uint32 | FieldKind::Uint64 => {
                Value::from(parse_int(key, text)?)
            }
            _ => {
                warnings.push(format!("key {key} cannot be set from a Secret; ignored"));
                continue;
            }
        };
        object.insert(field_name.to_owned(), value);
    }
    if object
        .get(url_field)
        .and_then(Value::as_str)
        .is_none_or(|u| u.trim().is_empty())
    {
        return Err(format!(
            "a {} Secret needs the key url",
            SecretType::of(secret)?.label()
        ));
    }
    let has_credentials = REPO_SECRET_KEYS
        .iter()
        .chain(&["username", "tlsClientCertData"])
        .any(|k| data.get(*k).is_some_and(|v| !v.is_empty()));
    Ok(FromSecret {
        object: Value::Object(object),
        warnings,
        has_credentials,
    })
}

/// A Secret for an object; `dropped` lists the credential keys left out (none when
/// `include_credentials`).
pub struct ToSecret {
    pub secret: Value,
    pub dropped: Vec<String>,
}

/// FNV-1a (32 bits), as upstream names its generated Secrets.
fn fnv32a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// A Secret name for `url` (upstream's `repo-<hash>`, `cluster-<host>-<hash>`, `creds-<hash>`:
/// util/db/secrets.go URIToSecretName for clusters, util/db/repository.go RepoURLToSecretName
/// for the others, whose hash covers the URL and then the project).
pub fn secret_name(kind: SecretType, url: &str, project: &str) -> String {
    if kind != SecretType::Cluster {
        return format!("{}-{}", kind.prefix(), fnv32a(&format!("{url}{project}")));
    }
    let hash = fnv32a(url);
    // The host as upstream takes it: no user info or port, an IPv6 address with `-` for `:`.
    let host = match url::Url::parse(url)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()))
    {
        Some(url::Host::Ipv6(addr)) => addr.to_string().replace(':', "-"),
        Some(host) => host.to_string(),
        None => String::new(),
    };
    let host: String = host
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(200)
        .collect();
    // An address without a host still gets both dashes, as upstream's.
    format!("cluster-{}-{hash}", host.trim_matches(['-', '.']))
}

/// The name of `object`'s Secret: the one it was declared in, else upstream's for its URL.
pub fn name_for(kind: SecretType, object: &Value, url: &str) -> String {
    match object.get(SECRET_NAME).and_then(Value::as_str) {
        Some(name) if !name.is_empty() => name.to_owned(),
        _ => {
            let project = object.get("project").and_then(Value::as_str).unwrap_or_default();
            secret_name(kind, url, project)
        }
    }
}

fn secret(kind: SecretType, name: String, object: &Value, data: Map<String, Value>) -> Value {
    let mut labels = object
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(SECRET_TYPE_LABEL.to_owned(), Value::from(kind.label()));
    let mut annotations = object
        .get("annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    annotations.insert(MANAGED_BY.to_owned(), Value::from("argocd.argoproj.io"));
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "type": "Opaque",
        "stringData": data,
    })
}

/// A Cluster as a cluster Secret.
pub fn cluster_to_secret(cluster: &Value, include_credentials: bool) -> ToSecret {
    let server = cluster.get("server").and_then(Value::as_str).unwrap_or_default();
    let mut data = Map::new();
    for key in ["name", "server", "project"] {
        if let Some(v) = cluster.get(key).and_then(Value::as_str).filter(|v| !v.is_empty()) {
            data.insert(key.to_owned(), Value::from(v));
        }
    }
    let namespaces = strings(cluster, "/namespaces");
    if !namespaces.is_empty() {
        data.insert("namespaces".to_owned(), Value::from(namespaces.join(",")));
    }
    if cluster.get("clusterResources") == Some(&Value::Bool(true)) {
        data.insert("clusterResources".to_owned(), Value::from("true"));
    }
    if let Some(shard) = cluster.get("shard").and_then(Value::as_i64) {
        data.insert("shard".to_owned(), Value::from(shard.to_string()));
    }
    let mut config = cluster.get("config").cloned().unwrap_or_else(|| json!({}));
    let mut dropped = Vec::new();
    if !include_credentials {
        for pointer in CLUSTER_SECRET_FIELDS {
            if remove_pointer(&mut config, pointer) {
                dropped.push(format!("config{}", pointer.replace('/', ".")));
            }
        }
    }
    data.insert("config".to_owned(), Value::from(config.to_string()));
    let name = name_for(SecretType::Cluster, cluster, server);
    ToSecret {
        secret: secret(SecretType::Cluster, name, cluster, data),
        dropped,
    }
}

/// The strings of the list at `pointer` (others as their JSON text).
fn strings(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn remove_pointer(value: &mut Value, pointer: &str) -> bool {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return false;
    };
    let parent = if parent.is_empty() {
        Some(value)
    } else {
        value.pointer_mut(parent)
    };
    parent
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove(last))
        .is_some_and(|v| !v.is_null() && v != "")
}

/// A Repository (`kind` Repository) or RepoCreds as its Secret.
pub fn repo_to_secret(object: &Value, kind: Kind, include_credentials: bool) -> ToSecret {
    let (secret_type, url_field) = (SecretType::of_kind(kind), url_field(kind));
    let mut data = Map::new();
    let mut dropped = Vec::new();
    let fields = object.as_object().cloned().unwrap_or_default();
    for (key, value) in fields {
        if matches!(
            key.as_str(),
            "connectionState" | "inheritedCreds" | "labels" | "annotations" | SECRET_NAME
        ) {
            continue;
        }
        let text = match value {
            Value::String(s) if !s.is_empty() => s,
            Value::Bool(true) => "true".to_owned(),
            Value::Number(n) if n.as_i64() != Some(0) => n.to_string(),
            _ => continue,
        };
        if !include_credentials && REPO_SECRET_KEYS.contains(&key.as_str()) {
            dropped.push(key);
            continue;
        }
        let key = if key == url_field { "url".to_owned() } else { key };
        data.insert(key, Value::from(text));
    }
    let url = object.get(url_field).and_then(Value::as_str).unwrap_or_default();
    let name = name_for(secret_type, object, url);
    ToSecret {
        secret: secret(secret_type, name, object, data),
        dropped,
    }
}

#[cfg(test)]
mod tests;
