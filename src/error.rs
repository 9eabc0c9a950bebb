//! The one error table: every client-meaningful error kind maps to exactly
//! one gRPC code and one HTTP status. Internal causes are logged once, here,
//! and never sent to the caller.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthenticated(String),
    /// Refused for what the caller may do (403). Only the authorizer makes one: see [`Denied`].
    #[error("{0}")]
    PermissionDenied(Denied),
    /// A request or message larger than the configured limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// A write based on a stale version (optimistic concurrency).
    #[error("{0}")]
    Aborted(String),
    /// Too many attempts: retry after the given time.
    #[error("{0}")]
    Throttled(String, std::time::Duration),
    /// The caller sent more requests than its rate limit (`tiphys.ratelimit.*`) lets through:
    /// retry after the given time.
    #[error("{0}")]
    RateLimited(String, std::time::Duration),
    /// The caller holds too much of something at once (open watches).
    #[error("{0}")]
    Exhausted(String),
    /// A state-changing REST call without an allowed content type (CSRF defence).
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unimplemented(String),
    #[error("{0}")]
    Unavailable(String),
    /// What a service tiphys called (the repo server) refused, passed on with its gRPC code.
    /// Made by [`AppError::peer`], which never lets a peer's code read as a denial.
    #[error("{1}")]
    Peer(tonic::Code, String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl AppError {
    /// The table. Exhaustive on purpose: a new variant must choose its codes.
    pub fn codes(&self) -> (tonic::Code, StatusCode) {
        use tonic::Code;
        match self {
            Self::InvalidArgument(_) => (Code::InvalidArgument, StatusCode::BAD_REQUEST),
            Self::NotFound(_) => (Code::NotFound, StatusCode::NOT_FOUND),
            Self::Unauthenticated(_) => (Code::Unauthenticated, StatusCode::UNAUTHORIZED),
            Self::PermissionDenied(_) => (Code::PermissionDenied, StatusCode::FORBIDDEN),
            Self::PayloadTooLarge(_) => (Code::ResourceExhausted, StatusCode::PAYLOAD_TOO_LARGE),
            Self::FailedPrecondition(_) => (Code::FailedPrecondition, StatusCode::BAD_REQUEST),
            Self::AlreadyExists(_) => (Code::AlreadyExists, StatusCode::CONFLICT),
            Self::Aborted(_) => (Code::Aborted, StatusCode::CONFLICT),
            Self::Throttled(..) | Self::RateLimited(..) | Self::Exhausted(_) => {
                (Code::ResourceExhausted, StatusCode::TOO_MANY_REQUESTS)
            }
            Self::UnsupportedMediaType(_) => (Code::InvalidArgument, StatusCode::UNSUPPORTED_MEDIA_TYPE),
            Self::Unimplemented(_) => (Code::Unimplemented, StatusCode::NOT_IMPLEMENTED),
            Self::Unavailable(_) => (Code::Unavailable, StatusCode::SERVICE_UNAVAILABLE),
            Self::Peer(code, _) => (*code, http_status_of(*code)),
            Self::Internal(_) => (Code::Internal, StatusCode::INTERNAL_SERVER_ERROR),
        }
    }

    /// Seconds a throttled caller should wait, rounded up.
    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Throttled(_, wait) | Self::RateLimited(_, wait) => {
                Some(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
            }
            _ => None,
        }
    }

    fn log_internal(&self) {
        if let Self::Internal(cause) = self {
            tracing::error!(error = format!("{cause:#}"), "internal error");
        }
    }
}

impl AppError {
    /// A peer's refusal with its code, except that PERMISSION_DENIED and UNAUTHENTICATED (about
    /// tiphys's own standing with the peer, never the caller's) become FAILED_PRECONDITION: a
    /// denial of the caller is only ever the authorizer's, and audited.
    pub fn peer(code: tonic::Code, message: String) -> Self {
        match code {
            tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
                Self::Peer(tonic::Code::FailedPrecondition, message)
            }
            code => Self::Peer(code, message),
        }
    }
}

/// The HTTP status grpc-gateway gives a gRPC code (its `HTTPStatusFromCode`), for codes
/// passed on from a peer.
fn http_status_of(code: tonic::Code) -> StatusCode {
    use tonic::Code;
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The message of a permission denial that has been recorded: its audit line written and
/// counted. The audit trail writes no line of its own for a `PermissionDenied` (it cannot
/// tell what was checked), so a denial that skipped the recording would leave no trace.
/// Hence the private field: the one way to make a `Denied` is [`Denied::once_recorded`], and
/// `tests/inproc/denials.rs` fails if anything but the authorizer (`src/rbac/mod.rs`, after
/// recording) calls it. Not `Clone` either: a copy would be a second, unrecorded denial.
/// (The authorizer lives above this leaf module, so the rule is checked, not typed.)
#[derive(Debug)]
pub struct Denied {
    message: String,
}

impl Denied {
    /// Only for `Rbac::deny` and `Rbac::refuse`, once they have written the audit line and
    /// counted the denial; anything else asks `service::access`.
    #[doc(hidden)]
    pub fn once_recorded(message: String) -> Self {
        Self { message }
    }
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Argo CD's REST error body (grpc-gateway v1): `{"error","code","message"}`,
/// where `code` is the numeric gRPC code.
#[derive(Serialize)]
pub struct ErrorBody<'a> {
    pub error: &'a str,
    pub code: i32,
    pub message: &'a str,
}

/// Builds a REST error response from a gRPC code, HTTP status and message.
pub fn rest_error(code: tonic::Code, status: StatusCode, message: &str) -> Response {
    let body = ErrorBody {
        error: message,
        code: code as i32,
        message,
    };
    (status, axum::Json(body)).into_response()
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        self.log_internal();
        let (code, status) = self.codes();
        let mut response = rest_error(code, status, &self.to_string());
        if let Some(secs) = self.retry_after() {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs.max(1)));
        }
        response
    }
}

impl From<AppError> for tonic::Status {
    fn from(err: AppError) -> Self {
        err.log_internal();
        let (code, _) = err.codes();
        let mut status = tonic::Status::new(code, err.to_string());
        if let Some(secs) = err.retry_after() {
            status.metadata_mut().insert("retry-after", secs.max(1).into());
        }
        status
    }
}

/// An error with its causes, for messages about outbound connections: hyper-util's
/// "client error (Connect)" alone says nothing.
pub fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_never_makes_a_denial() {
        for code in [tonic::Code::PermissionDenied, tonic::Code::Unauthenticated] {
            let status = tonic::Status::from(AppError::peer(code, "no".to_owned()));
            assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        }
        let status = tonic::Status::from(AppError::peer(tonic::Code::NotFound, "gone".to_owned()));
        assert_eq!((status.code(), status.message()), (tonic::Code::NotFound, "gone"));
    }

    #[test]
    fn internal_cause_is_never_sent() {
        let err = AppError::Internal(anyhow::anyhow!("disk /secret/path failed"));
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(status.message(), "internal error");
    }

    #[test]
    fn a_rate_limit_says_when_to_retry_on_both_transports() {
        let wait = std::time::Duration::from_millis(1500);
        let response = AppError::RateLimited("slow down".into(), wait).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "2");
        let status = tonic::Status::from(AppError::RateLimited("slow down".into(), wait));
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(status.metadata().get("retry-after").unwrap(), "2");
    }

    #[test]
    fn table_matches_grpc_gateway_statuses() {
        let cases = [
            (AppError::NotFound(String::new()), 404, tonic::Code::NotFound),
            (
                AppError::Unauthenticated(String::new()),
                401,
                tonic::Code::Unauthenticated,
            ),
            (
                AppError::PermissionDenied(Denied::once_recorded(String::new())),
                403,
                tonic::Code::PermissionDenied,
            ),
            (
                AppError::InvalidArgument(String::new()),
                400,
                tonic::Code::InvalidArgument,
            ),
            (
                AppError::Unimplemented(String::new()),
                501,
                tonic::Code::Unimplemented,
            ),
            (
                AppError::Unavailable(String::new()),
                503,
                tonic::Code::Unavailable,
            ),
            (
                AppError::RateLimited(String::new(), std::time::Duration::from_millis(1)),
                429,
                tonic::Code::ResourceExhausted,
            ),
        ];
        for (err, http, grpc) in cases {
            let (code, status) = err.codes();
            assert_eq!((code, status.as_u16()), (grpc, http), "{err:?}");
        }
    }
}
