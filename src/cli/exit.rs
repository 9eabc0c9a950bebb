//! Exit codes of the client commands, so that scripts can tell the common
//! failures apart without parsing messages:
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | any other failure (cannot connect, server error, some `apply` objects failed) |
//! | 2 | the command line itself is wrong (clap's usage error) |
//! | 3 | invalid input: a malformed file or flag, or the server said `InvalidArgument` |
//! | 4 | permission denied, or not logged in (`PermissionDenied`, `Unauthenticated`) |
//! | 5 | not found (`NotFound`) |
//! | 6 | conflict with the current state (`AlreadyExists`, `FailedPrecondition`, `Aborted`) |
//! | 7 | unavailable: the server did not answer in time (`--connect-timeout`, `--request-timeout`, `DeadlineExceeded`) |

use std::process::ExitCode;

/// What kind of failure a command ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Invalid,
    Denied,
    NotFound,
    Conflict,
    Unavailable,
}

impl Kind {
    pub fn code(self) -> u8 {
        match self {
            Kind::Invalid => 3,
            Kind::Denied => 4,
            Kind::NotFound => 5,
            Kind::Conflict => 6,
            Kind::Unavailable => 7,
        }
    }

    /// The kind of a gRPC status, if it is one of ours.
    pub fn of_status(code: tonic::Code) -> Option<Kind> {
        use tonic::Code;
        match code {
            Code::InvalidArgument | Code::OutOfRange => Some(Kind::Invalid),
            Code::PermissionDenied | Code::Unauthenticated => Some(Kind::Denied),
            Code::NotFound => Some(Kind::NotFound),
            Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => Some(Kind::Conflict),
            Code::DeadlineExceeded => Some(Kind::Unavailable),
            _ => None,
        }
    }
}

/// A failure with a kind; its message is all that is printed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
}

/// An error for invalid input found by the client (exit code 3).
pub fn invalid(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        kind: Kind::Invalid,
        message: message.into(),
    })
}

/// The kind of an error, looked up along its chain of causes.
pub fn kind_of(err: &anyhow::Error) -> Option<Kind> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<Failure>())
        .map(|f| f.kind)
}

/// The exit code for a failed command.
/// Whether `err` is a write to an output whose reader has gone (a broken pipe).
pub fn closed_output(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

pub fn code(err: &anyhow::Error) -> ExitCode {
    match kind_of(err) {
        Some(kind) => ExitCode::from(kind.code()),
        None => ExitCode::FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn kinds_are_found_through_context() {
        let err = Err::<(), _>(invalid("bad")).context("while reading").unwrap_err();
        assert_eq!(kind_of(&err), Some(Kind::Invalid));
        assert_eq!(format!("{err:#}"), "while reading: bad");
        assert_eq!(kind_of(&anyhow::anyhow!("plain")), None);
        assert_eq!(Kind::of_status(tonic::Code::NotFound), Some(Kind::NotFound));
        assert_eq!(Kind::of_status(tonic::Code::Unavailable), None);
    }
}
