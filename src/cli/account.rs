//! `tiphys account …`: who am I, local accounts, passwords and API keys; SSO users' personal
//! access tokens and, for administrators, those users' states.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail};
use serde::Serialize;

use super::args::parse_seconds;
use super::client::Client;
use super::config::LocalConfig;
use super::conn::ClientOpts;
use super::login::{create_session, token_subject};
use super::output::{self, Format};
use super::prompt;
use crate::pb::account::{
    Account, CanIRequest, CreateTokenRequest, DeleteSsoUserRequest, DeleteTokenRequest, GetAccountRequest,
    ListAccountRequest, ListSsoUsersRequest, UpdatePasswordRequest, UpdateSsoUserRequest,
};
use crate::pb::session::GetUserInfoRequest;
use crate::schema::is_zero;

#[derive(clap::Subcommand, Debug)]
pub enum AccountCommand {
    /// Print who the server takes you for.
    GetUserInfo(GetUserInfoArgs),
    /// List the accounts you may see.
    List(ListArgs),
    /// Print an account and its API keys.
    Get(GetArgs),
    /// List your API keys (a single sign-on user's: personal access tokens).
    ListTokens(GetArgs),
    /// Change the password of your account (or, as admin, another's).
    UpdatePassword(UpdatePasswordArgs),
    /// Create an API key and print its token.
    GenerateToken(GenerateTokenArgs),
    /// Delete an API key.
    DeleteToken(DeleteTokenArgs),
    /// Ask whether you may perform ACTION on RESOURCE SUBRESOURCE (prints yes or no).
    CanI(CanIArgs),
    /// List the SSO users who made personal access tokens, with their states.
    ListSsoUsers(ListArgs),
    /// Disable an SSO user: none of their personal access tokens works, no new one can be made.
    DisableSsoUser(SsoUserArgs),
    /// Enable a disabled SSO user again.
    EnableSsoUser(SsoUserArgs),
    /// Delete an SSO user's personal access tokens and mark the user deleted.
    DeleteSsoUser(SsoUserArgs),
}

#[derive(clap::Args, Debug)]
pub struct SsoUserArgs {
    /// The SSO user's RBAC subject (`<provider>:<sub>` among several providers).
    pub name: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GetUserInfoArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Format,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Format,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The account [default: yours].
    #[arg(short = 'a', long)]
    pub account: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Format,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct UpdatePasswordArgs {
    /// The account [default: yours].
    #[arg(long)]
    pub account: Option<String>,
    /// Your own current password (prompted for without echo when missing).
    #[arg(long)]
    pub current_password: Option<String>,
    /// The new password (prompted for twice without echo when missing).
    #[arg(long)]
    pub new_password: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GenerateTokenArgs {
    /// The account [default: yours].
    #[arg(short = 'a', long)]
    pub account: Option<String>,
    /// Lifetime of the token, such as 30m, 24h or 7d; 0 never expires.
    #[arg(short = 'e', long, default_value = "0", value_parser = parse_seconds)]
    pub expires_in: i64,
    /// Id of the token [default: a random UUID].
    #[arg(long)]
    pub id: Option<String>,
    /// What the token is for (kept with a single sign-on user's personal access token).
    #[arg(short = 'd', long)]
    pub description: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct DeleteTokenArgs {
    /// The account [default: yours].
    #[arg(short = 'a', long)]
    pub account: Option<String>,
    /// Id of the token to delete.
    pub id: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct CanIArgs {
    /// The action, such as get, create, update, delete, sync.
    pub action: String,
    /// The resource, such as applications, projects, accounts.
    pub resource: String,
    /// The object, such as PROJECT/APP, or '*' (empty when left out).
    #[arg(default_value = "")]
    pub subresource: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
struct UserInfoOut {
    #[serde(skip_serializing_if = "is_zero")]
    logged_in: bool,
    #[serde(skip_serializing_if = "is_zero")]
    username: String,
    #[serde(skip_serializing_if = "is_zero")]
    iss: String,
    #[serde(skip_serializing_if = "is_zero")]
    groups: Vec<String>,
}

#[derive(Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
struct AccountOut {
    #[serde(skip_serializing_if = "is_zero")]
    name: String,
    #[serde(skip_serializing_if = "is_zero")]
    enabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    capabilities: Vec<String>,
    #[serde(skip_serializing_if = "is_zero")]
    tokens: Vec<TokenOut>,
}

#[derive(Serialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
struct TokenOut {
    #[serde(skip_serializing_if = "is_zero")]
    id: String,
    #[serde(skip_serializing_if = "is_zero")]
    issued_at: i64,
    #[serde(skip_serializing_if = "is_zero")]
    expires_at: i64,
    #[serde(skip_serializing_if = "is_zero")]
    description: String,
}

impl From<Account> for AccountOut {
    fn from(a: Account) -> Self {
        Self {
            name: a.name,
            enabled: a.enabled,
            capabilities: a.capabilities,
            tokens: a
                .tokens
                .into_iter()
                .map(|t| TokenOut {
                    id: t.id,
                    issued_at: t.issued_at,
                    expires_at: t.expires_at,
                    description: t.description,
                })
                .collect(),
        }
    }
}

pub async fn run(config_path: &Path, command: AccountCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        AccountCommand::GetUserInfo(args) => get_user_info(config_path, args, out).await,
        AccountCommand::List(args) => list(config_path, args, out).await,
        AccountCommand::Get(args) => get(config_path, args, out).await,
        AccountCommand::ListTokens(args) => list_tokens(config_path, args, out).await,
        AccountCommand::UpdatePassword(args) => update_password(config_path, args, out).await,
        AccountCommand::GenerateToken(args) => generate_token(config_path, args, out).await,
        AccountCommand::DeleteToken(args) => delete_token(config_path, args, out).await,
        AccountCommand::CanI(args) => can_i(config_path, args, out).await,
        AccountCommand::ListSsoUsers(args) => list_sso_users(config_path, args, out).await,
        AccountCommand::DisableSsoUser(args) => set_sso_user(config_path, args, true, out).await,
        AccountCommand::EnableSsoUser(args) => set_sso_user(config_path, args, false, out).await,
        AccountCommand::DeleteSsoUser(args) => delete_sso_user(config_path, args, out).await,
    }
}

#[derive(Serialize)]
struct SsoUserOut {
    name: String,
    username: String,
    state: String,
    tokens: i64,
}

async fn list_sso_users(config_path: &Path, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let reply = client.finish(
        "account list-sso-users failed",
        client.account().list_sso_users(ListSsoUsersRequest {}).await,
    )?;
    let items: Vec<SsoUserOut> = reply
        .items
        .into_iter()
        .map(|u| SsoUserOut {
            name: u.name,
            username: u.username,
            state: u.state,
            tokens: u.tokens,
        })
        .collect();
    if args.output != Format::Text {
        return output::structured(out, args.output, &items);
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|u| {
            vec![
                u.name.clone(),
                u.username.clone(),
                u.state.clone(),
                u.tokens.to_string(),
            ]
        })
        .collect();
    output::table(out, &["NAME", "USERNAME", "STATE", "TOKENS"], &rows)?;
    Ok(())
}

async fn set_sso_user(
    config_path: &Path,
    args: SsoUserArgs,
    disabled: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let request = UpdateSsoUserRequest {
        name: args.name.clone(),
        disabled,
    };
    let user = client.finish(
        "account update of the SSO user failed",
        client.account().update_sso_user(request).await,
    )?;
    writeln!(out, "SSO user '{}' is {}", args.name, user.state)?;
    Ok(())
}

async fn delete_sso_user(config_path: &Path, args: SsoUserArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let request = DeleteSsoUserRequest {
        name: args.name.clone(),
    };
    client.finish(
        "account delete-sso-user failed",
        client.account().delete_sso_user(request).await,
    )?;
    writeln!(out, "SSO user '{}' deleted", args.name)?;
    Ok(())
}

async fn user_info(client: &Client) -> anyhow::Result<UserInfoOut> {
    let reply = client.finish(
        "account get-user-info failed",
        client.session().get_user_info(GetUserInfoRequest {}).await,
    )?;
    Ok(UserInfoOut {
        logged_in: reply.logged_in,
        username: reply.username,
        iss: reply.iss,
        groups: reply.groups,
    })
}

/// The caller's account name; an error when the server does not know them.
async fn me(client: &Client) -> anyhow::Result<String> {
    let info = user_info(client).await?;
    if info.logged_in && !info.username.is_empty() {
        return Ok(info.username);
    }
    Err(match client.token() {
        None => anyhow!("not logged in: run `tiphys login SERVER`, or pass --auth-token"),
        Some(_) => anyhow!(
            "not logged in: the server did not accept the token (expired, revoked, or from another server); \
             run `tiphys relogin` or `tiphys login SERVER`"
        ),
    })
}

async fn get_user_info(config_path: &Path, args: GetUserInfoArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let info = user_info(&client).await?;
    if args.output != Format::Text {
        return output::structured(out, args.output, &info);
    }
    writeln!(out, "Logged In: {}", info.logged_in)?;
    if info.logged_in {
        writeln!(out, "Username: {}", info.username)?;
        writeln!(out, "Issuer: {}", info.iss)?;
        writeln!(out, "Groups: {}", info.groups.join(","))?;
    }
    Ok(())
}

async fn list(config_path: &Path, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let reply = client.finish(
        "account list failed",
        client.account().list_accounts(ListAccountRequest {}).await,
    )?;
    let items: Vec<AccountOut> = reply.items.into_iter().map(AccountOut::from).collect();
    if args.output != Format::Text {
        return output::structured(out, args.output, &items);
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|a| vec![a.name.clone(), a.enabled.to_string(), a.capabilities.join(", ")])
        .collect();
    output::table(out, &["NAME", "ENABLED", "CAPABILITIES"], &rows)?;
    Ok(())
}

async fn get(config_path: &Path, args: GetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let name = match args.account.filter(|a| !a.is_empty()) {
        Some(name) => name,
        None => me(&client).await?,
    };
    let account = client.finish(
        "account get failed",
        client.account().get_account(GetAccountRequest { name }).await,
    )?;
    let account = AccountOut::from(account);
    if args.output != Format::Text {
        return output::structured(out, args.output, &account);
    }
    writeln!(out, "{:<20}{}", "Name:", account.name)?;
    writeln!(out, "{:<20}{}", "Enabled:", account.enabled)?;
    writeln!(out, "{:<20}{}", "Capabilities:", account.capabilities.join(", "))?;
    writeln!(out, "\nTokens:")?;
    print_tokens(&account, out)
}

async fn list_tokens(config_path: &Path, args: GetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let name = match args.account.filter(|a| !a.is_empty()) {
        Some(name) => name,
        None => me(&client).await?,
    };
    let account = client.finish(
        "account list-tokens failed",
        client.account().get_account(GetAccountRequest { name }).await,
    )?;
    let account = AccountOut::from(account);
    if args.output != Format::Text {
        return output::structured(out, args.output, &account.tokens);
    }
    print_tokens(&account, out)
}

fn print_tokens(account: &AccountOut, out: &mut dyn Write) -> anyhow::Result<()> {
    if account.tokens.is_empty() {
        writeln!(out, "NONE")?;
        return Ok(());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let rows: Vec<Vec<String>> = account
        .tokens
        .iter()
        .map(|t| {
            let expires = match t.expires_at {
                0 => "never".to_owned(),
                exp if exp <= now => format!("{} (expired)", output::rfc3339(exp)),
                exp => output::rfc3339(exp),
            };
            vec![
                t.id.clone(),
                output::rfc3339(t.issued_at),
                expires,
                t.description.clone(),
            ]
        })
        .collect();
    output::table(out, &["ID", "ISSUED AT", "EXPIRING AT", "DESCRIPTION"], &rows)?;
    Ok(())
}

async fn update_password(
    config_path: &Path,
    args: UpdatePasswordArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let me = me(&client).await?;
    let name = args
        .account
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| me.clone());
    let current = match args.current_password.filter(|p| !p.is_empty()) {
        Some(p) => p,
        None => prompt::secret(
            &format!("*** Enter password of currently logged in user ({me}): "),
            "current password",
        )?,
    };
    let new = match args.new_password.filter(|p| !p.is_empty()) {
        Some(p) => p,
        None => {
            let first = prompt::secret(
                &format!("*** Enter new password for user {name}: "),
                "new password",
            )?;
            let again = prompt::secret(
                &format!("*** Confirm new password for user {name}: "),
                "confirmation of the new password",
            )?;
            if first != again {
                bail!("the new passwords do not match; nothing was changed");
            }
            first
        }
    };
    let request = UpdatePasswordRequest {
        new_password: new.clone(),
        current_password: current,
        name: name.clone(),
    };
    client.finish(
        "account update-password failed",
        client.account().update_password(request).await,
    )?;
    writeln!(out, "Password updated")?;
    if name != me {
        eprintln!("note: sessions and API keys of '{name}' issued before now no longer work");
        return Ok(());
    }
    // Our own token stopped working with the change. A saved login session
    // is renewed with the new password; anything else needs a new login.
    match relogin_after_change(config_path, &client, &me, &new).await {
        Ok(Some(context)) => writeln!(out, "Context '{context}' updated")?,
        Ok(None) => eprintln!(
            "note: your sessions and API keys issued before now no longer work: log in again with `tiphys login`"
        ),
        Err(err) => eprintln!(
            "warning: the password was changed, but logging in again failed ({err:#}): log in again with `tiphys login`"
        ),
    }
    Ok(())
}

/// Replaces the context's login token after a password change; `None` when
/// the command did not use a saved login token of `me`.
async fn relogin_after_change(
    config_path: &Path,
    client: &Client,
    me: &str,
    password: &str,
) -> anyhow::Result<Option<String>> {
    let (Some(user), Some(context), Some(token)) =
        (&client.target.user, &client.target.context, client.token())
    else {
        return Ok(None);
    };
    match token_subject(token) {
        Ok((name, kind)) if name == me && kind == "login" => {}
        _ => return Ok(None),
    }
    let mut opts = client.target.opts.clone();
    opts.auth_token = None;
    let conn = opts.connect().await?;
    let token = create_session(&conn, me, password).await?;
    let mut cfg = LocalConfig::load(config_path)?;
    cfg.set_token(user, &token);
    cfg.save(config_path)?;
    Ok(Some(context.clone()))
}

async fn generate_token(
    config_path: &Path,
    args: GenerateTokenArgs,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let request = CreateTokenRequest {
        name: args.account.unwrap_or_default(),
        expires_in: args.expires_in,
        id: args.id.unwrap_or_default(),
        description: args.description.unwrap_or_default(),
    };
    let reply = client.finish(
        "account generate-token failed",
        client.account().create_token(request).await,
    )?;
    writeln!(out, "{}", reply.token)?;
    Ok(())
}

async fn delete_token(config_path: &Path, args: DeleteTokenArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let name = match args.account.filter(|a| !a.is_empty()) {
        Some(name) => name,
        None => me(&client).await?,
    };
    let request = DeleteTokenRequest {
        name: name.clone(),
        id: args.id.clone(),
    };
    client.finish(
        "account delete-token failed",
        client.account().delete_token(request).await,
    )?;
    writeln!(out, "Token '{}' of account '{name}' deleted", args.id)?;
    Ok(())
}

async fn can_i(config_path: &Path, args: CanIArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config_path, &args.conn, None).await?;
    let request = CanIRequest {
        resource: args.resource,
        action: args.action,
        subresource: args.subresource,
    };
    let reply = client.finish("account can-i failed", client.account().can_i(request).await)?;
    writeln!(out, "{}", reply.value)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_durations() {
        assert_eq!(parse_seconds("0"), Ok(0));
        assert_eq!(parse_seconds("30m"), Ok(1800));
        assert_eq!(parse_seconds("24h"), Ok(86400));
        assert_eq!(parse_seconds("7d"), Ok(7 * 86400));
        assert_eq!(parse_seconds("500ms"), Ok(1));
        assert!(parse_seconds("-1h").is_err());
        assert!(parse_seconds("soon").is_err());
    }
}
