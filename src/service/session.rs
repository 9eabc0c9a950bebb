//! `session.SessionService`: logging in and out, and who am I. Every method is open to
//! callers without a token; a token, when present, says who the caller is.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Ctx, Empty, Reply, SessionCookie};
use crate::error::AppError;
use crate::principal::Caller;
use crate::rbac::Policy;
use crate::schema::is_zero;

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

/// `SessionCreateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub username: String,
    pub password: String,
    pub token: String,
}

/// `Create`: password login. A new token on every login: nothing from before the login
/// (cookie, token) is reused. The token is the answer and, for a browser, the cookie.
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    if !req.token.is_empty() {
        return Err(AppError::Unauthenticated(
            "token-based session creation is not supported; log in with a username and password".to_owned(),
        ));
    }
    if req.username.is_empty() || req.password.is_empty() {
        return Err(AppError::Unauthenticated("no credentials supplied".to_owned()));
    }
    let token = ctx
        .app
        .auth
        .logins
        .login(&req.username, &req.password, ctx.caller.ip)
        .await?;
    Ok(Reply::Session {
        message: json!({ "token": token }),
        cookie: SessionCookie::Set(token),
    })
}

/// `Delete`: logout. The caller's session stops working at once and the cookie is cleared.
pub async fn delete(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    ctx.app.auth.end_session(&ctx.caller).await?;
    Ok(Reply::Session {
        message: json!({}),
        cookie: SessionCookie::Clear,
    })
}

/// `GetUserInfo`.
pub async fn get_user_info(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    Reply::json(user_info(&ctx.caller, &ctx.app.rbac.policy()))
}

/// Who the caller is. Open to everyone; an invalid token reads as logged out.
pub fn user_info(caller: &Caller, policy: &Policy) -> UserInfo {
    let p = &caller.principal;
    if !p.is_authenticated() {
        return UserInfo::default();
    }
    UserInfo {
        logged_in: true,
        username: p.username().to_owned(),
        iss: p.issuer().to_owned(),
        groups: crate::rbac::groups(policy, p)
            .into_iter()
            .map(str::to_owned)
            .collect(),
    }
}
