//! The wall clock, read in one place (Unix time; tokens and records store it).

/// The clock the state reads time from (tokens, sessions, revocations, logins, rate limits,
/// certificates), handed to each part rather than read from a global, so that tests can stop
/// time and move it by hand. It counts Unix microseconds: what it measures may be compared
/// between replicas (rate limits kept in Redis) and stored (token times).
#[derive(Clone, Debug)]
pub struct Clock(std::sync::Arc<Source>);

#[derive(Debug)]
enum Source {
    System,
    /// Stopped at this many microseconds; moved only by [`Clock::advance`].
    Paused(std::sync::atomic::AtomicU64),
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl Clock {
    /// The wall clock.
    pub fn system() -> Self {
        Self(std::sync::Arc::new(Source::System))
    }

    /// A clock stopped at the current time, for tests.
    pub fn paused() -> Self {
        let now = Self::system().now_us();
        Self(std::sync::Arc::new(Source::Paused(now.into())))
    }

    /// Microseconds since the Unix epoch.
    pub fn now_us(&self) -> u64 {
        match &*self.0 {
            Source::System => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                u64::try_from(now.as_micros()).unwrap_or(u64::MAX)
            }
            Source::Paused(at) => at.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        i64::try_from(self.now_us() / 1000).unwrap_or(i64::MAX)
    }

    /// Seconds since the Unix epoch.
    pub fn now_s(&self) -> i64 {
        self.now_ms() / 1000
    }

    /// The time as a `SystemTime` (certificate validity).
    pub fn system_time(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_micros(self.now_us())
    }

    /// Moves a paused clock forward; the system clock ignores it.
    pub fn advance(&self, by: std::time::Duration) {
        if let Source::Paused(at) = &*self.0 {
            let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
            at.fetch_add(by, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Clock;
    use std::time::Duration;

    #[test]
    fn a_paused_clock_moves_only_when_told() {
        let clock = Clock::paused();
        let start = clock.now_us();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(clock.now_us(), start);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.now_us(), start + 1_500_000);
        assert_eq!(clock.now_ms(), i64::try_from((start + 1_500_000) / 1000).unwrap());
        assert_eq!(clock.now_s(), clock.now_ms() / 1000);
        let system = Clock::system();
        assert!(system.now_us().abs_diff(start) < 60_000_000);
    }
}
