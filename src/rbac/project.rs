//! Project roles as RBAC sees them. A project's roles become a policy layer
//! that is only consulted for objects of that project:
//!
//! ```text
//! p, proj:<project>:<role>, projects, get, <project>, allow   (always)
//! <each of the role's policy lines, as written>
//! g, <group>, proj:<project>:<role>                           (one per role group)
//! ```

use std::sync::Arc;

use super::policy::{PolicyError, Rules};

/// One role of an AppProject (`spec.roles[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectRole {
    pub name: String,
    pub policies: Vec<String>,
    pub groups: Vec<String>,
}

/// The RBAC-relevant part of one AppProject.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectRoles {
    pub name: String,
    pub roles: Vec<ProjectRole>,
}

impl ProjectRoles {
    /// The project's policy text, as upstream builds it.
    pub fn policy_text(&self) -> String {
        let mut text = String::new();
        for role in &self.roles {
            let subject = format!("proj:{}:{}", self.name, role.name);
            text.push_str(&format!("p, {subject}, projects, get, {}, allow\n", self.name));
            for line in &role.policies {
                text.push_str(line);
                text.push('\n');
            }
            for group in &role.groups {
                text.push_str(&format!("g, {group}, {subject}\n"));
            }
        }
        text
    }

    pub fn rules(&self) -> Result<Rules, PolicyError> {
        let mut rules = Rules::default();
        rules.add_text(&format!("project {:?}", self.name), &self.policy_text())?;
        Ok(rules)
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.name == role)
    }
}

/// Where RBAC finds projects. The resources API provides the real one; until
/// then, and in the policy tools, a fixed set.
pub trait ProjectSource: Send + Sync {
    /// The project named `name`, if it exists. The same `Arc` is returned
    /// until the project changes, so compiled layers can be reused.
    fn project(&self, name: &str) -> Option<Arc<ProjectRoles>>;

    /// Changes whenever any project changes (invalidates cached decisions).
    fn generation(&self) -> u64;
}

/// A fixed set of projects (none for a server without the resources API).
#[derive(Debug, Default)]
pub struct FixedProjects(pub Vec<Arc<ProjectRoles>>);

impl ProjectSource for FixedProjects {
    fn project(&self, name: &str) -> Option<Arc<ProjectRoles>> {
        self.0.iter().find(|p| p.name == name).cloned()
    }

    fn generation(&self) -> u64 {
        0
    }
}

/// `proj:<project>:<role>` split, when `subject` has exactly that form.
pub fn project_subject(subject: &str) -> Option<(&str, &str)> {
    let mut parts = subject.split(':');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("proj"), Some(project), Some(role), None) => Some((project, role)),
        _ => None,
    }
}

/// Resources whose objects are `<project>/...`.
pub const PROJECT_SCOPED: &[&str] = &[
    "applications",
    "applicationsets",
    "repositories",
    "clusters",
    "logs",
    "exec",
];

/// The project an RBAC object belongs to, by upstream's rule: the text before
/// the first `/` for project-scoped resources, the object itself for `projects`.
pub fn project_of<'a>(resource: &str, object: &'a str) -> Option<&'a str> {
    if resource == "projects" {
        return Some(object);
    }
    if PROJECT_SCOPED.contains(&resource) {
        return object.split_once('/').map(|(project, _)| project);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_text_grants_get_and_binds_groups() {
        let p = ProjectRoles {
            name: "web".into(),
            roles: vec![ProjectRole {
                name: "dev".into(),
                policies: vec!["p, proj:web:dev, applications, sync, web/*, allow".into()],
                groups: vec!["my-org:devs".into()],
            }],
        };
        assert_eq!(
            p.policy_text(),
            "p, proj:web:dev, projects, get, web, allow\np, proj:web:dev, applications, sync, web/*, allow\ng, my-org:devs, proj:web:dev\n"
        );
        assert!(p.rules().is_ok());
    }

    #[test]
    fn subjects_and_objects() {
        assert_eq!(project_subject("proj:web:dev"), Some(("web", "dev")));
        assert_eq!(project_subject("proj:web:dev:x"), None);
        assert_eq!(project_subject("role:web:dev"), None);
        assert_eq!(project_of("applications", "web/ns/app"), Some("web"));
        assert_eq!(project_of("clusters", "https://k8s"), Some("https:"));
        assert_eq!(project_of("clusters", "kube"), None);
        assert_eq!(project_of("projects", "web"), Some("web"));
        assert_eq!(project_of("accounts", "web/x"), None);
    }
}
