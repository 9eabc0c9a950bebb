//! The last connection check of each remote thing tiphys contacts (repositories, clusters),
//! and when the next one is due.
//!
//! Answers never wait for a check they can do without: a list shows the last outcome and
//! starts a re-check in the background once it is due. A success is due again after the check
//! interval; a failure sooner, after a backoff that doubles from [`FIRST_RETRY`] up to the
//! interval, so a remote that comes back is seen soon and one that stays down is not hammered.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How soon a first failure is checked again.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);

/// Entries kept at most: beyond, the table starts afresh (every state is checked again).
const MAX_ENTRIES: usize = 100_000;

/// The outcome of one check, and when it was made.
#[derive(Debug, Clone)]
pub struct Checked<T, E> {
    pub outcome: Result<T, E>,
    /// Said beside a successful outcome (a repository reached in clear text, say).
    pub warning: Option<String>,
    /// Wall-clock time of the check (RFC 3339 in answers).
    pub at: jiff::Timestamp,
    checked: Instant,
    /// Failures in a row, this one included.
    failures: u32,
    /// A re-check is running in the background.
    refreshing: bool,
}

impl<T, E> Checked<T, E> {
    /// How long after this check the next one is due.
    fn due_after(&self, interval: Duration) -> Duration {
        if self.outcome.is_ok() {
            return interval;
        }
        let doublings = self.failures.saturating_sub(1).min(16);
        FIRST_RETRY.saturating_mul(1 << doublings).min(interval)
    }
}

/// The table of checks, by key (the caller's: a repository's project and URL, a cluster's
/// server).
#[derive(Debug)]
pub struct Checks<T, E> {
    interval: Duration,
    states: Mutex<HashMap<String, Checked<T, E>>>,
    /// Keys never checked whose first check runs in the background.
    pending: Mutex<HashSet<String>>,
}

impl<T: Clone, E: Clone> Checks<T, E> {
    /// Checks whose successes are due again after `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            states: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashSet::new()),
        }
    }

    /// Records the outcome of a check of `key`.
    pub fn record(&self, key: &str, outcome: Result<T, E>, warning: Option<String>) -> Checked<T, E> {
        let mut states = lock(&self.states);
        let failures = match (&outcome, states.get(key)) {
            (Ok(_), _) => 0,
            (Err(_), Some(last)) => last.failures.saturating_add(1),
            (Err(_), None) => 1,
        };
        let checked = Checked {
            warning: outcome.is_ok().then_some(warning).flatten(),
            outcome,
            at: jiff::Timestamp::now(),
            checked: Instant::now(),
            failures,
            refreshing: false,
        };
        if states.len() >= MAX_ENTRIES {
            states.clear();
        }
        states.insert(key.to_owned(), checked.clone());
        drop(states);
        lock(&self.pending).remove(key);
        checked
    }

    /// Claims the first check of a key never checked: true for one caller only, until the
    /// outcome is recorded.
    pub fn claim_first_check(&self, key: &str) -> bool {
        let mut pending = lock(&self.pending);
        pending.len() < MAX_ENTRIES && pending.insert(key.to_owned())
    }

    /// The last recorded check of `key`, and whether it is due again (and not being re-checked
    /// already; the caller then starts one and this call marks it as running).
    pub fn recorded(&self, key: &str) -> (Option<Checked<T, E>>, bool) {
        let mut states = lock(&self.states);
        match states.get_mut(key) {
            Some(found) => {
                let due = !found.refreshing && found.checked.elapsed() >= found.due_after(self.interval);
                if due {
                    found.refreshing = true;
                }
                (Some(found.clone()), due)
            }
            None => (None, false),
        }
    }

    /// The last recorded check of `key`, without starting anything.
    pub fn peek(&self, key: &str) -> Option<Checked<T, E>> {
        lock(&self.states).get(key).cloned()
    }

    /// Forgets the check of `key` (the remote was deleted or changed).
    pub fn forget(&self, key: &str) {
        lock(&self.states).remove(key);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_up_to_the_interval_and_a_success_resets() {
        let checks: Checks<(), String> = Checks::new(Duration::from_secs(60));
        let mut afters = Vec::new();
        for _ in 0..6 {
            let failed = checks.record("k", Err("down".to_owned()), None);
            afters.push(failed.due_after(checks.interval).as_secs());
        }
        assert_eq!(afters, [5, 10, 20, 40, 60, 60]);
        let ok = checks.record("k", Ok(()), Some("clear text".to_owned()));
        assert_eq!(ok.due_after(checks.interval), Duration::from_secs(60));
        assert_eq!(ok.warning.as_deref(), Some("clear text"));
        assert_eq!(checks.record("k", Err("x".to_owned()), None).failures, 1);
    }

    #[test]
    fn a_due_check_is_claimed_once() {
        let checks: Checks<(), String> = Checks::new(Duration::ZERO);
        assert!(checks.claim_first_check("k"));
        assert!(!checks.claim_first_check("k"));
        checks.record("k", Ok(()), None);
        assert!(checks.recorded("k").1, "due at once with a zero interval");
        assert!(!checks.recorded("k").1, "already being re-checked");
        checks.forget("k");
        assert!(checks.peek("k").is_none());
    }
}
