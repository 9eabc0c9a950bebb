//! `/auth/login`, `/auth/callback` and `/auth/logout`: the dashboard's single
//! sign-on (authorization code flow with PKCE S256, a nonce, and a state
//! bound to the browser).
//!
//! Whatever goes wrong, the browser gets one of a few fixed messages (plain
//! text, never HTML): nothing from the request or the provider is echoed
//! (SEC-05, SEC-06). The reasons go to the server log.
//!
//! A login in progress travels in a sealed cookie (`crate::oidc::login`): `/auth/login` and
//! `/auth/callback` may be served by different server processes sharing the store and the
//! server key.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::{IntoResponse, Response};
use http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use http::{HeaderMap, HeaderValue, StatusCode};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::cookies::append as append_cookies;
use super::extract::{Scope, Who};
use crate::auth::cookie::{self, CookieScope};
use crate::config::http_url;
use crate::oidc::login::{LOGIN_TTL, LoginStates, SEAL_KEY_ID, SEAL_PURPOSE, STATE_COOKIE, StateError};
use crate::oidc::provider::AuthorizationRequest;
use crate::oidc::verify::{Claims, Expect};
use crate::oidc::{Choice, Current};
use crate::service::SessionCookie;
use crate::state::ServerState;

/// RFC 3986 unreserved characters stay; everything else is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Longest query parameter value looked at.
const MAX_PARAM_BYTES: usize = 4096;

const SSO_OFF: &str = "single sign-on is not configured on this server";
const NO_URL: &str =
    "single sign-on is misconfigured: the server's external URL (url in argocd-cm) is not set";
const BAD_RETURN_URL: &str =
    "invalid return_url: only a path on this server, or a URL under the server's own url, is accepted";
const PROVIDER_DOWN: &str = "the identity provider cannot be reached; try again later";
const TOO_LONG: &str = "the return_url is too long to be kept through the login; use a shorter one";
const STORE_DOWN: &str = "the login cannot be checked right now; try again in a moment";
const BAD_CALLBACK: &str = "invalid login callback: it is missing its state or code";
const BAD_STATE: &str = "this login is unknown, expired or was already used; start the login again";
const REFUSED: &str = "the identity provider did not complete the login; start the login again";
const BAD_TOKEN: &str = "the identity provider's answer failed verification; start the login again";
const SESSION_FAILED: &str = "the session could not be started; try again";
const UNKNOWN_PROVIDER: &str =
    "unknown provider: choose one of the providers this server offers (GET /api/v1/settings, ssoProviders)";
const OTHER_PROVIDER: &str =
    "this login came back from another identity provider than the one it was sent to; start the login again";

/// A fixed message as plain text: a browser renders it, never runs it.
fn page(status: StatusCode, message: &'static str) -> Response {
    let mut response = (status, format!("{message}\n")).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        "content-security-policy",
        HeaderValue::from_static("default-src 'none'"),
    );
    response
}

fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    match HeaderValue::from_str(location) {
        Ok(v) => {
            response.headers_mut().insert(LOCATION, v);
        }
        Err(_) => return page(StatusCode::INTERNAL_SERVER_ERROR, SESSION_FAILED),
    }
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Query parameters; a parameter given twice counts as malformed (`None`).
fn params(query: Option<&str>) -> Option<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if v.len() > MAX_PARAM_BYTES || out.iter().any(|(seen, _)| *seen == k) {
            return None;
        }
        out.push((k.into_owned(), v.into_owned()));
    }
    Some(out)
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// The provider `name` names (the default one for `None`), or the page that says why not.
fn sso(state: &ServerState, name: Option<&str>) -> Result<Current, Box<Response>> {
    match state.oidc.choose(name) {
        Ok(current) => Ok(current),
        Err(Choice::Off) => Err(Box::new(page(StatusCode::NOT_FOUND, SSO_OFF))),
        Err(Choice::Unknown) => Err(Box::new(page(StatusCode::BAD_REQUEST, UNKNOWN_PROVIDER))),
        Err(Choice::Broken(err)) => {
            tracing::error!(error = %err, "cannot set up the OIDC provider client");
            Err(Box::new(page(StatusCode::INTERNAL_SERVER_ERROR, PROVIDER_DOWN)))
        }
    }
}

/// `scheme://host[:port]` of the external URL.
fn origin(url: &str) -> Option<String> {
    Some(http_url::parse(url).ok()?.origin().ascii_serialization())
}

/// Where the browser may be sent after the login: a path on this server
/// (not `//host`), or an absolute URL with the external URL's origin (scheme, host and port,
/// as the `url` crate reads them, the way browsers do) under its path. `None` for anything
/// else (open redirects).
pub fn safe_return_url(raw: Option<&str>, url: &str, basehref: &str) -> Option<String> {
    let Some(raw) = raw.filter(|r| !r.is_empty()) else {
        return Some(basehref.to_owned());
    };
    // Browsers read `\` as `/` and drop blanks: refused before anything else is looked at.
    if raw.len() > 2048
        || raw
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || c == '\\')
    {
        return None;
    }
    let path_only = |p: &str| (p.starts_with('/') && !p.starts_with("//")).then(|| p.to_owned());
    if raw.starts_with('/') {
        return path_only(raw);
    }
    let target = http_url::parse(raw).ok()?;
    let base = http_url::parse(url).ok()?;
    // `https://cd@evil` has another host, but user info has no business here anyway.
    let has_userinfo = !target.username().is_empty() || target.password().is_some();
    if target.origin() != base.origin() || has_userinfo {
        return None;
    }
    // Paths come back with dot segments resolved (`/argocd/../x` is `/x`), so this holds.
    let prefix = base.path().trim_end_matches('/');
    let path = target.path();
    if !(prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"))) {
        return None;
    }
    match target.query() {
        Some(query) => path_only(&format!("{path}?{query}")),
        None => path_only(path),
    }
}

/// The login state cookie, under `<base href>auth` only.
fn state_cookie(scope: &CookieScope, value: &str, max_age: u64) -> String {
    let max_age = i64::try_from(max_age).unwrap_or(i64::MAX);
    scope.set_cookie(STATE_COOKIE, value, &format!("{}auth", scope.path), Some(max_age))
}

fn read_cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    cookie::sent(headers).find(|(k, _)| *k == name).map(|(_, v)| v)
}

/// `GET /auth/login?return_url=…&provider=…`: off to the provider (`provider` names one of
/// several; without it, the default one, as upstream's clients expect).
pub async fn login(
    State(state): State<Arc<ServerState>>,
    Scope(scope): Scope,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(params) = params(query.as_deref()) else {
        return page(StatusCode::BAD_REQUEST, BAD_RETURN_URL);
    };
    let current = match sso(&state, param(&params, "provider")) {
        Ok(c) => c,
        Err(response) => return *response,
    };
    let url = state.url();
    if url.is_empty() {
        tracing::error!("SSO login refused: `url` is not set in argocd-cm (nor --url)");
        return page(StatusCode::SERVICE_UNAVAILABLE, NO_URL);
    }
    let Some(return_to) = safe_return_url(param(&params, "return_url"), &url, &state.basehref) else {
        return page(StatusCode::BAD_REQUEST, BAD_RETURN_URL);
    };
    // The provider must answer before a login is recorded for it.
    if let Err(err) = current.provider.discovery().await {
        tracing::warn!(provider = %current.config.id, error = %err, "SSO login: the identity provider is unavailable");
        return page(StatusCode::BAD_GATEWAY, PROVIDER_DOWN);
    }
    let redirect_uri = format!("{}/auth/callback", url.trim_end_matches('/'));
    let key = state.auth.sealing_key(SEAL_PURPOSE, SEAL_KEY_ID);
    let begun = match LoginStates::begin(
        &key,
        return_to,
        redirect_uri.clone(),
        &current.config.id,
        state.clock.now_s(),
    ) {
        Ok(b) => b,
        Err(err) => {
            tracing::info!(reason = %err, "SSO login refused");
            return page(StatusCode::BAD_REQUEST, TOO_LONG);
        }
    };
    let set_state = state_cookie(&scope, &begun.cookie, LOGIN_TTL.as_secs());
    if set_state.len() > cookie::MAX_COOKIE_LENGTH {
        tracing::info!(
            len = set_state.len(),
            "SSO login refused: the state cookie would be too long"
        );
        return page(StatusCode::BAD_REQUEST, TOO_LONG);
    }
    let config = &current.config;
    let mut extra = Vec::new();
    if !config.id_token_claims.is_empty() {
        let claims = serde_json::json!({ "id_token": config.id_token_claims });
        extra.push(("claims", claims.to_string()));
    }
    if let Some(hint) = &config.domain_hint {
        extra.push(("domain_hint", hint.clone()));
    }
    let scopes = config.scopes();
    let request = AuthorizationRequest {
        client_id: &config.client_id,
        redirect_uri: &redirect_uri,
        scopes: &scopes,
        state: &begun.state,
        nonce: &begun.nonce,
        pkce_verifier: &begun.verifier,
        extra,
    };
    let location = match current.provider.authorization_url(request).await {
        Ok(location) => location,
        Err(err) => {
            tracing::warn!(error = %err, "SSO login: cannot build the authorization request");
            return page(StatusCode::BAD_GATEWAY, PROVIDER_DOWN);
        }
    };
    let mut response = see_other(&location);
    append_cookies(&mut response, &[set_state]);
    response
}

/// `GET /auth/callback?code=…&state=…`: the provider sends the browser back.
pub async fn callback(
    State(state): State<Arc<ServerState>>,
    Who(_, auth): Who,
    Scope(scope): Scope,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let clear_state = state_cookie(&scope, "", 0);
    let fail = |status: StatusCode, message: &'static str| {
        let mut response = page(status, message);
        append_cookies(&mut response, std::slice::from_ref(&clear_state));
        response
    };
    if !state.oidc.enabled() {
        return page(StatusCode::NOT_FOUND, SSO_OFF);
    }
    let Some(params) = params(query.as_deref()) else {
        return fail(StatusCode::BAD_REQUEST, BAD_CALLBACK);
    };
    let login_state = param(&params, "state");
    if param(&params, "error").is_some() {
        // The provider's error text is not shown: it arrives in the URL, so anyone can write it.
        // The browser's state cookie is cleared; nothing was kept anywhere else.
        tracing::info!("SSO login: the identity provider answered with an error");
        return fail(StatusCode::UNAUTHORIZED, REFUSED);
    }
    let (Some(login_state), Some(code)) = (login_state, param(&params, "code")) else {
        return fail(StatusCode::BAD_REQUEST, BAD_CALLBACK);
    };
    // The cookie must open under this server key and carry this state, unexpired and unused.
    let key = state.auth.sealing_key(SEAL_PURPOSE, SEAL_KEY_ID);
    let refused = |err: StateError| match err {
        StateError::Store(_) => {
            tracing::warn!(reason = %err, "SSO callback: the used login states cannot be checked");
            fail(StatusCode::SERVICE_UNAVAILABLE, STORE_DOWN)
        }
        _ => {
            tracing::info!(reason = %err, "SSO callback refused");
            fail(StatusCode::BAD_REQUEST, BAD_STATE)
        }
    };
    let pending = match LoginStates::open(
        &key,
        login_state,
        read_cookie(&headers, STATE_COOKIE),
        state.clock.now_s(),
    ) {
        Ok(p) => p,
        Err(err) => return refused(err),
    };
    // The login goes on with the provider it was sent to, and no other.
    let started_at = Some(pending.provider.as_str()).filter(|p| !p.is_empty());
    let current = match sso(&state, started_at) {
        Ok(c) => c,
        Err(response) => {
            tracing::info!(provider = %pending.provider, "SSO callback refused: the login's provider is no longer configured");
            return fail(response.status(), BAD_STATE);
        }
    };
    // RFC 9207: a provider that names itself in its answer must be the one the login went to
    // (a code from another provider is never sent to this one's token endpoint).
    if let Some(iss) = param(&params, "iss")
        && iss != current.config.issuer
    {
        tracing::info!(provider = %current.config.id, "SSO callback refused: the answer names another issuer");
        return fail(StatusCode::BAD_REQUEST, OTHER_PROVIDER);
    }
    // A replay is refused before the provider is asked anything.
    if let Err(err) = state.oidc.logins.check_unused(&pending).await {
        return refused(err);
    }
    let config = &current.config;
    let tokens = match current
        .provider
        .exchange_code(
            code,
            &pending.verifier,
            &pending.redirect_uri,
            &config.client_id,
            config.client_secret.as_deref(),
        )
        .await
    {
        Ok(t) => t,
        Err(err) => {
            tracing::warn!(error = %err, "SSO callback: the code exchange failed");
            return fail(StatusCode::BAD_GATEWAY, REFUSED);
        }
    };
    let Some(id_token) = tokens.id_token.filter(|t| !t.is_empty()) else {
        tracing::warn!("SSO callback: the token answer has no id_token (is `openid` among the scopes?)");
        return fail(StatusCode::BAD_GATEWAY, REFUSED);
    };
    // The same verification as for bearer ID tokens, plus this login's nonce.
    let audiences = [config.client_id.clone()];
    let expect = Expect {
        issuer: &config.issuer,
        audiences: &audiences,
        skip_audience_when_absent: false,
        nonce: Some(&pending.nonce),
        now: state.clock.now_s(),
    };
    let mut claims = match current.provider.verify(&id_token, &expect).await {
        Ok(c) => c,
        Err(err) => {
            tracing::warn!(error = %err, "SSO callback: the ID token failed verification");
            return fail(StatusCode::UNAUTHORIZED, BAD_TOKEN);
        }
    };
    // Only now, with a login the provider completed, is the state remembered as used: a
    // callback that fails earlier writes nothing. Of two racing callbacks, one passes.
    if let Err(err) = state.oidc.logins.mark_used(&pending).await {
        return refused(err);
    }
    if let Some(url) = config.user_info_url() {
        merge_user_info_groups(&current, &url, &tokens.access_token, &mut claims).await;
    }
    let who = crate::principal::SsoPrincipal::from_claims(Arc::new(claims.clone()), 0, None, None);
    let who = crate::oidc::of_provider(who, config);
    let token = match state.auth.sso_sessions.start(claims, id_token, &config.id).await {
        Ok(t) => {
            tracing::info!(user = %who.user, username = %who.username, provider = %config.id, "SSO login");
            t
        }
        Err(err) => {
            tracing::error!(error = %err, "SSO callback: cannot record the session");
            return fail(StatusCode::INTERNAL_SERVER_ERROR, SESSION_FAILED);
        }
    };
    let mut response = see_other(&pending.return_to);
    if super::cookies::write(
        &mut response,
        &scope,
        &SessionCookie::Set(token),
        auth.cookie_chunks,
    )
    .is_err()
    {
        return fail(StatusCode::INTERNAL_SERVER_ERROR, SESSION_FAILED);
    }
    append_cookies(&mut response, &[clear_state]);
    response
}

/// `enableUserInfoGroups`: the user-info endpoint's `groups` join the ID
/// token's (for providers that put groups only there). Its `sub` must match.
async fn merge_user_info_groups(current: &Current, url: &str, access: &str, claims: &mut Claims) {
    let sub = claims
        .get("sub")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    let groups = current
        .provider
        .user_info_groups(url, access, sub, &current.config.client_id)
        .await;
    let groups = match groups {
        Ok(Some(groups)) => groups,
        Ok(None) => return,
        Err(err) => {
            // Also when the answer is for another subject.
            tracing::warn!(error = %err, "SSO: cannot read groups from the user-info endpoint");
            return;
        }
    };
    let mut merged: Vec<serde_json::Value> = match claims.get("groups") {
        Some(serde_json::Value::Array(items)) => items.clone(),
        Some(serde_json::Value::String(s)) => vec![serde_json::Value::String(s.clone())],
        _ => Vec::new(),
    };
    let extra: Vec<serde_json::Value> = match &groups {
        serde_json::Value::Array(items) => items.clone(),
        serde_json::Value::String(s) => vec![serde_json::Value::String(s.clone())],
        _ => Vec::new(),
    };
    for g in extra {
        if g.is_string() && !merged.contains(&g) {
            merged.push(g);
        }
    }
    claims.insert("groups".to_owned(), serde_json::Value::Array(merged));
}

/// `/auth/logout` (GET or POST): ends the session, clears every cookie chunk,
/// and sends the browser on: to `logoutURL` (with `{{token}}` and
/// `{{logoutRedirectURL}}` filled in, URL-encoded), or to the provider's
/// `end_session_endpoint`, for an SSO session; to the dashboard otherwise.
pub async fn logout(
    State(state): State<Arc<ServerState>>,
    Who(caller, auth): Who,
    Scope(scope): Scope,
) -> Response {
    let sid = caller.principal.sso().and_then(|s| s.session.as_deref());
    let session = match sid {
        // A session that cannot be read now still ends; only the provider's logout is skipped.
        Some(sid) => state.auth.sso_sessions.get(sid).await.ok().flatten(),
        None => None,
    };
    if let Err(err) = state.auth.end_session(&caller).await {
        return err.into_response();
    }
    let mut location = state.basehref.clone();
    // The logout goes to the provider the session was started with.
    if let Some(session) = session
        && let Ok(current) = state
            .oidc
            .choose(Some(session.provider.as_str()).filter(|p| !p.is_empty()))
    {
        let id_token = &session.id_token;
        let back = origin(&state.url()).map(|o| format!("{o}{}", state.basehref));
        let back = back.unwrap_or_else(|| state.basehref.clone());
        let enc = |s: &str| utf8_percent_encode(s, COMPONENT).to_string();
        if let Some(template) = &current.config.logout_url {
            location = template
                .replace("{{token}}", &enc(id_token))
                .replace("{{logoutRedirectURL}}", &enc(&back));
        } else if let Ok(Some(end_session)) = current.provider.end_session_url(id_token, &back).await {
            location = end_session;
        }
    }
    let mut response = see_other(&location);
    // Clearing cannot fail.
    let _ = super::cookies::write(&mut response, &scope, &SessionCookie::Clear, auth.cookie_chunks);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_urls_stay_on_this_server() {
        let url = "https://cd.example.com";
        let ok = |raw: &str| safe_return_url(Some(raw), url, "/");
        assert_eq!(safe_return_url(None, url, "/").as_deref(), Some("/"));
        assert_eq!(ok("/applications?x=1").as_deref(), Some("/applications?x=1"));
        assert_eq!(ok("https://cd.example.com/apps/a").as_deref(), Some("/apps/a"));
        assert_eq!(ok("https://CD.example.com:443/").as_deref(), Some("/"));
        for bad in [
            "//evil.com",
            "/\\evil.com",
            "https://evil.com/",
            "https://cd.example.com.evil.com/",
            "https://cd.example.com@evil.com/",
            "http://cd.example.com/",
            "https://cd.example.com:8443/",
            "javascript:alert(1)",
            "/a\r\nSet-Cookie: x=1",
            "/ /",
            "evil.com",
            "https://evil.com\\@cd.example.com/",
            "https://cd.example.com\\@evil.com/",
            "https:\\\\evil.com/",
            "/\\/evil.com",
            "https://user@cd.example.com/",
            "https://user:pw@cd.example.com/",
            "https://evil.com%2f@cd.example.com/",
            "https://cd.example.com%2eevil.com/",
            "https://[::1]/",
            "data:text/html,x",
            "HTTPS://evil.com/",
            "https://cd.example.com./x",
            "https:cd.example.com/c",
            "https:/cd.example.com/c",
        ] {
            assert_eq!(ok(bad), None, "{bad}");
        }
        // The same origin however it is written; only the path and query come back.
        assert_eq!(ok("HTTPS://cd.EXAMPLE.com/x").as_deref(), Some("/x"));
        assert_eq!(ok("https://cd.example.com%2ecom/x"), None);
        assert_eq!(
            ok("https://cd.example.com/a%2Fb?q=%20#frag").as_deref(),
            Some("/a%2Fb?q=%20")
        );
        assert_eq!(ok("https://cd.example.com/a/../b").as_deref(), Some("/b"));
        let v6 = "https://[2001:db8::1]:8443/argocd";
        assert_eq!(
            safe_return_url(Some("https://[2001:DB8:0::1]:8443/argocd/apps"), v6, "/argocd/").as_deref(),
            Some("/argocd/apps")
        );
        assert_eq!(
            safe_return_url(Some("https://[2001:db8::2]:8443/argocd/apps"), v6, "/argocd/"),
            None
        );
        let prefixed = "https://cd.example.com/argocd";
        assert_eq!(
            safe_return_url(Some("https://cd.example.com/argocd/apps"), prefixed, "/argocd/").as_deref(),
            Some("/argocd/apps")
        );
        assert_eq!(
            safe_return_url(Some("https://cd.example.com/other"), prefixed, "/argocd/"),
            None
        );
        // Dot segments, also percent-encoded, cannot climb out of the prefix.
        for escape in [
            "https://cd.example.com/argocd/../other",
            "https://cd.example.com/argocd/%2e%2e/other",
            "https://cd.example.com/argocdx",
        ] {
            assert_eq!(
                safe_return_url(Some(escape), prefixed, "/argocd/"),
                None,
                "{escape}"
            );
        }
    }

    #[test]
    fn origins_of_the_external_url() {
        assert_eq!(
            origin("https://cd.example.com:443/argocd").as_deref(),
            Some("https://cd.example.com")
        );
        assert_eq!(origin("http://[::1]:8080/").as_deref(), Some("http://[::1]:8080"));
        assert_eq!(origin("not a url"), None);
    }
}
