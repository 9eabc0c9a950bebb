//! `tiphys login SERVER --sso`: the authorization code flow with PKCE S256
//! and a nonce, the provider sending the browser back to a one-shot HTTP
//! listener on the loopback interface; with `--device`, the device
//! authorization grant instead (`oidc::device`); and the silent refresh of an
//! expired ID token with the saved refresh token.
//!
//! The protocol (discovery, authorization URL, code exchange, refresh grant)
//! is `openidconnect`'s, through `oidc::provider` and the project's HTTP
//! client; the ID token is verified as the server verifies one (`oidc::verify`).

use std::convert::Infallible;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use http_body_util::Full;
use subtle::ConstantTimeEq as _;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::client::Target;
use super::config::LocalConfig;
use super::conn::Connection;
use crate::config::oidc::DEFAULT_SCOPES;
use crate::oidc::http::Http;
use crate::oidc::provider::{AuthorizationRequest, Provider, Tokens};
use crate::oidc::verify::{self, Expect};
use crate::pb::cluster::{OidcConfig, SettingsQuery};
use crate::random;

/// The key under a user entry that holds the refresh token (Argo CD's name).
pub const REFRESH_TOKEN_KEY: &str = "refresh-token";
/// The keys under a user entry that hold the provider and client of the SSO
/// login, so that a refresh goes where the login went, whatever the saved
/// (unverified) token claims.
pub const SSO_ISSUER_KEY: &str = "sso-issuer";
pub const SSO_CLIENT_ID_KEY: &str = "sso-client-id";
/// How long the CLI waits for the browser to come back.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// What an SSO login yields.
pub struct SsoLogin {
    pub id_token: String,
    pub refresh_token: Option<String>,
    /// The name to greet the user with.
    pub name: String,
    /// The provider and client the login went through.
    pub issuer: String,
    pub client_id: String,
}

/// The callback's query, or why the provider said no.
type Callback = Result<(String, String), String>;

/// The server's provider, as its settings name it, and what a login asks it for.
struct Start {
    issuer: String,
    client_id: String,
    provider: Provider,
    /// `openid` first; `offline_access` when the provider offers it (for the silent refresh).
    scopes: Vec<String>,
}

impl Start {
    /// Reads the server's SSO settings and the discovery document of the provider named
    /// `provider` (the server's default one for `None`).
    async fn new(conn: &Connection, provider: Option<&str>) -> anyhow::Result<Self> {
        let settings = crate::pb::cluster::settings_service_client::SettingsServiceClient::with_origin(
            conn.transport.clone(),
            conn.origin.clone(),
        )
        .get(SettingsQuery {})
        .await
        .map_err(|s| anyhow!("cannot read the server's settings: {}", super::conn::describe(&s)))?
        .into_inner();
        let oidc = match provider {
            None => settings.oidc_config,
            Some(name) => Some(choose_provider(settings.sso_providers, name)?),
        };
        let oidc = oidc.filter(|o| !o.issuer.is_empty()).ok_or_else(|| {
            anyhow!("the server has no single sign-on configured (no oidc.config in its argocd-cm)")
        })?;
        let client_id = if oidc.cli_client_id.is_empty() {
            oidc.client_id.clone()
        } else {
            oidc.cli_client_id.clone()
        };
        let http = Http::new(&[], false).map_err(|e| anyhow!("cannot set up TLS: {e}"))?;
        let provider = Provider::new(&oidc.issuer, http);
        let offline = provider
            .offers_offline_access()
            .await
            .map_err(|e| anyhow!("cannot start the login: {e}"))?;
        let mut scopes: Vec<String> = if oidc.scopes.is_empty() {
            DEFAULT_SCOPES.iter().map(|s| (*s).to_owned()).collect()
        } else {
            oidc.scopes.clone()
        };
        if !scopes.iter().any(|s| s == "openid") {
            scopes.insert(0, "openid".to_owned());
        }
        if offline && !scopes.iter().any(|s| s == "offline_access") {
            scopes.push("offline_access".to_owned());
        }
        Ok(Self {
            issuer: oidc.issuer,
            client_id,
            provider,
            scopes,
        })
    }

    /// Verifies the ID token the provider issued (with the login's nonce, when it had one) and
    /// names the user.
    async fn finish(self, tokens: Tokens, nonce: Option<&str>) -> anyhow::Result<SsoLogin> {
        let id_token = tokens
            .id_token
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("the identity provider returned no ID token"))?;
        let audiences = [self.client_id.clone()];
        let claims = self
            .provider
            .verify(
                &id_token,
                &Expect {
                    issuer: &self.issuer,
                    audiences: &audiences,
                    skip_audience_when_absent: false,
                    nonce,
                    now: crate::clock::Clock::system().now_s(),
                },
            )
            .await
            .map_err(|e| anyhow!("the ID token failed verification: {e}"))?;
        let text = |k: &str| {
            claims
                .get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let name = text("email")
            .or_else(|| text("name"))
            .or_else(|| text("sub"))
            .unwrap_or_default();
        Ok(SsoLogin {
            id_token,
            refresh_token: tokens.refresh_token.filter(|t| !t.is_empty()),
            name,
            issuer: self.issuer,
            client_id: self.client_id,
        })
    }
}

/// The provider of the server's list named `name`; the error names those there are.
fn choose_provider(list: Vec<OidcConfig>, name: &str) -> anyhow::Result<OidcConfig> {
    if list.is_empty() {
        bail!(
            "the server offers one single sign-on provider (no tiphys.oidc.providers): log in without --provider"
        );
    }
    let names: Vec<String> = list.iter().map(|p| p.name.clone()).collect();
    list.into_iter().find(|p| p.name == name).ok_or_else(|| {
        anyhow!(
            "the server has no single sign-on provider named {name:?}; it offers: {}",
            names.join(", ")
        )
    })
}

/// Runs the authorization code flow against the server's provider `provider` (its default
/// one for `None`).
pub async fn login(
    conn: &Connection,
    provider: Option<&str>,
    port: u16,
    launch_browser: bool,
) -> anyhow::Result<SsoLogin> {
    let start = Start::new(conn, provider).await?;
    let listener = TcpListener::bind(("127.0.0.1", port)).await.with_context(|| {
        format!(
            "cannot listen on 127.0.0.1:{port} for the login callback; choose another port with --sso-port"
        )
    })?;
    let redirect_uri = format!("http://localhost:{port}/auth/callback");
    let state = random::token(32);
    let nonce = random::token(32);
    let verifier = random::token(64);
    let url = start
        .provider
        .authorization_url(AuthorizationRequest {
            client_id: &start.client_id,
            redirect_uri: &redirect_uri,
            scopes: &start.scopes,
            state: &state,
            nonce: &nonce,
            pkce_verifier: &verifier,
            extra: Vec::new(),
        })
        .await
        .map_err(|e| anyhow!("cannot start the login: {e}"))?;
    eprintln!("Performing the authorization code flow login; open this URL in a browser:\n{url}");
    if launch_browser {
        open_browser(&url);
    }

    let (code, returned_state) = tokio::time::timeout(LOGIN_TIMEOUT, wait_for_callback(listener, &state))
        .await
        .map_err(|_| anyhow!("no login within {} s", LOGIN_TIMEOUT.as_secs()))??
        .map_err(|why| anyhow!("the identity provider refused the login: {why}"))?;
    if returned_state != state {
        bail!("the login callback carries the wrong state; start the login again");
    }
    let tokens = start
        .provider
        .exchange_code(&code, &verifier, &redirect_uri, &start.client_id, None)
        .await
        .map_err(|e| anyhow!("the code exchange failed: {e}"))?;
    start.finish(tokens, Some(&nonce)).await
}

/// Runs the device authorization grant (RFC 8628) against the server's provider: prints a code
/// and a URL, and waits until the user approves or denies the login there, or the code expires.
/// Nothing listens on this machine, so it works where the browser is elsewhere.
pub async fn login_device(
    conn: &Connection,
    provider: Option<&str>,
    launch_browser: bool,
) -> anyhow::Result<SsoLogin> {
    let start = Start::new(conn, provider).await?;
    let device = start
        .provider
        .start_device_login(&start.client_id, &start.scopes)
        .await
        .map_err(|e| anyhow!("cannot start the device login: {e}"))?;
    let open = device
        .verification_uri_complete()
        .unwrap_or(device.verification_uri());
    eprintln!(
        "Performing the device code login; open this URL on any device and enter the code {} (valid for {} s):\n{}",
        device.user_code(),
        device.expires_in().as_secs(),
        device.verification_uri(),
    );
    if let Some(complete) = device.verification_uri_complete() {
        eprintln!("or open this URL, which carries the code:\n{complete}");
    }
    if launch_browser {
        open_browser(open);
    }
    let tokens = start
        .provider
        .finish_device_login(&device, &start.client_id)
        .await
        .map_err(|e| anyhow!("the device login failed: {e}"))?;
    start.finish(tokens, None).await
}

/// Serves the loopback listener until the provider's redirect for the login
/// with `expected_state` arrives. Callbacks with another (or no) state are
/// answered 400 and ignored: anything on this machine can reach the
/// listener, and must not be able to abort the login. The caller bounds the wait.
async fn wait_for_callback(listener: TcpListener, expected_state: &str) -> anyhow::Result<Callback> {
    let (tx, mut rx) = mpsc::channel::<Callback>(1);
    let tx = Arc::new(Mutex::new(Some(tx)));
    let expected: Arc<str> = Arc::from(expected_state);
    loop {
        tokio::select! {
            got = rx.recv() => return got.ok_or_else(|| anyhow!("the login callback listener stopped")),
            accepted = listener.accept() => {
                let (stream, _) = accepted.context("the login callback listener failed")?;
                let tx = Arc::clone(&tx);
                let expected = Arc::clone(&expected);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let tx = Arc::clone(&tx);
                        let expected = Arc::clone(&expected);
                        async move { Ok::<_, Infallible>(answer(&req, &tx, &expected)) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        }
    }
}

fn answer(
    req: &http::Request<hyper::body::Incoming>,
    tx: &Mutex<Option<mpsc::Sender<Callback>>>,
    expected_state: &str,
) -> http::Response<Full<Bytes>> {
    let reply = |status: u16, text: &'static str| {
        let mut r = http::Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_REQUEST);
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    if req.uri().path() != "/auth/callback" {
        return reply(404, "not found\n");
    }
    let params: Vec<(String, String)> =
        form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let ours = get("state").is_some_and(|s| bool::from(s.as_bytes().ct_eq(expected_state.as_bytes())));
    if !ours {
        return reply(400, "this callback does not belong to the login in progress\n");
    }
    let outcome = match (get("error"), get("code"), get("state")) {
        (Some(error), _, _) => {
            // Only an error code made of safe characters is shown in the terminal.
            let safe = error.len() < 64 && error.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            Err(if safe {
                error
            } else {
                "an unreadable error".to_owned()
            })
        }
        (None, Some(code), Some(state)) => Ok((code, state)),
        _ => return reply(400, "this is not a login callback\n"),
    };
    let failed = outcome.is_err();
    if let Ok(mut slot) = tx.lock()
        && let Some(tx) = slot.take()
    {
        let _ = tx.try_send(outcome);
    }
    if failed {
        reply(401, "Login failed; see the terminal.\n")
    } else {
        reply(
            200,
            "Login complete: you may close this window and return to the terminal.\n",
        )
    }
}

fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if spawned.is_err() {
        eprintln!("(could not start a browser with {opener}; open the URL yourself)");
    }
}

/// Claims of a token, read without verification (the server verifies).
fn unverified_claims(token: &str) -> Option<verify::Claims> {
    jsonwebtoken::dangerous::insecure_decode_claims(token).ok()
}

/// Before a command: if the saved token is an expired provider ID token and
/// a refresh token is saved with it, redeem the refresh token at the
/// provider and save the new tokens. Problems are warnings: the command then
/// runs with the old token and the server says what is wrong.
pub async fn refresh_if_expired(config_path: &Path, target: &mut Target) {
    let (Some(user), Some(token)) = (target.user.clone(), target.opts.auth_token.clone()) else {
        return;
    };
    let Ok(cfg) = LocalConfig::load(config_path) else {
        return;
    };
    let Some(Refresh {
        issuer,
        client_id,
        refresh,
    }) = refresh_plan(&cfg, &user, &token, crate::clock::Clock::system().now_s())
    else {
        return;
    };
    let refreshed = async {
        let http = Http::new(&[], false).map_err(|e| anyhow!(e))?;
        let tokens = Provider::new(&issuer, http).refresh(&refresh, &client_id).await?;
        let id_token = tokens
            .id_token
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("the provider returned no ID token"))?;
        let mut cfg = LocalConfig::load(config_path)?;
        save_tokens(
            &mut cfg,
            &user,
            &id_token,
            tokens.refresh_token.as_deref().or(Some(&refresh)),
        );
        cfg.save(config_path)?;
        anyhow::Ok(id_token)
    };
    match refreshed.await {
        Ok(id_token) => {
            tracing::debug!(user = %user, "refreshed the expired ID token");
            target.opts.auth_token = Some(id_token);
        }
        Err(err) => eprintln!("warning: the saved SSO token has expired and could not be refreshed: {err:#}"),
    }
}

/// Where and how to refresh an expired SSO token.
#[derive(Debug, PartialEq, Eq)]
struct Refresh {
    issuer: String,
    client_id: String,
    refresh: String,
}

/// Whether `token`, saved for `user`, is an expired provider ID token that
/// can be refreshed, and how: at the issuer and with the client saved at
/// login, never ones read from the token (not verified here).
fn refresh_plan(cfg: &LocalConfig, user: &str, token: &str, now: i64) -> Option<Refresh> {
    let claims = unverified_claims(token)?;
    let issuer = claims
        .get("iss")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let exp = claims
        .get("exp")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(i64::MAX);
    if issuer.is_empty() || issuer == crate::auth::jwt::ISSUER || exp > now + 10 {
        return None;
    }
    let entry = cfg.user(user)?;
    let saved = |key: &str| {
        entry
            .other
            .get(key)
            .and_then(serde_yaml_ng::Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    Some(Refresh {
        issuer: saved(SSO_ISSUER_KEY)?,
        client_id: saved(SSO_CLIENT_ID_KEY)?,
        refresh: saved(REFRESH_TOKEN_KEY)?,
    })
}

/// Records the provider and client of an SSO login under the user's entry.
pub fn save_sso_origin(cfg: &mut LocalConfig, user: &str, issuer: &str, client_id: &str) {
    if let Some(entry) = cfg.users.iter_mut().find(|u| u.name == user) {
        for (key, value) in [(SSO_ISSUER_KEY, issuer), (SSO_CLIENT_ID_KEY, client_id)] {
            entry
                .other
                .insert(key.to_owned(), serde_yaml_ng::Value::String(value.to_owned()));
        }
    }
}

/// Saves an ID token and its refresh token as the user's credentials.
pub fn save_tokens(cfg: &mut LocalConfig, user: &str, id_token: &str, refresh_token: Option<&str>) {
    cfg.set_token(user, id_token);
    if let (Some(refresh), Some(entry)) = (refresh_token, cfg.users.iter_mut().find(|u| u.name == user)) {
        entry.other.insert(
            REFRESH_TOKEN_KEY.to_owned(),
            serde_yaml_ng::Value::String(refresh.to_owned()),
        );
    }
}

/// The greeting line of a login.
pub fn greet(out: &mut dyn Write, name: &str) -> std::io::Result<()> {
    writeln!(out, "'{name}' logged in successfully")
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// One request to the callback listener; the status line of the answer.
    async fn get(port: u16, path_and_query: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request =
            format!("GET {path_and_query} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn callbacks_for_another_login_are_ignored() {
        let bounded = Duration::from_secs(20);
        tokio::time::timeout(bounded, async {
            let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let waiting = tokio::spawn(async move { wait_for_callback(listener, "s1").await });
            for stray in [
                "/auth/callback?code=c&state=other",
                "/auth/callback?code=c",
                "/auth/callback?error=access_denied&state=other",
                "/auth/callback?error=access_denied",
            ] {
                assert!(get(port, stray).await.contains(" 400 "), "{stray}");
            }
            assert!(!waiting.is_finished(), "a stray callback must not end the login");
            assert!(
                get(port, "/auth/callback?code=c1&state=s1")
                    .await
                    .contains(" 200 ")
            );
            let outcome = waiting.await.unwrap().unwrap();
            assert_eq!(outcome, Ok(("c1".to_owned(), "s1".to_owned())));
        })
        .await
        .expect("bounded");
    }

    fn token(claims: &serde_json::Value) -> String {
        format!(
            "e30.{}.sig",
            URL_SAFE_NO_PAD.encode(claims.to_string().as_bytes())
        )
    }

    #[test]
    fn a_refresh_goes_to_the_issuer_saved_at_login() {
        let mut cfg = LocalConfig::default();
        let expired = token(&serde_json::json!({"iss": "https://evil", "aud": "evil-client", "exp": 1000}));
        save_tokens(&mut cfg, "u", &expired, Some("r1"));
        // No provider saved at login: no refresh (and never the token's own issuer).
        assert_eq!(refresh_plan(&cfg, "u", &expired, 2000), None);
        save_sso_origin(&mut cfg, "u", "https://idp", "cd-cli");
        assert_eq!(
            refresh_plan(&cfg, "u", &expired, 2000),
            Some(Refresh {
                issuer: "https://idp".into(),
                client_id: "cd-cli".into(),
                refresh: "r1".into(),
            })
        );
        // Not expired yet, or not a provider token: nothing to do.
        assert_eq!(refresh_plan(&cfg, "u", &expired, 900), None);
        let own = token(&serde_json::json!({"iss": crate::auth::jwt::ISSUER, "exp": 1000}));
        assert_eq!(refresh_plan(&cfg, "u", &own, 2000), None);
    }

    #[tokio::test]
    async fn a_provider_error_for_this_login_ends_it() {
        tokio::time::timeout(Duration::from_secs(20), async {
            let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let waiting = tokio::spawn(async move { wait_for_callback(listener, "s1").await });
            assert!(
                get(port, "/auth/callback?error=access_denied&state=s1")
                    .await
                    .contains(" 401 ")
            );
            assert_eq!(waiting.await.unwrap().unwrap(), Err("access_denied".to_owned()));
        })
        .await
        .expect("bounded");
    }
}
