//! The session cookie on REST answers: set at login, cleared at logout, replaced when a
//! session is renewed. One writer for every answer that touches it.

use axum::response::Response;
use http::HeaderValue;
use http::header::SET_COOKIE;

use crate::auth::cookie::CookieScope;
use crate::error::AppError;
use crate::service::SessionCookie;

/// Adds the `Set-Cookie` headers that do `cookie` to `response`; `sent` is how many
/// `argocd.token*` chunks the request carried (all of them are replaced or expired).
pub fn write(
    response: &mut Response,
    scope: &CookieScope,
    cookie: &SessionCookie,
    sent: usize,
) -> Result<(), AppError> {
    let lines = match cookie {
        SessionCookie::Set(token) => scope
            .set(token, sent)
            .map_err(|e| AppError::InvalidArgument(e.to_string()))?,
        SessionCookie::Clear => scope.clear(sent),
    };
    append(response, &lines);
    Ok(())
}

/// Adds `Set-Cookie` header lines as they are.
pub fn append(response: &mut Response, lines: &[String]) {
    for line in lines {
        if let Ok(value) = HeaderValue::from_str(line) {
            response.headers_mut().append(SET_COOKIE, value);
        }
    }
}
