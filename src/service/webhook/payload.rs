//! What a push event says, read from each provider's JSON: the repository's URLs, the revision
//! and the files the commits touched.

use serde_json::Value;

use super::{MAX_CHANGED_FILES, Provider, Push};

/// The last segment of `refs/heads/main` (as upstream's `ParseRevision`: at most three parts).
pub(super) fn parse_revision(reference: &str) -> String {
    reference.splitn(3, '/').last().unwrap_or_default().to_owned()
}

pub(super) fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The files a push lists; past [`MAX_CHANGED_FILES`] the list counts as unknown (every path
/// concerns the application), which costs a refresh, not a missed one.
pub(super) fn changed_files(commits: Option<&Value>) -> Vec<String> {
    let mut files = Vec::new();
    for commit in commits.and_then(Value::as_array).into_iter().flatten() {
        for list in ["added", "modified", "removed"] {
            let names = commit.get(list).and_then(Value::as_array).into_iter().flatten();
            files.extend(names.filter_map(Value::as_str).map(str::to_owned));
        }
        if files.len() > MAX_CHANGED_FILES {
            return Vec::new();
        }
    }
    files
}

/// The fields upstream reads of each provider's push payload.
pub(super) fn read_push(provider: Provider, p: &Value) -> Push {
    let mut push = Push::default();
    let mut from = |url: &str, reference: &str, default_branch: &str| {
        push.urls.push(url.to_owned());
        push.revision = parse_revision(reference);
        push.touched_head = default_branch == push.revision;
        push.changed_files = changed_files(p.get("commits"));
    };
    match provider {
        Provider::GitHub => from(
            text(p, "/repository/html_url"),
            text(p, "/ref"),
            text(p, "/repository/default_branch"),
        ),
        Provider::GitLab => from(
            text(p, "/project/web_url"),
            text(p, "/ref"),
            text(p, "/project/default_branch"),
        ),
        Provider::Gogs => from(
            text(p, "/repository/html_url"),
            text(p, "/ref"),
            text(p, "/repository/default_branch"),
        ),
        Provider::AzureDevOps => {
            let name = text(p, "/resource/refUpdates/0/name");
            push.urls
                .push(text(p, "/resource/repository/remoteUrl").to_owned());
            push.revision = parse_revision(name);
            push.touched_head = name == text(p, "/resource/repository/defaultBranch");
        }
        Provider::Bitbucket => {
            push.urls.push(text(p, "/repository/links/html/href").to_owned());
            push.revision = text(p, "/push/changes/0/new/name").to_owned();
            // The payload does not say whether the default branch moved: assume it did.
            push.touched_head = true;
        }
        Provider::BitbucketServer => {
            let clone = p.pointer("/repository/links/clone").and_then(Value::as_array);
            for link in clone.into_iter().flatten() {
                if matches!(link.get("name").and_then(Value::as_str), Some("http" | "ssh")) {
                    push.urls.push(text(link, "/href").to_owned());
                }
            }
            push.revision = parse_revision(text(p, "/changes/0/ref/id"));
            push.touched_head = true;
        }
    }
    push.urls.retain(|u| !u.is_empty());
    push
}
