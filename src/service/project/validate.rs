//! What an AppProject must satisfy before it is stored (create, update): Kubernetes' limits on
//! its labels and annotations (`limits.rs`), its roles (names, policy lines, groups), no
//! duplicate destinations, source repositories or sync windows, and sync windows that make
//! sense. The rules are upstream's (`argocd-rbac.md` §9); a bad input
//! is `INVALID_ARGUMENT` naming the role and the policy line, a duplicate `ALREADY_EXISTS`.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::Value;

use crate::error::AppError;
use crate::rbac::project::PROJECT_SCOPED;
use crate::registry::projects::Roles;
use crate::service::limits::{check_annotations, check_labels, string_map};
use crate::service::sync_windows::SyncWindow;

/// What validation reads of a project.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct ProjectView {
    spec: SpecView,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
struct SpecView {
    source_repos: Vec<String>,
    destinations: Vec<DestinationView>,
    roles: Vec<RoleView>,
    sync_windows: Vec<SyncWindow>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct DestinationView {
    server: String,
    name: String,
    namespace: String,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct RoleView {
    name: String,
    policies: Vec<String>,
    groups: Vec<String>,
}

/// Actions a project role may name besides the patterns of [`action_allowed`].
const ACTIONS: &[&str] = &[
    "get", "create", "update", "delete", "sync", "override", "rollback", "*",
];

/// Rewrites every policy line of every role as its fields joined by `, ` (the fields after
/// the first trimmed of spaces), as upstream stores them.
pub fn normalize_policies(project: &mut Value) {
    let Some(roles) = project.pointer_mut("/spec/roles").and_then(Value::as_array_mut) else {
        return;
    };
    for role in roles {
        let Some(policies) = role.get_mut("policies").and_then(Value::as_array_mut) else {
            continue;
        };
        for policy in policies {
            if let Some(line) = policy.as_str() {
                *policy = Value::String(normalize_policy(line));
            }
        }
    }
}

fn normalize_policy(line: &str) -> String {
    let mut parts = line.split(',');
    let mut out = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        out.push_str(", ");
        out.push_str(part.trim_matches(' '));
    }
    out
}

/// Checks project `name` (its JSON, policies already normalized).
pub fn check_project(name: &str, project: &Value) -> Result<(), AppError> {
    let meta = project.get("metadata").unwrap_or(&Value::Null);
    check_labels("metadata.labels", string_map(meta, "labels"))?;
    check_annotations("metadata.annotations", string_map(meta, "annotations"))?;
    let view = ProjectView::deserialize(project)
        .map_err(|e| AppError::InvalidArgument(format!("invalid project: {e}")))?;
    let spec = &view.spec;

    let mut destinations = HashSet::new();
    for d in &spec.destinations {
        crate::service::sensitive::check_no_password("project destination server", &d.server)?;
        if !destinations.insert((&d.server, &d.name, &d.namespace)) {
            let target = if d.server.is_empty() { &d.name } else { &d.server };
            return Err(AppError::AlreadyExists(format!(
                "destination {target:?} namespace {:?} is listed twice",
                d.namespace
            )));
        }
    }
    let mut repos = HashSet::new();
    for repo in &spec.source_repos {
        crate::service::sensitive::check_no_password("project source repository", repo)?;
        if !repos.insert(repo) {
            return Err(AppError::AlreadyExists(format!(
                "source repository {repo:?} is listed twice"
            )));
        }
    }

    let mut role_names = HashSet::new();
    for role in &spec.roles {
        check_role_name(&role.name).map_err(AppError::InvalidArgument)?;
        if !role_names.insert(&role.name) {
            return Err(AppError::AlreadyExists(format!(
                "role {:?} is defined twice",
                role.name
            )));
        }
        let mut lines = HashSet::new();
        for (index, policy) in role.policies.iter().enumerate() {
            let line = index + 1;
            if !lines.insert(policy) {
                return Err(AppError::AlreadyExists(format!(
                    "role {:?} policy line {line} repeats an earlier line: {policy:?}",
                    role.name
                )));
            }
            check_policy(name, &role.name, policy).map_err(|why| {
                AppError::InvalidArgument(format!(
                    "role {:?} policy line {line} ({policy:?}): {why}",
                    role.name
                ))
            })?;
        }
        let mut groups = HashSet::new();
        for group in &role.groups {
            if !groups.insert(group) {
                return Err(AppError::AlreadyExists(format!(
                    "role {:?} lists group {group:?} twice",
                    role.name
                )));
            }
            check_group(group).map_err(|why| {
                AppError::InvalidArgument(format!("role {:?} group {group:?}: {why}", role.name))
            })?;
        }
    }
    // The lines must also load as RBAC loads them at enforcement (quoting, field counts).
    crate::state::projects::rbac_roles(name, &Roles::read(project))
        .rules()
        .map_err(|e| AppError::InvalidArgument(format!("the project's role policy does not load: {e}")))?;

    let mut windows = HashSet::new();
    for (index, w) in spec.sync_windows.iter().enumerate() {
        let which = index + 1;
        check_window(w).map_err(|why| AppError::InvalidArgument(format!("sync window {which}: {why}")))?;
        if !windows.insert((&w.kind, &w.schedule, &w.duration)) {
            return Err(AppError::AlreadyExists(format!(
                "sync window {which} ({} {:?} for {:?}) repeats an earlier one",
                w.kind, w.schedule, w.duration
            )));
        }
    }
    Ok(())
}

/// `^[a-zA-Z0-9]([-_a-zA-Z0-9]*[a-zA-Z0-9])?$`
pub fn check_role_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
    let ends_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if inner_ok && ends_ok {
        Ok(())
    } else {
        Err(format!(
            "invalid role name {name:?}: use letters, digits, '-' and '_', starting and ending with a letter or digit"
        ))
    }
}

/// One policy line of role `role` in project `project`: `p, proj:<project>:<role>, <resource>,
/// <action>, <project>/<object>, allow|deny`. Fields are split on every `,` and trimmed of
/// spaces, as upstream does.
pub fn check_policy(project: &str, role: &str, line: &str) -> Result<(), String> {
    let fields: Vec<&str> = line.split(',').map(|f| f.trim_matches(' ')).collect();
    let [kind, subject, resource, action, object, effect] = fields[..] else {
        return Err(format!(
            "expected 6 comma-separated fields (p, subject, resource, action, object, effect), found {}",
            fields.len()
        ));
    };
    if kind != "p" {
        return Err(format!(
            "a project role holds only 'p' lines, not {kind:?} (groups go in the role's groups)"
        ));
    }
    let expected = format!("proj:{project}:{role}");
    if subject != expected {
        return Err(format!("the subject must be {expected:?}, not {subject:?}"));
    }
    if !PROJECT_SCOPED.contains(&resource) {
        return Err(format!(
            "resource {resource:?} cannot be granted by a project role; use one of {}",
            PROJECT_SCOPED.join(", ")
        ));
    }
    if !action_allowed(action) {
        return Err(format!(
            "unknown action {action:?}; use one of {} or action/…, update/…, delete/…",
            ACTIONS.join(", ")
        ));
    }
    if !object_allowed(project, object) {
        return Err(format!(
            "the object must be {project}/<name> or {project}/<namespace>/<name> (letters, digits, \
             '*', '_', '-' and '.'), not {object:?}"
        ));
    }
    if effect != "allow" && effect != "deny" {
        return Err(format!("the effect must be allow or deny, not {effect:?}"));
    }
    Ok(())
}

/// A listed action, or one that contains `action/`, `update/` or `delete/` (upstream matches
/// these patterns unanchored).
fn action_allowed(action: &str) -> bool {
    ACTIONS.contains(&action)
        || ["action/", "update/", "delete/"]
            .iter()
            .any(|p| action.contains(p))
}

/// `^<project>(/[*\w-.]+)?/[*\w-.]+$` with `\w` ASCII word characters.
fn object_allowed(project: &str, object: &str) -> bool {
    let Some(rest) = object.strip_prefix(project).and_then(|r| r.strip_prefix('/')) else {
        return false;
    };
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'*' | b'_' | b'-' | b'.'))
    };
    let segments: Vec<&str> = rest.split('/').collect();
    (1..=2).contains(&segments.len()) && segments.iter().all(|s| segment_ok(s))
}

/// A group bound to a role: not blank, no `"`, newline or tab, no blanks around it, and a `,`
/// only inside quotes (the whole name quoted).
pub fn check_group(group: &str) -> Result<(), String> {
    let trimmed = group.trim();
    let name = if trimmed.len() > 1 && trimmed.starts_with('"') && trimmed.ends_with('"') {
        trimmed.trim_matches('"')
    } else if trimmed.contains(',') {
        return Err("a group name with ',' must be quoted".to_owned());
    } else {
        trimmed
    };
    if name.is_empty() {
        return Err("a group name cannot be empty".to_owned());
    }
    if name.contains(['\n', '\t', '"']) {
        return Err("a group name cannot contain '\"', a newline or a tab".to_owned());
    }
    if name.trim() != name {
        return Err("a group name cannot start or end with blanks".to_owned());
    }
    Ok(())
}

/// A window Argo CD can evaluate (kind, cron schedule, duration, time zone) that selects
/// something.
fn check_window(w: &SyncWindow) -> Result<(), String> {
    if let Some(problem) = w.problem() {
        return Err(problem);
    }
    if w.applications.is_empty() && w.namespaces.is_empty() && w.clusters.is_empty() {
        return Err("it must name applications, namespaces or clusters".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn project_with_role(policies: &[&str], groups: &[&str]) -> Value {
        json!({
            "metadata": {"name": "my-proj"},
            "spec": {"roles": [{"name": "ci", "policies": policies, "groups": groups}]}
        })
    }

    fn message(err: AppError) -> String {
        match err {
            AppError::InvalidArgument(m) | AppError::AlreadyExists(m) => m,
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn valid_policy_lines() {
        for line in [
            "p, proj:my-proj:ci, applications, get, my-proj/*, allow",
            "p, proj:my-proj:ci, applications, sync, my-proj/guestbook, deny",
            "p, proj:my-proj:ci, applications, *, my-proj/ns-1/app.v2, allow",
            "p, proj:my-proj:ci, applicationsets, create, my-proj/*, allow",
            "p, proj:my-proj:ci, logs, get, my-proj/*, allow",
            "p, proj:my-proj:ci, exec, create, my-proj/*, allow",
            "p, proj:my-proj:ci, clusters, get, my-proj/*, allow",
            "p, proj:my-proj:ci, repositories, update, my-proj/*, allow",
            "p, proj:my-proj:ci, applications, action/apps/Deployment/restart, my-proj/*, allow",
            "p, proj:my-proj:ci, applications, update/*, my-proj/*, allow",
            "p, proj:my-proj:ci, applications, delete/*/Pod/*/*, my-proj/*, allow",
            "p,proj:my-proj:ci,applications,get,my-proj/*,allow",
        ] {
            assert_eq!(check_policy("my-proj", "ci", line), Ok(()), "{line}");
        }
    }

    #[test]
    fn invalid_policy_lines_say_why() {
        for (line, why) in [
            (
                "p, proj:my-proj:ci, applications, get, my-proj/*",
                "6 comma-separated",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-proj/*, allow, x",
                "6 comma-separated",
            ),
            (
                "g, proj:my-proj:ci, applications, get, my-proj/*, allow",
                "only 'p' lines",
            ),
            (
                "p, proj:other:ci, applications, get, my-proj/*, allow",
                "subject must be",
            ),
            (
                "p, proj:my-proj:dev, applications, get, my-proj/*, allow",
                "subject must be",
            ),
            (
                "p, role:admin, applications, get, my-proj/*, allow",
                "subject must be",
            ),
            (
                "p, proj:my-proj:ci, projects, get, my-proj/*, allow",
                "cannot be granted",
            ),
            (
                "p, proj:my-proj:ci, accounts, get, my-proj/*, allow",
                "cannot be granted",
            ),
            (
                "p, proj:my-proj:ci, write-repositories, get, my-proj/*, allow",
                "cannot be granted",
            ),
            (
                "p, proj:my-proj:ci, applications, fly, my-proj/*, allow",
                "unknown action",
            ),
            (
                "p, proj:my-proj:ci, applications, get, */*, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, other/*, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-proj, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-proj/, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-proj/a/b/c, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, repositories, get, my-proj/https://x, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-projx/*, allow",
                "object must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-proj/*, Allow",
                "effect must be",
            ),
            (
                "p, proj:my-proj:ci, applications, get, my-proj/*, permit",
                "effect must be",
            ),
        ] {
            let err = check_policy("my-proj", "ci", line).unwrap_err();
            assert!(err.contains(why), "{line}: {err}");
        }
    }

    #[test]
    fn role_names() {
        for ok in ["ci", "a", "CI-bot_2", "0"] {
            assert!(check_role_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-ci", "ci-", "ci bot", "ci:x", "_a", "é"] {
            assert!(check_role_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn group_names() {
        for ok in ["my-org:devs", "\"a,b\"", "Dev Team", "  padded  "] {
            assert!(check_group(ok).is_ok(), "{ok:?}");
        }
        for bad in ["", "   ", "a,b", "a\"b", "a\tb", "a\nb", "\" a\"", "\"\""] {
            assert!(check_group(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn project_errors_name_the_role_and_line() {
        let p = project_with_role(
            &[
                "p, proj:my-proj:ci, applications, get, my-proj/*, allow",
                "p, proj:my-proj:ci, applications, get, */*, allow",
            ],
            &[],
        );
        let err = message(check_project("my-proj", &p).unwrap_err());
        assert!(err.contains("role \"ci\" policy line 2"), "{err}");
        assert!(err.contains("*/*"), "{err}");

        let p = project_with_role(&[], &["a,b"]);
        let err = message(check_project("my-proj", &p).unwrap_err());
        assert!(err.contains("role \"ci\" group"), "{err}");

        let p = json!({"spec": {"roles": [{"name": "ci"}, {"name": "ci"}]}});
        assert!(matches!(
            check_project("my-proj", &p),
            Err(AppError::AlreadyExists(_))
        ));
        let p = json!({"spec": {"roles": [{"name": "bad name"}]}});
        assert!(matches!(
            check_project("my-proj", &p),
            Err(AppError::InvalidArgument(_))
        ));
        let line = "p, proj:my-proj:ci, applications, get, my-proj/*, allow";
        let p = project_with_role(&[line, line], &[]);
        assert!(matches!(
            check_project("my-proj", &p),
            Err(AppError::AlreadyExists(_))
        ));
    }

    #[test]
    fn a_valid_project_passes() {
        let p = json!({"spec": {
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*"}],
            "roles": [{"name": "ci", "policies": ["p, proj:p1:ci, applications, get, p1/*, allow"], "groups": ["org:team"]}],
            "syncWindows": [{"kind": "allow", "schedule": "0 22 * * *", "duration": "1h", "applications": ["*"]}]
        }});
        assert!(check_project("p1", &p).is_ok());
    }

    #[test]
    fn a_bad_window_is_named_with_its_problem() {
        let p = json!({"spec": {"syncWindows": [
            {"kind": "allow", "schedule": "0 22 * * *", "duration": "1h", "applications": ["*"]},
            {"kind": "deny", "schedule": "0 25 * * *", "duration": "1h", "applications": ["*"]}
        ]}});
        let Err(AppError::InvalidArgument(message)) = check_project("p1", &p) else {
            panic!("accepted");
        };
        assert!(
            message.starts_with("sync window 2: schedule \"0 25 * * *\"") && message.contains("hour"),
            "{message}"
        );
    }

    #[test]
    fn duplicates_and_bad_windows_are_refused() {
        let p = json!({"spec": {"sourceRepos": ["a", "a"]}});
        assert!(matches!(check_project("p1", &p), Err(AppError::AlreadyExists(_))));
        let p = json!({"spec": {"destinations": [{"server": "s", "namespace": "n"}, {"server": "s", "namespace": "n"}]}});
        assert!(matches!(check_project("p1", &p), Err(AppError::AlreadyExists(_))));
        for window in [
            json!({"kind": "maybe", "schedule": "* * * * *", "duration": "1h", "applications": ["*"]}),
            json!({"kind": "allow", "schedule": "every day", "duration": "1h", "applications": ["*"]}),
            json!({"kind": "allow", "schedule": "* * * * *", "duration": "an hour", "applications": ["*"]}),
            json!({"kind": "allow", "schedule": "* * * * *", "duration": "1h"}),
            json!({"kind": "allow", "schedule": "61 * * * *", "duration": "1h", "applications": ["*"]}),
            json!({"kind": "allow", "schedule": "@daily", "duration": "1h", "applications": ["*"]}),
            json!({"kind": "allow", "schedule": "* * * * *", "duration": "1d", "applications": ["*"]}),
            json!({"kind": "deny", "schedule": "* * * * *", "duration": "1h", "timeZone": "Nowhere/Town", "applications": ["*"]}),
        ] {
            let p = json!({"spec": {"syncWindows": [window]}});
            assert!(
                matches!(check_project("p1", &p), Err(AppError::InvalidArgument(_))),
                "{p}"
            );
        }
    }

    #[test]
    fn normalization_rejoins_fields() {
        let mut p = json!({"spec": {"roles": [{"name": "ci", "policies": ["p,proj:a:ci ,  applications,get,a/*,allow "]}]}});
        normalize_policies(&mut p);
        assert_eq!(
            p["spec"]["roles"][0]["policies"][0],
            "p, proj:a:ci, applications, get, a/*, allow"
        );
    }
}
