//! The one authorization step every use case takes: load what it is about, decide, hide what
//! the caller may not see, and deny through `Rbac::deny` (which writes the audit line and
//! counts the denial). No use case asks RBAC any other way (`tests/inproc/denials.rs` fails if
//! one calls `rbac.allows`, `rbac.deny` or `rbac.refuse` itself). What is refused for other
//! reasons, a blocking sync window or a project's restrictions, is refused through [`refuse`],
//! which says why and is recorded the same way: the audit trail writes no line of its own for
//! a 403, so nothing else can make one (`AppError::PermissionDenied` holds a
//! `crate::error::Denied`, which only the authorizer makes).
//!
//! A missing object and one the caller may not see give the same answer (SEC-13, SEC-14): a
//! caller who would have been allowed on the object wherever it could live learns that it is
//! missing; anyone else gets exactly the denial an existing object would give.

use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::{Denial, Refusal};
use crate::state::ServerState;

/// What a use case asks of the objects it touches: one RBAC resource and action, and how a
/// denial reads.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub resource: &'a str,
    pub action: &'a str,
    pub denial: Denial,
}

/// What a lookup that found nothing needs to answer.
#[derive(Debug)]
pub struct Missing {
    /// The RBAC objects the caller must be allowed on to learn that nothing is there: every
    /// object the missing one could have had.
    pub objects: Vec<String>,
    /// The answer for a caller who may learn it.
    pub not_found: AppError,
}

impl Missing {
    pub fn new(objects: Vec<String>, not_found: AppError) -> Self {
        Self { objects, not_found }
    }

    /// A missing object whose RBAC object does not depend on where it lives.
    pub fn at(object: impl Into<String>, not_found: AppError) -> Self {
        Self::new(vec![object.into()], not_found)
    }
}

impl<'a> Access<'a> {
    /// Objects whose names are secret: every denial reads the same ([`Denial::Hidden`]).
    pub const fn hidden(resource: &'a str, action: &'a str) -> Self {
        Self {
            resource,
            action,
            denial: Denial::Hidden,
        }
    }

    /// Objects whose names the caller already knows: upstream's detailed denial.
    pub const fn detailed(resource: &'a str, action: &'a str) -> Self {
        Self {
            resource,
            action,
            denial: Denial::Detailed,
        }
    }

    /// The same access for another action.
    pub fn to(self, action: &'a str) -> Self {
        Self { action, ..self }
    }

    /// Whether the caller may act on `object` (no audit: for hiding list entries and
    /// answering questions).
    pub fn allows(&self, app: &ServerState, principal: &Principal, object: &str) -> bool {
        app.rbac.allows(principal, self.resource, self.action, object)
    }

    /// Ok when the caller may act on `object`, else the denial.
    pub fn check(&self, app: &ServerState, principal: &Principal, object: &str) -> Result<(), AppError> {
        if self.allows(app, principal, object) {
            Ok(())
        } else {
            Err(self.deny(app, principal, object))
        }
    }

    /// Ok when the caller may act on `object` with this action or with `other` (upstream's
    /// "create or update" checks); else the denial, naming this action.
    pub fn check_either(
        &self,
        app: &ServerState,
        principal: &Principal,
        other: &'a str,
        object: &str,
    ) -> Result<(), AppError> {
        if self.allows(app, principal, object) || self.to(other).allows(app, principal, object) {
            Ok(())
        } else {
            Err(self.deny(app, principal, object))
        }
    }

    /// The denial of this access to `object`, recorded, for a use case that decided with
    /// [`Access::allows`] because more than RBAC's answer mattered (a project role's members).
    pub fn deny(&self, app: &ServerState, principal: &Principal, object: &str) -> AppError {
        app.rbac
            .deny(self.denial, principal, self.resource, self.action, object)
    }

    /// For a create (this access) of `requested` whose name is taken by an object at
    /// `existing`: Ok when the caller may see the existing object, else exactly the denial a
    /// create of `requested` the caller may not make gets. "Already exists" (or an idempotent
    /// answer) would reveal an object in a project the caller cannot see.
    pub fn check_taken(
        &self,
        app: &ServerState,
        principal: &Principal,
        requested: &str,
        existing: &str,
    ) -> Result<(), AppError> {
        if self.to("get").allows(app, principal, existing) {
            return Ok(());
        }
        Err(self.deny(app, principal, requested))
    }

    /// The object `found` (whose RBAC object `object_of` tells) if the caller may act on it;
    /// the denial if not; and when nothing was found, `missing.not_found` to a caller allowed
    /// on every object it could have had, the denial to anyone else.
    pub fn load<T>(
        &self,
        app: &ServerState,
        principal: &Principal,
        found: Option<T>,
        object_of: impl FnOnce(&T) -> String,
        missing: impl FnOnce() -> Missing,
    ) -> Result<T, AppError> {
        match found {
            Some(item) => {
                self.check(app, principal, &object_of(&item))?;
                Ok(item)
            }
            None => {
                let missing = missing();
                let denied = match missing.objects.iter().find(|o| !self.allows(app, principal, o)) {
                    Some(denied) => Some(denied.as_str()),
                    // No object named: nobody may learn that nothing is there.
                    None if missing.objects.is_empty() => Some(""),
                    None => None,
                };
                match denied {
                    Some(object) => Err(self.deny(app, principal, object)),
                    None => Err(missing.not_found),
                }
            }
        }
    }

    /// The items the caller may act on; the others are left out, as if they did not exist.
    pub fn visible<T>(
        &self,
        app: &ServerState,
        principal: &Principal,
        items: impl IntoIterator<Item = T>,
        object_of: impl Fn(&T) -> String,
    ) -> Vec<T> {
        items
            .into_iter()
            .filter(|item| self.allows(app, principal, &object_of(item)))
            .collect()
    }
}

/// A 403 for a reason other than RBAC (`kind`), recorded like an RBAC denial: one audit line
/// with the kind and `message` as its reason, and one count. `object` names what was refused
/// (the application's RBAC object, a repository, an account). The caller gets `message`, so
/// keep upstream's wording where upstream refuses the same thing: scripts match on it.
pub fn refuse(
    app: &ServerState,
    principal: &Principal,
    kind: Refusal,
    object: &str,
    message: String,
) -> AppError {
    app.rbac.refuse(kind, principal, object, message)
}
