//! What an AppProject permits its applications: source repositories, destinations and the
//! namespaces applications may live in (SEC-22). Checked when applications are created,
//! updated and synced. Patterns are globs; a pattern starting with `!` denies what it matches.

use serde::Deserialize;

use crate::error::AppError;
use crate::rbac::{MatchMode, matcher::Matcher};
use crate::registry::{Key, Kind, Registry};

/// The in-cluster destination, present without being registered.
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";
pub const IN_CLUSTER_NAME: &str = "in-cluster";

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
pub struct ProjectRules {
    source_repos: Vec<String>,
    destinations: Vec<Destination>,
    source_namespaces: Vec<String>,
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct Destination {
    pub server: String,
    pub name: String,
    pub namespace: String,
}

fn glob(pattern: &str, value: &str) -> bool {
    Matcher::compile(pattern, MatchMode::Glob)
        .matches(value)
        .unwrap_or(false)
}

/// Allowed when some plain pattern matches and no `!pattern` does.
fn permitted(patterns: &[String], value: &str) -> bool {
    let mut allowed = false;
    for pattern in patterns {
        match pattern.strip_prefix('!') {
            Some(denied) if glob(denied, value) => return false,
            Some(_) => {}
            None => allowed |= glob(pattern, value),
        }
    }
    allowed
}

impl ProjectRules {
    /// The rules of project `name`, or an error that says it does not exist.
    pub fn load(registry: &Registry, namespace: &str, name: &str) -> Result<Self, AppError> {
        let doc = registry
            .get(&Key::new(Kind::AppProject, namespace, name))
            .ok_or_else(|| {
                AppError::InvalidArgument(format!(
                    "application references project {name} which does not exist"
                ))
            })?;
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct View {
            spec: ProjectRules,
        }
        let view: View = serde_json::from_slice(&doc.json).unwrap_or_default();
        Ok(view.spec)
    }

    /// Whether the project's `sourceRepos` let its applications use `repo`.
    pub fn permits_source(&self, repo: &str) -> bool {
        permitted(&self.source_repos, repo)
    }

    /// The project's `sourceRepos`, as written.
    pub fn source_repos(&self) -> &[String] {
        &self.source_repos
    }

    pub fn check_source(&self, project: &str, repo: &str) -> Result<(), AppError> {
        if self.permits_source(repo) {
            Ok(())
        } else {
            Err(AppError::InvalidArgument(format!(
                "application repo {repo} is not permitted in project '{project}'"
            )))
        }
    }

    /// `server` is the destination's server URL (resolved from its name when given by name).
    pub fn check_destination(
        &self,
        project: &str,
        server: &str,
        name: &str,
        namespace: &str,
    ) -> Result<(), AppError> {
        let ok = self.destinations.iter().any(|d| {
            let cluster_ok = (!d.server.is_empty() && glob(&d.server, server))
                || (!d.name.is_empty() && !name.is_empty() && glob(&d.name, name));
            cluster_ok && glob(if d.namespace.is_empty() { "" } else { &d.namespace }, namespace)
        });
        if ok {
            Ok(())
        } else {
            let target = if name.is_empty() { server } else { name };
            Err(AppError::InvalidArgument(format!(
                "application destination server '{target}' and namespace '{namespace}' do not match any of the allowed destinations in project '{project}'"
            )))
        }
    }

    /// Applications live in the server's namespace, or in one the project lists (SEC-22).
    /// `Err` is what the caller is told; the use case refuses with it (403, recorded as a
    /// [`crate::rbac::Refusal::ProjectRule`]), since only it knows who asked.
    pub fn check_app_namespace(&self, project: &str, app_ns: &str, server_ns: &str) -> Result<(), String> {
        if app_ns == server_ns || permitted(&self.source_namespaces, app_ns) {
            Ok(())
        } else {
            // Upstream's words (server/application's `getAppProject`), which do not tell a
            // project that refuses the namespace from one that does not exist.
            Err(format!(
                "app is not allowed in project \"{project}\", or the project does not exist"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negated_patterns_deny() {
        let patterns = vec![
            "https://github.com/org/*".to_owned(),
            "!https://github.com/org/secret".to_owned(),
        ];
        assert!(permitted(&patterns, "https://github.com/org/app"));
        assert!(!permitted(&patterns, "https://github.com/org/secret"));
        assert!(!permitted(&patterns, "https://gitlab.com/x"));
    }

    #[test]
    fn destinations_by_server_or_name_with_namespace_globs() {
        let rules = ProjectRules {
            destinations: vec![
                Destination {
                    server: "https://prod.*".to_owned(),
                    namespace: "team-*".to_owned(),
                    ..Destination::default()
                },
                Destination {
                    name: "staging".to_owned(),
                    namespace: "*".to_owned(),
                    ..Destination::default()
                },
            ],
            ..ProjectRules::default()
        };
        assert!(
            rules
                .check_destination("p", "https://prod.example", "", "team-a")
                .is_ok()
        );
        assert!(
            rules
                .check_destination("p", "https://prod.example", "", "kube-system")
                .is_err()
        );
        assert!(rules.check_destination("p", "https://s", "staging", "x").is_ok());
        assert!(rules.check_destination("p", "https://dev", "", "team-a").is_err());
    }
}
