//! Whom live calls act as when argocd-cm turns on `application.sync.impersonation.enabled`:
//! the ServiceAccount the application's project names for its destination
//! (`spec.destinationServiceAccounts`), as upstream's controller chooses the one its syncs
//! impersonate (`deriveServiceAccountToImpersonate` in controller/sync.go). Upstream's
//! argocd-server reads and changes live resources with the cluster's own credentials even
//! then; tiphys acts as the ServiceAccount, so that a user reaches no more through the API than
//! a sync of the application may change.

use serde_json::Value;

use crate::error::AppError;
use crate::glob::Glob;
use crate::registry::{Key, Kind};
use crate::state::ServerState;

/// argocd-cm's switch (on only when exactly "true", as upstream reads it).
const ENABLED_KEY: &str = "application.sync.impersonation.enabled";
/// Characters upstream refuses in a `defaultServiceAccount`.
const DISALLOWED: &[char] = &['!', '*', '[', ']', '{', '}', '\\', '/'];

/// The user live calls on the application `app` in the cluster `server` impersonate
/// (`system:serviceaccount:<namespace>:<name>`), or None when impersonation is off.
pub(super) fn user(state: &ServerState, app: &Value, server: &str) -> Result<Option<String>, AppError> {
    let enabled = state.config.peek().cm.get(ENABLED_KEY).map(String::as_str) == Some("true");
    if !enabled {
        return Ok(None);
    }
    let project_name = app.pointer("/spec/project").and_then(Value::as_str).unwrap_or("");
    let project = state
        .registry
        .get(&Key::new(Kind::AppProject, &state.namespace, project_name))
        .map(|doc| doc.value())
        .ok_or_else(|| {
            AppError::FailedPrecondition(format!(
                "failed to find a matching service account to impersonate: the project {project_name:?} does not exist"
            ))
        })?;
    derive(&project, app, server).map(Some).map_err(|why| {
        AppError::FailedPrecondition(format!(
            "failed to find a matching service account to impersonate: {why}"
        ))
    })
}

/// The first of the project's destination ServiceAccounts whose server and namespace globs
/// match the destination, fully named; Err says why there is none.
fn derive(project: &Value, app: &Value, server: &str) -> Result<String, String> {
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let dest_namespace = text(app, "/spec/destination/namespace");
    // Without a destination namespace the ServiceAccount is looked for in the application's.
    let sa_namespace = if dest_namespace.is_empty() {
        text(app, "/metadata/namespace")
    } else {
        dest_namespace.clone()
    };
    let entries = project
        .pointer("/spec/destinationServiceAccounts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for entry in entries {
        let matched = |field: &str, value: &str, what: &str| -> Result<bool, String> {
            Glob::new(&text(entry, field), &[])
                .map(|g| g.matches(value))
                .map_err(|e| format!("invalid glob pattern for destination {what}: {e}"))
        };
        if !(matched("/server", server, "server")? && matched("/namespace", &dest_namespace, "namespace")?) {
            continue;
        }
        let account = text(entry, "/defaultServiceAccount");
        if account.trim_matches(' ').is_empty() || account.contains(DISALLOWED) {
            return Err(format!(
                "default service account contains invalid chars '{account}'"
            ));
        }
        // `namespace:name` names its own namespace.
        if account.contains(':') {
            return Ok(format!("system:serviceaccount:{account}"));
        }
        return Ok(format!("system:serviceaccount:{sa_namespace}:{account}"));
    }
    Err(format!(
        "no matching service account found for destination server {} and namespace {sa_namespace}",
        text(app, "/spec/destination/server")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn project(entries: Value) -> Value {
        json!({"spec": {"destinationServiceAccounts": entries}})
    }

    fn app(server: &str, namespace: &str) -> Value {
        json!({"metadata": {"namespace": "argocd"},
               "spec": {"destination": {"server": server, "namespace": namespace}}})
    }

    #[test]
    fn the_first_matching_entry_names_the_account() {
        let p = project(json!([
            {"server": "https://other", "namespace": "*", "defaultServiceAccount": "no"},
            {"server": "https://k*", "namespace": "team-*", "defaultServiceAccount": "deployer"},
            {"server": "*", "namespace": "*", "defaultServiceAccount": "ops:admin"},
        ]));
        assert_eq!(
            derive(&p, &app("https://k:6443", "team-a"), "https://k:6443").unwrap(),
            "system:serviceaccount:team-a:deployer"
        );
        assert_eq!(
            derive(&p, &app("https://x", "prod"), "https://x").unwrap(),
            "system:serviceaccount:ops:admin"
        );
    }

    #[test]
    fn no_match_and_bad_accounts_say_why() {
        let p = project(json!([{"server": "https://k", "namespace": "a", "defaultServiceAccount": "sa"}]));
        assert_eq!(
            derive(&p, &app("https://k", "b"), "https://k").unwrap_err(),
            "no matching service account found for destination server https://k and namespace b"
        );
        // No destination namespace: the application's namespace is where the account is looked for.
        assert_eq!(
            derive(&project(json!([])), &app("https://k", ""), "https://k").unwrap_err(),
            "no matching service account found for destination server https://k and namespace argocd"
        );
        let bad = project(json!([{"server": "*", "namespace": "*", "defaultServiceAccount": "a*b"}]));
        assert_eq!(
            derive(&bad, &app("https://k", "n"), "https://k").unwrap_err(),
            "default service account contains invalid chars 'a*b'"
        );
        let blank = project(json!([{"server": "*", "namespace": "*", "defaultServiceAccount": "  "}]));
        assert!(derive(&blank, &app("https://k", "n"), "https://k").is_err());
        let glob = project(json!([{"server": "[", "namespace": "*", "defaultServiceAccount": "sa"}]));
        assert!(
            derive(&glob, &app("https://k", "n"), "https://k")
                .unwrap_err()
                .starts_with("invalid glob pattern for destination server")
        );
    }
}
