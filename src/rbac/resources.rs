//! The RBAC vocabulary: resources, actions, and how requests name them.

/// Every resource type the server checks.
pub const RESOURCES: &[&str] = &[
    "clusters",
    "projects",
    "applications",
    "applicationsets",
    "repositories",
    "write-repositories",
    "certificates",
    "accounts",
    "gpgkeys",
    "logs",
    "exec",
    "extensions",
];

/// The actions `CanI` accepts.
pub const CAN_I_ACTIONS: &[&str] = &[
    "get", "create", "update", "delete", "sync", "rollback", "override", "action", "invoke",
];

/// Checks a `CanI` question; Err names what is wrong and what would be right.
pub fn check_can_i(resource: &str, action: &str) -> Result<(), String> {
    if !CAN_I_ACTIONS.contains(&action) {
        return Err(format!(
            "unknown action {action:?}; use one of: {}",
            CAN_I_ACTIONS.join(", ")
        ));
    }
    if !RESOURCES.contains(&resource) {
        return Err(format!(
            "unknown resource {resource:?}; use one of: {}",
            RESOURCES.join(", ")
        ));
    }
    Ok(())
}

/// The resource a CLI name stands for (`app` → `applications`); other names as given.
pub fn resolve_alias(name: &str) -> &str {
    match name {
        "account" => "accounts",
        "app" | "apps" | "application" => "applications",
        "applicationset" => "applicationsets",
        "cert" | "certs" | "certificate" => "certificates",
        "cluster" => "clusters",
        "extension" => "extensions",
        "gpgkey" | "key" => "gpgkeys",
        "log" => "logs",
        "proj" | "projs" | "project" => "projects",
        "repo" | "repos" | "repository" => "repositories",
        other => other,
    }
}

/// `rbac can --strict`: the actions each resource really has, as upstream's
/// tool knows them. Actions marked with a trailing `/` may carry a path.
pub fn check_strict(resource: &str, action: &str) -> Result<(), String> {
    let allowed: &[&str] = match resource {
        "accounts" => &["create", "update"],
        "applications" => &[
            "create", "get", "update", "update/", "delete", "delete/", "action", "action/", "override",
            "sync", "rollback",
        ],
        "applicationsets" | "clusters" | "projects" | "repositories" => {
            &["create", "get", "update", "delete"]
        }
        "certificates" | "gpgkeys" => &["create", "get", "delete"],
        "logs" => &["get"],
        "exec" => &["create"],
        "extensions" => &["invoke"],
        _ => return Err(format!("error in RBAC request: unknown resource {resource:?}")),
    };
    let ok = allowed.iter().any(|&a| match a.strip_suffix('/') {
        Some(base) => action
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/')),
        None => a == action,
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "error in RBAC request: action {action:?} is not valid for resource {resource:?}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_actions() {
        assert!(check_strict("applications", "update/apps/Deployment/ns/x").is_ok());
        assert!(check_strict("applications", "action/apps/Deployment/restart").is_ok());
        assert!(check_strict("applications", "updates").is_err());
        assert!(
            check_strict("accounts", "get").is_err(),
            "upstream's table has no accounts get"
        );
        assert!(check_strict("write-repositories", "get").is_err());
        assert!(check_strict("logs", "get").is_ok());
    }

    #[test]
    fn aliases_and_can_i() {
        assert_eq!(resolve_alias("app"), "applications");
        assert_eq!(resolve_alias("key"), "gpgkeys");
        assert_eq!(resolve_alias("widgets"), "widgets");
        assert!(check_can_i("applications", "sync").is_ok());
        assert!(
            check_can_i("applications", "fly")
                .unwrap_err()
                .contains("unknown action")
        );
        assert!(
            check_can_i("widgets", "get")
                .unwrap_err()
                .contains("unknown resource")
        );
    }
}
