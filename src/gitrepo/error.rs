//! What can go wrong when tiphys reads a repository, in fixed words. The library's and the
//! `ssh` program's own messages are only classified, never passed on: they may quote a URL
//! with its credentials, a key file path, or the server's banner.

use std::time::Duration;

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum GitError {
    #[error("authentication to {host} failed: check the repository's credentials")]
    Auth { host: String },
    #[error(
        "the TLS certificate of {host} is not trusted: add its CA certificate, or mark the repository insecure"
    )]
    Certificate { host: String },
    #[error("{host} did not accept the TLS client certificate")]
    ClientCertificate { host: String },
    #[error("{host} refused the request (HTTP 400); it may require a TLS client certificate")]
    BadRequest { host: String },
    #[error("the TLS client certificate or key of the repository cannot be read")]
    BadClientCertificate,
    #[error(
        "the SSH host key of {host} is not known: add it to the known hosts, or mark the repository insecure"
    )]
    UnknownHostKey { host: String },
    #[error("the SSH host key of {host} does not match the known one")]
    ChangedHostKey { host: String },
    #[error("the repository's SSH private key cannot be used")]
    BadPrivateKey,
    #[error("{host} cannot be reached")]
    Unreachable { host: String },
    #[error("no repository at this URL on {host}")]
    NoRepository { host: String },
    #[error("{host} did not answer {}", in_time(*.after))]
    Timeout {
        host: String,
        /// The deadline that ran out; zero when the transport's own timeout fired.
        after: Duration,
    },
    #[error("the repository on {host} is larger than the limit of {limit} bytes")]
    TooLarge { host: String, limit: u64 },
    #[error("too many repository fetches are running; try again (while reaching {host})")]
    Busy { host: String },
    #[error("revision {revision:?} not found in the repository on {host}")]
    NoRevision { host: String, revision: String },
    #[error("the repository URL is not supported: use https, http, ssh or git")]
    UnsupportedUrl,
    #[error(
        "SSH repositories need the OpenSSH client, and this server has no `ssh` on its PATH (or no /bin/sh): \
         install openssh-client, or run the tiphys image with ssh (Containerfile.ssh)"
    )]
    NoSshProgram,
    #[error("reading the repository on {host} failed")]
    Failed { host: String },
    #[error("this server does not contact repositories (--repo-access off)")]
    Disabled,
}

fn in_time(after: Duration) -> String {
    if after.is_zero() {
        "in time".to_owned()
    } else {
        format!("within {}s", after.as_secs())
    }
}

/// Which kind of failure `text` (a library error chain or the `ssh` program's output,
/// lower-cased) describes. Order matters: the most specific first.
pub fn classify(text: &str, host: &str) -> GitError {
    // The raw text helps whoever runs the server; URLs in it carry no password (tiphys refuses
    // such URLs), and any userinfo is masked all the same.
    tracing::debug!(host, error = ?crate::urlmask::mask(text), "repository call failed");
    let host = host.to_owned();
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    if has(&[
        "remote host identification has changed",
        "host key for",
        "host key verification failed: changed",
    ]) && text.contains("changed")
    {
        GitError::ChangedHostKey { host }
    } else if has(&[
        "host key verification failed",
        "no ed25519 host key is known",
        "no rsa host key is known",
        "no ecdsa host key is known",
        "host key is not known",
    ]) {
        GitError::UnknownHostKey { host }
    } else if has(&[
        "invalid format",
        "load key",
        "bad permissions",
        "invalid privatekey",
        "error in libcrypto",
    ]) {
        GitError::BadPrivateKey
    } else if has(&[
        // Before the credentials: an untrusted server is never the password's fault.
        "unknownissuer",
        "unknown issuer",
        "invalid peer certificate",
        "certificate verify",
        "badsignature",
        "notvalidforname",
        "not valid for name",
        "certificate has expired",
        "certificate expired",
        "certificateexpired",
    ]) {
        GitError::Certificate { host }
    } else if has(&[
        "permission denied",
        "authentication",
        "unauthorized",
        "credentials",
    ]) || has_status(text, "401")
        || has_status(text, "403")
    {
        GitError::Auth { host }
    } else if has(&[
        "certificate required",
        "certificaterequired",
        "handshake failure",
        "handshakefailure",
        "alert received",
    ]) {
        GitError::ClientCertificate { host }
    } else if has(&["timed out", "timeout"]) {
        GitError::Timeout {
            host,
            after: Duration::ZERO,
        }
    } else if has(&[
        "connection refused",
        "could not resolve",
        "dns error",
        "failed to lookup",
        "no route to host",
        "network is unreachable",
        "connection reset",
        "broken pipe",
        "error trying to connect",
        "could not connect",
        "connection closed",
    ]) {
        GitError::Unreachable { host }
    } else if has(&["http status 400", "400 bad request"]) {
        GitError::BadRequest { host }
    } else if has_status(text, "404")
        || has(&[
            "not found",
            "does not appear to be a git repository",
            "repository not exported",
            "not a git repository",
            "no such file",
        ])
    {
        GitError::NoRepository { host }
    } else {
        GitError::Failed { host }
    }
}

/// Whether `text` holds the HTTP status `code` as a number of its own. A bare substring test
/// would find "401" in a port such as 127.0.0.1:40123, and so blame the credentials for an
/// untrusted certificate whenever the kernel picked such a port.
fn has_status(text: &str, code: &str) -> bool {
    text.match_indices(code).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + code.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}
