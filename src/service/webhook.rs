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

use ring::hmac;
use serde_json::Value;

use crate::app::App;
use crate::error::AppError;
use crate::registry::{Change, Kind, RegistryError};

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
pub async fn handle(state: &App, headers: &Headers, body: &[u8]) -> Result<Outcome, AppError> {
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

/// The `argocd-secret` keys that configure a provider's proof.
const SECRET_KEYS: [&str; 7] = [
    "webhook.github.secret",
    "webhook.gitlab.secret",
    "webhook.bitbucket.uuid",
    "webhook.bitbucketserver.secret",
    "webhook.gogs.secret",
    "webhook.azuredevops.username",
    "webhook.azuredevops.password",
];

/// Checks the provider's proof against its secret in `argocd-secret`. A provider without a
/// secret is accepted unsigned only while no provider has one. (Upstream accepts it anyway: there,
/// configuring GitHub's secret does not stop a forged event sent with GitLab's headers.)
fn verify<'a>(
    provider: Provider,
    header: &impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
    secrets: &BTreeMap<String, String>,
) -> Result<(), String> {
    let secret = |key: &str| secrets.get(key).map(String::as_str).filter(|s| !s.is_empty());
    let unsigned = || {
        if SECRET_KEYS.iter().any(|k| secret(k).is_some()) {
            Err(format!(
                "{provider:?} events are not accepted: this server checks webhook secrets, and none is configured for {provider:?}"
            ))
        } else {
            Ok(())
        }
    };
    match provider {
        Provider::GitHub => {
            let Some(secret) = secret("webhook.github.secret") else {
                return unsigned();
            };
            if let Some(sig) = header("x-hub-signature-256") {
                check_hmac(hmac::HMAC_SHA256, secret, body, sig.strip_prefix("sha256="))
            } else if let Some(sig) = header("x-hub-signature") {
                check_hmac(
                    hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
                    secret,
                    body,
                    sig.strip_prefix("sha1="),
                )
            } else {
                Err("missing X-Hub-Signature-256 header".to_owned())
            }
        }
        Provider::Gogs => {
            let Some(secret) = secret("webhook.gogs.secret") else {
                return unsigned();
            };
            let sig = header("x-gogs-signature").ok_or("missing X-Gogs-Signature header")?;
            check_hmac(hmac::HMAC_SHA256, secret, body, Some(sig))
        }
        Provider::BitbucketServer => {
            let Some(secret) = secret("webhook.bitbucketserver.secret") else {
                return unsigned();
            };
            let sig = header("x-hub-signature").ok_or("missing X-Hub-Signature header")?;
            check_hmac(hmac::HMAC_SHA256, secret, body, sig.strip_prefix("sha256="))
        }
        Provider::GitLab => {
            let Some(secret) = secret("webhook.gitlab.secret") else {
                return unsigned();
            };
            let token = header("x-gitlab-token").ok_or("missing X-Gitlab-Token header")?;
            equal(token, secret)
                .then_some(())
                .ok_or_else(|| "X-Gitlab-Token does not match".to_owned())
        }
        Provider::Bitbucket => {
            let Some(secret) = secret("webhook.bitbucket.uuid") else {
                return unsigned();
            };
            let uuid = header("x-hook-uuid").unwrap_or_default();
            equal(uuid, secret)
                .then_some(())
                .ok_or_else(|| "X-Hook-UUID does not match".to_owned())
        }
        Provider::AzureDevOps => {
            let user = secret("webhook.azuredevops.username");
            let pass = secret("webhook.azuredevops.password");
            if user.is_none() && pass.is_none() {
                return unsigned();
            }
            let expected = format!("{}:{}", user.unwrap_or(""), pass.unwrap_or(""));
            let sent = header("authorization")
                .and_then(|v| v.strip_prefix("Basic "))
                .and_then(|b| {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD.decode(b.trim()).ok()
                })
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or("missing basic authorization")?;
            equal(&sent, &expected)
                .then_some(())
                .ok_or_else(|| "basic authorization does not match".to_owned())
        }
    }
}

/// Constant-time comparison of two secrets.
fn equal(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

fn check_hmac(alg: hmac::Algorithm, secret: &str, body: &[u8], sig_hex: Option<&str>) -> Result<(), String> {
    let sig = sig_hex
        .and_then(decode_hex)
        .ok_or("the signature is not in the provider's format")?;
    let key = hmac::Key::new(alg, secret.as_bytes());
    hmac::verify(&key, body, &sig).map_err(|_| "HMAC verification failed".to_owned())
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The last segment of `refs/heads/main` (as upstream's `ParseRevision`: at most three parts).
fn parse_revision(reference: &str) -> String {
    reference.splitn(3, '/').last().unwrap_or_default().to_owned()
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The files a push lists; past [`MAX_CHANGED_FILES`] the list counts as unknown (every path
/// concerns the application), which costs a refresh, not a missed one.
fn changed_files(commits: Option<&Value>) -> Vec<String> {
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
fn read_push(provider: Provider, p: &Value) -> Push {
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

/// `https://git.example.com/team/app` → (`git.example.com`, `team/app`), lower-cased, without
/// `.git`, user, port or scheme; `git@host:team/app.git` too.
fn repo_identity(url: &str) -> Option<(String, String)> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest,
        None => url,
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let (host, path) = rest.split_once(['/', ':'])?;
    // `host:port/path`: the port is not part of the identity.
    let path = match path.split_once('/') {
        Some((port, p)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => path,
    };
    let host = host.to_ascii_lowercase();
    let host = host
        .strip_prefix("altssh.")
        .or_else(|| host.strip_prefix("ssh."))
        .unwrap_or(&host)
        .to_owned();
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path).to_ascii_lowercase();
    (!host.is_empty() && !path.is_empty()).then_some((host, path))
}

/// Whether `source` (an application source) tracks the pushed revision of the pushed repo.
fn source_affected(source: &Value, push: &Push, pushed: &[(String, String)]) -> bool {
    let Some(id) = repo_identity(text(source, "/repoURL")) else {
        return false;
    };
    if !pushed.contains(&id) {
        return false;
    }
    let target = text(source, "/targetRevision");
    let parsed = parse_revision(target);
    if parsed.is_empty() || parsed == "HEAD" {
        return push.touched_head;
    }
    if target.starts_with("refs/heads/") || target.starts_with("refs/tags/") {
        return parsed == push.revision;
    }
    target == push.revision
}

/// Whether the push changed a file under one of the paths the application says it depends on
/// (all paths when it says nothing, or the payload lists no files).
fn files_concern(app: &Value, source: &Value, files: &[String]) -> bool {
    let paths = text(
        app,
        &format!(
            "/metadata/annotations/{}",
            GENERATE_PATHS_ANNOTATION.replace('/', "~1")
        ),
    );
    if paths.is_empty() || files.is_empty() {
        return true;
    }
    let base = text(source, "/path").trim_matches('/');
    paths
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            let dir = if let Some(abs) = p.strip_prefix('/') {
                abs.trim_matches('/').to_owned()
            } else {
                let joined = format!("{base}/{p}");
                normalize(&joined)
            };
            files.iter().any(|f| {
                let f = f.trim_start_matches('/');
                dir.is_empty() || f == dir || f.starts_with(&format!("{dir}/"))
            })
        })
}

/// `a/./b/../c` → `a/c`.
fn normalize(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    out.join("/")
}

fn sources(app: &Value) -> Vec<&Value> {
    let spec = app.get("spec");
    let mut all: Vec<&Value> = spec.and_then(|s| s.get("source")).into_iter().collect();
    all.extend(
        spec.and_then(|s| s.get("sources"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten(),
    );
    if let Some(dry) = app.pointer("/spec/sourceHydrator/drySource") {
        all.push(dry);
    }
    all
}

async fn refresh_matching(state: &App, push: &Push) -> Result<Outcome, AppError> {
    let pushed: Vec<_> = push.urls.iter().filter_map(|u| repo_identity(u)).collect();
    let mut outcome = Outcome::default();
    if pushed.is_empty() {
        return Ok(outcome);
    }
    let (_, apps) = state.registry.list(Kind::Application);
    let mut failed = Vec::new();
    for doc in apps {
        let app = doc.value();
        let hit = sources(&app)
            .into_iter()
            .any(|s| source_affected(s, push, &pushed) && files_concern(&app, s, &push.changed_files));
        if !hit {
            continue;
        }
        // One application that cannot be written does not keep the others from their refresh.
        match request_refresh(state, &doc.key).await {
            Ok(()) => outcome.refreshed.push(doc.key.name.clone()),
            Err(err) => failed.push(format!("{}: {err}", doc.key.name)),
        }
    }
    if !failed.is_empty() {
        return Err(AppError::Unavailable(format!(
            "the refresh of {} application(s) was not recorded: {}",
            failed.len(),
            failed.join("; ")
        )));
    }
    Ok(outcome)
}

/// Sets the refresh annotation, on the application as it is at the time of the write.
async fn request_refresh(state: &App, key: &crate::registry::Key) -> Result<(), AppError> {
    for _ in 0..REFRESH_ATTEMPTS {
        let Some(doc) = state.registry.get(key) else {
            return Ok(());
        };
        let mut value = doc.value();
        let annotations = value
            .pointer_mut("/metadata")
            .and_then(Value::as_object_mut)
            .map(|m| {
                m.entry("annotations")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()))
            });
        match annotations.and_then(Value::as_object_mut) {
            Some(a) if a.get(REFRESH_ANNOTATION).and_then(Value::as_str) == Some("normal") => return Ok(()),
            Some(a) => {
                a.insert(REFRESH_ANNOTATION.to_owned(), Value::from("normal"));
            }
            None => return Ok(()),
        }
        let change = Change::Update {
            key: key.clone(),
            value,
            expect: Some(doc.rv),
        };
        match state.registry.apply_one(change).await {
            Ok(_) => return Ok(()),
            Err(RegistryError::Conflict { .. }) => {}
            Err(RegistryError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    Err(AppError::Aborted(format!(
        "application {} kept changing; its refresh was not recorded",
        key.name
    )))
}

#[cfg(test)]
mod tests {
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
