//! Credential templates (RepoCreds) apply to every repository whose URL starts with theirs;
//! when several do, the longest wins. A repository with credentials of its own uses those.
//! URLs compare as upstream normalises them: trimmed, lower case, without a `.git` suffix,
//! and with the scp-like `git@host:path` and `ssh://git@host/path` forms made the same.

use serde_json::Value;

use crate::registry::Kind;
use crate::state::ServerState;

/// The fields whose presence means a repository (or a template) carries credentials.
const CREDENTIAL_STRINGS: &[&str] = &[
    "username",
    "password",
    "bearerToken",
    "sshPrivateKey",
    "tlsClientCertKey",
    "githubAppPrivateKey",
    "gcpServiceAccountKey",
    "azureServicePrincipalClientSecret",
];

/// Whether a repository has credentials of its own.
pub fn has_credentials(repo: &Value) -> bool {
    CREDENTIAL_STRINGS.iter().any(|f| {
        repo.get(*f)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    }) || repo.get("useAzureWorkloadIdentity").and_then(Value::as_bool) == Some(true)
}

/// A URL in the form prefixes are compared in.
pub fn normalize(url: &str) -> String {
    let mut url = url.trim().to_ascii_lowercase();
    let scp_like = !url.contains("://")
        && url
            .split_once(':')
            .is_some_and(|(host, _)| host.contains('@') && !host.contains('/'));
    if scp_like {
        url = url.replacen(':', "/", 1);
    }
    if let Some(rest) = url.strip_prefix("ssh://") {
        url = rest.to_owned();
    }
    if let Some(rest) = url.strip_suffix(".git") {
        url = rest.to_owned();
    }
    url
}

/// The index of the template whose URL is the longest prefix of `repo` (the first of equally
/// long ones), if any.
pub fn longest_prefix<'a>(templates: impl IntoIterator<Item = &'a str>, repo: &str) -> Option<usize> {
    let repo = normalize(repo);
    let mut best: Option<(usize, usize)> = None;
    for (index, url) in templates.into_iter().enumerate() {
        let url = normalize(url);
        if !url.is_empty() && repo.starts_with(&url) && best.is_none_or(|(_, len)| url.len() > len) {
            best = Some((index, url.len()));
        }
    }
    best.map(|(index, _)| index)
}

/// The stored credential templates, for answers about several repositories.
pub struct Templates {
    items: Vec<(String, Value)>,
}

impl Templates {
    /// The templates of kind `creds` (credential templates, or write credential templates).
    pub fn load(state: &ServerState, creds: Kind) -> Self {
        let (_, docs) = state.registry.list(creds);
        Self::from_items(
            docs.into_iter()
                .map(|doc| (doc.key.name.clone(), doc.value()))
                .collect(),
        )
    }

    /// Templates given as (URL, template).
    pub fn from_items(items: Vec<(String, Value)>) -> Self {
        Self { items }
    }

    /// The template that applies to `repo`, if any.
    pub fn for_repo(&self, repo: &str) -> Option<&Value> {
        let index = longest_prefix(self.items.iter().map(|(url, _)| url.as_str()), repo)?;
        self.items.get(index).map(|(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_longest_prefix_wins() {
        let templates = [
            "https://github.com/",
            "https://github.com/argoproj/",
            "https://github.com/argoproj/argo-cd",
            "https://gitlab.com/",
        ];
        assert_eq!(
            longest_prefix(templates, "https://github.com/argoproj/argo-cd.git"),
            Some(2)
        );
        assert_eq!(
            longest_prefix(templates, "https://github.com/argoproj/other"),
            Some(1)
        );
        assert_eq!(longest_prefix(templates, "https://github.com/me/x"), Some(0));
        assert_eq!(longest_prefix(templates, "https://bitbucket.org/x"), None);
        // Order does not matter, only length.
        let reversed: Vec<&str> = templates.iter().rev().copied().collect();
        assert_eq!(
            longest_prefix(reversed.iter().copied(), "https://github.com/argoproj/x"),
            Some(2)
        );
    }

    #[test]
    fn urls_compare_normalized() {
        assert_eq!(
            longest_prefix(["HTTPS://GitHub.com/Org/"], "https://github.com/org/repo"),
            Some(0)
        );
        assert_eq!(
            longest_prefix(["git@github.com:org/"], "ssh://git@github.com/org/repo.git"),
            Some(0)
        );
        assert_eq!(
            longest_prefix(["ssh://git@github.com/org"], "git@github.com:org/repo.git"),
            Some(0)
        );
        assert_eq!(normalize(" https://h/x.git "), "https://h/x");
        assert_eq!(longest_prefix([""], "https://h/x"), None);
    }

    #[test]
    fn credentials_of_its_own() {
        assert!(!has_credentials(&json!({"repo": "https://x", "type": "git"})));
        assert!(!has_credentials(&json!({"repo": "https://x", "password": ""})));
        assert!(has_credentials(&json!({"username": "git"})));
        assert!(has_credentials(&json!({"sshPrivateKey": "k"})));
        assert!(has_credentials(&json!({"useAzureWorkloadIdentity": true})));
    }
}
