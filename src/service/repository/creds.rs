//! `repocreds.RepoCredsService`: credential templates, stored in the registry under their URL
//! and used by every repository whose URL they prefix and that has no credentials of its own
//! (the longest prefix wins; see [`super::templates`]). Authorised as repositories are,
//! with the URL prefix as the object and no project: `repositories, <action>, <url>`.
//!
//! Templates are credentials: answers never carry a secret (`redact::repo_creds`), and a
//! missing template and one the caller may not see give the same answer (SEC-14).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::templates::Templates;
use super::{Flavor, READ, TYPES, WRITE, check_url};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key};
use crate::service::access::{Access, Missing};
use crate::service::redact;
use crate::service::secret_name::{self, Create};
use crate::service::sensitive::{REPO_CREDS, REPO_CREDS_LIST, canonical, list, not_found, object_mut, write};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// A template as answered: no secret.
fn answer(value: &Value) -> Result<Value, AppError> {
    let mut out = value.clone();
    redact::repo_creds(&mut out);
    canonical(REPO_CREDS, &out)
}

/// What the use cases read of a template.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
struct CredsView {
    url: String,
    #[serde(rename = "type")]
    kind: String,
}

impl CredsView {
    fn read(value: &Value) -> Self {
        // Request values are canonical (typed by the schema): only a non-object fails here.
        Self::deserialize(value).unwrap_or_default()
    }
}

fn validate(f: Flavor, view: &CredsView) -> Result<(), AppError> {
    check_url(f.creds_what, "url", &view.url)?;
    if !TYPES.contains(&view.kind.as_str()) {
        return Err(AppError::InvalidArgument(format!(
            "unknown repository type {:?}: use git, helm or oci",
            view.kind
        )));
    }
    Ok(())
}

/// The stored template for `url`, if the caller may perform `action` on it; a missing one
/// answers "not found" only to a caller who would be allowed on it.
fn authorized(
    state: &ServerState,
    f: Flavor,
    principal: &Principal,
    url: &str,
    action: &str,
) -> Result<DocRef, AppError> {
    let what = f.creds_what;
    if url.is_empty() {
        return Err(AppError::InvalidArgument(format!("{what} URL is required")));
    }
    Access::hidden(f.resource, action).load(
        state,
        principal,
        state.registry.get(&Key::new(f.creds, "", url)),
        |_| url.to_owned(),
        || Missing::at(url, not_found(&format!("{what} for {:?}", redact::url(url)))),
    )
}

/// `RepoCredsQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct RepoCredsQuery {
    pub url: String,
}

/// ListRepositoryCredentials: every template the caller may `get`, or only the one for `url`.
pub async fn list_creds(ctx: Ctx, q: RepoCredsQuery) -> Result<Reply, AppError> {
    list_in(READ, &ctx, &q)
}

/// ListWriteRepositoryCredentials: [`list_creds`] of the write credential templates.
pub async fn list_write_creds(ctx: Ctx, q: RepoCredsQuery) -> Result<Reply, AppError> {
    list_in(WRITE, &ctx, &q)
}

fn list_in(f: Flavor, ctx: &Ctx, q: &RepoCredsQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let (resource_version, docs) = ctx.app.registry.list(f.creds);
    let items = docs
        .iter()
        .filter(|doc| q.url.is_empty() || doc.key.name == q.url)
        .filter(|doc| Access::hidden(f.resource, "get").allows(&ctx.app, principal, &doc.key.name))
        .map(|doc| answer(&doc.value()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Reply::Message(list(REPO_CREDS_LIST, resource_version, items)?))
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub creds: Value,
    pub upsert: bool,
}

pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = put(&ctx.app, READ, principal, req.creds, req.upsert).await?;
    Ok(Reply::Message(answer(&doc.value())?))
}

/// CreateWriteRepositoryCredentials: [`create`] of a write credential template.
pub async fn create_write(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = put(&ctx.app, WRITE, principal, req.creds, req.upsert).await?;
    Ok(Reply::Message(answer(&doc.value())?))
}

/// Stores a template (`repositories, create`; replacing a different one needs `upsert` and
/// `update`); an identical one is left as is. A body declared in the Secret of a template at
/// another URL moves that template here (`secret_name`), with the needs of an update.
async fn put(
    state: &ServerState,
    f: Flavor,
    principal: &Principal,
    mut value: Value,
    upsert: bool,
) -> Result<DocRef, AppError> {
    let view = CredsView::read(&value);
    validate(f, &view)?;
    let access = Access::hidden(f.resource, "create");
    access.check(state, principal, &view.url)?;
    let key = Key::new(f.creds, "", &view.url);
    let existing = state.registry.get(&key);
    let stored = existing.as_ref().map(|doc| doc.value());
    let create = Create {
        kind: f.creds,
        what: f.creds_what,
        key: key.clone(),
        object: &view.url,
        upsert,
    };
    let object_of = |doc: &DocRef| doc.key.name.clone();
    if let Some(moved) = secret_name::settle_create(
        state,
        principal,
        access,
        &create,
        &mut value,
        stored.as_ref(),
        object_of,
    )
    .await?
    {
        return stored_doc(moved);
    }
    let change = match (existing, stored) {
        (Some(existing), Some(stored)) => {
            if canonical(REPO_CREDS, &stored)? == canonical(REPO_CREDS, &value)? {
                return Ok(existing);
            }
            if !upsert {
                return Err(AppError::InvalidArgument(format!(
                    "existing {} spec is different; use upsert flag to force update",
                    f.creds_what
                )));
            }
            access.to("update").check(state, principal, &view.url)?;
            Change::Update {
                key,
                value,
                expect: Some(existing.rv),
            }
        }
        _ => Change::Create { key, value },
    };
    stored_doc(write(state, f.creds_what, change).await?)
}

fn stored_doc(doc: Option<DocRef>) -> Result<DocRef, AppError> {
    doc.ok_or_else(|| {
        AppError::Internal(anyhow::anyhow!(
            "a write of repository credentials gave no object"
        ))
    })
}

/// `CreateRepository` with `credsOnly`: the repository's credentials become the template for
/// its URL. Templates belong to no project, so a project-scoped request is refused. Answers
/// the template in the shape of a Repository (its output type), without secrets.
pub async fn create_from_repository(
    ctx: &Ctx,
    f: Flavor,
    principal: &Principal,
    mut repo: Value,
    upsert: bool,
) -> Result<Reply, AppError> {
    let Some(object) = object_mut(&mut repo) else {
        return Err(AppError::InvalidArgument("a repository is required".to_owned()));
    };
    if object
        .get("project")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty())
    {
        return Err(AppError::InvalidArgument(
            "credsOnly stores a credential template, and templates are not project-scoped: remove the project"
                .to_owned(),
        ));
    }
    let url = object.remove("repo").unwrap_or(Value::Null);
    object.insert("url".to_owned(), url);
    // Fields a template does not have (name, insecure, …) are dropped by the schema.
    let doc = put(&ctx.app, f, principal, repo, upsert).await?;
    let mut as_repo = doc.value();
    if let Some(object) = object_mut(&mut as_repo) {
        let url = object.remove("url").unwrap_or(Value::Null);
        object.insert("repo".to_owned(), url);
    }
    let no_templates = Templates::from_items(Vec::new());
    Ok(Reply::Message(super::answer(&as_repo, &no_templates)?))
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct UpdateRequest {
    pub creds: Value,
}

/// UpdateRepositoryCredentials: replaces the template for the body's URL (`repositories,
/// update`).
pub async fn update(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    update_in(READ, ctx, req).await
}

/// UpdateWriteRepositoryCredentials: [`update`] of a write credential template.
pub async fn update_write(ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    update_in(WRITE, ctx, req).await
}

async fn update_in(f: Flavor, ctx: Ctx, req: UpdateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let mut value = req.creds;
    let view = CredsView::read(&value);
    let existing = authorized(&ctx.app, f, principal, &view.url, "update")?;
    validate(f, &view)?;
    secret_name::settle(&mut value, Some(&existing.value()))?;
    secret_name::check_free(&ctx.app, f.creds, &existing.key, &value, |holder| {
        Access::hidden(f.resource, "update").check_taken(&ctx.app, principal, &view.url, &holder.key.name)
    })?;
    let change = Change::Update {
        key: existing.key.clone(),
        value,
        expect: Some(existing.rv),
    };
    let doc = stored_doc(write(&ctx.app, f.creds_what, change).await?)?;
    Ok(Reply::Message(answer(&doc.value())?))
}

/// `RepoCredsDeleteRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct DeleteRequest {
    pub url: String,
}

pub async fn delete(ctx: Ctx, req: DeleteRequest) -> Result<Reply, AppError> {
    delete_in(READ, ctx, req).await
}

/// DeleteWriteRepositoryCredentials: [`delete`] of a write credential template.
pub async fn delete_write(ctx: Ctx, req: DeleteRequest) -> Result<Reply, AppError> {
    delete_in(WRITE, ctx, req).await
}

async fn delete_in(f: Flavor, ctx: Ctx, req: DeleteRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, f, principal, &req.url, "delete")?;
    let change = Change::Delete {
        key: doc.key.clone(),
        expect: Some(doc.rv),
    };
    write(&ctx.app, f.creds_what, change).await?;
    Ok(Reply::Message(Value::Object(Map::new())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_carry_no_secret() {
        let value = json!({
            "url": "https://git.example/", "username": "bot", "password": "s3cr3t",
            "sshPrivateKey": "s3cr3t", "githubAppPrivateKey": "s3cr3t", "githubAppID": 3
        });
        let out = answer(&value).unwrap();
        assert!(!out.to_string().contains("s3cr3t"), "{out}");
        assert_eq!(out["url"], "https://git.example/");
        assert_eq!(out["username"], "bot");
        assert_eq!(out["githubAppID"], 3);
    }

    #[test]
    fn template_urls_and_types_are_checked() {
        let ok = |url: &str, kind: &str| {
            validate(
                READ,
                &CredsView {
                    url: url.to_owned(),
                    kind: kind.to_owned(),
                },
            )
        };
        assert!(ok("https://git.example/", "").is_ok());
        assert!(ok("git@git.example:team/", "git").is_ok());
        assert!(ok("javascript:alert(1)", "").is_err());
        assert!(ok("https://git.example/", "svn").is_err());
    }
}
