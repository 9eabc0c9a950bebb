//! What tiphys reads from repositories itself, where upstream asks its repo server: access
//! checks (`ValidateAccess`, and before a repository is stored), connection states, branches
//! and tags, the apps under a revision, an app's details, and a Helm repository's charts.
//!
//! RBAC as upstream (server/repository/repository.go): `repositories, get` on the repository
//! for what is read from it; ListApps also needs `applications, create` or `update` on the
//! app it is asked for, GetAppDetails `applications, get` (and `create` for an app not yet
//! stored), because both make tiphys fetch and read a repository on the caller's behalf.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};

use super::content::{self, Files};
use super::remote::remote_of;
use super::{Flavor, READ, RESOURCE, RepoQuery, RepoView, authorized, rbac_object};
use crate::error::AppError;
use crate::gitrepo::{Checked, GitError, Refs, Remote, Snapshot};
use crate::principal::Principal;
use crate::rbac::Refusal;
use crate::service::access::{Access, refuse};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// A failed access check as a caller sees it.
pub fn not_accessible(err: &GitError) -> AppError {
    if *err == GitError::Disabled {
        return AppError::FailedPrecondition(err.to_string());
    }
    AppError::InvalidArgument(format!("repository not accessible: {err}"))
}

/// A failed read (refs, a commit, an index) as a caller sees it.
pub fn read_failed(err: GitError) -> AppError {
    match err {
        GitError::NoRevision { .. } | GitError::NoRepository { .. } => AppError::NotFound(err.to_string()),
        GitError::Timeout { .. } | GitError::Unreachable { .. } | GitError::Busy { .. } => {
            AppError::Unavailable(err.to_string())
        }
        GitError::TooLarge { .. } | GitError::Disabled => AppError::FailedPrecondition(err.to_string()),
        other => AppError::FailedPrecondition(format!("repository not accessible: {other}")),
    }
}

fn is_helm(value: &Value) -> bool {
    value.get("type").and_then(Value::as_str) == Some("helm")
}

/// Contacts the repository as `remote` says: a Helm repository's index, or a Git
/// repository's refs (uncached).
pub async fn check(app: &ServerState, helm: bool, remote: &Remote) -> Result<(), GitError> {
    if helm {
        app.repos.helm_index(remote, true).await.map(|_| ())
    } else {
        app.repos.check_access(remote).await
    }
}

/// The key of a repository's connection state.
fn state_key(project: &str, url: &str) -> String {
    format!("{project}\u{0}{url}")
}

/// Checks the stored repository `value` now and records the outcome.
pub async fn check_stored(app: &ServerState, f: Flavor, value: &Value) -> Checked {
    let view = RepoView::read(value);
    let remote = remote_of(app, f, value);
    let outcome = check(app, is_helm(value), &remote).await;
    record(app, &view.project, &view.repo, &remote, outcome)
}

/// Records the outcome of a check of repository `url` in `project`, reached as `remote`.
pub fn record(
    app: &ServerState,
    project: &str,
    url: &str,
    remote: &Remote,
    outcome: Result<(), GitError>,
) -> Checked {
    app.repos.record(&state_key(project, url), remote, outcome)
}

/// The last recorded state of repository `url` in `project`, if it was checked.
pub fn recorded_state(app: &ServerState, project: &str, url: &str) -> Option<Value> {
    app.repos
        .states()
        .peek(&state_key(project, url))
        .map(|c| state_json(&c))
}

/// Forgets the last check of repository `url` in `project`.
pub fn forget(app: &ServerState, project: &str, url: &str) {
    app.repos.states().forget(&state_key(project, url));
}

/// A repository's connection state as answered: the last check, re-checked now with
/// `force`, or in the background once older than the check interval (the answer then shows
/// the last one). A repository never checked is checked now when `wait` (one repository is
/// asked for), else in the background, answered `Unknown` meanwhile (a list never waits for
/// every repository a restarted server has not checked yet).
pub async fn connection_state(
    app: &Arc<ServerState>,
    f: Flavor,
    value: &Value,
    force: bool,
    wait: bool,
) -> Value {
    if !app.repos.limits().enabled {
        return crate::service::sensitive::unknown_state(&GitError::Disabled.to_string());
    }
    let view = RepoView::read(value);
    let key = state_key(&view.project, &view.repo);
    let (recorded, due) = app.repos.states().recorded(&key);
    let checked = match recorded {
        Some(found) if !force => {
            if due {
                let (app, value) = (Arc::clone(app), value.clone());
                tokio::spawn(async move {
                    check_stored(&app, f, &value).await;
                });
            }
            found
        }
        None if !force && !wait => {
            if app.repos.states().claim_first_check(&key) {
                let (app, value) = (Arc::clone(app), value.clone());
                tokio::spawn(async move {
                    check_stored(&app, f, &value).await;
                });
            }
            return crate::service::sensitive::unknown_state("being checked");
        }
        _ => check_stored(app, f, value).await,
    };
    state_json(&checked)
}

fn state_json(checked: &Checked) -> Value {
    let at = checked.at.to_string();
    match &checked.outcome {
        Ok(()) => json!({
            "status": "Successful",
            "message": checked.warning.as_ref().map(|w| format!("warning: {w}")).unwrap_or_default(),
            "attemptedAt": at,
        }),
        Err(err) => json!({
            "status": "Failed",
            "message": format!("Unable to connect to repository: {err}"),
            "attemptedAt": at,
        }),
    }
}

/// `RepoAccessQuery` as far as the use case reads it.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
struct AccessQuery {
    repo: String,
    project: String,
    #[serde(rename = "type")]
    kind: String,
}

/// ValidateAccess: contacts a repository with the credentials in the query, or, when it
/// carries none, those of the credential template for its URL (as upstream copies them).
/// `repositories, create`, as upstream.
pub async fn validate_access(ctx: Ctx, query: Value) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let q = AccessQuery::deserialize(&query).unwrap_or_default();
    super::check_url("repository", "repo", &q.repo)?;
    Access::hidden(RESOURCE, "create").check(&ctx.app, principal, &rbac_object(&q.project, &q.repo))?;
    let remote = remote_of(&ctx.app, READ, &query);
    check(&ctx.app, q.kind == "helm", &remote)
        .await
        .map_err(|e| not_accessible(&e))?;
    Ok(Reply::Message(json!({})))
}

/// The repository `url` to read from, if the caller may `get` it: the stored one, or, as
/// upstream's `GetRepository` answers for a URL never added (the UI lists the refs of a public
/// repository typed into its form), a bare repository at that URL that borrows a credential
/// template's credentials if one matches. A caller who may not `get` it gets the same answer
/// whether it is stored or not (SEC-14).
fn readable(ctx: &Ctx, url: &str) -> Result<Value, AppError> {
    let principal = ctx.caller.require()?;
    let stored = ctx
        .app
        .registry
        .get(&crate::registry::Key::new(READ.repos, "", url))
        .is_some();
    // Asked before `authorized`, which records a denial: a caller allowed on the bare URL (but
    // not on it in every project) reads it without leaving a denial behind.
    if !stored && Access::hidden(RESOURCE, "get").allows(&ctx.app, principal, url) {
        super::check_url("repository", "repo", url)?;
        return Ok(json!({"repo": url}));
    }
    authorized(&ctx.app, READ, principal, url, "get").map(|doc| doc.value())
}

/// ListRefs: the repository's branches and tags, sorted.
pub async fn list_refs(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    let value = readable(&ctx, &q.repo)?;
    let remote = remote_of(&ctx.app, READ, &value);
    let refs = ctx
        .app
        .repos
        .refs(&remote, q.force_refresh)
        .await
        .map_err(read_failed)?;
    Ok(Reply::Message(
        json!({"branches": refs.branches(), "tags": refs.tags()}),
    ))
}

/// GetHelmCharts: the charts of a Helm repository's index, with their versions.
pub async fn helm_charts(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    let value = readable(&ctx, &q.repo)?;
    let remote = remote_of(&ctx.app, READ, &value);
    let index = helm_index(&ctx.app, &remote, q.force_refresh).await?;
    let items = content::parse_index(&index)?;
    Ok(Reply::Message(json!({"items": to_json(&items)?})))
}

/// A Helm repository's index, bounded as every fetch is, and reused for a while.
pub async fn helm_index(app: &ServerState, remote: &Remote, fresh: bool) -> Result<Arc<Vec<u8>>, AppError> {
    app.repos.helm_index(remote, fresh).await.map_err(read_failed)
}

/// The files of `revision` (branch, tag, commit or `HEAD`) of the repository `value`.
pub async fn files_at(app: &ServerState, value: &Value, revision: &str) -> Result<Arc<Snapshot>, AppError> {
    Ok(commit_at(app, value, revision).await?.0)
}

/// The files of `revision` of the repository `value`, and the tags naming its commit (from
/// the same listing of refs).
pub async fn files_and_tags_at(
    app: &ServerState,
    value: &Value,
    revision: &str,
) -> Result<(Arc<Snapshot>, Vec<String>), AppError> {
    let (snapshot, refs) = commit_at(app, value, revision).await?;
    let tags = refs.tags_of(&snapshot.commit.id);
    Ok((snapshot, tags))
}

/// The commit `revision` names (resolved on the listed refs, listed anew once if it is not
/// among them), fetched, with the refs it was resolved on.
async fn commit_at(
    app: &ServerState,
    value: &Value,
    revision: &str,
) -> Result<(Arc<Snapshot>, Arc<Refs>), AppError> {
    let remote = remote_of(app, READ, value);
    let mut refs = app.repos.refs(&remote, false).await.map_err(read_failed)?;
    if refs.resolve(revision).is_none() {
        // Perhaps it appeared since the refs were listed.
        refs = app.repos.refs(&remote, true).await.map_err(read_failed)?;
    }
    let commit = refs.resolve(revision).ok_or_else(|| {
        AppError::NotFound(format!(
            "revision {:?} not found in repository {}",
            display_revision(revision),
            crate::urlmask::mask(&remote.url)
        ))
    })?;
    let snapshot = app.repos.snapshot(&remote, &commit).await.map_err(read_failed)?;
    Ok((snapshot, refs))
}

fn display_revision(revision: &str) -> &str {
    if revision.is_empty() { "HEAD" } else { revision }
}

/// `RepoAppsQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct AppsQuery {
    pub repo: String,
    pub revision: String,
    pub app_name: String,
    pub app_project: String,
}

/// ListApps: the paths under a revision that hold an application, with their types.
pub async fn list_apps(ctx: Ctx, q: AppsQuery) -> Result<Reply, AppError> {
    let value = readable(&ctx, &q.repo)?;
    let principal = ctx.caller.require()?;
    let app_object = format!("{}/{}", q.app_project, q.app_name);
    Access::hidden("applications", "create").check_either(&ctx.app, principal, "update", &app_object)?;
    repo_permitted(&ctx.app, principal, &q.app_project, &q.repo)?;
    let snapshot = files_at(&ctx.app, &value, &q.revision).await?;
    let found = tokio::task::spawn_blocking(move || content::discover(&SnapshotFiles(&snapshot), ""))
        .await
        .map_err(|e| AppError::Internal(e.into()))??;
    let items: Vec<Value> = found
        .into_iter()
        .map(|(path, kind)| json!({"type": kind.as_str(), "path": path}))
        .collect();
    Ok(Reply::Message(json!({"items": items})))
}

/// The project's `sourceRepos` permit the repository, as upstream checks before it reads a
/// repository for an application of that project.
fn repo_permitted(
    app: &ServerState,
    principal: &Principal,
    project: &str,
    url: &str,
) -> Result<(), AppError> {
    crate::service::project_rules::ProjectRules::load(&app.registry, &app.namespace, project)?
        .check_source(project, url)
        .map_err(|_| {
            let message = format!("repository not permitted in project '{project}'");
            refuse(app, principal, Refusal::ProjectRule, url, message)
        })
}

/// A fetched commit as the content module reads it.
pub struct SnapshotFiles<'a>(pub &'a Snapshot);

impl Files for SnapshotFiles<'_> {
    fn list(&self) -> &[(String, u64)] {
        self.0.files()
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, AppError> {
        self.0
            .read_file(path)
            .ok_or_else(|| AppError::NotFound(format!("{path:?} not found at revision {}", self.0.commit.id)))
    }
}

fn to_json(value: &impl serde::Serialize) -> Result<Value, AppError> {
    serde_json::to_value(value).map_err(|e| AppError::Internal(e.into()))
}

/// `RepoAppDetailsQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct AppDetailsQuery {
    pub source: Option<Value>,
    pub app_name: String,
    pub app_project: String,
    pub source_index: i32,
}

/// GetAppDetails: the tool of an app path and what its form shows (Helm value files and
/// parameters, Kustomize images). RBAC as upstream: `repositories, get`, then
/// `applications, get` on the app, and for an app not stored yet `applications, create`;
/// for a stored one, the project must be its own and the source one of its sources (so a
/// caller who may read an app cannot make tiphys read arbitrary paths in its name).
pub async fn app_details(ctx: Ctx, q: AppDetailsQuery) -> Result<Reply, AppError> {
    let Some(source) = q.source.filter(Value::is_object) else {
        return Err(AppError::InvalidArgument("missing payload in request".to_owned()));
    };
    let url = source
        .get("repoURL")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let value = readable(&ctx, &url)?;
    let principal = ctx.caller.require()?;
    let app_object = format!("{}/{}", q.app_project, q.app_name);
    let apps = Access::hidden("applications", "get");
    apps.check(&ctx.app, principal, &app_object)?;
    let stored = ctx.app.registry.get(&crate::registry::Key::new(
        crate::registry::Kind::Application,
        &ctx.app.namespace,
        &q.app_name,
    ));
    match stored {
        None => apps.to("create").check(&ctx.app, principal, &app_object)?,
        Some(doc) => {
            let spec = doc.value().get("spec").cloned().unwrap_or(Value::Null);
            let project = spec.get("project").and_then(Value::as_str).unwrap_or_default();
            if project != q.app_project || !source_of(&spec, &source) {
                // Upstream's fixed text: the stored application's project and sources are
                // not told to a caller who named others.
                let message = crate::rbac::HIDDEN_DENIAL.to_owned();
                return Err(refuse(
                    &ctx.app,
                    principal,
                    Refusal::AppSource,
                    &app_object,
                    message,
                ));
            }
        }
    }
    repo_permitted(&ctx.app, principal, &q.app_project, &url)?;
    let revision = source
        .get("targetRevision")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let path = source
        .get("path")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if is_helm(&value) {
        return Err(AppError::FailedPrecondition(
            "the details of a chart from a Helm repository need a repo server, which tiphys does not run"
                .to_owned(),
        ));
    }
    let snapshot = files_at(&ctx.app, &value, &revision).await?;
    let details =
        tokio::task::spawn_blocking(move || content::app_details(&SnapshotFiles(&snapshot), &path, &source))
            .await
            .map_err(|e| AppError::Internal(e.into()))??;
    Ok(Reply::Message(to_json(&details)?))
}

/// Whether `source` is the application's source or one of its sources (compared on what
/// selects files: repository, path, revision, chart).
fn source_of(spec: &Value, source: &Value) -> bool {
    let key = |s: &Value| {
        ["repoURL", "path", "targetRevision", "chart"]
            .map(|f| s.get(f).and_then(Value::as_str).unwrap_or_default().to_owned())
    };
    let wanted = key(source);
    let sources = spec
        .get("sources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    spec.get("source")
        .into_iter()
        .chain(sources.iter())
        .any(|s| key(s) == wanted)
}
