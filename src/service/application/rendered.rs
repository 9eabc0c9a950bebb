//! GetManifests, RevisionMetadata and GetOCIMetadata through Argo CD's repo server
//! (`--repo-server`), as upstream's server/application/application.go asks it: each request
//! carries the source's repository with its credentials (its own, or its credential
//! template's, as util/db's `GetRepository`), the Helm and OCI repositories and credentials
//! the application's project permits (`queryRepoServer`), the `ref` sources of a multi-source
//! application (util/argo `GetRefSources`), and what argocd-cm says of rendering: the instance
//! label key, tracking method, Kustomize and Helm options, enabled source types and
//! installation ID (util/settings).

use serde_json::{Map, Value, json};

use super::source::{RevisionQuery, str_of};
use crate::error::AppError;
use crate::registry::{Key, Kind};
use crate::reposerver::{self, RepoServer};
use crate::service::project_rules::ProjectRules;
use crate::service::repository::READ;
use crate::service::repository::templates::{Templates, has_credentials};
use crate::state::ServerState;

/// The application an operation reads, as far as a repo server request needs it.
pub struct Target<'a> {
    pub doc: &'a Value,
    pub spec: &'a Value,
}

impl Target<'_> {
    fn project(&self) -> &str {
        str_of(self.spec, "project")
    }

    fn metadata(&self, field: &str) -> &str {
        self.doc
            .get("metadata")
            .map_or("", |metadata| str_of(metadata, field))
    }
}

/// The repository of `url` as the repo server needs it: the stored one (or one with only its
/// URL) with its own credentials, else those of the credential template of the longest
/// matching URL prefix. tiphys's own bookkeeping is left out.
pub fn repository(app: &ServerState, url: &str) -> Value {
    let mut repo = app
        .registry
        .get(&Key::new(Kind::Repository, "", url))
        .map(|doc| doc.value())
        .unwrap_or_else(|| json!({"repo": url}));
    if !has_credentials(&repo)
        && let Some(template) = Templates::load(app, READ.creds).for_repo(url)
        && let (Some(repo), Some(template)) = (repo.as_object_mut(), template.as_object())
    {
        for (field, value) in template {
            if field != "url" && !repo.contains_key(field) {
                repo.insert(field.clone(), value.clone());
            }
        }
    }
    without_bookkeeping(&mut repo);
    repo
}

/// A stored repository or template without tiphys's own fields, which the repo server does
/// not know.
fn without_bookkeeping(value: &mut Value) {
    if let Some(object) = value.as_object_mut() {
        object.remove("secretName");
        object.remove("connectionState");
    }
}

/// The stored repositories (or credential templates, `creds`) of `type` whose URL the
/// project permits, upstream's `GetPermittedRepos` / `GetPermittedReposCredentials`.
fn permitted(
    app: &ServerState,
    kind: Kind,
    repo_type: &str,
    url_field: &str,
    rules: &ProjectRules,
) -> Vec<Value> {
    let (_, docs) = app.registry.list(kind);
    docs.into_iter()
        .map(|doc| doc.value())
        .filter(|value| str_of(value, "type") == repo_type && rules.permits_source(str_of(value, url_field)))
        .map(|mut value| {
            without_bookkeeping(&mut value);
            value
        })
        .collect()
}

/// What argocd-cm says of rendering, in the request's field names.
fn settings(app: &ServerState) -> Map<String, Value> {
    let config = app.config.peek();
    let cm = &config.cm;
    let get = |key: &str| cm.get(key).map_or("", String::as_str);
    let or = |value: &str, default: &str| {
        if value.is_empty() {
            default.to_owned()
        } else {
            value.to_owned()
        }
    };
    let mut enabled = Map::new();
    for (source_type, key) in [
        ("Kustomize", "kustomize.enable"),
        ("Helm", "helm.enable"),
        ("Directory", "jsonnet.enable"),
    ] {
        enabled.insert(
            source_type.to_owned(),
            json!(get(key).is_empty() || get(key) == "true"),
        );
    }
    // Plugins cannot be turned off (upstream's GetEnabledSourceTypes).
    enabled.insert("Plugin".to_owned(), json!(true));
    let schemes: Vec<String> = match cm.get("helm.valuesFileSchemes") {
        Some(value) => value
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        None => vec!["https".to_owned(), "http".to_owned()],
    };
    let mut versions: Vec<Value> = cm
        .iter()
        .filter_map(|(key, path)| {
            let name = key
                .strip_prefix("kustomize.version.")
                .or_else(|| key.strip_prefix("kustomize.path."))?;
            Some(json!({
                "name": name,
                "path": path,
                "buildOptions": get(&format!("kustomize.buildOptions.{name}")),
            }))
        })
        .collect();
    versions.dedup_by(|a, b| a["name"] == b["name"]);
    let mut out = Map::new();
    out.insert(
        "appLabelKey".to_owned(),
        json!(or(
            get("application.instanceLabelKey"),
            "app.kubernetes.io/instance"
        )),
    );
    out.insert(
        "trackingMethod".to_owned(),
        json!(or(get("application.resourceTrackingMethod"), "annotation")),
    );
    out.insert(
        "kustomizeOptions".to_owned(),
        json!({"buildOptions": get("kustomize.buildOptions"), "versions": versions}),
    );
    out.insert("helmOptions".to_owned(), json!({"valuesFileSchemes": schemes}));
    out.insert("enabledSourceTypes".to_owned(), Value::Object(enabled));
    out.insert("installationID".to_owned(), json!(get("installationID")));
    out
}

/// The controller's view of the destination cluster (its version and API versions, which
/// Helm's `.Capabilities` show), when its cache is read; upstream asks the cluster itself.
async fn cluster_facts(app: &ServerState, spec: &Value) -> (String, Vec<Value>) {
    let destination = spec.get("destination").cloned().unwrap_or(Value::Null);
    let server = str_of(&destination, "server");
    let Some(cache) = app.controller_cache.as_ref().filter(|_| !server.is_empty()) else {
        return (String::new(), Vec::new());
    };
    match cache.cluster_infos(&[server]).await {
        Ok(infos) => match infos.into_iter().next().flatten() {
            Some(info) => (
                str_of(&info, "serverVersion").to_owned(),
                info.get("apiVersions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            ),
            None => (String::new(), Vec::new()),
        },
        Err(err) => {
            tracing::debug!(error = %err, "no cluster facts for a manifest request");
            (String::new(), Vec::new())
        }
    }
}

/// The sources GetManifests renders: every source of a multi-source application (those at
/// `sourcePositions` at the matching `revisions`), else the one source at `revision`.
fn sources(spec: &Value, q: &RevisionQuery) -> Result<(Vec<Value>, bool), AppError> {
    if let Some(all) = spec
        .get("sources")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
    {
        let mut all = all.clone();
        for (i, position) in q.source_positions.iter().enumerate() {
            let index = usize::try_from(*position)
                .ok()
                .filter(|p| (1..=all.len()).contains(p))
                .ok_or_else(|| AppError::InvalidArgument("source position is out of range".to_owned()))?;
            let revision = q.revisions.get(i).ok_or_else(|| {
                AppError::InvalidArgument("each source position needs a revision (revisions)".to_owned())
            })?;
            all[index - 1]["targetRevision"] = json!(revision);
        }
        return Ok((all, true));
    }
    let mut source = match spec.get("sourceHydrator").and_then(|h| h.get("drySource")) {
        Some(dry) => dry.clone(),
        None => spec
            .get("source")
            .cloned()
            .ok_or_else(|| AppError::InvalidArgument("the application has no source".to_owned()))?,
    };
    if !q.revision.is_empty() {
        source["targetRevision"] = json!(q.revision);
    }
    Ok((vec![source], false))
}

/// The `ref` sources of a multi-source application, keyed `$<ref>`.
fn ref_sources(app: &ServerState, sources: &[Value]) -> Result<Map<String, Value>, AppError> {
    let mut refs = Map::new();
    if sources.len() < 2 {
        return Ok(refs);
    }
    for source in sources {
        let name = str_of(source, "ref");
        if name.is_empty() {
            continue;
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(AppError::InvalidArgument(format!(
                "sources.ref {name} cannot contain any special characters except '_' and '-'"
            )));
        }
        let key = format!("${name}");
        if refs.contains_key(&key) {
            return Err(AppError::InvalidArgument(
                "invalid sources: multiple sources had the same `ref` key".to_owned(),
            ));
        }
        refs.insert(
            key,
            json!({
                "repo": repository(app, str_of(source, "repoURL")),
                "targetRevision": str_of(source, "targetRevision"),
                "chart": str_of(source, "chart"),
            }),
        );
    }
    Ok(refs)
}

/// The ManifestRequest fields every source of the application shares.
async fn common_request(app: &ServerState, target: &Target<'_>, rules: &ProjectRules) -> Map<String, Value> {
    let mut request = settings(app);
    let instance = crate::controller_cache::instance_name(
        target.metadata("namespace"),
        target.metadata("name"),
        &app.namespace,
    );
    let (kube_version, api_versions) = cluster_facts(app, target.spec).await;
    let destination = target.spec.get("destination").cloned().unwrap_or(Value::Null);
    request.insert("appName".to_owned(), json!(instance));
    request.insert("namespace".to_owned(), json!(str_of(&destination, "namespace")));
    request.insert("kubeVersion".to_owned(), json!(kube_version));
    request.insert("apiVersions".to_owned(), Value::Array(api_versions));
    request.insert("projectName".to_owned(), json!(target.project()));
    request.insert("projectSourceRepos".to_owned(), json!(rules.source_repos()));
    let annotation = target
        .doc
        .pointer("/metadata/annotations/argocd.argoproj.io~1manifest-generate-paths")
        .and_then(Value::as_str)
        .unwrap_or_default();
    request.insert("annotationManifestGeneratePaths".to_owned(), json!(annotation));
    request
}

/// GetManifests through the repo server: each source rendered, the documents joined, and
/// Secrets masked as upstream masks them.
pub async fn manifests(
    app: &ServerState,
    server: &RepoServer,
    target: Target<'_>,
    q: &RevisionQuery,
) -> Result<Value, AppError> {
    let rules = ProjectRules::load(&app.registry, &app.namespace, target.project())?;
    let (sources, multiple) = sources(target.spec, q)?;
    let refs = ref_sources(app, &sources)?;
    let mut common = common_request(app, &target, &rules).await;
    let helm_repos = permitted(app, Kind::Repository, "helm", "repo", &rules);
    let helm_creds = permitted(app, READ.creds, "helm", "url", &rules);
    common.insert("hasMultipleSources".to_owned(), json!(multiple));
    common.insert("refSources".to_owned(), Value::Object(refs));
    common.insert("noCache".to_owned(), json!(q.no_cache));
    let mut documents = Vec::new();
    for source in sources {
        let url = str_of(&source, "repoURL").to_owned();
        // An OCI source may be a Helm chart with OCI dependencies: those repositories too.
        let (mut repos, mut creds) = (helm_repos.clone(), helm_creds.clone());
        if url.starts_with("oci://") {
            repos.extend(permitted(app, Kind::Repository, "oci", "repo", &rules));
            creds.extend(permitted(app, READ.creds, "oci", "url", &rules));
        }
        let mut request = common.clone();
        request.insert("repo".to_owned(), repository(app, &url));
        request.insert("revision".to_owned(), source["targetRevision"].clone());
        request.insert("applicationSource".to_owned(), source);
        request.insert("repos".to_owned(), Value::Array(repos));
        request.insert("helmRepoCreds".to_owned(), Value::Array(creds));
        let reply = server
            .call(reposerver::GENERATE_MANIFEST, &Value::Object(request))
            .await?;
        documents.extend(masked_manifests(app, &reply)?);
    }
    Ok(json!({ "manifests": documents }))
}

/// GetManifestsWithFiles through the repo server: the application's source rendered from
/// the uploaded archive (`messages`: the query, then the archive's chunks), with the request
/// upstream builds for it (the application's own name, no `ref` sources).
pub async fn manifests_with_files(
    app: &ServerState,
    server: &RepoServer,
    target: Target<'_>,
    checksum: &str,
    chunks: Vec<Value>,
) -> Result<Value, AppError> {
    let rules = ProjectRules::load(&app.registry, &app.namespace, target.project())?;
    let source = target.spec.get("source").cloned().unwrap_or_else(|| json!({}));
    let url = str_of(&source, "repoURL").to_owned();
    let mut request = common_request(app, &target, &rules).await;
    request.insert("appName".to_owned(), json!(target.metadata("name")));
    request.remove("installationID");
    request.insert("repo".to_owned(), repository(app, &url));
    request.insert("revision".to_owned(), source["targetRevision"].clone());
    request.insert("applicationSource".to_owned(), source);
    request.insert(
        "repos".to_owned(),
        Value::Array(permitted(app, Kind::Repository, "helm", "repo", &rules)),
    );
    request.insert(
        "helmRepoCreds".to_owned(),
        Value::Array(permitted(app, READ.creds, "helm", "url", &rules)),
    );
    let part = |json: Value| reposerver::encode(reposerver::GENERATE_MANIFEST_WITH_FILES.input, &json);
    let mut messages = Vec::with_capacity(chunks.len() + 2);
    messages.push(part(json!({ "request": request }))?.into());
    messages.push(part(json!({ "metadata": { "checksum": checksum } }))?.into());
    for chunk in chunks {
        messages.push(part(json!({ "chunk": { "chunk": chunk } }))?.into());
    }
    let mut reply = server
        .call_streaming(reposerver::GENERATE_MANIFEST_WITH_FILES, messages)
        .await?;
    reply["manifests"] = Value::Array(masked_manifests(app, &reply)?);
    Ok(reply)
}

/// The reply's manifests, each a JSON document, with Secrets masked.
pub fn masked_manifests(app: &ServerState, reply: &Value) -> Result<Vec<Value>, AppError> {
    let manifests = reply
        .get("manifests")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    manifests
        .into_iter()
        .map(|manifest| {
            let text = manifest.as_str().unwrap_or_default();
            let obj: Value = serde_json::from_str(text).map_err(|e| {
                AppError::Internal(anyhow::anyhow!("the repo server's manifest is not JSON: {e}"))
            })?;
            if crate::service::application::masking::is_secret(&obj) {
                let masked = super::live::masked(app, obj);
                return Ok(json!(masked.to_string()));
            }
            Ok(manifest)
        })
        .collect()
}

/// RevisionMetadata through the repo server; signatures are checked when the project has
/// signature keys.
pub async fn revision_metadata(
    app: &ServerState,
    server: &RepoServer,
    target: Target<'_>,
    source: &Value,
    revision: &str,
) -> Result<Value, AppError> {
    let project = app
        .registry
        .get(&Key::new(Kind::AppProject, &app.namespace, target.project()))
        .map(|doc| doc.value())
        .unwrap_or(Value::Null);
    let check_signature = project
        .pointer("/spec/signatureKeys")
        .and_then(Value::as_array)
        .is_some_and(|keys| !keys.is_empty());
    let request = json!({
        "repo": repository(app, str_of(source, "repoURL")),
        "revision": revision,
        "checkSignature": check_signature,
    });
    server.call(reposerver::GET_REVISION_METADATA, &request).await
}

/// GetOCIMetadata through the repo server.
pub async fn oci_metadata(
    app: &ServerState,
    server: &RepoServer,
    source: &Value,
    revision: &str,
) -> Result<Value, AppError> {
    let request = json!({
        "repo": repository(app, str_of(source, "repoURL")),
        "name": str_of(source, "chart"),
        "revision": revision,
    });
    server.call(reposerver::GET_OCI_METADATA, &request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(positions: &[i64], revisions: &[&str]) -> RevisionQuery {
        RevisionQuery {
            source_positions: positions.to_vec(),
            revisions: revisions.iter().map(|r| (*r).to_owned()).collect(),
            ..RevisionQuery::default()
        }
    }

    #[test]
    fn positions_set_the_revisions_of_the_sources_they_name() {
        let spec = json!({"sources": [
            {"repoURL": "a", "targetRevision": "main"},
            {"repoURL": "b", "targetRevision": "main"},
        ]});
        let (all, multiple) = sources(&spec, &query(&[2], &["v1"])).unwrap();
        assert!(multiple);
        assert_eq!(all[0]["targetRevision"], "main");
        assert_eq!(all[1]["targetRevision"], "v1");
        for bad in [0, 3, -1] {
            let err = sources(&spec, &query(&[bad], &["v1"])).unwrap_err();
            assert_eq!(err.to_string(), "source position is out of range");
        }
        assert!(
            sources(&spec, &query(&[1], &[])).is_err(),
            "a position without its revision"
        );
    }

    #[test]
    fn one_source_takes_the_querys_revision() {
        let spec = json!({"source": {"repoURL": "a", "targetRevision": "main"}});
        let q = RevisionQuery {
            revision: "v2".to_owned(),
            ..RevisionQuery::default()
        };
        let (one, multiple) = sources(&spec, &q).unwrap();
        assert!(!multiple);
        assert_eq!(one, [json!({"repoURL": "a", "targetRevision": "v2"})]);
    }
}
