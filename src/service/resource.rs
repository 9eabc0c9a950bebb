//! What every resource use case shares: registry errors in the error table, resourceVersion
//! parsing, URL scheme checks. (Name, label and annotation checks are in `limits.rs`.)

use crate::error::AppError;
use crate::registry::RegistryError;
use crate::store::StoreError;

impl From<RegistryError> for AppError {
    fn from(err: RegistryError) -> Self {
        match err {
            RegistryError::NotFound(key) => {
                AppError::NotFound(format!("{} {:?} not found", key.kind.singular(), key.name))
            }
            RegistryError::AlreadyExists(key) => {
                AppError::AlreadyExists(format!("{} {:?} already exists", key.kind.singular(), key.name))
            }
            err @ RegistryError::Conflict { .. } => AppError::Aborted(err.to_string()),
            RegistryError::Invalid { err, .. } => AppError::InvalidArgument(err.to_string()),
            RegistryError::Store(StoreError::Unavailable(why)) => AppError::Unavailable(why),
            RegistryError::Store(StoreError::Forbidden(why)) => AppError::FailedPrecondition(why),
            RegistryError::Store(err) => AppError::Internal(err.into()),
        }
    }
}

/// A `resourceVersion` given by a caller: empty means "any".
pub fn parse_resource_version(text: &str) -> Result<Option<u64>, AppError> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| {
        AppError::InvalidArgument(format!("invalid resourceVersion {text:?}: expected a number"))
    })
}

/// What a repository URL may be, for messages.
const REPO_URL_FORMS: &str =
    "only https, http, ssh and git URLs with a host, or git's scp-like user@host:path, are accepted";

/// Repository URLs (at `field`, e.g. `spec.source.repoURL`) may only use https, http, ssh or git
/// with a host (or be the scp-like `user@host:path` form of ssh, or an OCI or Helm repository
/// without a scheme): anything else, `javascript:` above all, is refused before it is stored.
pub fn check_repo_url(field: &str, url: &str) -> Result<(), AppError> {
    // Messages show the URL with any password masked.
    let refuse = |why: &str| {
        Err(AppError::InvalidArgument(format!(
            "{field}: invalid repository URL {:?}: {why}",
            super::redact::url(url)
        )))
    };
    if url.is_empty() {
        return refuse("it is required");
    }
    if url.trim() != url || url.chars().any(char::is_control) {
        return refuse("it has leading or trailing blanks, or control characters");
    }
    let lower = url.to_ascii_lowercase();
    if let Some((scheme, rest)) = lower.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git") {
            return refuse(REPO_URL_FORMS);
        }
        // `ssh://git@host:org/repo.git` is no URL (its "port" is a path), but people write it
        // and tiphys always accepted it: a host before the colon is enough.
        let ssh_with_scp_path = scheme == "ssh"
            && rest
                .split_once(':')
                .is_some_and(|(authority, _)| !authority.is_empty() && !authority.contains('/'));
        if ssh_with_scp_path {
            return Ok(());
        }
        // Otherwise it must be a URL, read by the `url` crate, with a host. (`https:///x` has
        // none: the parser would repair it by taking `x` as the host.)
        if rest.starts_with('/') {
            return refuse("it has no host");
        }
        return match url::Url::parse(url) {
            Ok(u) if u.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
            Ok(_) | Err(url::ParseError::EmptyHost) => refuse("it has no host"),
            Err(err) => refuse(&format!("it is not a URL ({err})")),
        };
    }
    // Not URLs, and so not read as URLs: git's scp-like `user@host:path`, and an OCI or Helm
    // repository given without a scheme (`registry.example/charts`), a host name followed by a
    // path with no colon before the first slash.
    let scp_like = lower
        .split_once(':')
        .is_some_and(|(host, _)| host.contains('@') && !host.contains('/'));
    let bare_host = !lower.contains(':') && lower.split('/').next().is_some_and(|h| h.contains('.'));
    if scp_like || bare_host {
        Ok(())
    } else {
        refuse(REPO_URL_FORMS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_url_schemes() {
        for ok in [
            "https://github.com/a/b.git",
            "http://git.local/x",
            "ssh://git@host/x",
            "git://host/x",
            "git@github.com:a/b.git",
            "registry.example.com/charts",
            "HTTPS://GitHub.com/a/b",
            "ssh://git@[2001:db8::1]:2222/x.git",
            "https://github.com/a/b%20c.git",
            // Not a URL, but written and accepted before the `url` crate was used.
            "ssh://git@github.com:org/repo.git",
        ] {
            assert!(check_repo_url("repo", ok).is_ok(), "{ok}");
        }
        for bad in [
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            "file:///etc/passwd",
            "data:text/html,x",
            " https://x",
            "",
            "vbscript:x",
            "https://",
            "ssh://",
            "https://host:99999/x",
            "ssh://:org/repo.git",
            "javascript://%0aalert(1)",
            "git://[::1/x",
        ] {
            assert!(check_repo_url("repo", bad).is_err(), "{bad}");
        }
        for (bad, why) in [
            ("https://", "it has no host"),
            ("ssh://", "it has no host"),
            ("https:///org/repo.git", "it has no host"),
            ("git:///x", "it has no host"),
            ("git://[::1/x", "it is not a URL"),
            (
                "javascript:alert(1)",
                "only https, http, ssh and git URLs with a host",
            ),
            ("ftp://host/x", "only https, http, ssh and git URLs with a host"),
            ("", "it is required"),
        ] {
            let Err(AppError::InvalidArgument(m)) = check_repo_url("spec.source.repoURL", bad) else {
                panic!("{bad} was accepted");
            };
            assert!(
                m.starts_with("spec.source.repoURL: invalid repository URL "),
                "{m}"
            );
            assert!(m.contains(why), "{bad}: {m}");
        }
    }
}
