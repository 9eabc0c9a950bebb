//! The security headers every response carries (HSTS over TLS, frame and content-type
//! options, and the dashboard's content security policy on HTML).

use axum::body::Body;
use http::header::{
    CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use http::{HeaderValue, Response};

use super::Dispatcher;
use crate::principal::ClientScheme;

impl Dispatcher {
    pub(super) fn add_security_headers(&self, response: &mut Response<Body>, scheme: ClientScheme) {
        let is_html = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/html"));
        let headers = response.headers_mut();
        headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
        if scheme == ClientScheme::Https {
            headers.insert(
                STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static("max-age=31536000"),
            );
        }
        if is_html {
            let h = &self.html_headers;
            if let Ok(v) = HeaderValue::from_str(&h.content_security_policy)
                && !h.content_security_policy.is_empty()
            {
                headers.insert(CONTENT_SECURITY_POLICY, v);
            }
            if let Ok(v) = HeaderValue::from_str(&h.x_frame_options)
                && !h.x_frame_options.is_empty()
            {
                headers.insert(X_FRAME_OPTIONS, v);
            }
        }
    }
}
