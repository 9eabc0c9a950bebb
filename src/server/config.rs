//! Process configuration of `tiphys server`: flags with environment
//! equivalents, validated once into a [`ServerConfig`]. Settings that change
//! at run time (accounts, policies, SSO) are not here.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

use crate::auth::LoginLimits;
use crate::auth::throttle::ThrottlePolicy;

/// `tiphys server` flags. Names follow `argocd-server` where it has one.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Address to listen on (all interfaces by default).
    #[arg(long, env = "TIPHYS_LISTEN_ADDRESS", default_value = "0.0.0.0")]
    pub address: IpAddr,
    /// The one port that serves gRPC, gRPC-Web, REST and the UI (0: any free port).
    #[arg(long, env = "TIPHYS_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Serve plaintext only (HTTP/1.1 and h2c), for a gateway that terminates TLS.
    #[arg(long, env = "TIPHYS_SERVER_INSECURE")]
    pub insecure: bool,
    /// PEM certificate chain (RSA or ECDSA). Without it a self-signed certificate is used.
    #[arg(long, env = "TIPHYS_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key matching --tls-cert.
    #[arg(long, env = "TIPHYS_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Lowest TLS version accepted: 1.2 or 1.3.
    #[arg(long, env = "TIPHYS_TLS_MIN_VERSION", default_value = "1.2")]
    pub tlsminversion: String,
    /// Highest TLS version accepted: 1.2 or 1.3.
    #[arg(long, env = "TIPHYS_TLS_MAX_VERSION", default_value = "1.3")]
    pub tlsmaxversion: String,
    /// Colon-separated TLS 1.2 cipher suites (IANA names), or `list` to print the supported ones.
    #[arg(long, env = "TIPHYS_TLS_CIPHERS")]
    pub tlsciphers: Option<String>,
    /// Where the server keeps its state (the generated certificate among it); with
    /// --etcd-endpoints only the generated certificate.
    #[arg(long, env = "TIPHYS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub store: super::store_args::StoreArgs,
    /// The namespace the server runs in (Argo CD's `--namespace`): applications and projects
    /// live here unless they name another.
    /// Argo CD's Redis (`host:port`, argocd-server's `--redis`): logouts are shared with the
    /// installation's argocd-server replicas, as its `revoked-token|<id>` keys, and login rate
    /// limits between tiphys replicas (`tiphys|ratelimit|login|<address>`).
    #[arg(long, env = "TIPHYS_REDIS", value_name = "HOST:PORT")]
    pub redis: Option<String>,
    /// [default: with --kube, the kubeconfig context's or the pod's namespace; else argocd]
    #[arg(long, env = "ARGOCD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Comma-separated namespaces besides --namespace whose Applications are served: globs, or
    /// `/regex/` (argocd-cmd-params-cm `application.namespaces`, as upstream's environment
    /// variable). Needs cluster-wide list and watch of applications with --kube.
    #[arg(long, env = "ARGOCD_APPLICATION_NAMESPACES", value_delimiter = ',')]
    pub application_namespaces: Vec<String>,
    /// The external URL users reach the server at; its host joins the self-signed certificate.
    #[arg(long, env = "TIPHYS_URL")]
    pub url: Option<String>,
    /// Comma-separated CIDRs of proxies whose X-Forwarded-Proto / Forwarded headers are believed.
    #[arg(long, env = "TIPHYS_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<IpNet>,
    /// Comma-separated hosts (`*.example.com` for one label) a plaintext request may be
    /// redirected to besides the TLS certificate's names, when no external URL is set.
    #[arg(long, env = "TIPHYS_REDIRECT_HOSTS", value_delimiter = ',')]
    pub redirect_hosts: Vec<String>,
    /// Accept native gRPC over plaintext h2c on the TLS port (for meshes doing mTLS outside the pod).
    #[arg(long, env = "TIPHYS_PLAINTEXT_GRPC")]
    pub plaintext_grpc: bool,
    /// The UI's base href (for a proxy that strips a path prefix).
    #[arg(long, env = "TIPHYS_BASEHREF", default_value = "/")]
    pub basehref: String,
    /// Serve everything under this path prefix (forces --basehref to match).
    #[arg(long, env = "TIPHYS_ROOTPATH", default_value = "")]
    pub rootpath: String,
    /// Serve the UI from this directory instead of the embedded build.
    #[arg(long, env = "TIPHYS_STATIC_ASSETS")]
    pub staticassets: Option<PathBuf>,
    /// Address of the Prometheus metrics listener.
    #[arg(long, env = "TIPHYS_METRICS_LISTEN_ADDRESS", default_value = "0.0.0.0")]
    pub metrics_address: IpAddr,
    /// Port of the Prometheus metrics listener (0: any free port).
    #[arg(long, env = "TIPHYS_METRICS_PORT", default_value_t = 8083)]
    pub metrics_port: u16,
    /// A connection must finish its first bytes and TLS handshake within this time.
    #[arg(long, env = "TIPHYS_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub handshake_timeout: Duration,
    /// HTTP/1 request headers must arrive within this time.
    #[arg(long, env = "TIPHYS_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/2 pings do not
    /// keep it open).
    #[arg(long, env = "TIPHYS_IDLE_TIMEOUT", default_value = "2m", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Largest request head (HTTP/1 header buffer, HTTP/2 header list), in bytes.
    #[arg(long, env = "TIPHYS_MAX_HEADER_BYTES", default_value_t = 64 * 1024)]
    pub max_header_bytes: usize,
    /// HTTP/2 streams one connection may have open at once.
    #[arg(long, env = "TIPHYS_HTTP2_MAX_STREAMS", default_value_t = 1000)]
    pub http2_max_concurrent_streams: u32,
    /// Largest REST request body, in bytes (413 above it, refused from Content-Length when it
    /// says so, else once that much has been read).
    #[arg(long, env = "TIPHYS_MAX_BODY_BYTES", default_value_t = 2 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Largest gRPC or gRPC-Web request message, in bytes (RESOURCE_EXHAUSTED above it, refused
    /// from the message's length prefix before the message is read).
    #[arg(long, env = "TIPHYS_GRPC_MAX_REQUEST_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub grpc_max_request_bytes: usize,
    /// Largest gRPC message, in bytes, either direction: caps replies (a List of many
    /// objects) and, when lower than --grpc-max-request-bytes, requests too.
    #[arg(long, env = "TIPHYS_GRPC_MAX_MESSAGE_BYTES", default_value_t = 200 * 1024 * 1024)]
    pub grpc_max_message_bytes: usize,
    /// On SIGTERM/SIGINT, keep accepting and serving this long while /healthz answers 503, so
    /// load balancers stop sending first (0: stop accepting at once; a second signal skips it).
    #[arg(long, env = "TIPHYS_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// After the shutdown delay, in-flight requests get this long to finish (open watches end at once).
    #[arg(long, env = "TIPHYS_SHUTDOWN_TIMEOUT", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,
    /// Value of X-Frame-Options on HTML responses ("" disables it).
    #[arg(long, env = "TIPHYS_X_FRAME_OPTIONS", default_value = "sameorigin")]
    pub x_frame_options: String,
    /// Content-Security-Policy of HTML responses ("" disables it). Default: no inline scripts or
    /// styles; with --staticassets, inline styles are allowed (upstream's UI injects them).
    #[arg(long, env = "TIPHYS_CONTENT_SECURITY_POLICY")]
    pub content_security_policy: Option<String>,
    /// Directory holding argocd-cm, argocd-rbac-cm and argocd-secret (YAML manifests or mounted volumes).
    #[arg(long, env = "TIPHYS_CONFIG_DIR")]
    pub config_dir: Option<PathBuf>,
    /// Media types a state-changing REST call may carry, comma-separated ("" disables the CSRF check).
    #[arg(long, env = "TIPHYS_API_CONTENT_TYPES", default_value = "application/json")]
    pub api_content_types: String,
    /// Failed logins from one address for one username before that pair is locked.
    #[arg(long, env = "TIPHYS_LOGIN_MAX_FAILURES", default_value_t = 5)]
    pub login_max_failures: u32,
    /// The window failed logins are counted in, and how long a lock lasts.
    #[arg(long, env = "TIPHYS_LOGIN_FAILURE_WINDOW", default_value = "300s", value_parser = parse_duration)]
    pub login_failure_window: Duration,
    /// Watches (gRPC, gRPC-Web or server-sent events) one caller may hold open at once; more
    /// are refused with 429 / RESOURCE_EXHAUSTED.
    #[arg(long, env = "TIPHYS_MAX_WATCHES_PER_CALLER", default_value_t = crate::state::stream_slots::DEFAULT_PER_CALLER,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_watches_per_caller: u32,
    /// Open connections at most (0: sized from the file-descriptor limit). Beyond it, a
    /// connection is answered 503 / UNAVAILABLE and closed.
    #[arg(long, env = "TIPHYS_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Password logins in progress at once; more are refused with 429 / RESOURCE_EXHAUSTED.
    #[arg(long, env = "TIPHYS_LOGIN_MAX_CONCURRENT", default_value_t = 256)]
    pub login_max_concurrent: usize,
    /// Write `{"port":N,"metrics_port":M}` to this file once listening (for supervisors and tests).
    #[arg(long, env = "TIPHYS_READY_FILE")]
    pub ready_file: Option<PathBuf>,
    /// Whether tiphys contacts repositories (access checks, connection states, refs, apps,
    /// details, charts, manifests). `off`: repositories are stored unchecked, their state is
    /// Unknown, and reads from them are refused (for air-gapped servers and tests).
    #[arg(long, env = "TIPHYS_REPO_ACCESS", default_value = "on", value_parser = parse_on_off,
          action = clap::ArgAction::Set, value_name = "on|off", overrides_with = "repo_access")]
    pub repo_access: bool,
    /// Where fetched repository commits are kept (default: `repo-cache` in the data dir).
    #[arg(long, env = "TIPHYS_REPO_CACHE_DIR")]
    pub repo_cache_dir: Option<PathBuf>,
    /// How long one repository call (listing refs, fetching a commit, a Helm index) may take.
    #[arg(long, env = "TIPHYS_REPO_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub repo_timeout: Duration,
    /// The most one fetch of a repository (or one Helm index) may bring, in bytes.
    #[arg(long, env = "TIPHYS_REPO_MAX_BYTES", default_value_t = 512 * 1024 * 1024)]
    pub repo_max_bytes: u64,
    /// Repository calls running at once, over all repositories; more wait, up to their timeout.
    #[arg(long, env = "TIPHYS_REPO_MAX_FETCHES", default_value_t = 8,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub repo_max_fetches: u32,
    /// How long a repository's listed branches and tags are reused.
    #[arg(long, env = "TIPHYS_REPO_REFS_TTL", default_value = "3m", value_parser = parse_duration)]
    pub repo_refs_ttl: Duration,
    /// How old a repository's connection state may get before it is checked again (in the
    /// background; `forceRefresh` checks at once).
    #[arg(long, env = "TIPHYS_REPO_CHECK_INTERVAL", default_value = "3m", value_parser = parse_duration)]
    pub repo_check_interval: Duration,
    /// Argo CD's repo server (`host:port`, argocd-server's `--repo-server`): with one, manifests
    /// of every source type (and uploaded directories) are rendered by it, and revision and
    /// OCI metadata read through it. Without, tiphys renders plain directories itself.
    #[arg(long, env = "ARGOCD_SERVER_REPO_SERVER", value_name = "HOST:PORT")]
    pub repo_server: Option<String>,
    /// Reach the repo server without TLS.
    #[arg(long, env = "ARGOCD_SERVER_REPO_SERVER_PLAINTEXT")]
    pub repo_server_plaintext: bool,
    /// Check the repo server's certificate against the CA of `argocd-repo-server-tls`
    /// (mounted under `$ARGOCD_APP_CONFIG_PATH/server/tls`, as upstream); otherwise any
    /// certificate is accepted, as upstream does by default.
    #[arg(long, env = "ARGOCD_SERVER_REPO_SERVER_STRICT_TLS")]
    pub repo_server_strict_tls: bool,
    /// How long one call to the repo server may take (0: a minute).
    #[arg(long, env = "ARGOCD_SERVER_REPO_SERVER_TIMEOUT_SECONDS", default_value_t = 60)]
    pub repo_server_timeout_seconds: u64,
    /// Where upstream mounts its configuration (the repo server's CA under `server/tls`).
    #[arg(
        long,
        env = "ARGOCD_APP_CONFIG_PATH",
        default_value = "/app/config",
        hide = true
    )]
    pub app_config_path: PathBuf,
    /// Whether tiphys contacts destination clusters itself (their connection state and server
    /// version). `off`: their state is Unknown unless the controller's cache says otherwise.
    #[arg(long, env = "TIPHYS_CLUSTER_ACCESS", default_value = "on", value_parser = parse_on_off,
          action = clap::ArgAction::Set, value_name = "on|off", overrides_with = "cluster_access")]
    pub cluster_access: bool,
    /// How long one call to a destination cluster may take, its credentials included.
    #[arg(long, env = "TIPHYS_CLUSTER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub cluster_timeout: Duration,
    /// How long a cluster's exec credential provider may run before it is killed.
    #[arg(long, env = "TIPHYS_CLUSTER_EXEC_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub cluster_exec_timeout: Duration,
    /// How old a cluster's successful connection state may get before it is checked again (in
    /// the background; a failed one is re-checked sooner, backing off from 5 s).
    #[arg(long, env = "TIPHYS_CLUSTER_CHECK_INTERVAL", default_value = "3m", value_parser = parse_duration)]
    pub cluster_check_interval: Duration,
}

/// No inline scripts or styles, same-origin everything, no framing by others.
pub const DEFAULT_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'";

/// The default with `--staticassets`: as [`DEFAULT_CSP`], but styles may be inline, because
/// Argo CD's own UI bundle injects `<style>` elements (without them the page is unstyled).
/// Scripts stay same-origin only.
pub const STATIC_ASSETS_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; \
frame-ancestors 'self'";

/// Validated server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub insecure: bool,
    pub plaintext_grpc: bool,
    pub trusted_proxies: Vec<IpNet>,
    /// `--redirect-hosts`.
    pub redirect_hosts: Vec<String>,
    /// `""` or `/prefix` (no trailing slash).
    pub rootpath: String,
    /// Always starts and ends with `/`.
    pub basehref: String,
    pub data_dir: PathBuf,
    /// The store: the data dir's file, or etcd.
    pub store: crate::store::Backend,
    /// `--kube`: the installation whose custom resources are the applications and projects.
    pub kube: Option<crate::kubernetes::KubeOptions>,
    pub redis: Option<String>,
    pub namespace: String,
    /// `--application-namespaces`.
    pub app_namespaces: crate::kubernetes::AppNamespaces,
    pub url: Option<url_host::ExternalUrl>,
    pub limits: Limits,
    /// How long a stopping server keeps serving with `/healthz` at 503.
    pub shutdown_delay: Duration,
    pub html_headers: HtmlHeaders,
    pub staticassets: Option<PathBuf>,
    pub ready_file: Option<PathBuf>,
    pub config_dir: Option<PathBuf>,
    /// Media types a state-changing REST call may carry (lower case); empty: unchecked.
    pub api_content_types: Vec<String>,
    pub login_limits: LoginLimits,
    pub secrets_key_file: Option<PathBuf>,
    pub max_watches_per_caller: usize,
    /// How repositories are read.
    pub repos: crate::gitrepo::Limits,
    /// How destination clusters are contacted; `None`: they are not.
    pub clusters: Option<crate::clusters::Limits>,
    /// `--repo-server*`; `None`: no repo server.
    pub repo_server: Option<crate::reposerver::Config>,
}

impl ServerConfig {
    /// How the application state of this server is opened.
    pub fn app_options(&self) -> crate::state::Options {
        crate::state::Options {
            data_dir: self.data_dir.clone(),
            store: self.store.clone(),
            kube: self.kube.clone(),
            redis: self.redis.clone(),
            config_dir: self.config_dir.clone(),
            namespace: self.namespace.clone(),
            app_namespaces: self.app_namespaces.clone(),
            url: self.url.as_ref().map(|u| u.raw.clone()),
            basehref: self.basehref.clone(),
            login_limits: self.login_limits.clone(),
            secrets_key_file: self.secrets_key_file.clone(),
            max_streams_per_caller: self.max_watches_per_caller,
            repos: self.repos.clone(),
            clusters: self.clusters.clone(),
            repo_server: self.repo_server.clone(),
            clock: crate::clock::Clock::system(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub handshake_timeout: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_bytes: usize,
    pub http2_max_concurrent_streams: u32,
    pub max_body_bytes: usize,
    pub grpc_max_request_bytes: usize,
    pub grpc_max_message_bytes: usize,
    /// Open connections at most; beyond it one is answered 503 and closed.
    pub max_connections: usize,
    pub shutdown_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct HtmlHeaders {
    pub x_frame_options: String,
    pub content_security_policy: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "--rootpath {0:?} must start with '/' and contain no '?', '#', blank, control or non-ASCII character"
    )]
    RootPath(String),
    #[error("--basehref {0:?} must start with '/'")]
    BaseHref(String),
    #[error("--url {0:?} is not an absolute http(s) URL")]
    Url(String),
    #[error("no --data-dir given and no per-user data directory is known; pass --data-dir")]
    NoDataDir,
    #[error("{0}")]
    Store(String),
}

impl ServerArgs {
    pub fn validate(&self) -> Result<ServerConfig, ConfigError> {
        let rootpath = normalize_rootpath(&self.rootpath)?;
        if !self.basehref.starts_with('/') {
            return Err(ConfigError::BaseHref(self.basehref.clone()));
        }
        let mut basehref = with_trailing_slash(&self.basehref);
        if !rootpath.is_empty() {
            let forced = with_trailing_slash(&rootpath);
            if self.basehref != "/" && basehref != forced {
                tracing::warn!(basehref = %basehref, rootpath = %rootpath,
                    "--basehref and --rootpath conflict; using the rootpath as base href");
            }
            basehref = forced;
        }
        let url = match &self.url {
            Some(raw) => {
                Some(url_host::ExternalUrl::parse(raw).ok_or_else(|| ConfigError::Url(raw.clone()))?)
            }
            None => None,
        };
        let data_dir = match &self.data_dir {
            Some(dir) => dir.clone(),
            None => dirs::data_dir()
                .map(|d| d.join("tiphys"))
                .ok_or(ConfigError::NoDataDir)?,
        };
        let store = self
            .store
            .backend(&data_dir)
            .map_err(|e| ConfigError::Store(format!("{e:#}")))?;
        let repo_cache = self
            .repo_cache_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("repo-cache"));
        Ok(ServerConfig {
            store,
            secrets_key_file: self.store.secrets_key_file.clone(),
            listen: SocketAddr::new(self.address, self.port),
            metrics_listen: SocketAddr::new(self.metrics_address, self.metrics_port),
            insecure: self.insecure,
            plaintext_grpc: self.plaintext_grpc,
            trusted_proxies: self.trusted_proxies.clone(),
            redirect_hosts: self.redirect_hosts.clone(),
            rootpath,
            basehref,
            data_dir,
            kube: self.store.kube.then(|| crate::kubernetes::KubeOptions {
                kubeconfig: self.store.kubeconfig.clone(),
                namespace_of_context: self.namespace.is_none(),
            }),
            redis: self.redis.clone(),
            namespace: self.namespace.clone().unwrap_or_else(|| "argocd".to_owned()),
            app_namespaces: crate::kubernetes::AppNamespaces::parse(&self.application_namespaces),
            url,
            limits: Limits {
                handshake_timeout: self.handshake_timeout,
                header_read_timeout: self.header_read_timeout,
                idle_timeout: self.idle_timeout,
                max_header_bytes: self.max_header_bytes,
                http2_max_concurrent_streams: self.http2_max_concurrent_streams,
                max_body_bytes: self.max_body_bytes,
                grpc_max_request_bytes: self.grpc_max_request_bytes,
                grpc_max_message_bytes: self.grpc_max_message_bytes,
                max_connections: match self.max_connections {
                    0 => super::fdlimit::default_max_connections(),
                    n => n,
                },
                shutdown_timeout: self.shutdown_timeout,
            },
            shutdown_delay: self.shutdown_delay,
            html_headers: HtmlHeaders {
                x_frame_options: self.x_frame_options.clone(),
                content_security_policy: match (&self.content_security_policy, &self.staticassets) {
                    (Some(policy), _) => policy.clone(),
                    (None, Some(_)) => STATIC_ASSETS_CSP.to_owned(),
                    (None, None) => DEFAULT_CSP.to_owned(),
                },
            },
            staticassets: self.staticassets.clone(),
            ready_file: self.ready_file.clone(),
            config_dir: self.config_dir.clone(),
            api_content_types: self
                .api_content_types
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect(),
            login_limits: LoginLimits {
                throttle: ThrottlePolicy {
                    max_failures: self.login_max_failures.max(1),
                    window: self.login_failure_window,
                    ..ThrottlePolicy::default()
                },
                max_concurrent: self.login_max_concurrent.max(1),
                ..LoginLimits::default()
            },
            max_watches_per_caller: self.max_watches_per_caller as usize,
            repos: crate::gitrepo::Limits {
                timeout: self.repo_timeout,
                max_bytes: self.repo_max_bytes,
                max_fetches: self.repo_max_fetches as usize,
                refs_ttl: self.repo_refs_ttl,
                check_interval: self.repo_check_interval,
                enabled: self.repo_access,
                ..crate::gitrepo::Limits::new(repo_cache)
            },
            clusters: self.cluster_access.then_some(crate::clusters::Limits {
                timeout: self.cluster_timeout,
                exec_timeout: self.cluster_exec_timeout,
                check_interval: self.cluster_check_interval,
            }),
            repo_server: self.repo_server.clone().map(|address| crate::reposerver::Config {
                address,
                plaintext: self.repo_server_plaintext,
                strict_tls: self.repo_server_strict_tls,
                ca_files: ["tls.crt", "ca.crt"]
                    .iter()
                    .map(|f| self.app_config_path.join("server/tls").join(f))
                    .collect(),
                timeout: Duration::from_secs(self.repo_server_timeout_seconds),
            }),
        })
    }
}

fn parse_on_off(raw: &str) -> Result<bool, String> {
    match raw {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("{raw:?}: use on or off")),
    }
}

pub(crate) fn normalize_rootpath(raw: &str) -> Result<String, ConfigError> {
    let trimmed = raw.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    // Only what a URL path holds as it is: the root path goes into `Location` headers and
    // cookie paths, where a blank or control character would void the header.
    if !trimmed.starts_with('/')
        || trimmed.contains(['?', '#'])
        || !trimmed.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(ConfigError::RootPath(raw.to_owned()));
    }
    Ok(trimmed.to_owned())
}

fn with_trailing_slash(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    format!("{trimmed}/")
}

/// A flag's Go duration (`10s`, `1m30s`, `1.5h`): [`crate::config::parse_go_duration`],
/// surrounding blanks ignored.
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    crate::config::parse_go_duration(raw.trim())
}

/// The external URL, reduced to what the server needs from it.
pub mod url_host {
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ExternalUrl {
        pub raw: String,
        /// Host without brackets or port.
        pub host: String,
    }

    impl ExternalUrl {
        pub fn parse(raw: &str) -> Option<Self> {
            let url = crate::config::http_url::parse(raw).ok()?;
            let host = match url.host()? {
                url::Host::Ipv6(addr) => addr.to_string(),
                host => host.to_string(),
            };
            Some(Self {
                raw: raw.to_owned(),
                host,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration(" 10s "), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn rootpath_is_normalised() {
        assert_eq!(normalize_rootpath("/argocd/").unwrap(), "/argocd");
        assert_eq!(normalize_rootpath("").unwrap(), "");
        assert!(normalize_rootpath("argocd").is_err());
        // Found by the sniff fuzz target: the root path is written into `Location`.
        for bad in ["/argo cd", "/argo\0", "/argo\tx", "/café"] {
            assert!(normalize_rootpath(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn external_url_host() {
        assert_eq!(
            url_host::ExternalUrl::parse("https://cd.example.com:8443/x")
                .unwrap()
                .host,
            "cd.example.com"
        );
        assert_eq!(
            url_host::ExternalUrl::parse("https://[2001:db8::1]/")
                .unwrap()
                .host,
            "2001:db8::1"
        );
        assert_eq!(
            url_host::ExternalUrl::parse("https://user@CD.Example.com/")
                .unwrap()
                .host,
            "cd.example.com"
        );
        assert_eq!(
            url_host::ExternalUrl::parse("http://10.0.0.1:8080").unwrap().host,
            "10.0.0.1"
        );
        for bad in [
            "cd.example.com",
            "https://",
            "ftp://cd.example.com",
            "https://cd.example.com:99999",
            "https://[::1",
            "https://evil.com\\@cd.example.com",
        ] {
            assert!(url_host::ExternalUrl::parse(bad).is_none(), "{bad}");
        }
    }
}
