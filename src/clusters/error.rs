//! Why a cluster could not be used, in words a user acts on: its certificate, a refused
//! connection, credentials it does not accept, an identity without rights, a provider that
//! failed, a bound that passed. Messages name the cluster's server and never its credentials.

use std::error::Error as _;
use std::time::Duration;

use super::exec::ExecError;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ClusterError {
    /// The stored settings cannot be used as they are.
    #[error("the cluster's configuration cannot be used: {0}")]
    Config(String),
    #[error("{0}")]
    Exec(#[from] ExecError),
    #[error("the TLS handshake failed: {0}")]
    Certificate(String),
    #[error("the connection was refused: {0}")]
    Refused(String),
    #[error("the cluster is unreachable: {0}")]
    Unreachable(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// 401: the token expired, was revoked, or was never valid.
    #[error(
        "the cluster does not accept the credentials (401 Unauthorized: the token may have expired or been revoked): {0}"
    )]
    Unauthorized(String),
    /// 403.
    #[error("the credentials' identity may not do this (403 Forbidden): {0}")]
    Forbidden(String),
    #[error("the cluster answered {code}: {message}")]
    Refusal { code: u16, message: String },
    /// tiphys runs in no cluster it can reach for `https://kubernetes.default.svc`.
    #[error("{0}")]
    NoInCluster(String),
}

impl ClusterError {
    /// An error of kube-rs, read down its chain of causes.
    pub fn from_kube(err: &kube::Error) -> Self {
        if let kube::Error::Api(status) = err {
            let message = status.message.clone();
            return match status.code {
                401 => Self::Unauthorized(message),
                403 => Self::Forbidden(message),
                code => Self::Refusal { code, message },
            };
        }
        let mut cause = err.source();
        let mut deepest = err.to_string();
        // Bounded: chains are a handful of links.
        for _ in 0..32 {
            let Some(c) = cause else { break };
            if let Some(tls) = c.downcast_ref::<rustls::Error>() {
                return Self::Certificate(tls.to_string());
            }
            if let Some(io) = c.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::ConnectionRefused
            {
                return Self::Refused(io.to_string());
            }
            deepest = c.to_string();
            cause = next_link(c);
        }
        Self::Unreachable(deepest)
    }

    /// The message with `secret` (a token, a password) masked wherever it appears: errors of
    /// other libraries are not trusted to leave it out.
    pub fn message_without(&self, secrets: &[&str]) -> String {
        let mut text = self.to_string();
        for secret in secrets.iter().filter(|s| s.len() >= 4) {
            text = text.replace(secret, "<redacted>");
        }
        text
    }
}

/// The error `err` wraps. An io::Error's `source()` skips the error it carries, and rustls's
/// errors reach hyper carried in one: that one is the next link.
fn next_link<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(inner) = err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        return Some(inner);
    }
    err.source()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_named_by_their_code() {
        let status = |code: u16| {
            kube::Error::Api(Box::new(
                kube::core::Status::failure("no", "Reason").with_code(code),
            ))
        };
        assert!(matches!(
            ClusterError::from_kube(&status(401)),
            ClusterError::Unauthorized(_)
        ));
        assert!(matches!(
            ClusterError::from_kube(&status(403)),
            ClusterError::Forbidden(_)
        ));
        assert!(matches!(
            ClusterError::from_kube(&status(500)),
            ClusterError::Refusal { code: 500, .. }
        ));
        let masked = ClusterError::Unreachable("bad token abcd1234 here".to_owned())
            .message_without(&["abcd1234", ""]);
        assert_eq!(masked, "the cluster is unreachable: bad token <redacted> here");
    }
}
