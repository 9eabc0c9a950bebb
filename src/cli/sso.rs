//! `tiphys login SERVER --sso`: the authorization code flow with PKCE S256
//! and a nonce, the provider sending the browser back to a one-shot HTTP
//! listener on the loopback interface; and the silent refresh of an expired
//! ID token with the saved refresh token.

use std::convert::Infallible;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use http_body_util::Full;
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::client::Target;
use super::config::LocalConfig;
use super::conn::Connection;
use crate::auth::random;
use crate::config::oidc::DEFAULT_SCOPES;
use crate::oidc::http::Http;
use crate::oidc::provider::Provider;
use crate::oidc::verify::{self, Expect};
use crate::pb::cluster::SettingsQuery;

/// The key under a user entry that holds the refresh token (Argo CD's name).
pub const REFRESH_TOKEN_KEY: &str = "refresh-token";
/// How long the CLI waits for the browser to come back.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// What an SSO login yields.
pub struct SsoLogin {
    pub id_token: String,
    pub refresh_token: Option<String>,
    /// The name to greet the user with.
    pub name: String,
}

/// The callback's query, or why the provider said no.
type Callback = Result<(String, String), String>;

/// Runs the whole flow against the server's provider.
pub async fn login(conn: &Connection, port: u16, launch_browser: bool) -> anyhow::Result<SsoLogin> {
    let settings = crate::pb::cluster::settings_service_client::SettingsServiceClient::with_origin(
        conn.transport.clone(),
        conn.origin.clone(),
    )
    .get(SettingsQuery {})
    .await
    .map_err(|s| anyhow!("cannot read the server's settings: {}", super::conn::describe(&s)))?
    .into_inner();
    let oidc = settings
        .oidc_config
        .filter(|o| !o.issuer.is_empty())
        .ok_or_else(|| {
            anyhow!("the server has no single sign-on configured (no oidc.config in its argocd-cm)")
        })?;
    let client_id = if oidc.cli_client_id.is_empty() {
        oidc.client_id.clone()
    } else {
        oidc.cli_client_id.clone()
    };
    let http = Http::new(&[], false).map_err(|e| anyhow!("cannot set up TLS: {e}"))?;
    let provider = Provider::new(&oidc.issuer, http);
    let discovery = provider
        .discovery()
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
    let offline = discovery.scopes_supported.is_empty()
        || discovery.scopes_supported.iter().any(|s| s == "offline_access");
    if offline && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".to_owned());
    }

    let listener = TcpListener::bind(("127.0.0.1", port)).await.with_context(|| {
        format!(
            "cannot listen on 127.0.0.1:{port} for the login callback; choose another port with --sso-port"
        )
    })?;
    let redirect_uri = format!("http://localhost:{port}/auth/callback");
    let state = random::token(32);
    let nonce = random::token(32);
    let verifier = random::token(64);
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("response_type", "code")
        .append_pair("client_id", &client_id)
        .append_pair("redirect_uri", &redirect_uri)
        .append_pair("scope", &scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("nonce", &nonce)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256")
        .finish();
    let endpoint = &discovery.authorization_endpoint;
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    let url = format!("{endpoint}{sep}{query}");
    eprintln!("Performing the authorization code flow login; open this URL in a browser:\n{url}");
    if launch_browser {
        open_browser(&url);
    }

    let (code, returned_state) = tokio::time::timeout(LOGIN_TIMEOUT, wait_for_callback(listener))
        .await
        .map_err(|_| anyhow!("no login within {} s", LOGIN_TIMEOUT.as_secs()))??
        .map_err(|why| anyhow!("the identity provider refused the login: {why}"))?;
    if returned_state != state {
        bail!("the login callback carries the wrong state; start the login again");
    }
    let tokens = provider
        .exchange_code(&code, &verifier, &redirect_uri, &client_id, None)
        .await
        .map_err(|e| anyhow!("the code exchange failed: {e}"))?;
    let id_token = tokens
        .id_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow!("the identity provider returned no ID token"))?;
    let audiences = [client_id.clone()];
    let claims = provider
        .verify(
            &id_token,
            &Expect {
                issuer: &oidc.issuer,
                audiences: &audiences,
                skip_audience_when_absent: false,
                nonce: Some(&nonce),
                now: crate::oidc::now_s(),
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
    })
}

/// Serves the loopback listener until the provider's redirect arrives.
async fn wait_for_callback(listener: TcpListener) -> anyhow::Result<Callback> {
    let (tx, mut rx) = mpsc::channel::<Callback>(1);
    let tx = Arc::new(Mutex::new(Some(tx)));
    loop {
        tokio::select! {
            got = rx.recv() => return got.ok_or_else(|| anyhow!("the login callback listener stopped")),
            accepted = listener.accept() => {
                let (stream, _) = accepted.context("the login callback listener failed")?;
                let tx = Arc::clone(&tx);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let tx = Arc::clone(&tx);
                        async move { Ok::<_, Infallible>(answer(&req, &tx)) }
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
    let payload = token.split('.').nth(1)?;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?).ok()
}

/// Before a command: if the saved token is an expired provider ID token and
/// a refresh token is saved with it, redeem the refresh token at the
/// provider and save the new tokens. Problems are warnings: the command then
/// runs with the old token and the server says what is wrong.
pub async fn refresh_if_expired(config_path: &Path, target: &mut Target) {
    let (Some(user), Some(token)) = (target.user.clone(), target.opts.auth_token.clone()) else {
        return;
    };
    let Some(claims) = unverified_claims(&token) else {
        return;
    };
    let text = |k: &str| {
        claims
            .get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    let issuer = text("iss").unwrap_or_default();
    let exp = claims
        .get("exp")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(i64::MAX);
    if issuer.is_empty() || issuer == crate::auth::jwt::ISSUER || exp > crate::oidc::now_s() + 10 {
        return;
    }
    let Ok(cfg) = LocalConfig::load(config_path) else {
        return;
    };
    let Some(refresh) = cfg
        .user(&user)
        .and_then(|u| u.other.get(REFRESH_TOKEN_KEY))
        .and_then(serde_yaml_ng::Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    let client_id = text("azp").or_else(|| match claims.get("aud") {
        Some(serde_json::Value::String(a)) => Some(a.clone()),
        Some(serde_json::Value::Array(a)) => a.first().and_then(|v| v.as_str()).map(str::to_owned),
        _ => None,
    });
    let Some(client_id) = client_id else { return };
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
