//! Project roles for RBAC, read from the AppProjects in the registry (`rbac::ProjectSource`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::{Key, Kind, Registry};
use crate::rbac::{ProjectRole, ProjectRoles, ProjectSource};

/// Parses a project's roles once per stored version, so RBAC's per-project caches (keyed by
/// the `Arc`) stay valid until the project changes.
pub struct RegistryProjects {
    registry: Arc<Registry>,
    namespace: String,
    parsed: Mutex<HashMap<String, (u64, Arc<ProjectRoles>)>>,
}

impl RegistryProjects {
    pub fn new(registry: Arc<Registry>, namespace: &str) -> Self {
        Self {
            registry,
            namespace: namespace.to_owned(),
            parsed: Mutex::new(HashMap::new()),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProjectView {
    spec: SpecView,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SpecView {
    roles: Vec<RoleView>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RoleView {
    name: String,
    policies: Vec<String>,
    groups: Vec<String>,
}

impl ProjectSource for RegistryProjects {
    fn project(&self, name: &str) -> Option<Arc<ProjectRoles>> {
        let doc = self
            .registry
            .get(&Key::new(Kind::AppProject, &self.namespace, name))?;
        let mut parsed = self
            .parsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((rv, roles)) = parsed.get(name)
            && *rv == doc.rv
        {
            return Some(Arc::clone(roles));
        }
        let view: ProjectView = serde_json::from_slice(&doc.json).unwrap_or_default();
        let roles = Arc::new(ProjectRoles {
            name: name.to_owned(),
            roles: view
                .spec
                .roles
                .into_iter()
                .map(|r| ProjectRole {
                    name: r.name,
                    policies: r.policies,
                    groups: r.groups,
                })
                .collect(),
        });
        parsed.insert(name.to_owned(), (doc.rv, Arc::clone(&roles)));
        Some(roles)
    }

    fn generation(&self) -> u64 {
        self.registry.kind_revision(Kind::AppProject)
    }
}
