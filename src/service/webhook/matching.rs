//! Which applications a push concerns (repository identity, then `manifest-generate-paths`), and
//! the refresh request recorded on each.

use serde_json::Value;

use crate::error::AppError;
use crate::registry::{Change, Kind, RegistryError};
use crate::state::ServerState;

use super::payload::{parse_revision, text};
use super::{GENERATE_PATHS_ANNOTATION, Outcome, Push, REFRESH_ANNOTATION, REFRESH_ATTEMPTS};

/// `https://git.example.com/team/app` → (`git.example.com`, `team/app`), lower-cased, without
/// `.git`, user, port or scheme; `git@host:team/app.git` too.
pub(super) fn repo_identity(url: &str) -> Option<(String, String)> {
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
pub(super) fn source_affected(source: &Value, push: &Push, pushed: &[(String, String)]) -> bool {
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
pub(super) fn files_concern(app: &Value, source: &Value, files: &[String]) -> bool {
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
pub(super) fn normalize(path: &str) -> String {
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

pub(super) fn sources(app: &Value) -> Vec<&Value> {
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

pub(super) async fn refresh_matching(state: &ServerState, push: &Push) -> Result<Outcome, AppError> {
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
pub(super) async fn request_refresh(state: &ServerState, key: &crate::registry::Key) -> Result<(), AppError> {
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
