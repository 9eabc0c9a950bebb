//! What a failed etcd call means for a retry, and the error a caller sees.

use std::error::Error as _;

use etcd_client::Error;
use tonic::Code;

use crate::store::StoreError;

/// How a failed call may be retried.
#[derive(Debug)]
pub(super) enum Failure {
    /// The request never reached a member that could apply it (no connection, the member has
    /// no leader): any call may be retried.
    NotSent(String),
    /// The request may or may not have been applied (connection lost mid-call, leader changed,
    /// timeout): reads and conditional writes may be retried, unconditional writes may not.
    Unsure(String),
    /// Retrying cannot help.
    Fatal(StoreError),
}

/// Classifies an error of the client; `endpoints` names the cluster in messages.
pub(super) fn classify(err: &Error, endpoints: &str) -> Failure {
    let text = chain(err);
    let status = match err {
        Error::GRpcStatus(status) => status,
        Error::TransportError(_) | Error::IoError(_) => return transport(text),
        Error::InvalidArgs(_) | Error::InvalidUri(_) | Error::InvalidMetadataValue(_) => {
            return Failure::Fatal(StoreError::Invalid(format!("etcd client: {text}")));
        }
        _ => return Failure::Unsure(text),
    };
    let message = status.message();
    match status.code() {
        Code::Unavailable if message.contains("no leader") => Failure::NotSent(text),
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded => transport(text),
        Code::InvalidArgument if message.contains("authentication failed") => {
            Failure::Fatal(StoreError::Unavailable(format!(
                "etcd at {endpoints} refused the credentials: {message} (check the etcd username \
                 and password file)"
            )))
        }
        Code::InvalidArgument if message.contains("user name is empty") => {
            Failure::Fatal(StoreError::Unavailable(format!(
                "etcd at {endpoints} denied access: it requires authentication (give the etcd \
                 username and password file)"
            )))
        }
        Code::Unauthenticated | Code::PermissionDenied => Failure::Fatal(StoreError::Unavailable(format!(
            "etcd at {endpoints} denied access: {message} (check the etcd user and its role's \
                 permissions on the prefix)"
        ))),
        Code::OutOfRange if message.contains("compacted") => {
            Failure::Fatal(StoreError::Unavailable(format!("etcd at {endpoints}: {message}")))
        }
        Code::InvalidArgument | Code::FailedPrecondition | Code::ResourceExhausted => Failure::Fatal(
            StoreError::Invalid(format!("etcd refused the request: {message}")),
        ),
        _ => Failure::Unsure(text),
    }
}

/// A transport-level failure: a refused or failed connection was never sent.
fn transport(text: String) -> Failure {
    const NOT_SENT: [&str; 5] = [
        "tcp connect error",
        "Connection refused",
        "error trying to connect",
        "dns error",
        "invalid peer certificate",
    ];
    if NOT_SENT.iter().any(|s| text.contains(s)) {
        Failure::NotSent(text)
    } else {
        Failure::Unsure(text)
    }
}

/// The error and its sources in one line: tonic puts the useful part (refused, TLS) deep down,
/// and a transport error of etcd_client does not give the one it wraps as its source.
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = match err {
        Error::TransportError(e) => e.source(),
        _ => err.source(),
    };
    while let Some(e) = source {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = e.source();
    }
    text
}

/// The error of a call that kept failing until its retry window closed.
pub(super) fn unavailable(endpoints: &str, what: &str, last: &str) -> StoreError {
    let hint = if last.contains("certificate") || last.contains("tls handshake") {
        " (TLS handshake failed: check the etcd CA and client certificate)"
    } else {
        ""
    };
    StoreError::Unavailable(format!("etcd at {endpoints} did not answer {what}: {last}{hint}"))
}
