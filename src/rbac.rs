//! Authorisation: the one `enforce` every use case calls.
//!
//! For now this holds Argo CD's built-in policy only: the `admin` account is
//! `role:admin` and may do everything; nobody else may do anything that
//! needs a grant. The Casbin engine with `argocd-rbac-cm` policies replaces
//! the decision, not the call sites.

use crate::error::AppError;
use crate::principal::Principal;

#[derive(Debug, Default)]
pub struct Rbac;

impl Rbac {
    /// Whether `principal` may perform `action` on `resource`/`object`.
    pub fn allows(&self, principal: &Principal, resource: &str, action: &str, object: &str) -> bool {
        let _ = (resource, action, object);
        principal.account().is_some_and(|a| a.name == "admin")
    }

    /// `allows`, as a use case needs it: a denial is an error and an audit line.
    pub fn enforce(
        &self,
        principal: &Principal,
        resource: &str,
        action: &str,
        object: &str,
    ) -> Result<(), AppError> {
        if self.allows(principal, resource, action, object) {
            return Ok(());
        }
        tracing::info!(
            target: "audit",
            subject = principal.subject(),
            groups = ?principal.groups(),
            resource,
            action,
            object,
            decision = "deny",
            "permission denied"
        );
        Err(AppError::PermissionDenied(format!(
            "permission denied: {resource}, {action}, {object}"
        )))
    }
}
