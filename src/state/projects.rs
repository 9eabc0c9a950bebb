//! The AppProjects in the registry as the layers below the services need them: project roles
//! for RBAC (`rbac::ProjectSource`) and the check of presented project-role tokens
//! (`auth::ProjectTokenSource`). Each project's roles are read once per stored version, so
//! RBAC's per-project caches (keyed by the `Arc`) stay valid until the project changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::auth::{ProjectTokenClaims, ProjectTokenSource};
use crate::rbac::{ProjectRole, ProjectRoles, ProjectSource};
use crate::registry::projects::Roles;
use crate::registry::{Change, Key, Kind, Registry, RegistryError};

/// One project's roles, in both forms.
struct Parsed {
    rv: u64,
    roles: Arc<Roles>,
    rbac: Arc<ProjectRoles>,
}

pub struct RegistryProjects {
    registry: Arc<Registry>,
    namespace: String,
    parsed: Mutex<HashMap<String, Parsed>>,
}

impl RegistryProjects {
    pub fn new(registry: Arc<Registry>, namespace: &str) -> Self {
        Self {
            registry,
            namespace: namespace.to_owned(),
            parsed: Mutex::new(HashMap::new()),
        }
    }

    /// The roles of project `name` as stored now; `None` when it does not exist.
    fn roles(&self, name: &str) -> Option<(Arc<Roles>, Arc<ProjectRoles>)> {
        let doc = self
            .registry
            .get(&Key::new(Kind::AppProject, &self.namespace, name))?;
        let mut parsed = self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = parsed.get(name)
            && p.rv == doc.rv
        {
            return Some((Arc::clone(&p.roles), Arc::clone(&p.rbac)));
        }
        let roles = Arc::new(Roles::read_json(&doc.json));
        let rbac = Arc::new(rbac_roles(name, &roles));
        // Bounded by the number of projects: a deleted project's entry is dropped here.
        parsed.retain(|project, _| {
            self.registry
                .get(&Key::new(Kind::AppProject, &self.namespace, project))
                .is_some()
        });
        parsed.insert(
            name.to_owned(),
            Parsed {
                rv: doc.rv,
                roles: Arc::clone(&roles),
                rbac: Arc::clone(&rbac),
            },
        );
        Some((roles, rbac))
    }
}

impl ProjectSource for RegistryProjects {
    fn project(&self, name: &str) -> Option<Arc<ProjectRoles>> {
        self.roles(name).map(|(_, rbac)| rbac)
    }

    fn generation(&self) -> u64 {
        self.registry.kind_revision(Kind::AppProject)
    }
}

#[async_trait::async_trait]
impl ProjectTokenSource for RegistryProjects {
    async fn caught_up(&self, began: Instant) -> Result<(), String> {
        self.registry
            .fresh_since(began)
            .await
            .map_err(|e| format!("cannot check the token now: {e}"))
    }

    fn check(&self, project: &str, role: &str, claims: &ProjectTokenClaims<'_>) -> Result<(), String> {
        let (roles, _) = self
            .roles(project)
            .ok_or_else(|| format!("project {project} does not exist"))?;
        let role_of = roles
            .role(role)
            .ok_or_else(|| format!("project {project} has no role {role}"))?;
        if role_of
            .tokens
            .iter()
            .any(|t| t.records(claims.jti, claims.iat, claims.exp))
        {
            Ok(())
        } else {
            Err(format!(
                "the token is not (or no longer) a token of role {role} of project {project}"
            ))
        }
    }
}

/// The roles of project `name` as RBAC reads them.
pub fn rbac_roles(name: &str, roles: &Roles) -> ProjectRoles {
    ProjectRoles {
        name: name.to_owned(),
        roles: roles
            .0
            .iter()
            .map(|r| ProjectRole {
                name: r.name.clone(),
                policies: r.policies.clone(),
                groups: r.groups.clone(),
            })
            .collect(),
    }
}

/// Creates the `default` project, which permits everything, unless it exists. Upstream's
/// controller does the same at start.
pub async fn ensure_default_project(registry: &Registry, namespace: &str) -> Result<(), RegistryError> {
    let key = Key::new(Kind::AppProject, namespace, "default");
    if registry.get(&key).is_some() {
        return Ok(());
    }
    let value = serde_json::json!({
        "metadata": {"name": "default", "namespace": namespace},
        "spec": {
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*", "name": "*"}],
            "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]
        }
    });
    match registry.apply(vec![Change::Create { key, value }]).await {
        // Another replica starting at once on the same store created it first.
        Ok(_) | Err(RegistryError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}
