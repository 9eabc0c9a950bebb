use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use http::header::SET_COOKIE;
use serde::{Deserialize, Serialize};

use super::extract::{ApiJson, Scope, Who};
use crate::app::App;
use crate::error::AppError;
use crate::service::session::{self, UserInfo};

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct CreateRequest {
    username: String,
    password: String,
    token: String,
}

#[derive(Serialize)]
pub struct TokenResponse {
    #[serde(skip_serializing_if = "String::is_empty")]
    token: String,
}

/// `POST /api/v1/session`: the token in the body and as the session cookie.
pub async fn create(
    State(state): State<Arc<App>>,
    Who(caller, auth): Who,
    Scope(scope): Scope,
    ApiJson(req): ApiJson<CreateRequest>,
) -> Result<Response, AppError> {
    let token = session::create(&state.sessions, &caller, &req.username, &req.password, &req.token).await?;
    let cookies = scope
        .set(&token, auth.cookie_chunks)
        .map_err(|e| AppError::InvalidArgument(e.to_string()))?;
    let mut response = Json(TokenResponse { token }).into_response();
    append_cookies(&mut response, &cookies);
    Ok(response)
}

/// `DELETE /api/v1/session`: revokes the session and clears the cookie.
pub async fn delete(
    State(state): State<Arc<App>>,
    Who(caller, auth): Who,
    Scope(scope): Scope,
) -> Result<Response, AppError> {
    session::delete(&state.sessions, &caller).await?;
    let mut response = Json(TokenResponse { token: String::new() }).into_response();
    append_cookies(&mut response, &scope.clear(auth.cookie_chunks));
    Ok(response)
}

/// `GET /api/v1/session/userinfo`
pub async fn user_info(State(state): State<Arc<App>>, Who(caller, _): Who) -> Json<UserInfo> {
    Json(session::user_info(&caller, &state.rbac))
}

pub fn append_cookies(response: &mut Response, cookies: &[String]) {
    for cookie in cookies {
        if let Ok(value) = HeaderValue::from_str(cookie) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
}
