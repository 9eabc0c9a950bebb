//! Git push webhooks (`POST /api/webhook`): GitHub, GitLab, Bitbucket Cloud, Bitbucket Server,
//! Gogs and Azure DevOps events, verified with the secrets in `argocd-secret` as upstream's
//! `util/webhook/webhook.go` does, then a refresh request (the `argocd.argoproj.io/refresh`
//! annotation, `normal`) recorded on every application whose source the push touched. tiphys
//! runs no controller: the annotation is what a controller beside it acts on.
//!
//! Which provider sent an event is read from its headers, in upstream's order (Azure DevOps,
//! Gogs before GitHub since Gogs sends both, GitLab, Bitbucket Cloud, Bitbucket Server). A
//! provider whose secret is configured must sign (or carry) it: a missing or wrong signature is
//! refused (400) and nothing is written. Without a configured secret, events are accepted
//! unsigned, as upstream does; the README says to configure one.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::state::ServerState;

mod matching;
mod payload;
mod signature;

use self::matching::refresh_matching;
use self::payload::read_push;
use self::signature::verify;
use crate::error::AppError;

/// The annotation a controller reads as "refresh this application".
pub const REFRESH_ANNOTATION: &str = "argocd.argoproj.io/refresh";
/// The annotation naming the paths (`;`-separated, relative to the source path) whose changes
/// concern an application.
const GENERATE_PATHS_ANNOTATION: &str = "argocd.argoproj.io/manifest-generate-paths";
/// The most changed files a push is read with (see [`changed_files`]).
const MAX_CHANGED_FILES: usize = 10_000;
/// How often a refresh request is tried again when the application changed meanwhile.
const REFRESH_ATTEMPTS: usize = 5;

/// The request's headers that tell the provider and carry its proof, lower-cased names.
pub type Headers = BTreeMap<String, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Provider {
    AzureDevOps,
    Gogs,
    GitHub,
    GitLab,
    Bitbucket,
    BitbucketServer,
}

/// What a push changed, as read from its payload.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Push {
    /// The repository's web (or clone) URLs.
    pub urls: Vec<String>,
    /// The branch or tag pushed, without `refs/heads/` or `refs/tags/`.
    pub revision: String,
    /// Whether the default branch moved.
    pub touched_head: bool,
    /// Files added, changed or removed (empty: not known, every path counts).
    pub changed_files: Vec<String>,
}

/// What the webhook did: the applications it asked to refresh.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub refreshed: Vec<String>,
}

/// Verifies, reads and acts on one event.
pub async fn handle(state: &ServerState, headers: &Headers, body: &[u8]) -> Result<Outcome, AppError> {
    let secrets = state.config.current().secret.clone();
    let Some(push) = read_event(headers, body, &secrets)? else {
        return Ok(Outcome::default());
    };
    refresh_matching(state, &push).await
}

/// The push an event describes; `None` for events that change nothing (pings, other events).
pub fn read_event(
    headers: &Headers,
    body: &[u8],
    secrets: &BTreeMap<String, String>,
) -> Result<Option<Push>, AppError> {
    let header = |name: &str| headers.get(name).map(String::as_str).filter(|v| !v.is_empty());
    let provider = if header("x-vss-activityid").is_some() {
        Provider::AzureDevOps
    } else if header("x-gogs-event").is_some() {
        Provider::Gogs
    } else if header("x-github-event").is_some() {
        Provider::GitHub
    } else if header("x-gitlab-event").is_some() {
        Provider::GitLab
    } else if header("x-hook-uuid").is_some() {
        Provider::Bitbucket
    } else if header("x-event-key").is_some() {
        Provider::BitbucketServer
    } else {
        return Err(AppError::InvalidArgument("Unknown webhook event".to_owned()));
    };
    verify(provider, &header, body, secrets)
        .map_err(|why| AppError::InvalidArgument(format!("Webhook processing failed: {why}")))?;
    let event = match provider {
        Provider::AzureDevOps => "git.push",
        Provider::Gogs => header("x-gogs-event").unwrap_or_default(),
        Provider::GitHub => header("x-github-event").unwrap_or_default(),
        Provider::GitLab => header("x-gitlab-event").unwrap_or_default(),
        Provider::Bitbucket | Provider::BitbucketServer => header("x-event-key").unwrap_or_default(),
    };
    let pushes = matches!(
        (provider, event),
        (Provider::AzureDevOps, _)
            | (Provider::Gogs | Provider::GitHub, "push")
            | (Provider::GitLab, "Push Hook" | "Tag Push Hook" | "System Hook")
            | (Provider::Bitbucket, "repo:push")
            | (Provider::BitbucketServer, "repo:refs_changed")
    );
    let pings = matches!(
        (provider, event),
        (Provider::GitHub, "ping") | (Provider::BitbucketServer, "diagnostics:ping")
    );
    if pings {
        return Ok(None);
    }
    if !pushes {
        return Err(AppError::InvalidArgument(format!(
            "Webhook processing failed: event {event:?} is not one this server acts on (push events only)"
        )));
    }
    let payload: Value = serde_json::from_slice(body).map_err(|e| {
        AppError::InvalidArgument(format!("Webhook processing failed: the payload is not JSON: {e}"))
    })?;
    Ok(Some(read_push(provider, &payload)))
}

#[cfg(test)]
mod tests {
    use ring::hmac;

    use super::matching::{files_concern, repo_identity, source_affected};
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn sign(secret: &str, body: &[u8]) -> String {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()), body);
        tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
    }

    const GITHUB_PUSH: &str = r#"{"ref":"refs/heads/main","repository":{"html_url":"https://github.com/team/app","default_branch":"main"},"commits":[{"added":["k8s/a.yaml"],"modified":[],"removed":["docs/x.md"]}]}"#;

    #[test]
    fn a_github_push_is_read_after_its_signature() {
        let secrets: BTreeMap<_, _> = [("webhook.github.secret".to_owned(), "s3cret".to_owned())].into();
        let body = GITHUB_PUSH.as_bytes();
        let good = format!("sha256={}", sign("s3cret", body));
        let push = read_event(
            &headers(&[("x-github-event", "push"), ("x-hub-signature-256", &good)]),
            body,
            &secrets,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            push,
            Push {
                urls: vec!["https://github.com/team/app".into()],
                revision: "main".into(),
                touched_head: true,
                changed_files: vec!["k8s/a.yaml".into(), "docs/x.md".into()],
            }
        );
        let bad = format!("sha256={}", sign("other", body));
        for h in [
            headers(&[("x-github-event", "push"), ("x-hub-signature-256", &bad)]),
            headers(&[("x-github-event", "push")]),
            headers(&[("x-github-event", "push"), ("x-hub-signature-256", "sha256=zz")]),
        ] {
            let err = read_event(&h, body, &secrets).unwrap_err().to_string();
            assert!(err.contains("Webhook processing failed"), "{err}");
        }
    }

    #[test]
    fn a_provider_without_a_secret_is_refused_once_any_has_one() {
        let body = br#"{"ref":"refs/heads/main","project":{"web_url":"https://github.com/team/app"}}"#;
        let gitlab = headers(&[("x-gitlab-event", "Push Hook")]);
        assert!(read_event(&gitlab, body, &BTreeMap::new()).unwrap().is_some());
        let secrets: BTreeMap<_, _> = [("webhook.github.secret".to_owned(), "s3cret".to_owned())].into();
        let err = read_event(&gitlab, body, &secrets).unwrap_err().to_string();
        assert!(err.contains("none is configured for GitLab"), "{err}");
        let azure = headers(&[("x-vss-activityid", "1")]);
        assert!(read_event(&azure, b"{}", &secrets).is_err());
    }

    #[test]
    fn unknown_events_and_pings() {
        let none = BTreeMap::new();
        let err = read_event(&headers(&[]), b"{}", &none).unwrap_err().to_string();
        assert!(err.contains("Unknown webhook event"), "{err}");
        assert_eq!(
            read_event(&headers(&[("x-github-event", "ping")]), b"{}", &none).unwrap(),
            None
        );
        let err = read_event(&headers(&[("x-github-event", "issues")]), b"{}", &none)
            .unwrap_err()
            .to_string();
        assert!(err.contains("push events only"), "{err}");
    }

    #[test]
    fn repository_urls_are_compared_as_upstream_matches_them() {
        let id = |u| repo_identity(u).unwrap();
        let web = id("https://github.com/Team/App");
        for same in [
            "https://github.com/team/app.git",
            "git@github.com:team/app.git",
            "ssh://git@ssh.github.com:22/team/app",
            "http://user@github.com/team/app",
        ] {
            assert_eq!(id(same), web, "{same}");
        }
        assert_ne!(id("https://github.com/team/app2"), web);
        assert_ne!(id("https://gitlab.com/team/app"), web);
    }

    #[test]
    fn target_revisions_and_paths() {
        let push = Push {
            urls: vec!["https://github.com/team/app".into()],
            revision: "main".into(),
            touched_head: true,
            changed_files: vec!["k8s/a.yaml".into()],
        };
        let pushed = vec![repo_identity("https://github.com/team/app").unwrap()];
        let src = |rev: &str| serde_json::json!({"repoURL": "https://github.com/team/app.git", "targetRevision": rev, "path": "k8s"});
        assert!(source_affected(&src(""), &push, &pushed));
        assert!(source_affected(&src("HEAD"), &push, &pushed));
        assert!(source_affected(&src("main"), &push, &pushed));
        assert!(source_affected(&src("refs/heads/main"), &push, &pushed));
        assert!(!source_affected(&src("release"), &push, &pushed));
        let app = |paths: &str| serde_json::json!({"metadata": {"annotations": {GENERATE_PATHS_ANNOTATION: paths}}});
        assert!(files_concern(&app("."), &src(""), &push.changed_files));
        assert!(!files_concern(&app("../docs"), &src(""), &push.changed_files));
        assert!(files_concern(&app("/k8s;/other"), &src(""), &push.changed_files));
    }
}
