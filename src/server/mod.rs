//! `tiphys server`: wires configuration, TLS, the routers and the listeners.

pub mod body;
pub mod config;
pub mod conn;
pub mod dispatch;
pub mod edge;
pub mod idle;
pub mod listener;
pub mod metrics;
pub mod protocol;
pub mod shutdown;
pub mod state;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use self::config::{ServerArgs, ServerConfig};
use self::dispatch::{Dispatcher, LogThrottle};
use self::listener::Front;
use self::metrics::Metrics;
use self::state::AppState;
use self::tls::{CertSource, TlsPolicy};
use crate::service::settings::SettingsSource;

/// A server whose sockets are bound and which is ready to serve.
pub struct Server {
    listener: TcpListener,
    metrics_listener: TcpListener,
    front: Arc<Front>,
    state: Arc<AppState>,
    metrics: Arc<Metrics>,
    health: tonic_health::server::HealthReporter,
    reloader: Option<(Arc<tls::CertResolver>, CertSource, TlsPolicy)>,
    config: ServerConfig,
    tls_summary: String,
}

impl Server {
    /// Validates the configuration, loads TLS material and binds both ports.
    /// Every error names what is wrong (a file and why, a port in use).
    pub async fn bind(args: &ServerArgs) -> anyhow::Result<Self> {
        if args.tlsciphers.as_deref() == Some("list") {
            anyhow::bail!("--tlsciphers list is handled by the CLI before the server starts");
        }
        let config = args.validate()?;
        let policy = TlsPolicy::parse(
            &args.tlsminversion,
            &args.tlsmaxversion,
            args.tlsciphers.as_deref(),
        )?;
        let (acceptor, reloader, tls_summary) = if config.insecure {
            (None, None, "off (--insecure)".to_owned())
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
                Some((resolver, source, policy)),
                summary,
            )
        };

        let state = Arc::new(AppState::new(SettingsSource {
            url: config.url.as_ref().map(|u| u.raw.clone()).unwrap_or_default(),
            app_label_key: String::new(),
        }));
        let metrics = Arc::new(Metrics::default());
        let (health, health_service) = tonic_health::server::health_reporter();
        let grpc_routes = crate::grpc::routes(&state, health_service, config.limits.grpc_max_message_bytes);
        let ui = crate::ui::Ui::new(config.staticassets.clone(), &config.basehref)?;
        let dispatcher = Dispatcher {
            grpc: grpc_routes.clone().into_axum_router(),
            grpc_web: grpc_routes
                .into_axum_router()
                .layer(tonic_web::GrpcWebLayer::new()),
            http: crate::api::router(Arc::clone(&state), Arc::new(ui)),
            metrics: Arc::clone(&metrics),
            tls_mode: !config.insecure,
            plaintext_grpc: config.plaintext_grpc,
            trusted_proxies: config.trusted_proxies.clone(),
            rootpath: config.rootpath.clone(),
            max_body_bytes: config.limits.max_body_bytes,
            html_headers: config.html_headers.clone(),
            downgrade_warning: LogThrottle::default(),
        };
        let front = Arc::new(Front::new(dispatcher, acceptor, config.limits));

        let listener = bind(config.listen, "--address/--port").await?;
        let metrics_listener = bind(config.metrics_listen, "--metrics-address/--metrics-port").await?;
        Ok(Self {
            listener,
            metrics_listener,
            front,
            state,
            metrics,
            health,
            reloader,
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

    /// Serves until `shutdown` fires, then drains.
    pub async fn serve(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let addr = self.local_addr()?;
        let metrics_addr = self.metrics_addr()?;
        let internal = CancellationToken::new();
        if let Some((resolver, source, policy)) = self.reloader {
            tls::spawn_reloader(resolver, source, Arc::clone(policy.provider()), internal.clone());
        }
        tokio::spawn(serve_metrics(
            self.metrics_listener,
            Arc::clone(&self.metrics),
            internal.clone(),
        ));
        if let Some(path) = &self.config.ready_file {
            let ready = serde_json::json!({ "port": addr.port(), "metrics_port": metrics_addr.port() });
            std::fs::write(path, ready.to_string())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        tracing::info!(
            "tiphys {} serving on {addr} (tls: {}, url: {}, metrics: {metrics_addr}, rootpath: {:?})",
            crate::buildinfo::VERSION,
            self.tls_summary,
            self.config.url.as_ref().map_or("unset", |u| u.raw.as_str()),
            self.config.rootpath,
        );
        let state = Arc::clone(&self.state);
        let health = self.health.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            state.stop_serving();
            health
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
        });
        listener::serve(self.listener, self.front, shutdown).await;
        internal.cancel();
        Ok(())
    }
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

async fn serve_metrics(listener: TcpListener, metrics: Arc<Metrics>, cancel: CancellationToken) {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let metrics = Arc::clone(&metrics);
            async move { ([("content-type", "text/plain; version=0.0.4")], metrics.render()) }
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
