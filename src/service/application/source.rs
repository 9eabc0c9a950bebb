//! What is read from an application's source repository, where upstream asks its repo
//! server: a revision's commit metadata, a chart version's details, OCI metadata and
//! manifests. `applications, get` on the application, as upstream
//! (server/application/application.go); the repository is the stored one for the source's
//! URL (with its credentials or a template's), else reached anonymously, as upstream does.
//! With `--repo-server` these are the repo server's answers (`rendered`); without, tiphys
//! reads commits itself and renders plain directories only.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{authorized, rendered};
use crate::error::AppError;
use crate::registry::{Key, Kind};
use crate::service::repository::browse::{self, SnapshotFiles};
use crate::service::repository::content;
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// RevisionMetadataQuery, RevisionChartDetailsQuery and ApplicationManifestQuery, as far as
/// they are read.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct RevisionQuery {
    pub name: String,
    pub revision: String,
    pub app_namespace: String,
    pub project: String,
    pub source_index: i32,
    pub source_positions: Vec<i64>,
    pub revisions: Vec<String>,
    pub no_cache: bool,
}

/// Why OCI metadata and uploaded files need `--repo-server`.
const NO_REPO_SERVER: &str = "tiphys was started without --repo-server: OCI metadata and \
     manifests generated from uploaded files come from Argo CD's repo server";

/// `operation` refused for want of a repo server (as a Helm source's GetManifests is).
fn no_repo_server(ctx: &Ctx, operation: &str) -> AppError {
    match ctx.caller.require() {
        Err(refused) => refused,
        Ok(_) => AppError::FailedPrecondition(format!("{operation} needs a repo server: {NO_REPO_SERVER}")),
    }
}

/// The application's source at `index` (its only source, or one of `sources`).
fn source_at(spec: &Value, index: i32) -> Result<Value, AppError> {
    if let Some(sources) = spec
        .get("sources")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty())
    {
        return usize::try_from(index)
            .ok()
            .and_then(|i| sources.get(i))
            .cloned()
            .ok_or_else(|| AppError::InvalidArgument(format!("source index {index} is out of range")));
    }
    spec.get("source")
        .cloned()
        .ok_or_else(|| AppError::InvalidArgument("the application has no source".to_owned()))
}

/// The stored repository of `url`, or one without credentials.
fn repository(app: &ServerState, url: &str) -> Value {
    app.registry
        .get(&Key::new(Kind::Repository, "", url))
        .map(|doc| doc.value())
        .unwrap_or_else(|| json!({"repo": url}))
}

pub(super) fn str_of<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// The application and its spec, if the caller may `get` it.
fn app_of(ctx: &Ctx, q: &RevisionQuery) -> Result<(Value, Value), AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.app_namespace, &q.name, &q.project, "get")?.value();
    let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
    Ok((doc, spec))
}

fn spec_of(ctx: &Ctx, q: &RevisionQuery) -> Result<Value, AppError> {
    app_of(ctx, q).map(|(_, spec)| spec)
}

/// RevisionMetadata: author, date, message and tags of a commit of the source's repository.
pub async fn revision_metadata(ctx: Ctx, q: RevisionQuery) -> Result<Reply, AppError> {
    let (doc, spec) = app_of(&ctx, &q)?;
    let source = source_at(&spec, q.source_index)?;
    if let Some(server) = &ctx.app.repo_server {
        let target = rendered::Target {
            doc: &doc,
            spec: &spec,
        };
        let metadata = rendered::revision_metadata(&ctx.app, server, target, &source, &q.revision).await?;
        return Ok(Reply::Message(metadata));
    }
    let repo = repository(&ctx.app, str_of(&source, "repoURL"));
    if str_of(&repo, "type") == "helm" || !str_of(&source, "chart").is_empty() {
        return Err(AppError::InvalidArgument(
            "revision metadata is only available for Git sources".to_owned(),
        ));
    }
    let (snapshot, tags) = browse::files_and_tags_at(&ctx.app, &repo, &q.revision).await?;
    let commit = &snapshot.commit;
    Ok(Reply::Message(json!({
        "author": commit.author,
        "date": commit.date,
        "tags": tags,
        "message": commit.message,
    })))
}

/// RevisionChartDetails: description, home and maintainers of a chart version, from the
/// Helm repository's index.
pub async fn revision_chart_details(ctx: Ctx, q: RevisionQuery) -> Result<Reply, AppError> {
    let spec = spec_of(&ctx, &q)?;
    let source = source_at(&spec, q.source_index)?;
    let chart = str_of(&source, "chart");
    if chart.is_empty() {
        return Err(AppError::InvalidArgument(
            "chart details are only available for Helm chart sources".to_owned(),
        ));
    }
    let repo = repository(&ctx.app, str_of(&source, "repoURL"));
    let remote =
        crate::service::repository::remote::remote_of(&ctx.app, crate::service::repository::READ, &repo);
    let index = browse::helm_index(&ctx.app, &remote, false).await?;
    let details = content::chart_details(&index, chart, &q.revision)?;
    Ok(Reply::Message(
        serde_json::to_value(details).map_err(|e| AppError::Internal(e.into()))?,
    ))
}

/// GetOCIMetadata: the OCI image's annotations, from the repo server.
pub async fn oci_metadata(ctx: Ctx, q: RevisionQuery) -> Result<Reply, AppError> {
    let Some(server) = ctx.app.repo_server.clone() else {
        return Err(no_repo_server(&ctx, "GetOCIMetadata"));
    };
    let spec = spec_of(&ctx, &q)?;
    let source = source_at(&spec, q.source_index)?;
    let metadata = rendered::oci_metadata(&ctx.app, &server, &source, &q.revision).await?;
    Ok(Reply::Message(metadata))
}

/// GetManifests: with a repo server, every source rendered by it; without, the YAML and JSON
/// documents of a directory source at a revision (the source's own by default).
pub async fn manifests(ctx: Ctx, q: RevisionQuery) -> Result<Reply, AppError> {
    let (doc, spec) = app_of(&ctx, &q)?;
    if let Some(server) = &ctx.app.repo_server {
        let target = rendered::Target {
            doc: &doc,
            spec: &spec,
        };
        return Ok(Reply::Message(
            rendered::manifests(&ctx.app, server, target, &q).await?,
        ));
    }
    let index = q
        .source_positions
        .first()
        .map_or(0, |p| i32::try_from(p - 1).unwrap_or(-1));
    let source = source_at(&spec, index)?;
    if !str_of(&source, "chart").is_empty() {
        return Err(AppError::FailedPrecondition(
            "rendering a Helm chart needs a repo server, which tiphys does not run".to_owned(),
        ));
    }
    let repo = repository(&ctx.app, str_of(&source, "repoURL"));
    let revision = if q.revision.is_empty() {
        str_of(&source, "targetRevision").to_owned()
    } else {
        q.revision.clone()
    };
    let snapshot = browse::files_at(&ctx.app, &repo, &revision).await?;
    let commit = snapshot.commit.id.clone();
    let path = str_of(&source, "path").to_owned();
    let (documents, kind) = tokio::task::spawn_blocking(move || {
        let files = SnapshotFiles(&snapshot);
        let kind = content::source_type(&files, &path, &source)?;
        content::manifests(&files, &path, &source).map(|docs| (docs, kind))
    })
    .await
    .map_err(|e| AppError::Internal(e.into()))??;
    let destination = spec.get("destination").cloned().unwrap_or(Value::Null);
    Ok(Reply::Message(json!({
        "manifests": documents,
        "namespace": str_of(&destination, "namespace"),
        "server": str_of(&destination, "server"),
        "revision": commit,
        "sourceType": kind.as_str(),
    })))
}

/// GetManifestsWithFiles as the gRPC adapter hands it over: every message of the upload.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct Upload {
    pub messages: Vec<Value>,
}

/// GetManifestsWithFiles: the manifests of the application's source rendered by the repo
/// server from a directory the caller uploads (`argocd app diff --local
/// --server-side-generate`): first the query, then the archive's chunks, as upstream's
/// util/manifeststream sends them. The whole upload is bounded by the request limit.
pub async fn manifests_with_files(ctx: Ctx, upload: Upload) -> Result<Reply, AppError> {
    let Some(server) = ctx.app.repo_server.clone() else {
        return Err(no_repo_server(&ctx, "GetManifestsWithFiles"));
    };
    if upload.messages.is_empty() {
        return Err(AppError::InvalidArgument(
            "GetManifestsWithFiles takes a stream of messages (the query, then the archive's chunks), \
             which only gRPC carries"
                .to_owned(),
        ));
    }
    let mut messages = upload.messages.into_iter();
    let query = messages
        .next()
        .and_then(|first| first.get("query").cloned())
        .ok_or_else(|| AppError::InvalidArgument("error getting stream query: query is nil".to_owned()))?;
    let q: RevisionQuery = serde_json::from_value(query.clone())
        .map_err(|e| AppError::InvalidArgument(format!("invalid request: {e}")))?;
    if q.name.is_empty() {
        return Err(AppError::InvalidArgument(
            "invalid request: application name is missing".to_owned(),
        ));
    }
    let (doc, spec) = app_of(&ctx, &q)?;
    let chunks = messages
        .map(|part| {
            part.pointer("/chunk/chunk").cloned().ok_or_else(|| {
                AppError::InvalidArgument("error getting stream chunk: chunk is nil".to_owned())
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let checksum = str_of(&query, "checksum").to_owned();
    let target = rendered::Target {
        doc: &doc,
        spec: &spec,
    };
    let reply = rendered::manifests_with_files(&ctx.app, &server, target, &checksum, chunks).await?;
    Ok(Reply::Message(reply))
}

/// Checks what upstream's repo server checks when an application is created with `validate`
/// (the default): each Git source's revision exists and its path holds something to deploy.
/// Helm chart sources are not fetched. Nothing is checked when repositories are not
/// contacted (`--repo-access off`).
pub async fn check_sources(app: &ServerState, name: &str, spec: &Value) -> Result<(), AppError> {
    if !app.repos.limits().enabled {
        return Ok(());
    }
    let sources: Vec<Value> = match spec.get("sources").and_then(Value::as_array) {
        Some(sources) if !sources.is_empty() => sources.clone(),
        _ => spec.get("source").cloned().into_iter().collect(),
    };
    for source in sources {
        if !str_of(&source, "chart").is_empty()
            || !source.get("ref").is_none_or(Value::is_null) && str_of(&source, "path").is_empty()
        {
            continue;
        }
        let path = str_of(&source, "path").to_owned();
        let invalid = |err: AppError| {
            AppError::InvalidArgument(format!(
                "application spec for {name} is invalid: InvalidSpecError: Unable to generate manifests in {path}: {err}"
            ))
        };
        let repo = repository(app, str_of(&source, "repoURL"));
        let snapshot = browse::files_at(app, &repo, str_of(&source, "targetRevision"))
            .await
            .map_err(&invalid)?;
        let checked = source.clone();
        let dir = path.clone();
        tokio::task::spawn_blocking(move || content::source_type(&SnapshotFiles(&snapshot), &dir, &checked))
            .await
            .map_err(|e| AppError::Internal(e.into()))?
            .map_err(&invalid)?;
    }
    Ok(())
}
