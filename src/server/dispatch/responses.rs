//! Responses the dispatcher makes itself, before any service runs.

use axum::body::Body;
use http::header::{CONTENT_TYPE, LOCATION};
use http::{HeaderValue, Response, StatusCode};

use crate::error::{AppError, rest_error};
use crate::server::protocol::Protocol;

pub fn grpc_error(code: tonic::Code, message: &str) -> Response<Body> {
    tonic::Status::new(code, message).into_http::<Body>()
}

/// A request refused from its headers (its body is never read), in its protocol's form: for
/// credentials that disagree, a connection beyond `--max-connections`, or a rate limit (whose
/// `Retry-After` the error table adds, as a header on every protocol).
pub(super) fn refusal(protocol: Protocol, headers: &http::HeaderMap, err: AppError) -> Response<Body> {
    match protocol {
        Protocol::Grpc => tonic::Status::from(err).into_http::<Body>(),
        Protocol::GrpcWeb => {
            // A trailers-only answer, in the gRPC-Web media type the client sent.
            let mut response = tonic::Status::from(err).into_http::<Body>();
            if let Some(media) = crate::server::protocol::media_type(headers)
                && let Ok(value) = HeaderValue::from_str(&media)
            {
                response.headers_mut().insert(CONTENT_TYPE, value);
            }
            response
        }
        Protocol::Rest | Protocol::Ui => axum::response::IntoResponse::into_response(err),
    }
}

pub(super) fn redirect(location: &str) -> Response<Body> {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::TEMPORARY_REDIRECT;
    if let Ok(v) = HeaderValue::from_str(location) {
        response.headers_mut().insert(LOCATION, v);
    }
    response
}

pub(super) fn not_found() -> Response<Body> {
    rest_error(tonic::Code::NotFound, StatusCode::NOT_FOUND, "Not Found")
}
