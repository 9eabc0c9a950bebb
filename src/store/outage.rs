//! When a shared store last failed to answer a read: callers that can answer from what they
//! hold (the registry's view, the last-read account records) stop asking for a short pause, so
//! an unreachable etcd costs one wait, not one per request.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

#[derive(Debug)]
pub struct Outage {
    pause: Duration,
    failed_at: Mutex<Option<Instant>>,
}

impl Outage {
    /// After a failure, [`Outage::pausing`] is true for `pause`.
    pub const fn new(pause: Duration) -> Self {
        Self {
            pause,
            failed_at: Mutex::new(None),
        }
    }

    /// Notes that a read just failed.
    pub fn failed(&self) {
        *self.failed_at.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
    }

    /// Whether a read failed less than the pause ago: answer without asking.
    pub fn pausing(&self) -> bool {
        self.failed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| at.elapsed() < self.pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failure_pauses_asking_for_a_while() {
        let outage = Outage::new(Duration::from_millis(200));
        assert!(!outage.pausing());
        outage.failed();
        assert!(outage.pausing());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!outage.pausing());
    }
}
