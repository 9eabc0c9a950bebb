//! `repository.RepositoryService`: Git, Helm and OCI repositories, stored in the registry under
//! their URL and authorised with upstream's RBAC objects (`<url>`, or `<project>/<url>` for a
//! project-scoped repository). The credential templates of `repocreds.RepoCredsService` are
//! served from here too (`super::repocreds`).
//!
//! Repositories hold credentials: answers are built without them (`redact::repository`),
//! never sent as stored, and a repository that borrows a template's credentials says
//! `inheritedCreds: true`, never what they are. A missing repository and one the caller may
//! not see give the same answer (SEC-14). Only https, http, ssh and git URLs (and the
//! scp-like `user@host:path`) are accepted (SEC-25), and none with a password in it.
//!
//! The write repositories (and write credential templates) that upstream's source hydrator
//! pushes with are a second, separate registry served by the same code ([`Flavor`]): their own
//! kinds, Secret types and RBAC resource (`write-repositories`), the same rules and redaction.
//!
//! Repositories are contacted (`browse`): before one is stored, for its connection state,
//! and for what the UI reads from them (refs, apps, app details, Helm charts). Write
//! repositories are not: tiphys does not push, so their state stays `Unknown`.

pub mod browse;
pub mod content;
pub mod creds;
pub mod remote;
pub mod templates;

use serde::Deserialize;
use serde_json::{Map, Value};

use self::templates::{Templates, has_credentials};
use super::access::{Access, Missing};
use super::redact;
use super::resource::check_repo_url;
use super::secret_name::{self, Create};
use super::sensitive::{
    REPOSITORY, REPOSITORY_LIST, canonical, check_no_password, list, not_found, object_mut, unknown_state,
    write,
};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key, Kind};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// The RBAC resource of repositories and of credential templates.
pub const RESOURCE: &str = "repositories";

/// Which registry of repositories a call works on: the ones Argo CD reads from, or the write
/// repositories upstream's source hydrator pushes to. Each has its repositories, its
/// credential templates (a write repository only inherits write credentials) and its RBAC
/// resource, as upstream keeps them in Secrets of their own types.
#[derive(Debug, Clone, Copy)]
pub struct Flavor {
    pub repos: Kind,
    pub creds: Kind,
    pub resource: &'static str,
    /// What one repository is called in messages.
    pub what: &'static str,
    /// What one credential template is called in messages.
    pub creds_what: &'static str,
}

/// Repositories and credential templates.
pub const READ: Flavor = Flavor {
    repos: Kind::Repository,
    creds: Kind::RepoCreds,
    resource: RESOURCE,
    what: "repository",
    creds_what: "repository credentials",
};

/// Write repositories and write credential templates.
pub const WRITE: Flavor = Flavor {
    repos: Kind::WriteRepository,
    creds: Kind::WriteRepoCreds,
    resource: "write-repositories",
    what: "write repository",
    creds_what: "write repository credentials",
};

const NO_CONNECTION: &str =
    "tiphys does not push to repositories; the connection state of a write repository is not checked";
/// Repository types upstream knows (empty means git).
/// Repository and credential template types upstream knows (empty means git).
const TYPES: &[&str] = &["", "git", "helm", "oci"];

/// What the server owns in a repository: never taken from a caller, never stored.
const SERVER_FIELDS: &[&str] = &["connectionState", "inheritedCreds"];

/// The RBAC object of a repository: `<url>`, or `<project>/<url>` for a project-scoped one.
pub fn rbac_object(project: &str, url: &str) -> String {
    if project.is_empty() {
        url.to_owned()
    } else {
        format!("{project}/{url}")
    }
}

/// What the use cases read of a repository.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct RepoView {
    repo: String,
    project: String,
    #[serde(rename = "type")]
    kind: String,
}

impl RepoView {
    fn read(value: &Value) -> Self {
        // Request values are canonical (typed by the schema): only a non-object fails here.
        Self::deserialize(value).unwrap_or_default()
    }

    fn rbac_object(&self) -> String {
        rbac_object(&self.project, &self.repo)
    }
}

/// A repository URL (at `field`) as accepted on write: no password in it (checked first, so no
/// message below ever quotes one), and an allowed scheme with a host (SEC-25).
pub fn check_url(what: &str, field: &str, url: &str) -> Result<(), AppError> {
    if url.is_empty() {
        return Err(AppError::InvalidArgument(format!(
            "{field}: {what} URL is required"
        )));
    }
    check_no_password(what, url)?;
    check_repo_url(field, url)
}

/// A repository as answered: credentials removed, `inheritedCreds` when a template supplies
/// them, the default type, and the connection state.
pub fn answer(value: &Value, templates: &Templates) -> Result<Value, AppError> {
    let mut out = value.clone();
    let view = RepoView::read(value);
    if let Some(object) = object_mut(&mut out) {
        for field in SERVER_FIELDS {
            object.remove(*field);
        }
        if !has_credentials(value)
            && let Some(template) = templates.for_repo(&view.repo)
        {
            object.insert("inheritedCreds".to_owned(), Value::Bool(true));
            if let Some(username) = template
                .get("username")
                .filter(|u| u.as_str().is_some_and(|s| !s.is_empty()))
            {
                object.insert("username".to_owned(), username.clone());
            }
        }
        if view.kind.is_empty() {
            object.insert("type".to_owned(), Value::from("git"));
        }
        object.insert("connectionState".to_owned(), unknown_state(NO_CONNECTION));
    }
    redact::repository(&mut out);
    canonical(REPOSITORY, &out)
}

/// The stored repository with URL `url`, if the caller may perform `action` on it; see the
/// module comment for what a missing or hidden one answers.
fn authorized(
    state: &ServerState,
    f: Flavor,
    principal: &Principal,
    url: &str,
    action: &str,
) -> Result<DocRef, AppError> {
    if url.is_empty() {
        return Err(AppError::InvalidArgument(format!("{} URL is required", f.what)));
    }
    Access::hidden(f.resource, action).load(
        state,
        principal,
        state.registry.get(&Key::new(f.repos, "", url)),
        |doc| rbac_object(&doc.summary.project, url),
        // Global or in any project.
        || {
            Missing::new(
                vec![url.to_owned(), format!("*/{url}")],
                not_found(&format!("{} {:?}", f.what, redact::url(url))),
            )
        },
    )
}

/// `RepoQuery` (List, Get, Delete).
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct RepoQuery {
    pub repo: String,
    pub force_refresh: bool,
    pub app_project: String,
}

/// ListRepositories (and List): every repository the caller may `get`, narrowed to the
/// query's URL and project.
pub async fn list_repositories(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    list_in(READ, &ctx, &q).await
}

/// ListWriteRepositories: [`list_repositories`] of the write repositories.
pub async fn list_write_repositories(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    list_in(WRITE, &ctx, &q).await
}

async fn list_in(f: Flavor, ctx: &Ctx, q: &RepoQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let (resource_version, docs) = ctx.app.registry.list(f.repos);
    let templates = Templates::load(&ctx.app, f.creds);
    let visible: Vec<Value> = docs
        .iter()
        .filter(|doc| q.repo.is_empty() || doc.key.name == q.repo)
        .filter(|doc| q.app_project.is_empty() || doc.summary.project == q.app_project)
        .filter(|doc| {
            Access::hidden(f.resource, "get").allows(
                &ctx.app,
                principal,
                &rbac_object(&doc.summary.project, &doc.key.name),
            )
        })
        .map(|doc| doc.value())
        .collect();
    // Every repository's state at once (each check is bounded by the repository timeout).
    let states = futures_util::future::join_all(
        visible
            .iter()
            .map(|value| with_state(&ctx.app, f, value, q.force_refresh, false)),
    )
    .await;
    let items = visible
        .iter()
        .zip(states)
        .map(|(value, state)| answer_with(value, &templates, state))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::Message(list(REPOSITORY_LIST, resource_version, items)?))
}

/// The connection state of a repository of flavor `f`: checked for repositories, `Unknown`
/// for write repositories (tiphys does not push).
async fn with_state(
    app: &std::sync::Arc<ServerState>,
    f: Flavor,
    value: &Value,
    force: bool,
    wait: bool,
) -> Value {
    if f.repos == Kind::Repository {
        browse::connection_state(app, f, value, force, wait).await
    } else {
        unknown_state(NO_CONNECTION)
    }
}

/// [`answer`] with the given connection state.
fn answer_with(value: &Value, templates: &Templates, state: Value) -> Result<Value, AppError> {
    let mut out = answer(value, templates)?;
    if let Some(object) = object_mut(&mut out) {
        object.insert("connectionState".to_owned(), state);
    }
    canonical(REPOSITORY, &out)
}

pub async fn get_repository(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    get_in(READ, &ctx, &q).await
}

/// GetWrite: a write repository.
pub async fn get_write_repository(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    get_in(WRITE, &ctx, &q).await
}

async fn get_in(f: Flavor, ctx: &Ctx, q: &RepoQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let value = authorized(&ctx.app, f, principal, &q.repo, "get")?.value();
    let state = with_state(&ctx.app, f, &value, q.force_refresh, true).await;
    Ok(Reply::Message(answer_with(
        &value,
        &Templates::load(&ctx.app, f.creds),
        state,
    )?))
}

/// What a caller sends, without what the server owns.
fn client_fields(mut value: Value) -> Value {
    if let Some(object) = object_mut(&mut value) {
        for field in SERVER_FIELDS {
            object.remove(*field);
        }
    }
    value
}

fn validate(f: Flavor, view: &RepoView) -> Result<(), AppError> {
    check_url(f.what, "repo", &view.repo)?;
    if !TYPES.contains(&view.kind.as_str()) {
        return Err(AppError::InvalidArgument(format!(
            "unknown repository type {:?}: use git, helm or oci",
            view.kind
        )));
    }
    Ok(())
}

async fn save(state: &ServerState, f: Flavor, change: Change) -> Result<Reply, AppError> {
    answer_written(state, f, write(state, f.what, change).await?)
}

fn answer_written(state: &ServerState, f: Flavor, doc: Option<DocRef>) -> Result<Reply, AppError> {
    match doc {
        Some(doc) => {
            let value = doc.value();
            let templates = Templates::load(state, f.creds);
            let view = RepoView::read(&value);
            Ok(Reply::Message(
                match browse::recorded_state(state, &view.project, &view.repo) {
                    Some(checked) if f.repos == Kind::Repository => answer_with(&value, &templates, checked)?,
                    _ => answer(&value, &templates)?,
                },
            ))
        }
        None => Ok(Reply::Message(Value::Object(Map::new()))),
    }
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct CreateRequest {
    pub repo: Value,
    pub upsert: bool,
    pub creds_only: bool,
}

/// CreateRepository (and Create), `repositories, create`. An identical repository is
/// answered as is; a different one needs `upsert` and `update` on the stored and the new
/// object. With `credsOnly` the credentials are stored as a credential template for the URL
/// instead (upstream's "operate on the credential set instead of the repository"). A body
/// declared in the Secret of a repository at another URL moves that repository here
/// (`secret_name`), with the needs of an update.
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    create_in(READ, ctx, req).await
}

/// CreateWriteRepository: [`create`] of a write repository.
pub async fn create_write(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    create_in(WRITE, ctx, req).await
}

async fn create_in(f: Flavor, ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    if req.creds_only {
        return creds::create_from_repository(&ctx, f, principal, req.repo, req.upsert).await;
    }
    let mut value = client_fields(req.repo);
    let view = RepoView::read(&value);
    validate(f, &view)?;
    let access = Access::hidden(f.resource, "create");
    access.check(&ctx.app, principal, &view.rbac_object())?;
    // Contact it first, as upstream does for repositories outside a project.
    if f.repos == Kind::Repository && view.project.is_empty() && ctx.app.repos.limits().enabled {
        let remote = remote::remote_of(&ctx.app, f, &value);
        let outcome = browse::check(&ctx.app, view.kind == "helm", &remote).await;
        if let Err(err) = &outcome {
            return Err(browse::not_accessible(err));
        }
        browse::record(&ctx.app, &view.project, &view.repo, &remote, outcome);
    }
    let key = Key::new(f.repos, "", &view.repo);
    let existing = ctx.app.registry.get(&key);
    let stored = existing.as_ref().map(|doc| doc.value());
    let object = view.rbac_object();
    let create = Create {
        kind: f.repos,
        what: f.what,
        key: key.clone(),
        object: &object,
        upsert: req.upsert,
    };
    if let Some(moved) = secret_name::settle_create(
        &ctx.app,
        principal,
        access,
        &create,
        &mut value,
        stored.as_ref(),
        stored_rbac_object,
    )
    .await?
    {
        return answer_written(&ctx.app, f, moved);
    }
    let (Some(existing), Some(stored)) = (existing, stored) else {
        return save(&ctx.app, f, Change::Create { key, value }).await;
    };
    access.check_taken(
        &ctx.app,
        principal,
        &view.rbac_object(),
        &rbac_object(&existing.summary.project, &view.repo),
    )?;
    if canonical(REPOSITORY, &stored)? == canonical(REPOSITORY, &value)? {
        return Ok(Reply::Message(answer(
            &stored,
            &Templates::load(&ctx.app, f.creds),
        )?));
    }
    if !req.upsert {
        return Err(AppError::InvalidArgument(format!(
            "existing {} spec is different; use upsert flag to force update",
            f.what
        )));
    }
    let update = access.to("update");
    update.check(
        &ctx.app,
        principal,
        &rbac_object(&existing.summary.project, &view.repo),
    )?;
    update.check(&ctx.app, principal, &view.rbac_object())?;
    let change = Change::Update {
        key,
        value,
        expect: Some(existing.rv),
    };
    save(&ctx.app, f, change).await
}

/// The RBAC object of a stored repository.
fn stored_rbac_object(doc: &DocRef) -> String {
    rbac_object(&doc.summary.project, &doc.key.name)
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct UpdateRequest {
    pub repo: Value,
}

/// UpdateRepository (and Update): replaces the repository, credentials included, as
/// upstream. Needs `update` on the stored object and on the resulting one (a project change
/// needs both projects).
pub async fn update(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    update_in(READ, ctx, req).await
}

/// UpdateWriteRepository: [`update`] of a write repository.
pub async fn update_write(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    update_in(WRITE, ctx, req).await
}

async fn update_in(f: Flavor, ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let mut value = client_fields(req.repo);
    let view = RepoView::read(&value);
    let existing = authorized(&ctx.app, f, principal, &view.repo, "update")?;
    validate(f, &view)?;
    let update = Access::hidden(f.resource, "update");
    update.check(&ctx.app, principal, &view.rbac_object())?;
    secret_name::settle(&mut value, Some(&existing.value()))?;
    secret_name::check_free(&ctx.app, f.repos, &existing.key, &value, |holder| {
        update.check_taken(
            &ctx.app,
            principal,
            &view.rbac_object(),
            &stored_rbac_object(holder),
        )
    })?;
    // Checked again when next asked for.
    browse::forget(&ctx.app, &existing.summary.project, &existing.key.name);
    let change = Change::Update {
        key: existing.key.clone(),
        value,
        expect: Some(existing.rv),
    };
    save(&ctx.app, f, change).await
}

/// DeleteRepository (and Delete), `repositories, delete` on the stored object.
pub async fn delete(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    delete_in(READ, ctx, q).await
}

/// DeleteWriteRepository: [`delete`] of a write repository.
pub async fn delete_write(ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    delete_in(WRITE, ctx, q).await
}

async fn delete_in(f: Flavor, ctx: Ctx, q: RepoQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, f, principal, &q.repo, "delete")?;
    browse::forget(&ctx.app, &doc.summary.project, &doc.key.name);
    let change = Change::Delete {
        key: doc.key.clone(),
        expect: Some(doc.rv),
    };
    write(&ctx.app, f.what, change).await?;
    Ok(Reply::Message(Value::Object(Map::new())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn templates(items: &[(&str, Value)]) -> Templates {
        Templates::from_items(items.iter().map(|(u, v)| ((*u).to_owned(), v.clone())).collect())
    }

    #[test]
    fn answers_show_inherited_credentials_but_never_the_secret() {
        let t = templates(&[
            (
                "https://git.example/",
                json!({"url": "https://git.example/", "username": "bot", "password": "s3cr3t"}),
            ),
            (
                "https://git.example/team/",
                json!({"url": "https://git.example/team/", "password": "s3cr3t-2"}),
            ),
        ]);
        let own = answer(
            &json!({"repo": "https://git.example/a", "password": "s3cr3t-3"}),
            &t,
        )
        .unwrap();
        assert!(own.get("inheritedCreds").is_none(), "{own}");
        let inherited = answer(&json!({"repo": "https://git.example/a"}), &t).unwrap();
        assert_eq!(inherited["inheritedCreds"], true);
        assert_eq!(inherited["username"], "bot");
        assert_eq!(inherited["type"], "git");
        assert_eq!(inherited["connectionState"]["status"], "Unknown");
        let team = answer(&json!({"repo": "https://git.example/team/x", "type": "helm"}), &t).unwrap();
        assert_eq!(team["inheritedCreds"], true);
        assert!(
            team.get("username").is_none(),
            "the longest prefix has no username: {team}"
        );
        assert_eq!(team["type"], "helm");
        let none = answer(&json!({"repo": "https://other.example/a"}), &t).unwrap();
        assert!(none.get("inheritedCreds").is_none());
        for v in [own, inherited, team, none] {
            assert!(!v.to_string().contains("s3cr3t"), "{v}");
        }
    }

    #[test]
    fn urls_are_checked_without_quoting_passwords() {
        assert!(check_url(READ.what, "repo", "https://git.example/a.git").is_ok());
        assert!(check_url(READ.what, "repo", "git@github.com:a/b.git").is_ok());
        for bad in [
            "",
            "javascript:alert(1)",
            "file:///etc/passwd",
            "https://u:hunter2@h/x",
        ] {
            let err = check_url(READ.what, "repo", bad).unwrap_err();
            assert!(matches!(err, AppError::InvalidArgument(_)), "{bad}");
            assert!(!err.to_string().contains("hunter2"));
        }
    }

    #[test]
    fn rbac_objects() {
        assert_eq!(rbac_object("", "https://x"), "https://x");
        assert_eq!(rbac_object("p", "https://x"), "p/https://x");
    }
}
