use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use super::extract::{ApiJson, Who};
use crate::app::App;
use crate::error::AppError;
use crate::service::account::{self, AccountView, CreateToken, UpdatePassword};

#[derive(Serialize)]
pub struct Items<T> {
    items: Vec<T>,
}

#[derive(Serialize)]
pub struct Value {
    value: &'static str,
}

#[derive(Serialize)]
pub struct TokenResponse {
    token: String,
}

#[derive(Serialize)]
pub struct Empty {}

/// `GET /api/v1/account`
pub async fn list(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
) -> Result<Json<Items<AccountView>>, AppError> {
    let items = account::list(&state.sessions, &state.rbac, &caller)?;
    Ok(Json(Items { items }))
}

/// `GET /api/v1/account/{name}`
pub async fn get(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
    Path(name): Path<String>,
) -> Result<Json<AccountView>, AppError> {
    Ok(Json(account::get(&state.sessions, &state.rbac, &caller, &name)?))
}

/// `GET /api/v1/account/can-i/{resource}/{action}/{subresource=**}`
pub async fn can_i(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
    Path((resource, action, subresource)): Path<(String, String, String)>,
) -> Result<Json<Value>, AppError> {
    let allowed = account::can_i(
        &state.rbac,
        &state.namespace,
        &caller,
        &resource,
        &action,
        &subresource,
    )?;
    Ok(Json(Value {
        value: if allowed { "yes" } else { "no" },
    }))
}

/// `GET /api/v1/account/can-i/{resource}/{action}[/]`: the empty sub-resource.
pub async fn can_i_without_object(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
    Path((resource, action)): Path<(String, String)>,
) -> Result<Json<Value>, AppError> {
    let allowed = account::can_i(&state.rbac, &state.namespace, &caller, &resource, &action, "")?;
    Ok(Json(Value {
        value: if allowed { "yes" } else { "no" },
    }))
}

/// `PUT /api/v1/account/password`
pub async fn update_password(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
    ApiJson(req): ApiJson<UpdatePassword>,
) -> Result<Json<Empty>, AppError> {
    account::update_password(&state.sessions, &state.rbac, &caller, req).await?;
    Ok(Json(Empty {}))
}

/// `POST /api/v1/account/{name}/token`: the path names the account.
pub async fn create_token(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
    Path(name): Path<String>,
    ApiJson(mut req): ApiJson<CreateToken>,
) -> Result<Json<TokenResponse>, AppError> {
    req.name = name;
    let token = account::create_token(&state.sessions, &state.rbac, &caller, req).await?;
    Ok(Json(TokenResponse { token }))
}

/// `DELETE /api/v1/account/{name}/token/{id}`
pub async fn delete_token(
    State(state): State<Arc<App>>,
    Who(caller, _): Who,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Empty>, AppError> {
    account::delete_token(&state.sessions, &state.rbac, &caller, &name, &id).await?;
    Ok(Json(Empty {}))
}
