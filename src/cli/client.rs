//! A connection as a client command needs it: the server, connection flags
//! and token worked out from the command line and the client config, plus
//! the handling every answer gets (renewed tokens saved, errors worded).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::anyhow;

use super::config::LocalConfig;
use super::conn::{ClientOpts, Connection, GrpcTransport, describe};
use crate::pb::account::account_service_client::AccountServiceClient;
use crate::pb::session::session_service_client::SessionServiceClient;

/// Response metadata with a fresh login token (native gRPC only).
const RENEW_TOKEN: &str = "renew-token";

const NO_SERVER: &str = "no server given and no current context: pass --server HOST:PORT (or set TIPHYS_SERVER), \
     or log in first with `tiphys login SERVER`";

/// What to connect to and with which token, before connecting.
#[derive(Clone, Debug)]
pub struct Target {
    /// Effective connection options (server, flags and token filled in).
    pub opts: ClientOpts,
    /// The context the saved flags or token came from.
    pub context: Option<String>,
    /// The user entry the token came from; `None` when the token came from
    /// --auth-token (or there is none).
    pub user: Option<String>,
}

/// Works out the target: an explicit `context` (logout, relogin) wins; else
/// the context of an explicitly given --server (if any points there); else
/// the current context. Explicit flags override saved ones, and
/// --auth-token overrides the saved token. A saved token is only ever sent
/// to the server it was issued by.
pub fn resolve(cfg: &LocalConfig, given: &ClientOpts, context: Option<&str>) -> anyhow::Result<Target> {
    let given_server = given.server.as_deref().filter(|s| !s.trim().is_empty());
    let resolved = match (context, given_server) {
        (Some(name), _) => Some(cfg.resolve(name)?),
        (None, Some(server)) => cfg.for_server(server),
        (None, None) => Some(cfg.current()?.ok_or_else(|| anyhow!(NO_SERVER))?),
    };
    let mut opts = given.clone();
    opts.auth_token = opts.auth_token.filter(|t| !t.is_empty());
    let mut target = Target {
        opts,
        context: None,
        user: None,
    };
    let Some(resolved) = resolved else {
        return Ok(target);
    };
    let opts = &mut target.opts;
    if context.is_some() || given_server.is_none() {
        opts.server = Some(resolved.context.server.clone());
    }
    if let Some(saved) = resolved.server {
        opts.grpc_web |= saved.grpc_web;
        opts.plaintext |= saved.plain_text;
        opts.insecure |= saved.insecure;
        if opts.grpc_web_root_path.is_none() && !saved.grpc_web_root_path.is_empty() {
            opts.grpc_web_root_path = Some(saved.grpc_web_root_path.clone());
        }
        if opts.server_crt.is_none() {
            opts.server_crt.clone_from(&saved.server_crt);
        }
        if opts.headers.is_empty() {
            opts.headers.clone_from(&saved.headers);
        }
    }
    target.context = Some(resolved.context.name.clone());
    if opts.auth_token.is_none()
        && let Some(token) = resolved.token()
    {
        opts.auth_token = Some(token.to_owned());
        target.user = Some(resolved.context.user.clone());
    }
    Ok(target)
}

/// A connected client command.
pub struct Client {
    pub conn: Connection,
    pub target: Target,
    config_path: PathBuf,
    renewal_saved: AtomicBool,
}

impl Client {
    /// Reads the client config, resolves the target and connects.
    pub async fn connect(
        config_path: &Path,
        given: &ClientOpts,
        context: Option<&str>,
    ) -> anyhow::Result<Self> {
        let cfg = LocalConfig::load(config_path)?;
        let target = resolve(&cfg, given, context)?;
        Self::connect_to(config_path, target).await
    }

    pub async fn connect_to(config_path: &Path, mut target: Target) -> anyhow::Result<Self> {
        super::sso::refresh_if_expired(config_path, &mut target).await;
        let conn = target.opts.connect().await?;
        Ok(Self {
            conn,
            target,
            config_path: config_path.to_path_buf(),
            renewal_saved: AtomicBool::new(false),
        })
    }

    pub fn session(&self) -> SessionServiceClient<GrpcTransport> {
        self.conn.session_client()
    }

    pub fn account(&self) -> AccountServiceClient<GrpcTransport> {
        self.conn.account_client()
    }

    pub fn token(&self) -> Option<&str> {
        self.target.opts.auth_token.as_deref()
    }

    /// The answer of a call: a renewed token is saved to the context it
    /// replaces; a failure becomes an error that starts with `what`.
    pub fn finish<T>(
        &self,
        what: &str,
        result: Result<tonic::Response<T>, tonic::Status>,
    ) -> anyhow::Result<T> {
        let metadata = match &result {
            Ok(response) => response.metadata(),
            Err(status) => status.metadata(),
        };
        if let Some(token) = metadata.get(RENEW_TOKEN).and_then(|v| v.to_str().ok())
            && !token.is_empty()
        {
            self.save_renewed(token);
        }
        result
            .map(tonic::Response::into_inner)
            .map_err(|status| call_error(what, &status))
    }

    /// Replaces the saved token this command used (never a newer one saved
    /// meanwhile, never a token given with --auth-token). Failing to save is
    /// only a warning: the old token still works until it expires.
    fn save_renewed(&self, token: &str) {
        let Some(user) = &self.target.user else { return };
        if self.renewal_saved.swap(true, Ordering::Relaxed) {
            return;
        }
        let used = self.token().unwrap_or_default();
        let result = LocalConfig::load(&self.config_path).and_then(|mut cfg| {
            if cfg.user(user).is_none_or(|u| u.auth_token != used) {
                return Ok(());
            }
            cfg.set_token(user, token);
            cfg.save(&self.config_path)
        });
        match result {
            Ok(()) => tracing::debug!(user = %user, "saved the renewed session token"),
            Err(err) => eprintln!("warning: cannot save the renewed session token: {err:#}"),
        }
    }
}

/// A failed call, worded for a person: the server's own message for
/// answers from the application, the transport diagnosis otherwise.
pub fn call_error(what: &str, status: &tonic::Status) -> anyhow::Error {
    use tonic::Code;
    let message = status.message();
    match status.code() {
        Code::DeadlineExceeded => super::deadline::failure(format!("{what}: {message}")),
        Code::Unauthenticated if !message.contains("log in") => anyhow!(
            "{what}: {message} (Unauthenticated; log in with `tiphys login SERVER`, or pass --auth-token)"
        ),
        Code::Unauthenticated => anyhow!("{what}: {message} (Unauthenticated)"),
        Code::PermissionDenied
        | Code::InvalidArgument
        | Code::NotFound
        | Code::AlreadyExists
        | Code::FailedPrecondition
        | Code::ResourceExhausted
        | Code::OutOfRange
            if !message.is_empty() =>
        {
            anyhow!("{what}: {message}")
        }
        _ => anyhow!("{what}: {}", describe(status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = "\
contexts:
- name: one
  server: one:443
  user: one
- name: two
  server: two:8080
  user: two
current-context: one
servers:
- server: one:443
  insecure: true
  headers: ['X-A: 1']
- server: two:8080
  plain-text: true
  grpc-web-root-path: /argocd
users:
- name: one
  auth-token: t1
- name: two
  auth-token: t2
";

    fn cfg() -> LocalConfig {
        serde_yaml_ng::from_str(CFG).unwrap()
    }

    #[test]
    fn current_context_supplies_server_flags_and_token() {
        let t = resolve(&cfg(), &ClientOpts::default(), None).unwrap();
        assert_eq!(t.opts.server.as_deref(), Some("one:443"));
        assert!(t.opts.insecure && !t.opts.plaintext);
        assert_eq!(t.opts.headers, ["X-A: 1"]);
        assert_eq!(t.opts.auth_token.as_deref(), Some("t1"));
        assert_eq!(t.user.as_deref(), Some("one"));
    }

    #[test]
    fn explicit_flags_and_token_win() {
        let given = ClientOpts {
            headers: vec!["X-B: 2".to_owned()],
            auth_token: Some("mine".to_owned()),
            ..ClientOpts::default()
        };
        let t = resolve(&cfg(), &given, None).unwrap();
        assert_eq!(t.opts.headers, ["X-B: 2"]);
        assert_eq!(t.opts.auth_token.as_deref(), Some("mine"));
        assert!(t.user.is_none(), "a given token is never saved over");
    }

    #[test]
    fn given_server_uses_only_its_own_context() {
        let given = ClientOpts {
            server: Some("two:8080".to_owned()),
            ..ClientOpts::default()
        };
        let t = resolve(&cfg(), &given, None).unwrap();
        assert_eq!(t.opts.auth_token.as_deref(), Some("t2"));
        assert!(t.opts.plaintext);
        assert_eq!(t.opts.grpc_web_root_path.as_deref(), Some("/argocd"));
        let given = ClientOpts {
            server: Some("elsewhere:443".to_owned()),
            ..ClientOpts::default()
        };
        let t = resolve(&cfg(), &given, None).unwrap();
        assert!(t.opts.auth_token.is_none() && !t.opts.insecure && t.context.is_none());
    }

    #[test]
    fn named_context_overrides_the_server() {
        let given = ClientOpts {
            server: Some("elsewhere:443".to_owned()),
            ..ClientOpts::default()
        };
        let t = resolve(&cfg(), &given, Some("two")).unwrap();
        assert_eq!(t.opts.server.as_deref(), Some("two:8080"));
        assert!(resolve(&cfg(), &given, Some("three")).is_err());
    }

    #[test]
    fn nothing_configured_asks_for_a_server() {
        let err = resolve(&LocalConfig::default(), &ClientOpts::default(), None).unwrap_err();
        assert!(err.to_string().contains("--server"), "{err}");
    }

    #[test]
    fn errors_read_well() {
        let e = call_error(
            "login failed",
            &tonic::Status::unauthenticated("Invalid username or password"),
        );
        assert!(
            e.to_string()
                .starts_with("login failed: Invalid username or password"),
            "{e}"
        );
        let e = call_error(
            "login failed",
            &tonic::Status::resource_exhausted("too many login attempts; retry in 3 s"),
        );
        assert_eq!(
            e.to_string(),
            "login failed: too many login attempts; retry in 3 s"
        );
        let e = call_error("x", &tonic::Status::unavailable("connection refused"));
        assert_eq!(e.to_string(), "x: Unavailable: connection refused");
    }
}
