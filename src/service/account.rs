//! `account.AccountService`: local accounts, passwords and API keys.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use serde_json::json;

use super::access::{Access, refuse};
use super::{Ctx, Empty, Reply};
use crate::auth::LoginError;
use crate::auth::accounts::Account;
use crate::auth::accounts::Accounts;
use crate::error::AppError;
use crate::principal::Principal;
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
    let items: Vec<AccountView> = ctx
        .app
        .auth
        .accounts
        .all()
        .await?
        .iter()
        .filter(|a| may(&ctx.app, principal, "get", &a.name))
        .map(AccountView::from)
        .collect();
    Ok(Reply::Message(json!({ "items": items })))
}

/// `GetAccount`.
pub async fn get_account(ctx: Ctx, req: AccountRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
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

/// `DeleteToken`: `{}`.
pub async fn delete_token(ctx: Ctx, req: AccountRequest) -> Result<Reply, AppError> {
    let auth = &ctx.app.auth;
    let principal = ctx.caller.require()?;
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
