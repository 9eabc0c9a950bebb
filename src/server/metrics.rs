//! Prometheus metrics with fixed, low-cardinality labels: requests and
//! latency by protocol (grpc, grpc-web, rest, ui) and outcome class.
//! Plain atomics: nothing here allocates per request.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::protocol::Protocol;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 10] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

/// How a request ended, coarsely: HTTP status class, or gRPC ok/error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success,
    ClientError,
    ServerError,
    Redirect,
}

const OUTCOMES: [Outcome; 4] = [
    Outcome::Success,
    Outcome::Redirect,
    Outcome::ClientError,
    Outcome::ServerError,
];

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Redirect => "redirect",
            Self::ClientError => "client_error",
            Self::ServerError => "server_error",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Success => 0,
            Self::Redirect => 1,
            Self::ClientError => 2,
            Self::ServerError => 3,
        }
    }

    pub fn from_http(status: u16) -> Self {
        match status {
            300..=399 => Self::Redirect,
            400..=499 => Self::ClientError,
            500.. => Self::ServerError,
            _ => Self::Success,
        }
    }

    /// gRPC codes a client caused are client errors; the rest server errors.
    pub fn from_grpc(code: &str) -> Self {
        match code.trim() {
            "0" => Self::Success,
            "1" | "3" | "4" | "5" | "6" | "7" | "8" | "9" | "10" | "11" | "12" | "16" => Self::ClientError,
            _ => Self::ServerError,
        }
    }
}

#[derive(Default)]
struct PerProtocol {
    outcomes: [AtomicU64; 4],
    /// Observations per bucket, not cumulative: the last counts those above
    /// every bound. One counter per observation instead of one per bound it
    /// is under: these cache lines travel between cores on every request.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

#[derive(Default)]
pub struct Metrics {
    protocols: [PerProtocol; 4],
    connections_tls: AtomicU64,
    connections_plaintext: AtomicU64,
    connections_refused: AtomicU64,
    open_connections: AtomicU64,
    redirects: AtomicU64,
}

fn index(protocol: Protocol) -> usize {
    match protocol {
        Protocol::Grpc => 0,
        Protocol::GrpcWeb => 1,
        Protocol::Rest => 2,
        Protocol::Ui => 3,
    }
}

/// Counts an open connection until dropped.
pub struct OpenConnection<'a>(&'a Metrics);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn connection_opened(&self, tls: bool) -> OpenConnection<'_> {
        let counter = if tls {
            &self.connections_tls
        } else {
            &self.connections_plaintext
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self)
    }

    /// A connection closed before a request: idle, failed handshake, wrong protocol.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub fn redirected(&self) {
        self.redirects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn observe(&self, protocol: Protocol, outcome: Outcome, elapsed: Duration) {
        let p = &self.protocols[index(protocol)];
        p.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(BUCKETS.len());
        p.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        p.sum_micros.fetch_add(
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        let _ = writeln!(
            out,
            "# HELP tiphys_build_info Build information.\n# TYPE tiphys_build_info gauge"
        );
        let _ = writeln!(
            out,
            "tiphys_build_info{{version=\"{}\"}} 1",
            crate::buildinfo::VERSION
        );
        let _ = writeln!(
            out,
            "# HELP tiphys_requests_total Requests by protocol and outcome."
        );
        let _ = writeln!(out, "# TYPE tiphys_requests_total counter");
        for proto in Protocol::ALL {
            let p = &self.protocols[index(proto)];
            for outcome in OUTCOMES {
                let n = p.outcomes[outcome.index()].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "tiphys_requests_total{{protocol=\"{}\",outcome=\"{}\"}} {n}",
                    proto.as_str(),
                    outcome.as_str()
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP tiphys_request_duration_seconds Time to the response head, by protocol."
        );
        let _ = writeln!(out, "# TYPE tiphys_request_duration_seconds histogram");
        for proto in Protocol::ALL {
            let p = &self.protocols[index(proto)];
            let name = proto.as_str();
            // Prometheus buckets are cumulative; +Inf and the count are the same total.
            let mut count = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                count += p.buckets[i].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "tiphys_request_duration_seconds_bucket{{protocol=\"{name}\",le=\"{bound}\"}} {count}"
                );
            }
            count += p.buckets[BUCKETS.len()].load(Ordering::Relaxed);
            #[allow(clippy::cast_precision_loss)]
            let sum = p.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
            let _ = writeln!(
                out,
                "tiphys_request_duration_seconds_bucket{{protocol=\"{name}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "tiphys_request_duration_seconds_sum{{protocol=\"{name}\"}} {sum}"
            );
            let _ = writeln!(
                out,
                "tiphys_request_duration_seconds_count{{protocol=\"{name}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP tiphys_connections_total Accepted connections by transport."
        );
        let _ = writeln!(out, "# TYPE tiphys_connections_total counter");
        let tls = self.connections_tls.load(Ordering::Relaxed);
        let plain = self.connections_plaintext.load(Ordering::Relaxed);
        let _ = writeln!(out, "tiphys_connections_total{{transport=\"tls\"}} {tls}");
        let _ = writeln!(out, "tiphys_connections_total{{transport=\"plaintext\"}} {plain}");
        let _ = writeln!(
            out,
            "# HELP tiphys_connections_refused_total Connections closed before a request."
        );
        let _ = writeln!(out, "# TYPE tiphys_connections_refused_total counter");
        let _ = writeln!(
            out,
            "tiphys_connections_refused_total {}",
            self.connections_refused.load(Ordering::Relaxed)
        );
        let _ = writeln!(out, "# HELP tiphys_connections_open Connections open now.");
        let _ = writeln!(out, "# TYPE tiphys_connections_open gauge");
        let _ = writeln!(
            out,
            "tiphys_connections_open {}",
            self.open_connections.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP tiphys_https_redirects_total Plaintext requests redirected to https."
        );
        let _ = writeln!(out, "# TYPE tiphys_https_redirects_total counter");
        let _ = writeln!(
            out,
            "tiphys_https_redirects_total {}",
            self.redirects.load(Ordering::Relaxed)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_show_up_in_the_exposition() {
        let m = Metrics::default();
        m.observe(Protocol::Grpc, Outcome::Success, Duration::from_millis(2));
        m.observe(Protocol::Rest, Outcome::from_http(404), Duration::from_millis(1));
        let text = m.render();
        assert!(
            text.contains("tiphys_requests_total{protocol=\"grpc\",outcome=\"success\"} 1"),
            "{text}"
        );
        assert!(text.contains("tiphys_requests_total{protocol=\"rest\",outcome=\"client_error\"} 1"));
        assert!(text.contains("tiphys_request_duration_seconds_count{protocol=\"grpc\"} 1"));
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe(Protocol::Rest, Outcome::Success, Duration::from_micros(200));
        m.observe(Protocol::Rest, Outcome::Success, Duration::from_millis(2));
        m.observe(Protocol::Rest, Outcome::Success, Duration::from_secs(10));
        let text = m.render();
        let bucket = |le: &str| {
            let prefix = format!("tiphys_request_duration_seconds_bucket{{protocol=\"rest\",le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .unwrap_or_else(|| panic!("no bucket le={le} in {text}"))
                .to_owned()
        };
        assert_eq!(bucket("0.0005"), "1");
        assert_eq!(bucket("0.001"), "1");
        assert_eq!(bucket("0.0025"), "2");
        assert_eq!(bucket("2.5"), "2");
        assert_eq!(bucket("+Inf"), "3");
        assert!(text.contains("tiphys_request_duration_seconds_count{protocol=\"rest\"} 3"));
    }
}
