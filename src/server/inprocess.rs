//! The whole server without sockets, for tests: the application state and the dispatcher a
//! real server would build from the same flags, called as a tower service (as axum's testing
//! example calls a router). Every request goes through identification, the edge policy, CSRF,
//! routing and the adapters exactly as one from a socket does; only the listener, TLS and
//! HTTP/2 framing are left out.

use super::idle::{InFlight, Requests};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use clap::Parser;
use http::{Request, Response};

use super::config::ServerArgs;
use super::conn::ConnInfo;
use super::dispatch::{Dispatcher, RequestBody};
use super::metrics::Metrics;
use crate::state::ServerState;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    server: ServerArgs,
}

/// A server in this process.
#[derive(Clone)]
pub struct InProcess {
    pub app: Arc<ServerState>,
    pub metrics: Arc<Metrics>,
    dispatcher: Arc<Dispatcher>,
    conn: ConnInfo,
    requests: Arc<Requests>,
}

impl InProcess {
    /// Opens a server on `data_dir` configured by `flags` (those of `tiphys server`). Requests
    /// arrive as if over TLS from 127.0.0.1. Repositories are not contacted unless `flags` say
    /// `--repo-access on`.
    pub async fn open(data_dir: &Path, flags: &[&str]) -> anyhow::Result<Self> {
        Self::open_with_clock(data_dir, flags, crate::clock::Clock::system()).await
    }

    /// [`InProcess::open`] with the state reading time from `clock` (a paused one, moved by
    /// the test).
    pub async fn open_with_clock(
        data_dir: &Path,
        flags: &[&str],
        clock: crate::clock::Clock,
    ) -> anyhow::Result<Self> {
        let mut argv = vec!["tiphys-server".to_owned(), "--data-dir".to_owned()];
        argv.push(data_dir.display().to_string());
        argv.extend(["--repo-access".to_owned(), "off".to_owned()]);
        argv.extend(flags.iter().map(|f| (*f).to_owned()));
        let args = Flags::try_parse_from(argv)?.server;
        let config = args.validate()?;
        let mut options = config.app_options();
        options.clock = clock;
        let app = Arc::new(ServerState::open(options).await?);
        crate::service::certificate::seed::seed_app(&app).await?;
        app.auth.logins.ensure_initial_admin().await?;
        let metrics = Arc::new(Metrics::default());
        let (_, health) = tonic_health::server::health_reporter();
        // No certificate: a plaintext request is redirected to `--redirect-hosts` or the URL only.
        let dispatcher = Dispatcher::new(&app, &config, Arc::clone(&metrics), health, None)?;
        Ok(Self {
            app,
            metrics,
            dispatcher: Arc::new(dispatcher),
            conn: ConnInfo {
                peer: SocketAddr::from(([127, 0, 0, 1], 40000)),
                tls: true,
                over_capacity: false,
            },
            requests: Arc::default(),
        })
    }

    /// The same server, its requests arriving as plaintext (the redirect and `--insecure`
    /// rules apply) from `peer`.
    pub fn plaintext_from(&self, peer: SocketAddr) -> Self {
        Self {
            conn: ConnInfo {
                peer,
                tls: false,
                over_capacity: false,
            },
            ..self.clone()
        }
    }
}

impl<B: RequestBody> tower::Service<Request<B>> for InProcess {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let in_flight = InFlight::new(Arc::clone(&this.requests));
            let response = this.dispatcher.handle(req, this.conn, in_flight).await;
            Ok(response.map(Body::new))
        })
    }
}
