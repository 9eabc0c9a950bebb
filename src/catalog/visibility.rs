//! Remembered list decisions: whether a caller may `get` each application, per caller and per
//! version of what decides it (the policy in force and the projects, whose roles bind groups).
//!
//! Facet counts look at every application, and a user in fifty groups costs a full RBAC
//! decision per application: remembering them makes the second look a hash lookup by the
//! entry's [`super::Entry::uid`] (BENCHMARKS.md, "Pages, filters and facets").

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What decides: the policy in force (held, so that its identity is never reused while
/// remembered) and the projects' revision.
pub type Version = (Arc<dyn Any + Send + Sync>, u64);

fn same(a: &Version, b: &Version) -> bool {
    Arc::ptr_eq(&a.0, &b.0) && a.1 == b.1
}

/// Callers remembered at once; the least recently used is forgotten first.
const CALLERS: usize = 256;

/// Decisions of one caller under one version of the policy and projects.
pub struct Decisions {
    version: Version,
    allowed: HashMap<u64, bool, foldhash::fast::RandomState>,
}

impl Decisions {
    /// Whether the caller may see the entry `uid`, deciding with `decide` when not remembered.
    /// At most `bound` decisions are kept: past that (entries replaced many times over), the
    /// set starts again.
    pub fn allowed(&mut self, uid: u64, bound: usize, decide: impl FnOnce() -> bool) -> bool {
        if let Some(allowed) = self.allowed.get(&uid) {
            return *allowed;
        }
        if self.allowed.len() >= bound {
            self.allowed.clear();
        }
        let allowed = decide();
        self.allowed.insert(uid, allowed);
        allowed
    }
}

#[derive(Default)]
pub struct Visibility {
    callers: Mutex<Callers>,
}

#[derive(Default)]
struct Callers {
    tick: u64,
    by_caller: HashMap<String, (u64, Arc<Mutex<Decisions>>)>,
}

impl Visibility {
    /// The decisions of `caller` (a fingerprint of who they are to RBAC) at `version` (the
    /// policy's identity and the projects' revision); a new version starts empty.
    pub fn of(&self, caller: &str, version: Version) -> Arc<Mutex<Decisions>> {
        let mut callers = self
            .callers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        callers.tick += 1;
        let tick = callers.tick;
        if !callers.by_caller.contains_key(caller) && callers.by_caller.len() >= CALLERS {
            let oldest = callers
                .by_caller
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(name, _)| name.clone());
            if let Some(oldest) = oldest {
                callers.by_caller.remove(&oldest);
            }
        }
        let (used, decisions) = callers
            .by_caller
            .entry(caller.to_owned())
            .or_insert_with(|| (tick, Arc::new(Mutex::new(Decisions::new(version.clone())))));
        *used = tick;
        let decisions = Arc::clone(decisions);
        drop(callers);
        {
            let mut held = decisions
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !same(&held.version, &version) {
                *held = Decisions::new(version);
            }
        }
        decisions
    }
}

impl Decisions {
    fn new(version: Version) -> Self {
        Self {
            version,
            allowed: HashMap::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(policy: &Arc<dyn Any + Send + Sync>, projects: u64) -> Version {
        (Arc::clone(policy), projects)
    }

    #[test]
    fn decisions_are_remembered_per_caller_and_version() {
        let v = Visibility::default();
        let one: Arc<dyn Any + Send + Sync> = Arc::new(1);
        let two: Arc<dyn Any + Send + Sync> = Arc::new(1);
        let mut asked = 0;
        for _ in 0..3 {
            let d = v.of("alice", version(&one, 1));
            let mut d = d.lock().unwrap();
            assert!(d.allowed(7, 100, || {
                asked += 1;
                true
            }));
        }
        assert_eq!(asked, 1);
        // Another caller, and a new policy, decide again.
        assert!(
            !v.of("bob", version(&one, 1))
                .lock()
                .unwrap()
                .allowed(7, 100, || false)
        );
        // Another policy (equal in value, not the same one), or another projects' revision.
        assert!(
            !v.of("alice", version(&two, 1))
                .lock()
                .unwrap()
                .allowed(7, 100, || false)
        );
        assert!(
            !v.of("alice", version(&two, 2))
                .lock()
                .unwrap()
                .allowed(7, 100, || false)
        );
    }

    #[test]
    fn the_callers_and_their_decisions_are_bounded() {
        let v = Visibility::default();
        let policy: Arc<dyn Any + Send + Sync> = Arc::new(());
        for n in 0..(CALLERS + 10) {
            v.of(&format!("user-{n}"), version(&policy, 1));
        }
        assert_eq!(v.callers.lock().unwrap().by_caller.len(), CALLERS);
        let d = v.of("carol", version(&policy, 1));
        let mut d = d.lock().unwrap();
        for uid in 0..50 {
            d.allowed(uid, 10, || true);
        }
        assert!(d.allowed.len() <= 10);
    }
}
