//! Prometheus metrics with fixed, low-cardinality labels: requests and
//! latency by protocol (grpc, grpc-web, rest, ui) and outcome class, the same
//! by route (gRPC method or REST template, a set fixed at startup), and
//! what the application counts. Plain atomics on the request path (nothing
//! here allocates or locks per request); `prometheus-client` writes the
//! exposition, the one writer of the server's metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

pub use super::loglimit::{LogKind, LogLimiter};
use super::outcome::Outcome;
use super::protocol::Protocol;
use super::routes::Routes;
use crate::rbac::Refusal;
use crate::state::ServerState;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 10] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5];

#[derive(Default, Debug)]
struct Series {
    outcomes: [AtomicU64; 4],
    /// Observations per bucket, not cumulative: the last counts those above
    /// every bound. One counter per observation instead of one per bound it
    /// is under: these cache lines travel between cores on every request.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

pub struct Metrics {
    protocols: [Series; 4],
    routes: Routes,
    /// One series per route and protocol: `[route * 4 + protocol]`.
    by_route: Box<[Series]>,
    connections_tls: AtomicU64,
    connections_plaintext: AtomicU64,
    connections_refused: AtomicU64,
    connections_over_capacity: AtomicU64,
    open_connections: AtomicU64,
    redirects: AtomicU64,
    /// Client-caused log lines, rate-limited; what it suppressed is exported here.
    pub logs: LogLimiter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
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

impl Series {
    fn observe(&self, outcome: Outcome, elapsed: Duration) {
        self.outcomes[outcome.index()].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn count(&self) -> u64 {
        self.outcomes.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    fn encode_requests(
        &self,
        family: &mut MetricEncoder<'_>,
        labels: &[(&str, &str)],
    ) -> Result<(), std::fmt::Error> {
        for outcome in Outcome::ALL {
            let n = self.outcomes[outcome.index()].load(Ordering::Relaxed);
            let labels = [labels, &[("outcome", outcome.as_str())]].concat();
            family
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&n, None)?;
        }
        Ok(())
    }

    fn encode_histogram(
        &self,
        family: &mut MetricEncoder<'_>,
        labels: &[(&str, &str)],
    ) -> Result<(), std::fmt::Error> {
        let mut buckets = Vec::with_capacity(BUCKETS.len() + 1);
        let mut count = 0;
        for (i, bound) in BUCKETS.iter().chain(&[f64::INFINITY]).enumerate() {
            let n = self.buckets[i].load(Ordering::Relaxed);
            count += n;
            buckets.push((*bound, n));
        }
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        family
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

/// The metrics of a server with the method table's routes.
impl Default for Metrics {
    fn default() -> Self {
        Self::new(Routes::new(&crate::rpc::table()))
    }
}

impl Metrics {
    pub fn new(routes: Routes) -> Self {
        let by_route = (0..routes.count() * Protocol::ALL.len())
            .map(|_| Series::default())
            .collect();
        Self {
            protocols: Default::default(),
            routes,
            by_route,
            connections_tls: AtomicU64::default(),
            connections_plaintext: AtomicU64::default(),
            connections_refused: AtomicU64::default(),
            connections_over_capacity: AtomicU64::default(),
            open_connections: AtomicU64::default(),
            redirects: AtomicU64::default(),
            logs: LogLimiter::default(),
        }
    }

    /// The route labels these metrics count by.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

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

    /// A connection beyond `--max-connections` (answered 503, or closed when many are).
    pub fn over_capacity(&self) {
        self.connections_over_capacity.fetch_add(1, Ordering::Relaxed);
    }

    pub fn redirected(&self) {
        self.redirects.fetch_add(1, Ordering::Relaxed);
    }

    /// One request of `protocol` to `route` (an index of [`Metrics::routes`]).
    pub fn observe(&self, protocol: Protocol, route: usize, outcome: Outcome, elapsed: Duration) {
        self.protocols[index(protocol)].observe(outcome, elapsed);
        if let Some(series) = self.by_route.get(route * Protocol::ALL.len() + index(protocol)) {
            series.observe(outcome, elapsed);
        }
    }

    /// The series of each route and protocol that has seen a request: a route appears at its
    /// first request, so the exposition holds what is used, not every route the server has.
    fn used_routes(&self) -> impl Iterator<Item = (&'static str, Protocol, &Series)> {
        (0..self.routes.count()).flat_map(move |route| {
            Protocol::ALL.into_iter().filter_map(move |proto| {
                let series = self.by_route.get(route * Protocol::ALL.len() + index(proto))?;
                (series.count() > 0).then(|| (self.routes.name(route), proto, series))
            })
        })
    }
}

/// The counters and gauges of this process, written by `prometheus-client` at each scrape
/// from the atomics above (its own histogram takes a lock per observation; these take one
/// atomic add per counter, on every request).
impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let info = [("version", crate::buildinfo::VERSION)];
        encoder
            .encode_descriptor("tiphys_build_info", "Build information.", None, MetricType::Gauge)?
            .encode_family(&info)?
            .encode_gauge(&1_i64)?;
        let mut requests = encoder.encode_descriptor(
            "tiphys_requests",
            "Requests by protocol and outcome.",
            None,
            MetricType::Counter,
        )?;
        for proto in Protocol::ALL {
            self.protocols[index(proto)].encode_requests(&mut requests, &[("protocol", proto.as_str())])?;
        }
        let mut durations = encoder.encode_descriptor(
            "tiphys_request_duration_seconds",
            "Time to the response head, by protocol.",
            None,
            MetricType::Histogram,
        )?;
        for proto in Protocol::ALL {
            self.protocols[index(proto)].encode_histogram(&mut durations, &[("protocol", proto.as_str())])?;
        }
        self.encode_routes(&mut encoder)?;
        let mut connections = encoder.encode_descriptor(
            "tiphys_connections",
            "Accepted connections by transport.",
            None,
            MetricType::Counter,
        )?;
        for (transport, counter) in [
            ("tls", &self.connections_tls),
            ("plaintext", &self.connections_plaintext),
        ] {
            connections
                .encode_family(&[("transport", transport)])?
                .encode_counter::<NoLabelSet, _, u64>(&counter.load(Ordering::Relaxed), None)?;
        }
        counter(
            &mut encoder,
            "tiphys_connections_refused",
            "Connections closed before a request.",
            self.connections_refused.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "tiphys_connections_over_capacity",
            "Connections beyond --max-connections: refused with 503 / UNAVAILABLE, or closed.",
            self.connections_over_capacity.load(Ordering::Relaxed),
        )?;
        gauge(
            &mut encoder,
            "tiphys_connections_open",
            "Connections open now.",
            self.open_connections.load(Ordering::Relaxed),
        )?;
        counter(
            &mut encoder,
            "tiphys_https_redirects",
            "Plaintext requests redirected to https.",
            self.redirects.load(Ordering::Relaxed),
        )?;
        let mut suppressed = encoder.encode_descriptor(
            "tiphys_log_lines_suppressed",
            "Client-caused log lines left out by the rate limit, by kind.",
            None,
            MetricType::Counter,
        )?;
        for kind in LogKind::ALL {
            suppressed
                .encode_family(&[("kind", kind.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(&self.logs.suppressed(kind), None)?;
        }
        Ok(())
    }
}

impl Metrics {
    fn encode_routes(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut requests = encoder.encode_descriptor(
            "tiphys_route_requests",
            "Requests by route (gRPC method or REST template), protocol and outcome.",
            None,
            MetricType::Counter,
        )?;
        for (route, proto, series) in self.used_routes() {
            series.encode_requests(&mut requests, &[("route", route), ("protocol", proto.as_str())])?;
        }
        let mut durations = encoder.encode_descriptor(
            "tiphys_route_request_duration_seconds",
            "Time to the response head, by route and protocol.",
            None,
            MetricType::Histogram,
        )?;
        for (route, proto, series) in self.used_routes() {
            series.encode_histogram(&mut durations, &[("route", route), ("protocol", proto.as_str())])?;
        }
        Ok(())
    }
}

/// What the application counts (logins, revocations, RBAC, configuration reloads), read at
/// each scrape from the parts that keep the numbers.
pub struct AppNumbers(pub Arc<ServerState>);

impl std::fmt::Debug for AppNumbers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppNumbers").finish_non_exhaustive()
    }
}

impl Collector for AppNumbers {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let app = &self.0;
        let auth = &app.auth;
        let outcomes = &auth.logins.outcomes;
        let mut logins = encoder.encode_descriptor(
            "tiphys_login_request",
            "Password logins by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (status, n) in [
            ("success", &outcomes.success),
            ("failure", &outcomes.failure),
            ("throttled", &outcomes.throttled),
        ] {
            logins
                .encode_family(&[("status", status)])?
                .encode_counter::<NoLabelSet, _, u64>(&n.load(Ordering::Relaxed), None)?;
        }
        {
            let mut limited = encoder.encode_descriptor(
                "tiphys_rate_limited",
                "Requests refused by a rate limit (tiphys.ratelimit.*), by class.",
                None,
                MetricType::Counter,
            )?;
            for class in crate::config::rate_limits::Class::ALL {
                limited
                    .encode_family(&[("class", class.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&auth.rate_limits.refused(class), None)?;
            }
        }
        {
            let reviews = &auth.authenticator.service_accounts().reviews;
            let mut family = encoder.encode_descriptor(
                "tiphys_serviceaccount_token_reviews",
                "TokenReviews of ServiceAccount tokens asked of the --kube API server, by answer.",
                None,
                MetricType::Counter,
            )?;
            for (result, n) in [
                ("accepted", &reviews.accepted),
                ("refused", &reviews.refused),
                ("failed", &reviews.failed),
            ] {
                family
                    .encode_family(&[("result", result)])?
                    .encode_counter::<NoLabelSet, _, u64>(&n.load(Ordering::Relaxed), None)?;
            }
        }
        gauge(
            &mut encoder,
            "tiphys_rate_limit_buckets",
            "Rate limit buckets held in this process (full ones are forgotten).",
            auth.rate_limits.held() as u64,
        )?;
        gauge(
            &mut encoder,
            "tiphys_revoked_tokens",
            "Revoked tokens not yet expired.",
            auth.revocations.len() as u64,
        )?;
        gauge(
            &mut encoder,
            "tiphys_login_failure_entries",
            "Failed-login records held.",
            auth.logins.failure_entries() as u64,
        )?;
        counter(
            &mut encoder,
            "tiphys_config_reload_errors",
            "Configuration reloads refused as malformed.",
            app.config.reload_errors(),
        )?;
        counter(
            &mut encoder,
            "tiphys_rbac_denials",
            "Requests denied by RBAC.",
            app.rbac.denials(),
        )?;
        // The other 403s, by why: with the RBAC denials, every PERMISSION_DENIED once.
        {
            let mut refusals = encoder.encode_descriptor(
                "tiphys_permission_refusals",
                "Requests refused with PERMISSION_DENIED for a reason other than RBAC, by kind.",
                None,
                MetricType::Counter,
            )?;
            for kind in Refusal::ALL {
                refusals
                    .encode_family(&[("kind", kind.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&app.rbac.refusals(kind), None)?;
            }
        }
        gauge(
            &mut encoder,
            "tiphys_rbac_policy_lines",
            "Lines of user RBAC policy in force.",
            app.rbac.policy().user_lines() as u64,
        )?;
        counter(
            &mut encoder,
            "tiphys_rbac_policy_reload_errors",
            "Edits of argocd-rbac-cm refused; the last valid policy stayed in force.",
            app.config.policy_errors(),
        )
    }
}

/// A counter without labels (the exposition adds `_total` to `name`).
fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&value, None)
}

/// A gauge without labels.
fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let value = i64::try_from(value).unwrap_or(i64::MAX);
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

/// Every metric of the server, for the `/metrics` endpoint.
pub fn registry(metrics: Arc<Metrics>, app: Arc<ServerState>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(metrics));
    registry.register_collector(Box::new(AppNumbers(app)));
    registry
}

/// The OpenMetrics text exposition of `registry`.
pub fn render(registry: &Registry) -> String {
    let mut out = String::with_capacity(4096);
    if let Err(err) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::error!(error = %err, "cannot write the metrics");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render_alone(metrics: Metrics) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics));
        render(&registry)
    }

    #[test]
    fn observations_show_up_in_the_exposition() {
        let m = Metrics::default();
        m.observe(Protocol::Grpc, 0, Outcome::Success, Duration::from_millis(2));
        m.observe(
            Protocol::Rest,
            0,
            Outcome::from_http(404),
            Duration::from_millis(1),
        );
        let text = render_alone(m);
        assert!(
            text.contains("tiphys_requests_total{protocol=\"grpc\",outcome=\"success\"} 1"),
            "{text}"
        );
        assert!(text.contains("tiphys_requests_total{protocol=\"rest\",outcome=\"client_error\"} 1"));
        assert!(text.contains("tiphys_request_duration_seconds_count{protocol=\"grpc\"} 1"));
        assert!(
            text.contains(
                "tiphys_route_requests_total{route=\"other\",protocol=\"rest\",outcome=\"client_error\"} 1"
            ),
            "{text}"
        );
        // Only routes that saw a request are written.
        assert!(!text.contains("route=\"ui\""), "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.observe(Protocol::Rest, 0, Outcome::Success, Duration::from_micros(200));
        m.observe(Protocol::Rest, 0, Outcome::Success, Duration::from_millis(2));
        m.observe(Protocol::Rest, 0, Outcome::Success, Duration::from_secs(10));
        let text = render_alone(m);
        let bucket = |le: &str| {
            let prefix = format!("tiphys_request_duration_seconds_bucket{{le=\"{le}\",protocol=\"rest\"}} ");
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
