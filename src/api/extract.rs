//! Extractors shared by the HTTP handlers: the caller, how they
//! authenticated, and the scope of their session cookie.

use axum::extract::FromRequestParts;
use http::request::Parts;

use crate::auth::cookie::CookieScope;
pub use crate::principal::AuthInfo;
use crate::principal::{Caller, ClientScheme, RequestContext};

/// The caller of this request (anonymous if the dispatcher did not say).
pub struct Who(pub Caller, pub AuthInfo);

impl<S: Send + Sync> FromRequestParts<S> for Who {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let caller = RequestContext::caller_of(&parts.extensions);
        let info = parts
            .extensions
            .get::<RequestContext>()
            .map(|c| c.auth)
            .unwrap_or_default();
        Ok(Self(caller, info))
    }
}

/// Session cookies are scoped to the base href and `Secure` whenever the
/// client reached us over https (directly or through a trusted proxy).
pub struct Scope(pub CookieScope);

impl FromRequestParts<std::sync::Arc<crate::state::ServerState>> for Scope {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &std::sync::Arc<crate::state::ServerState>,
    ) -> Result<Self, Self::Rejection> {
        let scheme = parts
            .extensions
            .get::<RequestContext>()
            .map_or(ClientScheme::Http, |c| c.scheme);
        Ok(Self(CookieScope::new(&state.basehref, scheme)))
    }
}
