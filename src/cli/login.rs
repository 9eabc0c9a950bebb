//! `tiphys login`, `logout` and `relogin`: sessions saved as contexts in the
//! client config.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail};
use base64::Engine as _;

use super::client::{Target, call_error, resolve};
use super::config::{ContextRef, LocalConfig, Server};
use super::conn::{ClientOpts, Connection};
use super::prompt;
use crate::pb::session::{SessionCreateRequest, SessionDeleteRequest};

#[derive(clap::Args, Debug)]
pub struct LoginArgs {
    /// The server, as HOST:PORT (else --server / TIPHYS_SERVER).
    #[arg(value_name = "SERVER")]
    pub address: Option<String>,
    /// The account to log in as (prompted for when missing).
    #[arg(long)]
    pub username: Option<String>,
    /// The password (prompted for without echo when missing; read from stdin when it is not a terminal).
    #[arg(long)]
    pub password: Option<String>,
    /// Name of the context to save [default: SERVER, or SERVER/ROOT with --grpc-web-root-path].
    #[arg(long)]
    pub name: Option<String>,
    /// Log in through the server's single sign-on provider (OpenID Connect) in a browser.
    #[arg(long, conflicts_with_all = ["username", "password"])]
    pub sso: bool,
    /// The loopback port the provider sends the browser back to (http://localhost:PORT/auth/callback).
    #[arg(long, default_value_t = 8085, requires = "sso")]
    pub sso_port: u16,
    /// Open the login URL in a browser (`--sso-launch-browser=false` only prints it).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true",
          action = clap::ArgAction::Set, require_equals = true)]
    pub sso_launch_browser: bool,
    /// With --sso: log in with a code shown here and approved in a browser on any device (the
    /// OAuth 2.0 device authorization grant), for machines the browser cannot call back to.
    #[arg(long, requires = "sso")]
    pub device: bool,
    /// With --sso: the provider to log in with, by its name on the server (tiphys.oidc.providers;
    /// `default` is oidc.config's) [default: the server's default provider].
    #[arg(long, requires = "sso")]
    pub provider: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct LogoutArgs {
    /// The context to log out from [default: the current one].
    pub context: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct ReloginArgs {
    /// The password (prompted for without echo when missing).
    #[arg(long)]
    pub password: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

/// The account name and token kind (`login`, `apiKey`) of one of our tokens,
/// read without verifying it (the server does that).
pub fn token_subject(token: &str) -> anyhow::Result<(String, String)> {
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow!("the saved token is not a JWT"))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|e| anyhow!("the saved token's payload is not base64url: {e}"))?;
    let claims: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| anyhow!("the saved token's payload is not JSON: {e}"))?;
    let sub = claims
        .get("sub")
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow!("the saved token has no subject"))?;
    Ok(match sub.split_once(':') {
        Some((name, kind)) => (name.to_owned(), kind.to_owned()),
        None => (sub.to_owned(), "apiKey".to_owned()),
    })
}

/// SessionService/Create: a new login token.
pub async fn create_session(conn: &Connection, username: &str, password: &str) -> anyhow::Result<String> {
    let request = SessionCreateRequest {
        username: username.to_owned(),
        password: password.to_owned(),
        token: String::new(),
    };
    let reply = conn.session_client().create(request).await.map_err(|status| {
        if status.code() == tonic::Code::Unauthenticated {
            anyhow!("login failed: {}", status.message())
        } else {
            call_error("login failed", &status)
        }
    })?;
    let token = reply.into_inner().token;
    if token.is_empty() {
        bail!("login failed: the server answered without a token");
    }
    Ok(token)
}

fn default_context_name(server: &str, root_path: Option<&str>) -> String {
    match root_path.map(|p| p.trim_matches('/')).filter(|p| !p.is_empty()) {
        Some(root) => format!("{server}/{root}"),
        None => server.to_owned(),
    }
}

pub async fn login(config_path: &Path, args: LoginArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let server = args
        .address
        .or_else(|| args.conn.server.clone())
        .map(|s| s.trim().trim_end_matches('/').to_owned())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow!("no server given: `tiphys login HOST:PORT`"))?;
    // A broken config stops the login before any password is typed; it is never replaced.
    LocalConfig::load(config_path)?;
    let mut opts = args.conn;
    opts.server = Some(server.clone());
    opts.auth_token = None;
    opts.grpc_web_root_path = opts
        .grpc_web_root_path
        .filter(|p| !p.trim_matches('/').is_empty());
    if let Some(crt) = &opts.server_crt {
        opts.server_crt = Some(std::path::absolute(crt).unwrap_or_else(|_| crt.clone()));
    }
    let conn = opts.connect().await?;
    let (token, refresh_token, sso_origin) = if args.sso {
        let login = if args.device {
            super::sso::login_device(&conn, args.provider.as_deref(), args.sso_launch_browser).await?
        } else {
            let provider = args.provider.as_deref();
            super::sso::login(&conn, provider, args.sso_port, args.sso_launch_browser).await?
        };
        super::sso::greet(out, &login.name)?;
        (
            login.id_token,
            login.refresh_token,
            Some((login.issuer, login.client_id)),
        )
    } else {
        let username = match args.username.filter(|u| !u.is_empty()) {
            Some(u) => u,
            None => prompt::text("Username: ", "username")?,
        };
        let password = match args.password.filter(|p| !p.is_empty()) {
            Some(p) => p,
            None => prompt::secret(&format!("Password for {username}: "), "password")?,
        };
        let token = create_session(&conn, &username, &password).await?;
        writeln!(out, "'{username}' logged in successfully")?;
        (token, None, None)
    };

    let name = args
        .name
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| default_context_name(&server, opts.grpc_web_root_path.as_deref()));
    let mut cfg = LocalConfig::load(config_path)?;
    cfg.upsert_server(Server {
        server: server.clone(),
        // A fallback to gRPC-Web is remembered: later commands skip the native attempt.
        grpc_web: opts.grpc_web || conn.grpc_web,
        grpc_web_root_path: opts.grpc_web_root_path.clone().unwrap_or_default(),
        plain_text: opts.plaintext,
        insecure: opts.insecure,
        server_crt: opts.server_crt.clone(),
        headers: opts.headers.clone(),
        other: Default::default(),
    });
    super::sso::save_tokens(&mut cfg, &name, &token, refresh_token.as_deref());
    if let Some((issuer, client_id)) = &sso_origin {
        super::sso::save_sso_origin(&mut cfg, &name, issuer, client_id);
    }
    cfg.upsert_context(ContextRef {
        name: name.clone(),
        server,
        user: name.clone(),
        other: Default::default(),
    });
    cfg.current_context.clone_from(&name);
    cfg.save(config_path)?;
    writeln!(out, "Context '{name}' updated")?;
    Ok(())
}

pub async fn logout(config_path: &Path, args: LogoutArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let cfg = LocalConfig::load(config_path)?;
    let name = args
        .context
        .filter(|c| !c.is_empty())
        .or_else(|| Some(cfg.current_context.clone()).filter(|c| !c.is_empty()))
        .ok_or_else(|| {
            anyhow!("no current context: name the context to log out from (`tiphys context` lists them)")
        })?;
    let resolved = cfg.resolve(&name)?;
    let user = resolved.context.user.clone();
    if resolved.token().is_some() {
        let mut given = args.conn;
        given.auth_token = None;
        let target = resolve(&cfg, &given, Some(&name))?;
        if let Err(err) = revoke(target).await {
            eprintln!(
                "warning: could not revoke the token on the server ({err:#}); removing it locally, \
                 but it stays valid on the server until it expires"
            );
        }
    } else {
        eprintln!("note: context '{name}' holds no token");
    }
    let mut cfg = LocalConfig::load(config_path)?;
    if cfg.remove_token(&user) {
        cfg.save(config_path)?;
    }
    writeln!(out, "Logged out from '{name}'")?;
    Ok(())
}

/// SessionService/Delete with the context's token. A token the server
/// renews on this very call is revoked as well (it is never saved).
async fn revoke(mut target: Target) -> anyhow::Result<()> {
    for _ in 0..2 {
        let conn = target.opts.connect().await?;
        let response = conn
            .session_client()
            .delete(SessionDeleteRequest {})
            .await
            .map_err(|status| call_error("logout failed", &status))?;
        let renewed = response
            .metadata()
            .get("renew-token")
            .and_then(|v| v.to_str().ok())
            .filter(|t| !t.is_empty());
        match renewed {
            Some(token) => target.opts.auth_token = Some(token.to_owned()),
            None => return Ok(()),
        }
    }
    Ok(())
}

pub async fn relogin(config_path: &Path, args: ReloginArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let cfg = LocalConfig::load(config_path)?;
    let current = cfg
        .current()?
        .ok_or_else(|| anyhow!("no current context: log in with `tiphys login SERVER`"))?;
    let name = current.context.name.clone();
    let user = current.context.user.clone();
    let token = current.token().ok_or_else(|| {
        anyhow!(
            "context '{name}' holds no token to take the username from: log in with `tiphys login {} --username NAME`",
            current.context.server
        )
    })?;
    let (username, kind) = token_subject(token)?;
    if kind != "login" {
        bail!(
            "context '{name}' holds an API key of '{username}', not a login session: use `tiphys login {}`",
            current.context.server
        );
    }
    let mut given = args.conn;
    given.auth_token = None;
    let mut target = resolve(&cfg, &given, Some(&name))?;
    target.opts.auth_token = None;
    let conn = target.opts.connect().await?;
    writeln!(out, "Relogging in as '{username}'")?;
    let password = match args.password.filter(|p| !p.is_empty()) {
        Some(p) => p,
        None => prompt::secret(&format!("Password for {username}: "), "password")?,
    };
    let token = create_session(&conn, &username, &password).await?;
    let mut cfg = LocalConfig::load(config_path)?;
    cfg.set_token(&user, &token);
    cfg.save(config_path)?;
    writeln!(out, "Context '{name}' updated")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", b64(r#"{"alg":"HS256"}"#), b64(payload))
    }

    #[test]
    fn subject_of_tokens() {
        let (name, kind) = token_subject(&jwt(r#"{"sub":"admin:login","iss":"argocd"}"#)).unwrap();
        assert_eq!((name.as_str(), kind.as_str()), ("admin", "login"));
        let (name, kind) = token_subject(&jwt(r#"{"sub":"ci:apiKey"}"#)).unwrap();
        assert_eq!((name.as_str(), kind.as_str()), ("ci", "apiKey"));
        assert!(token_subject("nope").is_err());
        assert!(token_subject(&jwt(r#"{"iss":"argocd"}"#)).is_err());
    }

    #[test]
    fn context_names() {
        assert_eq!(default_context_name("cd:443", None), "cd:443");
        assert_eq!(default_context_name("cd:443", Some("/argocd/")), "cd:443/argocd");
        assert_eq!(default_context_name("cd:443", Some("/")), "cd:443");
    }
}
