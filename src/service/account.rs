//! `account.AccountService`: local accounts, passwords and API keys.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use serde_json::json;

use super::access::{Access, refuse};
use super::{Ctx, Empty, Reply};
use crate::auth::LoginError;
use crate::auth::accounts::Account;
use crate::auth::accounts::Accounts;
use crate::auth::personal_tokens::{SsoUser, UserState};
use crate::error::AppError;
use crate::principal::{Principal, SsoPrincipal};
use crate::rbac::{Refusal, resources};
use crate::schema::is_zero;
use crate::state::ServerState;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountView {
    #[serde(skip_serializing_if = "is_zero")]
    pub name: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub enabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub capabilities: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    pub tokens: Vec<TokenView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenView {
    #[serde(skip_serializing_if = "is_zero")]
    pub id: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub issued_at: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub expires_at: i64,
    /// A personal access token's (tiphys's field 1000).
    #[serde(skip_serializing_if = "is_zero")]
    pub description: String,
}

impl From<&Account> for AccountView {
    fn from(a: &Account) -> Self {
        Self {
            name: a.name.clone(),
            enabled: a.enabled,
            capabilities: a.capabilities(),
            tokens: a
                .tokens
                .values()
                .map(|t| TokenView {
                    id: t.id.clone(),
                    issued_at: t.iat,
                    expires_at: t.exp,
                    description: String::new(),
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UpdatePassword {
    pub new_password: String,
    pub current_password: String,
    pub name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct CreateToken {
    pub name: String,
    pub expires_in: i64,
    pub id: String,
    /// A personal access token's (tiphys's field 1000).
    pub description: String,
}

/// `CanIRequest`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct CanIRequest {
    pub resource: String,
    pub action: String,
    pub subresource: String,
}

/// `GetAccountRequest`, `DeleteTokenRequest`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct AccountRequest {
    pub name: String,
    pub id: String,
}

/// `UpdateSsoUserRequest`, `DeleteSsoUserRequest`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct SsoUserRequest {
    pub name: String,
    pub disabled: bool,
}

/// The caller is a single sign-on user naming themself (by subject or by the name
/// `GetUserInfo` shows, which upstream's CLI sends), or naming no one: the request is about
/// their personal access tokens.
fn sso_self<'p>(principal: &'p Principal, name: &str) -> Option<&'p SsoPrincipal> {
    principal
        .sso()
        .filter(|s| name.is_empty() || name == s.user || name == s.username)
}

/// [`sso_self`], unless `name` is a local account's: an SSO administrator naming a local
/// account acts on that account's API keys, as upstream.
async fn personal_target<'p>(
    app: &ServerState,
    principal: &'p Principal,
    name: &str,
) -> Result<Option<&'p SsoPrincipal>, AppError> {
    let Some(sso) = sso_self(principal, name) else {
        return Ok(None);
    };
    if !name.is_empty() && app.auth.accounts.get(name).await?.is_some() {
        return Ok(None);
    }
    Ok(Some(sso))
}

/// An SSO user's own view as an account: their personal access tokens.
async fn sso_account(app: &ServerState, sso: &SsoPrincipal) -> Result<AccountView, AppError> {
    let tokens = &app.auth.personal_tokens;
    let state = tokens.user(&sso.user).await?.map(|u| u.state);
    Ok(AccountView {
        name: sso.user.clone(),
        enabled: state != Some(UserState::Disabled),
        capabilities: vec!["apiKey".to_owned()],
        tokens: tokens
            .list(&sso.user)
            .await?
            .into_iter()
            .map(|t| TokenView {
                issued_at: t.issued_at(),
                expires_at: t.expires_at,
                id: t.id,
                description: t.description,
            })
            .collect(),
    })
}

/// The caller acts on their own local account.
fn is_self(principal: &Principal, name: &str) -> bool {
    principal.account().is_some_and(|a| a.name == name)
}

/// May `principal` do `action` to account `name`? A local account always may
/// act on itself (as upstream); anyone else needs `accounts, <action>, <name>`.
fn may(app: &ServerState, principal: &Principal, action: &str, name: &str) -> bool {
    is_self(principal, name) || Access::detailed("accounts", action).allows(app, principal, name)
}

/// [`may`], as an error and an audit line when not.
fn ensure(app: &ServerState, principal: &Principal, action: &str, name: &str) -> Result<(), AppError> {
    if is_self(principal, name) {
        return Ok(());
    }
    Access::detailed("accounts", action).check(app, principal, name)
}

/// The caller's own account, for requests that leave the account name empty. A project
/// token has none.
fn own_account(principal: &Principal) -> Result<&str, AppError> {
    match principal {
        Principal::Project(p) => Err(AppError::InvalidArgument(format!(
            "{} is a project token, not an account: name the account",
            p.subject
        ))),
        other => Ok(other.subject()),
    }
}

async fn find(accounts: &Accounts, name: &str) -> Result<Account, AppError> {
    accounts
        .get(name)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("account '{name}' does not exist")))
}

/// `CanI`: the caller's own permission, never someone else's. Asking is not
/// acting, so a "no" is an answer, not a denial (no audit line).
/// `namespace` is the server's: for project-scoped resources an object
/// `<project>/<namespace>/<name>` in it is asked as `<project>/<name>`, the
/// form the server itself uses for objects in its own namespace.
/// Answers `{value: yes|no}`.
pub async fn can_i(ctx: Ctx, req: CanIRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let rbac = &ctx.app.rbac;
    let (resource, action) = (req.resource.as_str(), req.action.as_str());
    resources::check_can_i(resource, action).map_err(AppError::InvalidArgument)?;
    // Rollback is decided as sync unless argocd-cm says to enforce it apart.
    let action = if action == "rollback" && !rbac.rollback_enforced() {
        "sync"
    } else {
        action
    };
    let object = normalize_object(resource, &req.subresource, &ctx.app.namespace);
    let allowed = Access::detailed(resource, action).allows(&ctx.app, principal, &object);
    Ok(Reply::Message(
        json!({ "value": if allowed { "yes" } else { "no" } }),
    ))
}

fn normalize_object(resource: &str, object: &str, namespace: &str) -> String {
    let parts: Vec<&str> = object.split('/').collect();
    match parts.as_slice() {
        [project, ns, name]
            if *ns == namespace && crate::rbac::project::PROJECT_SCOPED.contains(&resource) =>
        {
            format!("{project}/{name}")
        }
        _ => object.to_owned(),
    }
}

/// `ListAccounts`: `{items}`, the accounts the caller may `get`.
pub async fn list_accounts(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let mut items: Vec<AccountView> = ctx
        .app
        .auth
        .accounts
        .all()
        .await?
        .iter()
        .filter(|a| may(&ctx.app, principal, "get", &a.name))
        .map(AccountView::from)
        .collect();
    // An SSO user sees themself, with their personal access tokens, when they may.
    if let Some(sso) = principal.sso()
        && Access::detailed("accounts", "get").allows(&ctx.app, principal, &sso.user)
    {
        items.push(sso_account(&ctx.app, sso).await?);
    }
    Ok(Reply::Message(json!({ "items": items })))
}

/// `GetAccount`.
pub async fn get_account(ctx: Ctx, req: AccountRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    if let Some(sso) = personal_target(&ctx.app, principal, &req.name).await? {
        Access::detailed("accounts", "get").check(&ctx.app, principal, &sso.user)?;
        return Reply::json(sso_account(&ctx.app, sso).await?);
    }
    ensure(&ctx.app, principal, "get", &req.name)?;
    Reply::json(AccountView::from(&find(&ctx.app.auth.accounts, &req.name).await?))
}

/// `UpdatePassword`: `{}`.
pub async fn update_password(ctx: Ctx, req: UpdatePassword) -> Result<Reply, AppError> {
    let (auth, caller) = (&ctx.app.auth, &ctx.caller);
    let principal = caller.require()?;
    let Some(me) = principal.account() else {
        return Err(match principal {
            // Not an RBAC decision: no policy gives a project token a password.
            Principal::Project(p) => {
                let message = format!(
                    "{} is a project token, not an account: it has no password to change",
                    p.subject
                );
                refuse(&ctx.app, principal, Refusal::NotAnAccount, &req.name, message)
            }
            _ => AppError::Unauthenticated("only a logged-in account can change a password".to_owned()),
        });
    };
    let name = if req.name.is_empty() {
        me.name.clone()
    } else {
        req.name
    };
    ensure(&ctx.app, principal, "update", &name)?;
    find(&auth.accounts, &name).await?;
    if req.current_password.is_empty() {
        return Err(AppError::InvalidArgument(
            "current password is required".to_owned(),
        ));
    }
    // The caller proves who they are with their own password; a wrong one
    // counts toward the lockout like any failed login.
    match auth
        .logins
        .check_password(&me.name, &req.current_password, caller.ip)
        .await
    {
        Ok(()) => {}
        Err(LoginError::Invalid) => {
            return Err(AppError::InvalidArgument(
                "current password does not match".to_owned(),
            ));
        }
        Err(other) => return Err(other.into()),
    }
    let pattern = &ctx.app.config.current().password_pattern;
    if req.new_password.is_empty() {
        return Err(AppError::InvalidArgument(
            "Blank passwords are not allowed".to_owned(),
        ));
    }
    if !pattern.is_match(&req.new_password) {
        return Err(AppError::InvalidArgument(format!(
            "new password does not match the following expression: {}",
            pattern.as_str()
        )));
    }
    auth.logins.set_password(&name, &req.new_password).await?;
    tracing::info!(target: "audit", account = %name, by = %me.name, "password changed");
    Ok(Reply::empty())
}

/// `CreateToken`: `{token}`.
pub async fn create_token(ctx: Ctx, req: CreateToken) -> Result<Reply, AppError> {
    let auth = &ctx.app.auth;
    let principal = ctx.caller.require()?;
    if let Some(sso) = personal_target(&ctx.app, principal, &req.name).await? {
        return create_personal_token(&ctx, sso, req).await;
    }
    let name = if req.name.is_empty() {
        own_account(principal)?.to_owned()
    } else {
        req.name
    };
    ensure(&ctx.app, principal, "update", &name)?;
    let account = find(&auth.accounts, &name).await?;
    if !account.api_key {
        return Err(AppError::InvalidArgument(format!(
            "account '{name}' does not have apiKey capability"
        )));
    }
    let expires_in = u64::try_from(req.expires_in)
        .map_err(|_| AppError::InvalidArgument("expiresIn must not be negative".to_owned()))?;
    if req.id.len() > 256 || req.id.chars().any(|c| c.is_control() || c == '/') {
        return Err(AppError::InvalidArgument(
            "token id must be at most 256 printable characters without '/'".to_owned(),
        ));
    }
    let id = (!req.id.is_empty()).then_some(req.id);
    let token = auth
        .api_keys
        .create(&name, id, Duration::from_secs(expires_in))
        .await?;
    tracing::info!(target: "audit", account = %name, by = %principal.subject(), "API key created");
    Ok(Reply::Message(json!({ "token": token })))
}

/// `CreateToken` of an SSO user for themself: a personal access token, under
/// `accounts, update, <subject>` and the server-wide switch.
async fn create_personal_token(ctx: &Ctx, sso: &SsoPrincipal, req: CreateToken) -> Result<Reply, AppError> {
    let principal = &ctx.caller.principal;
    Access::detailed("accounts", "update").check(&ctx.app, principal, &sso.user)?;
    if let Some(id) = &sso.personal_token {
        // Else a token could be renewed forever by itself, outliving the sign-in it came from.
        return Err(AppError::FailedPrecondition(format!(
            "the caller presented personal access token {id}: sign in through single sign-on to make another"
        )));
    }
    let expires_in = u64::try_from(req.expires_in)
        .map_err(|_| AppError::InvalidArgument("expiresIn must not be negative".to_owned()))?;
    let groups = crate::rbac::groups(&ctx.app.rbac.policy(), principal)
        .into_iter()
        .map(str::to_owned)
        .collect();
    let id = (!req.id.is_empty()).then_some(req.id);
    let (token, record) = ctx
        .app
        .auth
        .personal_tokens
        .create(sso, groups, id, req.description, Duration::from_secs(expires_in))
        .await?;
    tracing::info!(target: "audit", user = %sso.user, token = %record.id, "personal access token created");
    Ok(Reply::Message(json!({ "token": token })))
}

/// `DeleteToken`: `{}`.
pub async fn delete_token(ctx: Ctx, req: AccountRequest) -> Result<Reply, AppError> {
    let auth = &ctx.app.auth;
    let principal = ctx.caller.require()?;
    if let Some(sso) = personal_target(&ctx.app, principal, &req.name).await? {
        Access::detailed("accounts", "update").check(&ctx.app, principal, &sso.user)?;
        auth.personal_tokens.revoke(&sso.user, &req.id).await?;
        tracing::info!(target: "audit", user = %sso.user, token = %req.id, "personal access token revoked");
        return Ok(Reply::empty());
    }
    let name = if req.name.is_empty() {
        own_account(principal)?
    } else {
        &req.name
    };
    ensure(&ctx.app, principal, "update", name)?;
    find(&auth.accounts, name).await?;
    auth.api_keys.delete(name, &req.id).await?;
    tracing::info!(target: "audit", account = %name, token = %req.id, by = %principal.subject(), "API key deleted");
    Ok(Reply::empty())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SsoUserView {
    #[serde(skip_serializing_if = "is_zero")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    username: String,
    #[serde(skip_serializing_if = "is_zero")]
    state: &'static str,
    #[serde(skip_serializing_if = "is_zero")]
    tokens: i64,
}

async fn sso_user_view(app: &ServerState, user: SsoUser) -> Result<SsoUserView, AppError> {
    let tokens = app.auth.personal_tokens.list(&user.user).await?.len();
    Ok(SsoUserView {
        state: user.state.as_str(),
        tokens: i64::try_from(tokens).unwrap_or(i64::MAX),
        name: user.user,
        username: user.username,
    })
}

/// `ListSsoUsers` (tiphys): `{items}`, the SSO users known for personal access tokens that
/// the caller may `accounts, get`.
pub async fn list_sso_users(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let mut items = Vec::new();
    for user in ctx.app.auth.personal_tokens.users().await? {
        if Access::detailed("accounts", "get").allows(&ctx.app, principal, &user.user) {
            items.push(sso_user_view(&ctx.app, user).await?);
        }
    }
    Ok(Reply::Message(json!({ "items": items })))
}

fn named(req: &SsoUserRequest) -> Result<&str, AppError> {
    if req.name.is_empty() {
        return Err(AppError::InvalidArgument(
            "name the SSO user (its RBAC subject)".to_owned(),
        ));
    }
    Ok(&req.name)
}

/// `UpdateSsoUser` (tiphys): disables or enables an SSO user's personal access tokens, under
/// `accounts, update, <user>`. Nobody changes their own state: a disabled user with `update`
/// on themself could otherwise enable themself again.
pub async fn update_sso_user(ctx: Ctx, req: SsoUserRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let name = named(&req)?;
    Access::detailed("accounts", "update").check(&ctx.app, principal, name)?;
    if principal.sso().is_some_and(|s| s.user == name) {
        return Err(AppError::FailedPrecondition(
            "an SSO user cannot disable or enable themself".to_owned(),
        ));
    }
    let user = ctx
        .app
        .auth
        .personal_tokens
        .set_disabled(name, req.disabled)
        .await?;
    tracing::info!(target: "audit", user = %name, state = user.state.as_str(), by = %principal.subject(), "SSO user state changed");
    Reply::json(sso_user_view(&ctx.app, user).await?)
}

/// `DeleteSsoUser` (tiphys): deletes an SSO user's personal access tokens and marks the user
/// deleted, under `accounts, delete, <user>`.
pub async fn delete_sso_user(ctx: Ctx, req: SsoUserRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let name = named(&req)?;
    Access::detailed("accounts", "delete").check(&ctx.app, principal, name)?;
    ctx.app.auth.personal_tokens.delete_user(name).await?;
    tracing::info!(target: "audit", user = %name, by = %principal.subject(), "SSO user deleted");
    Ok(Reply::empty())
}

#[cfg(test)]
mod tests {
    use super::normalize_object;

    #[test]
    fn can_i_objects_in_the_server_namespace_take_the_short_form() {
        assert_eq!(
            normalize_object("applications", "p/argocd/app", "argocd"),
            "p/app"
        );
        assert_eq!(
            normalize_object("applications", "p/other/app", "argocd"),
            "p/other/app"
        );
        assert_eq!(normalize_object("logs", "p/argocd/app", "argocd"), "p/app");
        assert_eq!(normalize_object("projects", "p/argocd/x", "argocd"), "p/argocd/x");
        assert_eq!(normalize_object("applications", "p/app", "argocd"), "p/app");
    }
}
