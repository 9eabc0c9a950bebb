//! Per-request routing on the one port: the edge policy (redirect, plaintext
//! gRPC), who is calling, the root path, then gRPC, gRPC-Web, or the HTTP
//! router (REST, health, UI). Routing is per request, so one HTTP/2
//! connection can carry all of them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use http::{HeaderValue, Request, Response, StatusCode, Uri, Version};
use ipnet::IpNet;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_web::GrpcWebService;
use tower::{Service, ServiceExt};

use super::body::{Bounded, ObservedBody, PendingOutcome};
use super::config::{HtmlHeaders, ServerConfig};
use super::conn::ConnInfo;
use super::edge::{self, Decision};
use super::idle::InFlight;
use super::loglimit::LogKind;
use super::metrics::Metrics;
use super::outcome::{self, Final};
use super::protocol::Protocol;
use super::rate_limit::RateClasses;
use super::redirect::RedirectHosts;
use super::routes;
use super::tls::CertResolver;
use crate::auth::{Ambiguous, Carrier};
use crate::error::{AppError, rest_error};
use crate::grpc::GrpcServices;
use crate::principal::Credentials;
use crate::principal::{BodyLimit, ClientScheme};
use crate::state::ServerState;

mod grpc_web;
mod headers;
mod identity;
mod limits;
mod responses;

pub(crate) use self::grpc_web::normalize_grpc_web_content_type;
use self::grpc_web::{fix_bad_base64_status, fix_message_size_status};
use self::limits::{declared_length, raw_body_limit};
pub use self::responses::grpc_error;
use self::responses::{not_found, redirect, refusal};

pub const GRPC_NEEDS_HTTP2: &str = "gRPC needs HTTP/2 end to end, but this call reached tiphys over HTTP/1.1 \
(a proxy in between downgraded it): use the CLI's --grpc-web flag, or let the proxy speak HTTP/2 (h2c) to the server";

/// What a request on a connection beyond `--max-connections` is told (503 / UNAVAILABLE).
pub const OVER_CAPACITY: &str = "the server holds as many connections as it allows (--max-connections); \
     retry shortly, or reuse an open connection";

/// What a caller without a valid session may send: a login, never an application. Larger
/// requests are refused (401, UNAUTHENTICATED) from their headers, or once this much is read.
pub const UNAUTHENTICATED_BODY_BYTES: u64 = 64 * 1024;

pub const FOREIGN_HOST: &str = "this port expects TLS, and the Host header names a host this \
server does not answer for: it redirects plaintext requests only to its own hosts";

pub const PLAINTEXT_GRPC_REFUSED: &str = "this port serves gRPC over TLS only: connect with TLS \
(drop --plaintext), or start the server with --plaintext-grpc";

/// What a request's body must be: hyper's for requests from a socket, any other in the
/// in-process tests.
pub trait RequestBody:
    http_body::Body<Data = bytes::Bytes, Error: Into<axum::BoxError> + std::fmt::Display> + Send + Unpin + 'static
{
}

impl<B> RequestBody for B where
    B: http_body::Body<Data = bytes::Bytes, Error: Into<axum::BoxError> + std::fmt::Display>
        + Send
        + Unpin
        + 'static
{
}

/// Everything the dispatcher needs, fixed at startup.
pub struct Dispatcher {
    grpc: GrpcServices,
    grpc_web: GrpcWebService<GrpcServices>,
    http: Router,
    /// Who callers are (`app.auth.authenticator`).
    app: Arc<ServerState>,
    pub(super) metrics: Arc<Metrics>,
    /// TLS mode: plaintext requests are subject to the edge policy.
    tls_mode: bool,
    plaintext_grpc: bool,
    trusted_proxies: Vec<IpNet>,
    /// Where a plaintext request may be redirected.
    redirect_hosts: RedirectHosts,
    /// `--url`: the external URL when argocd-cm sets none.
    flag_url: Option<String>,
    rootpath: String,
    max_body_bytes: u64,
    /// The largest gRPC request message, and the flag that sets it.
    grpc_request_limit: (u64, &'static str),
    /// Media types a state-changing REST call may carry (CSRF defence); empty: unchecked.
    api_content_types: Vec<String>,
    html_headers: HtmlHeaders,
    /// Which rate limit each request is counted against.
    rate_classes: RateClasses,
}

impl Dispatcher {
    /// The request handler of a server configured by `config`, over `app`: what the listener
    /// calls for every request (the in-process tests call it directly).
    pub fn new(
        app: &Arc<ServerState>,
        config: &ServerConfig,
        metrics: Arc<Metrics>,
        health: HealthServer<impl Health>,
        cert: Option<Arc<CertResolver>>,
    ) -> anyhow::Result<Self> {
        let grpc = crate::grpc::routes(app, health, config.limits.grpc_max_message_bytes);
        let ui = crate::ui::Ui::new(config.staticassets.clone(), &config.basehref)?;
        Ok(Self {
            grpc_web: tower::Layer::layer(&tonic_web::GrpcWebLayer::new(), grpc.clone()),
            grpc,
            http: crate::api::router(Arc::clone(app), &config.rootpath)
                .fallback_service(crate::ui::router(Arc::new(ui))),
            app: Arc::clone(app),
            metrics,
            tls_mode: !config.insecure,
            plaintext_grpc: config.plaintext_grpc,
            trusted_proxies: config.trusted_proxies.clone(),
            redirect_hosts: RedirectHosts::new(&config.redirect_hosts, cert),
            flag_url: config.url.as_ref().map(|u| u.raw.clone()),
            rootpath: config.rootpath.clone(),
            max_body_bytes: config.limits.max_body_bytes as u64,
            grpc_request_limit: if config.limits.grpc_max_message_bytes < config.limits.grpc_max_request_bytes
            {
                (
                    config.limits.grpc_max_message_bytes as u64,
                    "--grpc-max-message-bytes",
                )
            } else {
                (
                    config.limits.grpc_max_request_bytes as u64,
                    "--grpc-max-request-bytes",
                )
            },
            api_content_types: config.api_content_types.clone(),
            html_headers: config.html_headers.clone(),
            rate_classes: RateClasses::new(&crate::rpc::table()),
        })
    }

    pub async fn handle<B: RequestBody>(
        &self,
        req: Request<B>,
        conn: ConnInfo,
        in_flight: InFlight,
    ) -> Response<ObservedBody> {
        let start = Instant::now();
        let (protocol, route, response) = self.route(req, conn).await;
        let elapsed = start.elapsed();
        let scan = match outcome::at_head(protocol, response.status(), response.headers()) {
            Final::Known(outcome) => {
                self.metrics.observe(protocol, route, outcome, elapsed);
                None
            }
            Final::Trailers => Some(None),
            Final::GrpcWeb(scan) => Some(Some(scan)),
        };
        let pending = scan.map(|scan| PendingOutcome {
            metrics: Arc::clone(&self.metrics),
            protocol,
            route,
            elapsed,
            scan,
        });
        response.map(|body| ObservedBody::new(body, pending, in_flight))
    }

    /// The protocol, the route label (an index of `metrics.routes()`) and the response.
    async fn route<B: RequestBody>(
        &self,
        req: Request<B>,
        conn: ConnInfo,
    ) -> (Protocol, usize, Response<Body>) {
        // From here on, whatever refuses or answers the request, a body left unread is
        // drained after the response (see `Bounded`), so HTTP/2 clients read the answer.
        let mut req = req.map(Bounded::new);
        let wire = Protocol::of_content_type(req.headers());
        // Health probes are still answered: a full server is alive, and says so.
        if conn.over_capacity && req.uri().path() != "/healthz" {
            let protocol = wire.at_path(req.uri().path());
            let mut response = refusal(
                protocol,
                req.headers(),
                AppError::Unavailable(OVER_CAPACITY.to_owned()),
            );
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
            return (protocol, routes::OTHER, response);
        }
        let scheme = match self.scheme(&req, conn, wire) {
            Ok(scheme) => scheme,
            Err(response) => {
                let protocol = wire.at_path(req.uri().path());
                return (protocol, routes::OTHER, *response);
            }
        };
        if wire == Protocol::Grpc && req.version() < Version::HTTP_2 {
            if let Some(suppressed) = self.metrics.logs.allow(LogKind::GrpcOverHttp1) {
                tracing::warn!(peer = %conn.peer, path = req.uri().path(), suppressed,
                    "gRPC request arrived over HTTP/1.1: a proxy is downgrading gRPC; clients must use --grpc-web through it");
            }
            let route = self.metrics.routes().index(wire, req.uri().path());
            return (
                wire,
                route,
                grpc_error(tonic::Code::Unavailable, GRPC_NEEDS_HTTP2),
            );
        }
        if !self.rootpath.is_empty() && req.uri().path() != "/healthz" {
            match strip_prefix(req.uri(), &self.rootpath) {
                Some(uri) => *req.uri_mut() = uri,
                // Native gRPC is served at the root as well, as upstream does.
                None if wire == Protocol::Grpc => {}
                None => {
                    let protocol = wire.at_path(req.uri().path());
                    return (protocol, routes::OTHER, not_found());
                }
            }
        }
        let protocol = wire.at_path(req.uri().path());
        let route = self.metrics.routes().index(protocol, req.uri().path());
        let (mut context, renewed) = match self.identify(req.headers(), protocol, conn, scheme).await {
            Ok(identified) => identified,
            Err(Ambiguous(why)) => {
                let err = AppError::InvalidArgument(why.to_owned());
                return (protocol, route, refusal(protocol, req.headers(), err));
            }
        };
        let verified_bearer = context.auth.carrier == Some(Carrier::Bearer)
            && matches!(context.caller.credentials, Credentials::Valid(_));
        // Who is calling is known before a byte of the body is read: that decides how much
        // of it may be read.
        let limit = self.body_limit(protocol, &context.caller, req.uri().path());
        let raw_limit = raw_body_limit(protocol, limit, req.headers());
        req.body_mut().set_limit(raw_limit, limit);
        context.body_limit = limit;
        req.extensions_mut().insert(context);
        let over_rate = match protocol {
            // REST is counted after its refusals from the headers (CSRF, size): see `call_http`.
            Protocol::Grpc | Protocol::GrpcWeb => {
                self.over_rate(
                    protocol,
                    req.method(),
                    req.uri().path(),
                    req.headers(),
                    req.extensions(),
                )
                .await
            }
            Protocol::Rest | Protocol::Ui => None,
        };
        let mut response = match (protocol, over_rate) {
            (_, Some(refused)) => refused,
            (Protocol::Grpc, None) => {
                let response = self.grpc.call(req.map(tonic::body::Body::new)).await;
                let mut response = response.map(Body::new);
                fix_message_size_status(&mut response);
                response
            }
            (Protocol::GrpcWeb, None) => {
                normalize_grpc_web_content_type(&mut req);
                let mut response = call(self.grpc_web.clone(), req).await;
                fix_message_size_status(&mut response);
                fix_bad_base64_status(&mut response);
                response
            }
            (Protocol::Rest | Protocol::Ui, None) => {
                let mut response = self.call_http(req, protocol, verified_bearer, limit).await;
                self.add_security_headers(&mut response, scheme);
                response
            }
        };
        if let Some(renewal) = renewed {
            self.hand_back(&mut response, protocol, scheme, &renewal).await;
        }
        (protocol, route, response)
    }

    /// The client's scheme, or the response that ends the request here.
    fn scheme<B>(
        &self,
        req: &Request<B>,
        conn: ConnInfo,
        wire: Protocol,
    ) -> Result<ClientScheme, Box<Response<Body>>> {
        if conn.tls {
            return Ok(ClientScheme::Https);
        }
        if !self.tls_mode {
            let https = edge::forwarded_https(req.headers(), conn.peer.ip(), &self.trusted_proxies);
            return Ok(if https {
                ClientScheme::Https
            } else {
                ClientScheme::Http
            });
        }
        if wire == Protocol::Grpc {
            return if self.plaintext_grpc {
                Ok(ClientScheme::Http)
            } else {
                Err(Box::new(grpc_error(
                    tonic::Code::Unavailable,
                    PLAINTEXT_GRPC_REFUSED,
                )))
            };
        }
        let settings = self.app.config.peek();
        let to = edge::Redirect {
            hosts: &self.redirect_hosts,
            rootpath: &self.rootpath,
            external: settings.url.as_deref().or(self.flag_url.as_deref()),
        };
        match edge::decide(
            req.uri(),
            req.headers(),
            conn.peer.ip(),
            &self.trusted_proxies,
            &to,
        ) {
            Decision::Serve(scheme) => Ok(scheme),
            Decision::Redirect(location) => {
                self.metrics.redirected();
                Err(Box::new(redirect(&location)))
            }
            Decision::BadHost => Err(Box::new(rest_error(
                tonic::Code::InvalidArgument,
                StatusCode::BAD_REQUEST,
                "this port expects TLS; a plaintext request needs a valid Host header to be redirected to https",
            ))),
            Decision::ForeignHost => Err(Box::new(rest_error(
                tonic::Code::InvalidArgument,
                StatusCode::BAD_REQUEST,
                FOREIGN_HOST,
            ))),
        }
    }

    /// `verified_bearer`: see [`super::csrf::refusal`]. A body whose `Content-Length` is over
    /// `limit` is refused from the headers; one without is stopped at the limit while read.
    async fn call_http<B: RequestBody>(
        &self,
        req: Request<Bounded<B>>,
        protocol: Protocol,
        verified_bearer: bool,
        limit: BodyLimit,
    ) -> Response<Body> {
        if let Some(refusal) = super::csrf::refusal(
            &self.api_content_types,
            req.method(),
            req.uri().path(),
            req.headers(),
            verified_bearer,
        ) {
            return refusal;
        }
        if declared_length(req.headers()).is_some_and(|len| limit.exceeded_by(len)) {
            return axum::response::IntoResponse::into_response(limit.refusal());
        }
        if let Some(refused) = self
            .over_rate(
                protocol,
                req.method(),
                req.uri().path(),
                req.headers(),
                req.extensions(),
            )
            .await
        {
            return refused;
        }
        call(self.http.clone(), req.map(Body::new)).await
    }
}

/// Calls a service that cannot fail (its errors are responses).
async fn call<S, B, R>(service: S, req: Request<B>) -> Response<Body>
where
    S: Service<Request<B>, Response = Response<R>, Error = Infallible>,
    R: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    R::Error: Into<axum::BoxError>,
{
    match service.oneshot(req).await {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}

/// `/root/x?q` → `/x?q`; `None` when the path is outside the root.
pub(crate) fn strip_prefix(uri: &Uri, root: &str) -> Option<Uri> {
    let path = uri.path();
    let rest = path.strip_prefix(root)?;
    let rest = match rest {
        "" => "/",
        r if r.starts_with('/') => r,
        _ => return None,
    };
    let pq = match uri.query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse().ok()?);
    Uri::from_parts(parts).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rootpath_is_stripped_only_at_a_segment_boundary() {
        let uri: Uri = "/argo/api/version?x=1".parse().unwrap();
        assert_eq!(
            strip_prefix(&uri, "/argo").unwrap().to_string(),
            "/api/version?x=1"
        );
        assert_eq!(
            strip_prefix(&"/argo".parse().unwrap(), "/argo")
                .unwrap()
                .to_string(),
            "/"
        );
        assert!(strip_prefix(&"/argocd/x".parse().unwrap(), "/argo").is_none());
        assert!(strip_prefix(&"/other".parse().unwrap(), "/argo").is_none());
    }
}
