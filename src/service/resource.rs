//! What every resource use case shares: registry errors in the error table, name checks,
//! resourceVersion parsing, URL scheme checks.

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
            RegistryError::Store(err) => AppError::Internal(err.into()),
        }
    }
}

/// A Kubernetes object name (DNS-1123 subdomain): what applications and projects are named.
pub fn check_object_name(what: &str, name: &str) -> Result<(), AppError> {
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    if valid {
        Ok(())
    } else {
        Err(AppError::InvalidArgument(format!(
            "invalid {what} name {name:?}: it must consist of lower case letters, digits, '-' and '.', \
             start and end with a letter or digit, and be at most 253 characters"
        )))
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

/// Repository URLs may only use https, http, ssh or git (or the scp-like `user@host:path` form
/// of ssh): anything else, `javascript:` above all, is refused before it is stored.
pub fn check_repo_url(url: &str) -> Result<(), AppError> {
    let lower = url.to_ascii_lowercase();
    // A URL (`scheme://…`) must be one, read by the `url` crate, with a host.
    let allowed_scheme = lower.contains("://")
        && url::Url::parse(url).is_ok_and(|u| {
            matches!(u.scheme(), "https" | "http" | "ssh" | "git")
                && u.host_str().is_some_and(|h| !h.is_empty())
        });
    // `ssh://git@host:org/repo.git` is no URL (its "port" is a path), but people write it and
    // tiphys always accepted it: a host before the colon is enough.
    let ssh_with_scp_path = lower.strip_prefix("ssh://").is_some_and(|rest| {
        rest.split_once(':')
            .is_some_and(|(authority, _)| !authority.is_empty() && !authority.contains('/'))
    });
    // Not URLs, and so not read as URLs: git's scp-like `user@host:path`, and an OCI or Helm
    // repository given without a scheme (`registry.example/charts`), a host name followed by a
    // path with no colon before the first slash.
    let scp_like = !lower.contains("://")
        && lower
            .split_once(':')
            .is_some_and(|(host, _)| host.contains('@') && !host.contains('/'));
    let bare_host = !lower.contains(':') && lower.split('/').next().is_some_and(|h| h.contains('.'));
    // Messages show the URL with any password masked.
    let shown = super::redact::url(url);
    if url.trim() != url || url.is_empty() || url.chars().any(char::is_control) {
        return Err(AppError::InvalidArgument(format!(
            "invalid repository URL {shown:?}"
        )));
    }
    if allowed_scheme || ssh_with_scp_path || scp_like || bare_host {
        Ok(())
    } else {
        Err(AppError::InvalidArgument(format!(
            "invalid repository URL {shown:?}: only https, http, ssh and git URLs are accepted"
        )))
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
            assert!(check_repo_url(ok).is_ok(), "{ok}");
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
            assert!(check_repo_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_names() {
        assert!(check_object_name("application", "guest-book.v1").is_ok());
        for bad in ["", "Guest", "-a", "a-", "a_b", "a/b", &"a".repeat(254)] {
            assert!(check_object_name("application", bad).is_err(), "{bad}");
        }
    }
}
