//! Authorisation: Argo CD's RBAC (Casbin model, `policy.csv` format) decided
//! by our own engine, and [`Rbac::deny`] and [`Rbac::refuse`], the one place a denial is
//! recorded (an audit line and a count) and the only code that makes an
//! `AppError::PermissionDenied` (`tests/inproc/denials.rs` checks it).
//!
//! - [`policy`] reads policy text, [`csv`] splits its lines as Go's `encoding/csv`;
//! - [`crate::glob`] and [`gore`] give patterns upstream's meaning, [`matcher`] compiles them;
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

use crate::error::{AppError, Denied};
use crate::principal::{Principal, SsoPrincipal};

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
    /// By [`Refusal::index`].
    refusals: [AtomicU64; Refusal::ALL.len()],
}

impl Rbac {
    pub fn new(config: Arc<dyn PolicySource>, projects: Arc<dyn ProjectSource>) -> Self {
        Self {
            config,
            projects,
            denials: AtomicU64::new(0),
            refusals: Default::default(),
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

    /// The one place an RBAC denial is recorded: an audit line (target `audit`) and the denial
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
            kind = "rbac",
            subject = principal.subject(),
            groups = ?groups(&self.policy(), principal),
            token_id = principal.token_id(),
            resource,
            action,
            object,
            decision = "deny",
            "permission denied"
        );
        AppError::PermissionDenied(Denied::once_recorded(match denial {
            Denial::Detailed => denied_message(principal, resource, action, &object),
            Denial::Hidden => HIDDEN_DENIAL.to_owned(),
        }))
    }

    /// A 403 that is not an RBAC decision (a project's restrictions, a sync window, …),
    /// recorded as [`Rbac::deny`] records a denial: one audit line, with the `kind` and the
    /// `reason` (what the caller is told), and one count of its kind. `object` is what was
    /// refused (an application, a repository, an account). The caller gets `message`
    /// unchanged: it is upstream's wording where upstream refuses the same thing.
    pub fn refuse(&self, kind: Refusal, principal: &Principal, object: &str, message: String) -> AppError {
        self.refusals[kind.index()].fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            target: "audit",
            kind = kind.as_str(),
            subject = principal.subject(),
            groups = ?groups(&self.policy(), principal),
            token_id = principal.token_id(),
            object = crate::urlmask::mask(object),
            reason = crate::urlmask::mask(&message),
            decision = "deny",
            "permission denied"
        );
        AppError::PermissionDenied(Denied::once_recorded(message))
    }

    /// Requests denied by RBAC so far.
    pub fn denials(&self) -> u64 {
        self.denials.load(Ordering::Relaxed)
    }

    /// Requests refused for `kind` so far.
    pub fn refusals(&self, kind: Refusal) -> u64 {
        self.refusals[kind.index()].load(Ordering::Relaxed)
    }
}

/// Why a call was refused with 403 / `PERMISSION_DENIED` other than by RBAC: the `kind` of
/// its audit line and the label of `tiphys_permission_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The project does not permit it: a source repository not in its `sourceRepos`, an
    /// application namespace not in its `sourceNamespaces`.
    ProjectRule,
    /// A sync window of the application's project forbids syncing now (or is invalid).
    SyncWindow,
    /// A project token asked for what only a local account has (a password).
    NotAnAccount,
    /// The request names a project or source that the stored application does not have.
    AppSource,
    /// The application's namespace is not one `--application-namespaces` enables.
    AppNamespace,
    /// A resource the request names is not one the application manages.
    NotInApp,
}

impl Refusal {
    /// Every kind, in declaration order ([`Refusal::index`] is the position here).
    pub const ALL: [Refusal; 6] = [
        Refusal::ProjectRule,
        Refusal::SyncWindow,
        Refusal::NotAnAccount,
        Refusal::AppSource,
        Refusal::AppNamespace,
        Refusal::NotInApp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::ProjectRule => "project_rule",
            Refusal::SyncWindow => "sync_window",
            Refusal::NotAnAccount => "not_an_account",
            Refusal::AppSource => "app_source",
            Refusal::AppNamespace => "app_namespace",
            Refusal::NotInApp => "not_in_app",
        }
    }

    fn index(self) -> usize {
        self as usize
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

/// The groups RBAC puts `principal` in: those of its provider among several, else the values
/// of the claims `policy`'s `scopes` names.
pub fn groups<'p>(policy: &Policy, principal: &'p Principal) -> Vec<&'p str> {
    match principal.sso().and_then(|s| s.groups.as_ref()) {
        Some(groups) => groups.iter().map(String::as_str).collect(),
        None => policy.groups(principal.claims()),
    }
}

/// Who `principal` is to RBAC under `policy`, as text: two principals with the same
/// fingerprint get the same decisions (for remembering them).
pub fn fingerprint(policy: &Policy, principal: &Principal) -> String {
    let user = match subject(principal) {
        Subject::Plain(user) | Subject::Grouped { user, .. } | Subject::Claims { user, .. } => user,
    };
    let mut out = String::with_capacity(64);
    out.push_str(user);
    for group in groups(policy, principal) {
        out.push('\0');
        out.push_str(group);
    }
    out
}

/// How RBAC sees a principal.
pub fn subject(principal: &Principal) -> Subject<'_> {
    match principal {
        Principal::Anonymous => Subject::Plain(""),
        Principal::Sso(SsoPrincipal {
            user,
            groups: Some(groups),
            ..
        }) => Subject::Grouped { user, groups },
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

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn each_refusal_kind_has_its_own_counter_and_label() {
        let mut labels = Vec::new();
        for (i, kind) in Refusal::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
            labels.push(kind.as_str());
        }
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Refusal::ALL.len(), "{labels:?}");
    }
}
