//! `tiphys server`: wires configuration, TLS, the routers and the listeners.

pub mod body;
pub mod config;
pub mod conn;
pub mod csrf;
pub mod dispatch;
pub mod edge;
pub mod fdlimit;
pub mod idle;
pub mod inprocess;
pub mod listener;
pub mod loglimit;
pub mod metrics;
pub mod outcome;
pub mod protocol;
pub mod rate_limit;
pub mod redirect;
pub mod routes;
pub mod shutdown;
pub mod store_args;
pub mod stream_executor;
pub mod tls;
pub mod tls_kube;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::config::{ServerArgs, ServerConfig};
use self::dispatch::Dispatcher;
use self::listener::Front;
use self::metrics::Metrics;
use self::shutdown::Shutdown;
use self::tls::{CertSource, TlsPolicy};
use crate::config::ConfigWatch;
use crate::state::ServerState;

/// A server whose sockets are bound and which is ready to serve.
pub struct Server {
    listener: TcpListener,
    metrics_listener: TcpListener,
    front: Arc<Front>,
    state: Arc<ServerState>,
    config_watch: Arc<ConfigWatch>,
    metrics: Arc<Metrics>,
    health: tonic_health::server::HealthReporter,
    reloader: Option<Reloader>,
    policy: TlsPolicy,
    config: ServerConfig,
    tls_summary: String,
}

/// The certificate in force and what follows its source.
enum Reloader {
    Files(Arc<tls::CertResolver>, CertSource),
    Installation(Arc<tls::CertResolver>, tls_kube::Installation),
}

impl Reloader {
    fn resolver(&self) -> &Arc<tls::CertResolver> {
        match self {
            Self::Files(resolver, _) | Self::Installation(resolver, _) => resolver,
        }
    }
}

impl Server {
    /// Validates the configuration, loads TLS material and binds both ports.
    /// Every error names what is wrong (a file and why, a port in use).
    pub async fn bind(args: &ServerArgs) -> anyhow::Result<Self> {
        if args.tlsciphers.as_deref() == Some("list") {
            anyhow::bail!("--tlsciphers list is handled by the CLI before the server starts");
        }
        // Before the connection cap is worked out from it.
        fdlimit::raise();
        let config = args.validate()?;
        let policy = TlsPolicy::parse(
            &args.tlsminversion,
            &args.tlsmaxversion,
            args.tlsciphers.as_deref(),
        )?;
        // On an installation, the certificate is the installation's (`tls_kube`), read once
        // its API server is open.
        let from_installation = !config.insecure && args.tls_cert.is_none() && config.kube.is_some();
        let (mut acceptor, mut reloader, mut tls_summary) = if config.insecure {
            (None, None, "off (--insecure)".to_owned())
        } else if from_installation {
            (None, None, String::new())
        } else {
            let source = match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => CertSource::Files {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                _ => CertSource::SelfSigned {
                    dir: config.data_dir.join("tls"),
                    names: tls::self_signed_names(config.url.as_ref().map(|u| u.host.as_str())),
                },
            };
            let resolver = tls::load(&source, policy.provider())?;
            let server_config = policy.server_config(Arc::clone(&resolver))?;
            let summary = source.describe();
            (
                Some(tokio_rustls::TlsAcceptor::from(server_config)),
                Some(Reloader::Files(resolver, source)),
                summary,
            )
        };

        let state = Arc::new(ServerState::open(config.app_options()).await?);
        if from_installation {
            let client = (state.kube.clone())
                .ok_or_else(|| anyhow::anyhow!("--kube is set, but no API server client was opened"))?;
            let installation = tls_kube::Installation {
                client,
                namespace: state.namespace.clone(),
                names: tls_kube::generated_names(
                    &state.namespace,
                    config.url.as_ref().map(|u| u.host.as_str()),
                ),
            };
            let (resolver, from) = installation.load(policy.provider()).await?;
            acceptor = Some(tokio_rustls::TlsAcceptor::from(
                policy.server_config(Arc::clone(&resolver))?,
            ));
            tls_summary = from;
            reloader = Some(Reloader::Installation(resolver, installation));
        }
        crate::service::certificate::seed::seed_app(&state).await?;
        let config_watch = Arc::clone(&state.config);
        if config.api_content_types.is_empty() {
            tracing::warn!(
                "--api-content-types is empty: state-changing REST calls are not checked for CSRF"
            );
        }
        crate::config::log_policy(&config_watch.current());
        check_sso_url(&state)?;
        let metrics = Arc::new(Metrics::default());
        let health = tonic_health::server::HealthReporter::new();
        let health_service = crate::grpc::health::server(&health, &state);
        let cert = reloader.as_ref().map(|r| Arc::clone(r.resolver()));
        let dispatcher = Dispatcher::new(&state, &config, Arc::clone(&metrics), health_service, cert)?;
        let front = Arc::new(Front::new(dispatcher, acceptor, config.limits));

        let listener = bind(config.listen, "--address/--port").await?;
        let metrics_listener = bind(config.metrics_listen, "--metrics-address/--metrics-port").await?;
        Ok(Self {
            listener,
            metrics_listener,
            front,
            state,
            config_watch,
            metrics,
            health,
            reloader,
            policy,
            config,
            tls_summary,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn metrics_addr(&self) -> std::io::Result<SocketAddr> {
        self.metrics_listener.local_addr()
    }

    /// Serves until `shutdown` begins, then drains (see [`drain`]).
    pub async fn serve(self, shutdown: Shutdown) -> anyhow::Result<()> {
        let addr = self.local_addr()?;
        let metrics_addr = self.metrics_addr()?;
        let internal = CancellationToken::new();
        let provider = Arc::clone(self.policy.provider());
        match self.reloader {
            Some(Reloader::Files(resolver, source)) => {
                tls::spawn_reloader(resolver, source, provider, internal.clone());
            }
            Some(Reloader::Installation(resolver, installation)) => {
                installation.spawn_reloader(resolver, provider, internal.clone());
            }
            None => {}
        }
        let app = Arc::clone(&self.state);
        self.config_watch.spawn_watcher(internal.clone(), move |next| {
            let app = Arc::clone(&app);
            async move { app.prepare_config(&next).await }
        });
        tokio::spawn(purge_expired(Arc::clone(&self.state), internal.clone()));
        tokio::spawn(serve_metrics(
            self.metrics_listener,
            Arc::clone(&self.metrics),
            Arc::clone(&self.state),
            internal.clone(),
        ));
        // The first start's admin password is made beside serving, so that
        // bcrypt does not delay the first request. The ready file, which
        // scripts read the port (and then that password) from, waits for it.
        let app = Arc::clone(&self.state);
        let ready_file = self.config.ready_file.clone();
        tokio::spawn(async move {
            if let Err(err) = app.auth.logins.ensure_initial_admin().await {
                tracing::error!(error = %format!("{err:#}"), "cannot set the initial admin password");
            }
            if let Some(path) = ready_file {
                let ready = serde_json::json!({ "port": addr.port(), "metrics_port": metrics_addr.port() });
                if let Err(err) = std::fs::write(&path, ready.to_string()) {
                    tracing::error!(path = %path.display(), error = %err, "cannot write the ready file");
                }
            }
        });
        tracing::info!(
            "tiphys {} serving on {addr} (tls: {}, url: {}, metrics: {metrics_addr}, rootpath: {:?})",
            crate::buildinfo::VERSION,
            self.tls_summary,
            self.config.url.as_ref().map_or("unset", |u| u.raw.as_str()),
            self.config.rootpath,
        );
        let stop_accepting = CancellationToken::new();
        tokio::spawn(drain(
            shutdown,
            self.config.shutdown_delay,
            Arc::clone(&self.state),
            self.health.clone(),
            stop_accepting.clone(),
        ));
        listener::serve(self.listener, self.front, stop_accepting).await;
        internal.cancel();
        Ok(())
    }
}

/// The shutdown sequence, once `shutdown` begins: report not serving (`/healthz` 503, gRPC
/// health NOT_SERVING) while still accepting and serving for `delay`, so that load balancers
/// and Kubernetes take this replica out of rotation before any connection is refused; then
/// stop accepting and end every open stream at once (clients reconnect elsewhere). The
/// listener then waits for in-flight requests, up to `--shutdown-timeout`.
async fn drain(
    shutdown: Shutdown,
    delay: std::time::Duration,
    state: Arc<ServerState>,
    health: tonic_health::server::HealthReporter,
    stop_accepting: CancellationToken,
) {
    shutdown.begin.cancelled().await;
    state.drain.stop_serving();
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    if !delay.is_zero() {
        tracing::info!(
            ?delay,
            "shutting down: /healthz answers 503; still serving until the delay (--shutdown-delay) \
             has passed or another signal comes"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.hurry.cancelled() => tracing::info!("second signal: the rest of the shutdown delay is skipped"),
        }
    }
    stop_accepting.cancel();
    state.drain.end_streams();
}

/// Single sign-on needs the external URL: the provider sends browsers back
/// to `<url>/auth/callback`. Without it, say so instead of starting with a
/// broken redirect URI.
fn check_sso_url(state: &ServerState) -> anyhow::Result<()> {
    let settings = state.config.current();
    if !settings.oidc_providers.is_empty() && state.url().is_empty() {
        let key = if settings.oidc.is_some() {
            "oidc.config"
        } else {
            crate::config::oidc::PROVIDERS_KEY
        };
        anyhow::bail!(
            "{key} is set in argocd-cm, but the server's external URL is not: set `url` in argocd-cm \
             (or --url), e.g. https://argocd.example.com; the provider must know <url>/auth/callback as a redirect URI"
        );
    }
    Ok(())
}

async fn bind(addr: SocketAddr, flags: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|err| {
        let hint = if err.kind() == std::io::ErrorKind::AddrInUse {
            " (another process is listening there; stop it or choose another port)"
        } else {
            ""
        };
        anyhow::anyhow!("cannot listen on {addr} ({flags}): {err}{hint}")
    })
}

/// Revocations are kept only until the revoked token would have expired, SSO sessions
/// until they end, used SSO login states until their logins would have expired.
async fn purge_expired(app: Arc<ServerState>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {
                if let Err(err) = app.auth.purge_expired().await {
                    tracing::warn!(error = %err, "cannot purge expired revocations");
                }
                if let Err(err) = app.oidc.logins.purge(app.clock.now_s()).await {
                    tracing::warn!(error = %err, "cannot purge the used SSO login states");
                }
            }
        }
    }
}

async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    state: Arc<ServerState>,
    cancel: CancellationToken,
) {
    use axum::routing::get;
    let registry = Arc::new(metrics::registry(metrics, state));
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let registry = Arc::clone(&registry);
            async move {
                let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                ([("content-type", content_type)], metrics::render(&registry))
            }
        }),
    );
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(cancel.cancelled_owned())
        .await;
    if let Err(err) = served {
        tracing::warn!(error = %err, "metrics listener failed");
    }
}

/// `tiphys server`: bind, serve until SIGINT/SIGTERM, drain.
pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let server = Server::bind(&args).await?;
    server.serve(shutdown::on_signal()).await
}
