//! `session.SessionService`: logging in and out, and who am I.

use serde::Serialize;

use crate::auth::sessions::Sessions;
use crate::error::AppError;
use crate::json::is_zero;
use crate::principal::{Caller, Credentials, TokenKind};
use crate::rbac::Rbac;

/// `GetUserInfoResponse`, with Go `encoding/json` rules (anonymous → `{}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserInfo {
    #[serde(skip_serializing_if = "is_zero")]
    pub logged_in: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub username: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub iss: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub groups: Vec<String>,
}

/// Password login. A new token on every login: nothing from before the
/// login (cookie, token) is reused.
pub async fn create(
    sessions: &Sessions,
    caller: &Caller,
    username: &str,
    password: &str,
    token: &str,
) -> Result<String, AppError> {
    if !token.is_empty() {
        return Err(AppError::Unauthenticated(
            "token-based session creation is not supported; log in with a username and password".to_owned(),
        ));
    }
    if username.is_empty() || password.is_empty() {
        return Err(AppError::Unauthenticated("no credentials supplied".to_owned()));
    }
    Ok(sessions.login(username, password, caller.ip).await?)
}

/// Logout: the caller's session token stops working at once (an API key is
/// left alone; it is deleted through the account API).
pub async fn delete(sessions: &Sessions, caller: &Caller) -> Result<(), AppError> {
    if let (Credentials::Valid(_), Some(account)) = (&caller.credentials, caller.principal.account())
        && account.kind == TokenKind::Login
    {
        sessions.revoke(&account.jti, account.expires_at).await?;
    }
    // A dashboard SSO session ends on the server; a presented ID token is the
    // provider's to revoke.
    if let (Credentials::Valid(_), Some(sso)) = (&caller.credentials, caller.principal.sso())
        && let Some(sid) = &sso.session
    {
        sessions.end_sso(sid).await?;
    }
    Ok(())
}

/// Who the caller is. Open to everyone; an invalid token reads as logged out.
pub fn user_info(caller: &Caller, rbac: &Rbac) -> UserInfo {
    let p = &caller.principal;
    if !p.is_authenticated() {
        return UserInfo::default();
    }
    UserInfo {
        logged_in: true,
        username: p.username().to_owned(),
        iss: p.issuer().to_owned(),
        groups: rbac
            .policy()
            .groups(p.claims())
            .into_iter()
            .map(str::to_owned)
            .collect(),
    }
}
