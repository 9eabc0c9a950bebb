//! The one authorization step every use case takes: load what it is about, decide, hide what
//! the caller may not see, and deny through `Rbac::deny` (which writes the audit line and
//! counts the denial). No use case denies an RBAC permission any other way (what is refused
//! for other reasons, a blocking sync window or a project's restrictions, says why).
//!
//! A missing object and one the caller may not see give the same answer (SEC-13, SEC-14): a
//! caller who would have been allowed on the object wherever it could live learns that it is
//! missing; anyone else gets exactly the denial an existing object would give.

use crate::app::App;
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::Denial;

/// What a use case asks of the objects it touches: one RBAC resource and action, and how a
/// denial reads.
#[derive(Clone, Copy, Debug)]
pub struct Access<'a> {
    pub resource: &'static str,
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
    pub fn hidden(resource: &'static str, action: &'a str) -> Self {
        Self {
            resource,
            action,
            denial: Denial::Hidden,
        }
    }

    /// Objects whose names the caller already knows: upstream's detailed denial.
    pub fn detailed(resource: &'static str, action: &'a str) -> Self {
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
    pub fn allows(&self, app: &App, principal: &Principal, object: &str) -> bool {
        app.rbac.allows(principal, self.resource, self.action, object)
    }

    /// Ok when the caller may act on `object`, else the denial.
    pub fn check(&self, app: &App, principal: &Principal, object: &str) -> Result<(), AppError> {
        app.rbac
            .enforce_as(self.denial, principal, self.resource, self.action, object)
    }

    /// For a create (this access) of `requested` whose name is taken by an object at
    /// `existing`: Ok when the caller may see the existing object, else exactly the denial a
    /// create of `requested` the caller may not make gets. "Already exists" (or an idempotent
    /// answer) would reveal an object in a project the caller cannot see.
    pub fn check_taken(
        &self,
        app: &App,
        principal: &Principal,
        requested: &str,
        existing: &str,
    ) -> Result<(), AppError> {
        if self.to("get").allows(app, principal, existing) {
            return Ok(());
        }
        Err(app
            .rbac
            .deny(self.denial, principal, self.resource, self.action, requested))
    }

    /// The object `found` (whose RBAC object `object_of` tells) if the caller may act on it;
    /// the denial if not; and when nothing was found, `missing.not_found` to a caller allowed
    /// on every object it could have had, the denial to anyone else.
    pub fn load<T>(
        &self,
        app: &App,
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
                    Some(object) => {
                        Err(app
                            .rbac
                            .deny(self.denial, principal, self.resource, self.action, object))
                    }
                    None => Err(missing.not_found),
                }
            }
        }
    }

    /// The items the caller may act on; the others are left out, as if they did not exist.
    pub fn visible<T>(
        &self,
        app: &App,
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
