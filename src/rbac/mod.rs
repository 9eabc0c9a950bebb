//! Authorisation: Argo CD's RBAC (Casbin model, `policy.csv` format) decided
//! by our own engine, and [`Rbac::deny`], the one place a denial is recorded.
//!
//! - [`policy`] reads policy text, [`csv`] splits its lines as Go's `encoding/csv`;
//! - [`glob`] and [`gore`] give patterns upstream's meaning, [`matcher`] compiles them;
//! - [`model`] is one Casbin check over rules indexed by subject;
//! - [`decide`] is Argo CD's procedure (default role, user, groups, project tokens);
//! - [`cache`] remembers decisions per policy version;
//! - [`project`] turns AppProject roles into a policy layer.
//!
//! The compiled policy lives in the configuration's settings, so it is built
//! and validated with the rest of the configuration: a bad policy never
//! replaces a good one, and every decision sees one consistent version.
//!
//! The engine is our own, not a Casbin library, for speed: rules indexed by
//! subject and patterns compiled once decide an uncached request hundreds of
//! times faster than Casbin's scan of every line (BENCHMARKS.md,
//! "Authorization": 227x at 1,000 policy lines, 1,222x at 10,000). It is kept
//! honest by `tests/rbac_oracle`, which checks its decisions on random
//! policies and requests against Argo CD's procedure run on the `casbin`
//! crate, and names each deliberate difference from upstream in a test.

pub mod cache;
pub mod csv;
pub mod decide;
pub mod glob;
pub mod gore;
pub mod matcher;
pub mod model;
pub mod policy;
pub mod project;
pub mod resources;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use decide::{LoadError, LoadOptions, Policy, Subject};
pub use matcher::MatchMode;
pub use project::{FixedProjects, ProjectRole, ProjectRoles, ProjectSource};

use crate::error::AppError;
use crate::principal::Principal;

/// Where the authoriser reads the policy in force: the configuration (`crate::config`
/// implements it), which this module does not depend on.
pub trait PolicySource: Send + Sync {
    /// The policy in force now.
    fn policy(&self) -> Arc<Policy>;
    /// `server.rbac.rollback.enforce.enable`: rollback has its own action (otherwise it is
    /// decided as `sync`).
    fn rollback_enforced(&self) -> bool;
    /// Edits of the policy refused so far (the last valid policy stayed in force).
    fn policy_errors(&self) -> u64;
}

/// The server's authoriser: the current policy plus the projects it may consult.
pub struct Rbac {
    config: Arc<dyn PolicySource>,
    projects: Arc<dyn ProjectSource>,
    denials: AtomicU64,
}

impl Rbac {
    pub fn new(config: Arc<dyn PolicySource>, projects: Arc<dyn ProjectSource>) -> Self {
        Self {
            config,
            projects,
            denials: AtomicU64::new(0),
        }
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.config.policy()
    }

    /// `server.rbac.rollback.enforce.enable`: rollback has its own action
    /// (otherwise it is decided as `sync`).
    pub fn rollback_enforced(&self) -> bool {
        self.config.rollback_enforced()
    }

    /// Whether `principal` may perform `action` on `resource`/`object`.
    pub fn allows(&self, principal: &Principal, resource: &str, action: &str, object: &str) -> bool {
        self.policy().decide(
            self.projects.as_ref(),
            subject(principal),
            resource,
            action,
            object,
        )
    }

    /// `allows`, as a use case needs it: a denial is an error (upstream's detailed message)
    /// and an audit line.
    pub fn enforce(
        &self,
        principal: &Principal,
        resource: &str,
        action: &str,
        object: &str,
    ) -> Result<(), AppError> {
        self.enforce_as(Denial::Detailed, principal, resource, action, object)
    }

    /// [`Rbac::enforce`], with the denial worded as `denial` says.
    pub fn enforce_as(
        &self,
        denial: Denial,
        principal: &Principal,
        resource: &str,
        action: &str,
        object: &str,
    ) -> Result<(), AppError> {
        if self.allows(principal, resource, action, object) {
            Ok(())
        } else {
            Err(self.deny(denial, principal, resource, action, object))
        }
    }

    /// The one place a denial is recorded: an audit line (target `audit`) and the denial
    /// counter. Returns the error the caller gets.
    pub fn deny(
        &self,
        denial: Denial,
        principal: &Principal,
        resource: &str,
        action: &str,
        object: &str,
    ) -> AppError {
        self.denials.fetch_add(1, Ordering::Relaxed);
        // Objects are often URLs a caller typed: a password in one is never logged or echoed.
        let object = crate::urlmask::mask(object);
        tracing::info!(
            target: "audit",
            subject = principal.subject(),
            groups = ?self.policy().groups(principal.claims()),
            token_id = principal.token_id(),
            resource,
            action,
            object,
            decision = "deny",
            "permission denied"
        );
        AppError::PermissionDenied(match denial {
            Denial::Detailed => denied_message(principal, resource, action, &object),
            Denial::Hidden => HIDDEN_DENIAL.to_owned(),
        })
    }

    /// Requests denied so far.
    pub fn denials(&self) -> u64 {
        self.denials.load(Ordering::Relaxed)
    }
}

/// How a denial reads to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    /// Upstream's message, naming the resource, action, object and caller.
    Detailed,
    /// One fixed text, the same for an object the caller may not see and for one that does
    /// not exist (SEC-13, SEC-14): the object's name may be secret.
    Hidden,
}

/// The text of every [`Denial::Hidden`].
pub const HIDDEN_DENIAL: &str = "permission denied";

/// How RBAC sees a principal.
pub fn subject(principal: &Principal) -> Subject<'_> {
    match principal {
        Principal::Anonymous => Subject::Plain(""),
        other => Subject::Claims {
            user: other.subject(),
            claims: other.claims(),
        },
    }
}

/// Upstream's wording, so scripts that match on it keep working.
fn denied_message(principal: &Principal, resource: &str, action: &str, object: &str) -> String {
    let mut message = format!("permission denied: {resource}, {action}, {object}");
    if principal.is_authenticated() {
        message.push_str(&format!(", sub: {}", principal.subject()));
        if let Some(iat) = principal.issued_at() {
            message.push_str(&format!(", iat: {iat}"));
        }
    }
    message
}
