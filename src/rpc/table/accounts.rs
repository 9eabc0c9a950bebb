//! `account.AccountService`.

use std::sync::Arc;

use super::{delete, get, post, put, rpc};
use crate::rpc::{Body, Rpc, call};
use crate::service::account;

pub fn rpcs() -> Vec<Arc<Rpc>> {
    vec![
        rpc(
            "/account.AccountService/CanI",
            [get("/api/v1/account/can-i/{resource}/{action}/{subresource=**}")],
            call(account::can_i),
        ),
        rpc(
            "/account.AccountService/UpdatePassword",
            [put("/api/v1/account/password", Body::All)],
            call(account::update_password),
        ),
        rpc(
            "/account.AccountService/ListAccounts",
            [get("/api/v1/account")],
            call(account::list_accounts),
        ),
        rpc(
            "/account.AccountService/GetAccount",
            [get("/api/v1/account/{name}")],
            call(account::get_account),
        ),
        rpc(
            "/account.AccountService/CreateToken",
            [post("/api/v1/account/{name}/token", Body::All)],
            call(account::create_token),
        ),
        rpc(
            "/account.AccountService/DeleteToken",
            [delete("/api/v1/account/{name}/token/{id}")],
            call(account::delete_token),
        ),
        // tiphys's own: SSO users' personal access tokens (README, "Personal access tokens").
        rpc(
            "/account.AccountService/ListSsoUsers",
            [get("/api/v1/ssousers")],
            call(account::list_sso_users),
        ),
        rpc(
            "/account.AccountService/UpdateSsoUser",
            [put("/api/v1/ssousers/{name}", Body::All)],
            call(account::update_sso_user),
        ),
        rpc(
            "/account.AccountService/DeleteSsoUser",
            [delete("/api/v1/ssousers/{name}")],
            call(account::delete_sso_user),
        ),
    ]
}
