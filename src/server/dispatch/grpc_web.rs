//! Fix-ups around tonic and tonic-web so their answers read as grpc-go's do: the gRPC-Web
//! media type, and the status codes of an oversized message and of bad base64.

use axum::body::Body;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Request, Response};

use crate::server::protocol::{GRPC_MESSAGE, GRPC_STATUS};

/// `application/grpc-web+proto; charset=…` → `application/grpc-web+proto`:
/// tonic-web matches the media type exactly. tonic-web also picks the
/// response encoding from `Accept` alone; a text request from a client that
/// does not say what it accepts gets a text response, as the protocol intends.
pub(crate) fn normalize_grpc_web_content_type<B>(req: &mut Request<B>) {
    let Some(media) = crate::server::protocol::media_type(req.headers()) else {
        return;
    };
    let accepts_grpc_web = req
        .headers()
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/grpc-web"));
    if media.starts_with("application/grpc-web-text") && !accepts_grpc_web {
        req.headers_mut()
            .insert(ACCEPT, HeaderValue::from_static("application/grpc-web-text"));
    }
    if let Ok(value) = HeaderValue::from_str(&media) {
        req.headers_mut().insert(CONTENT_TYPE, value);
    }
}

/// tonic reports a request message above the size limit as OUT_OF_RANGE; gRPC
/// (and grpc-go, which Argo CD's clients know) says RESOURCE_EXHAUSTED.
pub(super) fn fix_message_size_status(response: &mut Response<Body>) {
    let headers = response.headers_mut();
    let too_large = headers.get(GRPC_STATUS).is_some_and(|v| v == "11")
        && headers
            .get(GRPC_MESSAGE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|m| {
                m.contains("message%20length%20too%20large") || m.contains("message length too large")
            });
    if too_large {
        headers.insert(GRPC_STATUS, HeaderValue::from_static("8"));
    }
}

/// tonic-web reports a gRPC-Web text body that is not base64 as INTERNAL ("tonic-web: Invalid
/// symbol …", "tonic-web: malformed base64 request"): the client sent it, so it is
/// INVALID_ARGUMENT, with a message that says what was wrong.
pub(super) fn fix_bad_base64_status(response: &mut Response<Body>) {
    let headers = response.headers_mut();
    let detail = headers
        .get(GRPC_MESSAGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|m| m.strip_prefix("tonic-web:%20"))
        .filter(|m| m.starts_with("Invalid%20") || m.starts_with("malformed%20base64"))
        .map(str::to_owned);
    let Some(detail) = detail.filter(|_| headers.get(GRPC_STATUS).is_some_and(|v| v == "13")) else {
        return;
    };
    let message = format!("malformed%20gRPC-Web%20text%20body:%20not%20valid%20base64%20({detail})");
    if let Ok(value) = HeaderValue::from_str(&message) {
        headers.insert(GRPC_STATUS, HeaderValue::from_static("3"));
        headers.insert(GRPC_MESSAGE, value);
    }
}
