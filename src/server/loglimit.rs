//! Log lines a client can cause (TLS bytes on a plaintext port, gRPC over HTTP/1.1, failed TLS
//! handshakes, broken connections) are rate-limited per kind, so that no client can fill the
//! disk: a token bucket per kind (a burst, then a few lines a second). What was suppressed is
//! counted: the next line of that kind that gets through says how many it stands for, and
//! `/metrics` exports the totals (`tiphys_log_lines_suppressed_total{kind}`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The kinds of client-caused lines, each with its own bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    TlsOnPlaintextPort,
    GrpcOverHttp1,
    TlsHandshakeFailed,
    ConnectionError,
    OverCapacity,
}

impl LogKind {
    pub const ALL: [Self; 5] = [
        Self::TlsOnPlaintextPort,
        Self::GrpcOverHttp1,
        Self::TlsHandshakeFailed,
        Self::ConnectionError,
        Self::OverCapacity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TlsOnPlaintextPort => "tls_on_plaintext_port",
            Self::GrpcOverHttp1 => "grpc_over_http1",
            Self::TlsHandshakeFailed => "tls_handshake_failed",
            Self::ConnectionError => "connection_error",
            Self::OverCapacity => "over_capacity",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Lines let through at once, then per second, for each kind.
const BURST: f64 = 10.0;
const PER_SECOND: f64 = 2.0;

#[derive(Debug)]
struct Bucket {
    /// Tokens left and when they were last refilled.
    state: Mutex<(f64, Option<Instant>)>,
    /// Suppressed since the last line let through.
    pending: AtomicU64,
    /// Suppressed since the start.
    total: AtomicU64,
}

impl Default for Bucket {
    fn default() -> Self {
        Self {
            state: Mutex::new((BURST, None)),
            pending: AtomicU64::new(0),
            total: AtomicU64::new(0),
        }
    }
}

/// One per server (owned by its metrics); no global state.
#[derive(Debug, Default)]
pub struct LogLimiter {
    buckets: [Bucket; LogKind::ALL.len()],
}

impl LogLimiter {
    /// Whether a line of `kind` may be written now: `Some(n)` with the number of lines of that
    /// kind suppressed since the last one written (to report in this one), `None` if this one
    /// is suppressed (and counted).
    pub fn allow(&self, kind: LogKind) -> Option<u64> {
        self.allow_at(kind, Instant::now())
    }

    fn allow_at(&self, kind: LogKind, now: Instant) -> Option<u64> {
        let bucket = &self.buckets[kind.index()];
        let allowed = {
            let mut state = bucket
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (tokens, last) = &mut *state;
            if let Some(last) = *last {
                let refill = now.saturating_duration_since(last).as_secs_f64() * PER_SECOND;
                *tokens = (*tokens + refill).min(BURST);
            }
            *last = Some(now);
            if *tokens >= 1.0 {
                *tokens -= 1.0;
                true
            } else {
                false
            }
        };
        if allowed {
            Some(bucket.pending.swap(0, Ordering::Relaxed))
        } else {
            bucket.pending.fetch_add(1, Ordering::Relaxed);
            bucket.total.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// Lines of `kind` suppressed since the start.
    pub fn suppressed(&self, kind: LogKind) -> u64 {
        self.buckets[kind.index()].total.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_then_a_few_a_second_and_the_next_line_reports_what_was_dropped() {
        let limiter = LogLimiter::default();
        let start = Instant::now();
        let kind = LogKind::TlsOnPlaintextPort;
        let burst = (0..100)
            .filter(|_| limiter.allow_at(kind, start).is_some())
            .count();
        assert_eq!(burst, 10);
        assert_eq!(limiter.suppressed(kind), 90);
        // Another kind has its own bucket.
        assert_eq!(limiter.allow_at(LogKind::GrpcOverHttp1, start), Some(0));
        // Half a second later one more line gets through, saying 90 were dropped before it.
        let later = start + Duration::from_millis(500);
        assert_eq!(limiter.allow_at(kind, later), Some(90));
        assert_eq!(limiter.allow_at(kind, later), None);
        assert_eq!(limiter.allow_at(kind, later + Duration::from_secs(1)), Some(1));
        assert_eq!(limiter.suppressed(kind), 91);
    }
}
