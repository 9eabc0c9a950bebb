//! How the CLI reaches a server: native gRPC (TLS or h2c) or gRPC-Web over
//! HTTP/1.1, with the connection options every client command shares.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use rustls::ClientConfig;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;

use super::deadline::{self, BoundedConnector, Deadline, parse_timeout};
use crate::buildinfo::USER_AGENT;
use crate::tlsclient;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// HTTP/2 pings under a native channel: a peer that stops answering them is given up after
/// interval + timeout, so a watch (exempt from --request-timeout) cannot hang on a dead server.
/// 30 s is above the 10 s ping minimum Argo CD's server enforces (`ARGOCD_GRPC_KEEP_ALIVE_MIN`);
/// tiphys's server enforces none. Pings go only while a call is open (`keep_alive_while_idle`).
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(20);
/// TCP keep-alive under gRPC-Web (HTTP/1.1 has no pings): finds a vanished peer or path.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// Connection options shared by every client command.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientOpts {
    /// The server, as HOST:PORT (port 443 when omitted).
    #[arg(long, env = "TIPHYS_SERVER")]
    pub server: Option<String>,
    /// Use gRPC-Web over HTTP/1.1 (for proxies that do not pass HTTP/2 through).
    #[arg(long, env = "TIPHYS_GRPC_WEB")]
    pub grpc_web: bool,
    /// Path prefix of the server behind a proxy (implies --grpc-web).
    #[arg(long, env = "TIPHYS_GRPC_WEB_ROOT_PATH")]
    pub grpc_web_root_path: Option<String>,
    /// Connect without TLS.
    #[arg(long, env = "TIPHYS_PLAINTEXT")]
    pub plaintext: bool,
    /// Skip verification of the server's certificate.
    #[arg(long, env = "TIPHYS_INSECURE")]
    pub insecure: bool,
    /// A PEM file of CA certificates to trust in addition to the system's.
    #[arg(long, env = "TIPHYS_SERVER_CRT")]
    pub server_crt: Option<PathBuf>,
    /// An extra header for every request, as 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// The session or API token to authenticate with.
    #[arg(long, env = "TIPHYS_AUTH_TOKEN", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// How long connecting may take, the TLS handshake included (Go syntax: 10s, 1m).
    #[arg(long, env = "TIPHYS_CONNECT_TIMEOUT", value_name = "DURATION", default_value = "10s",
          value_parser = parse_timeout)]
    pub connect_timeout: Option<Duration>,
    /// How long a call may wait for the server's whole answer (watches are exempt).
    #[arg(long, env = "TIPHYS_REQUEST_TIMEOUT", value_name = "DURATION", default_value = "60s",
          value_parser = parse_timeout)]
    pub request_timeout: Option<Duration>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub type GrpcTransport =
    BoxCloneSyncService<http::Request<tonic::body::Body>, http::Response<tonic::body::Body>, BoxError>;

/// A transport plus the origin generated clients are built with.
#[derive(Clone)]
pub struct Connection {
    pub transport: GrpcTransport,
    pub origin: Uri,
    pub grpc_web: bool,
}

impl Connection {
    pub fn version_client(
        &self,
    ) -> crate::pb::version::version_service_client::VersionServiceClient<GrpcTransport> {
        crate::pb::version::version_service_client::VersionServiceClient::with_origin(
            self.transport.clone(),
            self.origin.clone(),
        )
    }

    pub fn session_client(
        &self,
    ) -> crate::pb::session::session_service_client::SessionServiceClient<GrpcTransport> {
        crate::pb::session::session_service_client::SessionServiceClient::with_origin(
            self.transport.clone(),
            self.origin.clone(),
        )
    }

    pub fn account_client(
        &self,
    ) -> crate::pb::account::account_service_client::AccountServiceClient<GrpcTransport> {
        crate::pb::account::account_service_client::AccountServiceClient::with_origin(
            self.transport.clone(),
            self.origin.clone(),
        )
    }
}

/// `HOST:PORT` of a server as people type it (`host`, `host:8080`, `[::1]:8080`, or
/// `https://host/`), read with the `url` crate as the authority of a URL: the host in its
/// canonical form (lower case, IPv6 in brackets), and port 443 when none is given. `None` for
/// anything more than an authority (a path, user info) or a bad host or port.
pub fn server_address(raw: &str) -> Option<String> {
    let bare = raw.trim();
    let bare = bare
        .strip_prefix("https://")
        .or_else(|| bare.strip_prefix("http://"))
        .unwrap_or(bare)
        .trim_end_matches('/');
    if bare.is_empty() || bare.contains(['/', '\\', '?', '#', '@']) {
        return None;
    }
    let url = url::Url::parse(&format!("https://{bare}")).ok()?;
    Some(format!("{}:{}", url.host_str()?, url.port().unwrap_or(443)))
}

impl ClientOpts {
    // `None` only for options built in code (`ClientOpts::default()`): clap always fills them.
    fn connect_timeout(&self) -> Duration {
        self.connect_timeout.unwrap_or(CONNECT_TIMEOUT)
    }

    fn request_timeout(&self) -> Duration {
        self.request_timeout.unwrap_or(REQUEST_TIMEOUT)
    }

    fn server(&self) -> anyhow::Result<String> {
        let server = self
            .server
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| anyhow!("no server given: pass --server HOST:PORT or set TIPHYS_SERVER"))?;
        server_address(server).ok_or_else(|| {
            anyhow!("invalid server {server:?}: expected HOST:PORT (an IPv6 address in brackets)")
        })
    }

    fn extra_headers(&self) -> anyhow::Result<HeaderMap> {
        let mut map = HeaderMap::new();
        for raw in &self.headers {
            let (name, value) = raw
                .split_once(':')
                .ok_or_else(|| anyhow!("--header {raw:?}: expected 'Name: value'"))?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .with_context(|| format!("--header {raw:?}: invalid header name"))?;
            let value = HeaderValue::from_str(value.trim())
                .with_context(|| format!("--header {raw:?}: invalid header value"))?;
            map.append(name, value);
        }
        if let Some(token) = self.auth_token.as_deref().filter(|t| !t.is_empty()) {
            map.insert(
                "token",
                HeaderValue::from_str(token).context("--auth-token is not a valid header value")?,
            );
        }
        Ok(map)
    }

    fn root_path(&self) -> String {
        self.grpc_web_root_path
            .as_deref()
            .map(|p| p.trim_matches('/'))
            .filter(|p| !p.is_empty())
            .map_or_else(String::new, |p| format!("/{p}"))
    }

    /// Connects as asked. Without --grpc-web, native gRPC is tried first; if
    /// something in between cannot carry it (HTTP/1.1, HTML, text/plain), the
    /// call is retried over gRPC-Web and the user is told once.
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        if self.grpc_web || self.grpc_web_root_path.is_some() {
            let web = self.grpc_web_connection()?;
            return match probe(&web).await {
                Ok(()) => Ok(web),
                Err(status) if is_auth_error(&status) => Ok(web),
                Err(status) if deadline::is_timeout(&status) => {
                    Err(deadline::failure(status.message().to_owned()))
                }
                Err(status) => Err(anyhow!(
                    "cannot reach {} over gRPC-Web: {}",
                    self.server()?,
                    describe(&status)
                )),
            };
        }
        let native = self.native_connection()?;
        let native_err = match probe(&native).await {
            Ok(()) => return Ok(native),
            Err(status) if is_auth_error(&status) => return Ok(native),
            // No gRPC-Web retry after a timeout: it would double the wait, and a proxy that
            // cannot carry HTTP/2 answers (with an error) rather than staying silent, so a
            // silent server is down or unreachable whatever the transport.
            Err(status) if deadline::is_timeout(&status) => {
                return Err(deadline::failure(format!(
                    "{}; not retried over gRPC-Web",
                    status.message()
                )));
            }
            Err(status) if is_final(&status) => {
                return Err(anyhow!("cannot reach {}: {}", self.server()?, describe(&status)));
            }
            Err(status) => status,
        };
        let web = self.grpc_web_connection()?;
        match probe(&web).await {
            Ok(()) => {
                eprintln!(
                    "note: native gRPC to {} failed ({}); using gRPC-Web instead. Pass --grpc-web to skip the native attempt.",
                    self.server()?,
                    describe(&native_err)
                );
                Ok(web)
            }
            Err(status) if is_auth_error(&status) => Ok(web),
            Err(status) if deadline::is_timeout(&status) => {
                Err(deadline::failure(status.message().to_owned()))
            }
            Err(web_err) => Err(anyhow!(
                "cannot reach {} over gRPC: {}; gRPC-Web also failed: {}. If a proxy sits between, check --grpc-web, --plaintext and --grpc-web-root-path",
                self.server()?,
                describe(&native_err),
                describe(&web_err)
            )),
        }
    }

    fn native_connection(&self) -> anyhow::Result<Connection> {
        let server = self.server()?;
        let origin: Uri = format!("http://{server}")
            .parse()
            .with_context(|| format!("invalid server {server:?}"))?;
        let tls = if self.plaintext {
            None
        } else {
            Some(Arc::new(self.tls_config(vec![b"h2".to_vec()])?))
        };
        let host = origin
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_owned();
        let after = self.connect_timeout();
        let connector = tower::service_fn(move |uri: Uri| {
            let tls = tls.clone();
            let host = host.clone();
            let server = server.clone();
            async move { deadline::connecting(&server, after, dial(&uri, tls, &host)).await }
        });
        // The connector bounds TCP and TLS itself (tonic's connect_timeout would not say which
        // server). Pings only while a call is open: an idle CLI channel has nothing to keep.
        let channel = tonic::transport::Endpoint::from(origin.clone())
            .user_agent(USER_AGENT)?
            .http2_keep_alive_interval(PING_INTERVAL)
            .keep_alive_timeout(PING_TIMEOUT)
            .keep_alive_while_idle(false)
            .connect_with_connector_lazy(connector);
        let headers = self.extra_headers()?;
        let transport = channel.map_request(move |mut req: http::Request<tonic::body::Body>| {
            req.headers_mut().extend(headers.clone());
            req
        });
        let transport = transport
            .map_response(|r| r.map(tonic::body::Body::new))
            .map_err(BoxError::from);
        Ok(Connection {
            transport: self.bounded(BoxCloneSyncService::new(transport))?,
            origin,
            grpc_web: false,
        })
    }

    fn grpc_web_connection(&self) -> anyhow::Result<Connection> {
        let server = self.server()?;
        let scheme = if self.plaintext { "http" } else { "https" };
        let origin: Uri = format!("{scheme}://{server}{}", self.root_path())
            .parse()
            .with_context(|| format!("invalid server {server:?}"))?;
        let tls = self.tls_config(Vec::new())?; // hyper-rustls sets ALPN itself
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        // No read-idle bound on gRPC-Web streams: the server sends no heartbeat on them (only
        // its REST streams get one), so any bound would end quiet, healthy watches.
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_keepalive_interval(Some(Duration::from_secs(10)));
        http.set_keepalive_retries(Some(3));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let https = BoundedConnector {
            inner: https,
            server,
            after: self.connect_timeout(),
        };
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(false)
            .build::<_, tonic_web::GrpcWebCall<tonic::body::Body>>(https);
        let web = tower::ServiceBuilder::new()
            .layer(tonic_web::GrpcWebClientLayer::new())
            .service(client);
        let mut headers = self.extra_headers()?;
        headers.insert(http::header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
        let transport = web
            .map_request(move |mut req: http::Request<tonic::body::Body>| {
                req.headers_mut().extend(headers.clone());
                req
            })
            .map_result(|result| match result {
                Ok(response) => grpc_web_response(response),
                Err(err) => Err(web_error(&err)),
            });
        Ok(Connection {
            transport: self.bounded(BoxCloneSyncService::new(transport))?,
            origin,
            grpc_web: true,
        })
    }

    /// `transport` with the request timeout on its unary calls.
    fn bounded(&self, transport: GrpcTransport) -> anyhow::Result<GrpcTransport> {
        Ok(BoxCloneSyncService::new(Deadline {
            inner: transport,
            server: self.server()?,
            after: self.request_timeout(),
        }))
    }

    fn tls_config(&self, alpn: Vec<Vec<u8>>) -> anyhow::Result<ClientConfig> {
        let mut config = if self.insecure {
            tlsclient::insecure()?
        } else {
            let mut extra = Vec::new();
            if let Some(path) = &self.server_crt {
                let pem = std::fs::read(path)
                    .with_context(|| format!("cannot read --server-crt {}", path.display()))?;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    extra.push(cert.with_context(|| {
                        format!("--server-crt {}: not a PEM certificate", path.display())
                    })?);
                }
            }
            // Only an `extra` certificate can be refused.
            let roots = tlsclient::roots(&extra).with_context(|| {
                let path = self.server_crt.as_deref().map(std::path::Path::display);
                format!(
                    "--server-crt {}: unusable certificate",
                    path.map(|p| p.to_string()).unwrap_or_default()
                )
            })?;
            if roots.is_empty() {
                bail!(
                    "no trusted CA certificates found: pass --server-crt, or --insecure to skip verification"
                );
            }
            tlsclient::verifying(roots)?
        };
        config.alpn_protocols = alpn;
        Ok(config)
    }
}

/// A failed gRPC-Web exchange: our timeout as its status, anything else with its causes
/// spelled out (hyper's own message is only "client error (Connect)").
fn web_error(err: &hyper_util::client::legacy::Error) -> BoxError {
    match deadline::timeout_in(err) {
        Some(status) => Box::new(status),
        None => BoxError::from(crate::error::with_causes(err)),
    }
}

/// Only a gRPC-Web answer is decoded as one: anything else (a 404 page, a
/// proxy's HTML) becomes an error that says what came back instead.
fn grpc_web_response<B>(response: http::Response<B>) -> Result<http::Response<tonic::body::Body>, BoxError>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none");
    if response.status() == http::StatusCode::OK && content_type.starts_with("application/grpc-web") {
        return Ok(response.map(tonic::body::Body::new));
    }
    Err(format!(
        "the server answered HTTP {} with content-type {content_type}, not gRPC-Web: \
         check --grpc-web-root-path (the server's --rootpath), or whether a proxy answered instead",
        response.status().as_u16()
    )
    .into())
}

async fn dial(
    uri: &Uri,
    tls: Option<Arc<ClientConfig>>,
    host: &str,
) -> Result<hyper_util::rt::TokioIo<tlsclient::ClientStream>, std::io::Error> {
    let authority = uri.authority().map(|a| a.as_str().to_owned()).unwrap_or_default();
    tlsclient::dial(&authority, tls, host).await
}

async fn probe(conn: &Connection) -> Result<(), tonic::Status> {
    conn.version_client().version(()).await.map(|_| ())
}

fn is_auth_error(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
    )
}

/// A status as a person should read it: never grpc-go's or tonic's raw
/// "unexpected content-type" wording, which upstream users cannot act on.
pub fn describe(status: &tonic::Status) -> String {
    let message = status.message();
    let lower = message.to_ascii_lowercase();
    if lower.contains("not grpc-web") {
        return message.to_owned(); // already says what came back and what to check
    }
    if lower.contains("content-type")
        || lower.contains("http status")
        || lower.contains("grpc-status header missing")
    {
        return "something in between answered with a non-gRPC response (a proxy or a web server): \
                use --grpc-web if that proxy only speaks HTTP/1.1"
            .to_owned();
    }
    if lower.contains("certificate") {
        return format!(
            "{message}: the server's certificate is not trusted; pass --server-crt CA.pem, or --insecure to skip verification"
        );
    }
    format!("{:?}: {message}", status.code())
}

/// Failures no other transport can fix: fall back to gRPC-Web only for the rest.
fn is_final(status: &tonic::Status) -> bool {
    let lower = status.message().to_ascii_lowercase();
    matches!(
        status.code(),
        tonic::Code::Unauthenticated | tonic::Code::PermissionDenied
    ) || lower.contains("certificate")
        || lower.contains("connection refused")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses_as_people_type_them() {
        let addr = |raw: &str| server_address(raw);
        assert_eq!(addr("localhost:8080").as_deref(), Some("localhost:8080"));
        assert_eq!(addr(" cd.Example.com ").as_deref(), Some("cd.example.com:443"));
        assert_eq!(
            addr("https://cd.example.com/").as_deref(),
            Some("cd.example.com:443")
        );
        assert_eq!(
            addr("http://cd.example.com:80").as_deref(),
            Some("cd.example.com:80")
        );
        assert_eq!(addr("cd.example.com:443").as_deref(), Some("cd.example.com:443"));
        assert_eq!(addr("[::1]:8080").as_deref(), Some("[::1]:8080"));
        assert_eq!(addr("[2001:DB8:0::1]").as_deref(), Some("[2001:db8::1]:443"));
        assert_eq!(addr("127.0.0.1:8080").as_deref(), Some("127.0.0.1:8080"));
        for bad in [
            "",
            "::1",
            "host:99999",
            "host:port",
            "host:8080/argocd",
            "user@host:8080",
            "evil.com\\@host",
            "host?x",
            "[::1",
        ] {
            assert_eq!(addr(bad), None, "{bad}");
        }
    }
}
