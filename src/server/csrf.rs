//! CSRF defence for REST: a state-changing call that a browser could have
//! sent cross-site (anything not authenticated by a bearer token) must carry
//! an allowed `Content-Type`. A cross-site form or `fetch` without CORS
//! preflight can only send `text/plain`, form or multipart bodies, so it is
//! refused before any handler runs. The media type is compared without
//! parameters (`application/json; charset=utf-8` is JSON).
//!
//! The dispatcher asks [`refusal`] once it knows who is calling, before the
//! router: a plain function call rather than a middleware layer, which would
//! box every REST request's future, safe ones included.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method};

use super::protocol::media_type;
use crate::error::AppError;

/// The response that refuses the call, or `None` to let it through.
///
/// `verified_bearer`: the caller authenticated with a bearer token that
/// verified. A browser cannot be made to send one, but anyone can send a
/// bogus one, so only a valid token exempts the call.
pub fn refusal(
    allowed: &[String],
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    verified_bearer: bool,
) -> Option<Response> {
    let safe = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if safe || verified_bearer || allowed.is_empty() || !path.starts_with("/api/") {
        return None;
    }
    let media = media_type(headers);
    if media.as_deref().is_some_and(|m| allowed.iter().any(|a| a == m)) {
        return None;
    }
    Some(
        AppError::UnsupportedMediaType(format!(
            "unsupported content type {}: use {}",
            media
                .as_deref()
                .map_or_else(|| "(none)".to_owned(), |m| format!("{m:?}")),
            allowed.join(" or ")
        ))
        .into_response(),
    )
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use http::header::CONTENT_TYPE;

    use super::*;

    fn check(method: Method, path: &str, content_type: Option<&'static str>, bearer: bool) -> Option<u16> {
        let allowed = ["application/json".to_owned()];
        let mut headers = HeaderMap::new();
        if let Some(ct) = content_type {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        refusal(&allowed, &method, path, &headers, bearer).map(|r| r.status().as_u16())
    }

    #[test]
    fn state_changing_api_calls_need_an_allowed_media_type() {
        assert_eq!(check(Method::POST, "/api/v1/session", None, false), Some(415));
        assert_eq!(
            check(Method::POST, "/api/v1/session", Some("text/plain"), false),
            Some(415)
        );
        assert_eq!(
            check(
                Method::PUT,
                "/api/v1/account/password",
                Some("application/x-www-form-urlencoded"),
                false
            ),
            Some(415)
        );
        assert_eq!(
            check(
                Method::POST,
                "/api/v1/session",
                Some("application/json; charset=utf-8"),
                false
            ),
            None
        );
        assert_eq!(
            check(Method::DELETE, "/api/v1/session", Some("Application/JSON"), false),
            None
        );
    }

    #[test]
    fn safe_methods_verified_bearers_and_other_paths_pass() {
        assert_eq!(check(Method::GET, "/api/v1/applications", None, false), None);
        assert_eq!(
            check(Method::HEAD, "/api/version", Some("text/plain"), false),
            None
        );
        assert_eq!(
            check(Method::POST, "/api/v1/applications", Some("text/plain"), true),
            None
        );
        assert_eq!(check(Method::POST, "/auth/logout", None, false), None);
        let unchecked = refusal(&[], &Method::POST, "/api/v1/session", &HeaderMap::new(), false);
        assert!(unchecked.is_none());
    }
}
