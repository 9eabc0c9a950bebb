//! The accept loop: sniff the first byte (TLS or plaintext), handshake with a
//! deadline, serve HTTP/1.1 or HTTP/2 on the connection, drain on shutdown.
//! The caller owns the socket and the shutdown signal.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::body::InFlight;
use super::config::Limits;
use super::conn::ConnInfo;
use super::dispatch::Dispatcher;
use super::idle::IdleIo;
use super::loglimit::LogKind;
use super::streams::ConnStreams;

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

pub struct Front {
    pub dispatcher: Dispatcher,
    /// `None` in `--insecure` mode.
    pub tls: Option<TlsAcceptor>,
    pub limits: Limits,
}

impl Front {
    pub fn new(dispatcher: Dispatcher, tls: Option<TlsAcceptor>, limits: Limits) -> Self {
        Self {
            dispatcher,
            tls,
            limits,
        }
    }

    /// The HTTP/1.1 and HTTP/2 settings of one connection, whose streams run
    /// on `streams`.
    fn builder(&self, streams: ConnStreams) -> auto::Builder<ConnStreams> {
        let limits = &self.limits;
        let mut builder = auto::Builder::new(streams);
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            // One buffer per response: through TLS, separate header and body
            // buffers would each become a record of their own.
            .writev(false)
            .max_buf_size(limits.max_header_bytes.max(8192));
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.http2_max_concurrent_streams)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Some(Duration::from_secs(60)))
            .keep_alive_timeout(Duration::from_secs(20));
        builder
    }
}

/// Serves until `shutdown` fires, then stops accepting and gives in-flight
/// requests `limits.shutdown_timeout` to finish.
pub async fn serve(listener: TcpListener, front: Arc<Front>, shutdown: CancellationToken) {
    let graceful = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let front = Arc::clone(&front);
                let watcher = graceful.watcher();
                let cancel = shutdown.clone();
                tokio::spawn(async move { handle(tcp, peer, front, watcher, cancel).await });
            }
            Err(err) => {
                // Out of file descriptors and similar: back off instead of spinning.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; waiting for in-flight requests");
    match tokio::time::timeout(front.limits.shutdown_timeout, graceful.shutdown()).await {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => {
            tracing::warn!(deadline = ?front.limits.shutdown_timeout, "shutdown deadline passed; closing the remaining connections")
        }
    }
}

async fn handle(
    tcp: TcpStream,
    peer: SocketAddr,
    front: Arc<Front>,
    watcher: Watcher,
    cancel: CancellationToken,
) {
    let _ = tcp.set_nodelay(true);
    let metrics = &front.dispatcher.metrics;
    let deadline = front.limits.handshake_timeout;
    let first = tokio::select! {
        first = tokio::time::timeout(deadline, first_byte(&tcp)) => first,
        () = cancel.cancelled() => return,
    };
    let first = match first {
        Ok(Ok(Some(byte))) => byte,
        Ok(Ok(None)) => return,
        Ok(Err(err)) => {
            if let Some(suppressed) = metrics.logs.allow(LogKind::ConnectionError) {
                tracing::debug!(%peer, error = %err, suppressed, "connection failed before its first byte");
            }
            return;
        }
        Err(_) => {
            metrics.connection_refused();
            tracing::debug!(%peer, ?deadline, "closed a connection that sent nothing");
            return;
        }
    };
    match (&front.tls, first == TLS_HANDSHAKE) {
        (None, true) => {
            metrics.connection_refused();
            // `suppressed`: lines of this kind the rate limit left out since the last one.
            if let Some(suppressed) = metrics.logs.allow(LogKind::TlsOnPlaintextPort) {
                tracing::warn!(%peer, suppressed,
                    "TLS handshake on a plaintext (--insecure) port: point the client or gateway at http:// \
                     (or at the TLS port of a gateway), or run the server without --insecure");
            }
        }
        (Some(acceptor), true) => {
            let accepted = tokio::select! {
                accepted = tokio::time::timeout(deadline, acceptor.accept(tcp)) => accepted,
                () = cancel.cancelled() => return,
            };
            match accepted {
                Ok(Ok(tls)) => serve_connection(tls, ConnInfo { peer, tls: true }, &front, watcher).await,
                Ok(Err(err)) => {
                    metrics.connection_refused();
                    if let Some(suppressed) = metrics.logs.allow(LogKind::TlsHandshakeFailed) {
                        tracing::debug!(%peer, error = %err, suppressed, "TLS handshake failed");
                    }
                }
                Err(_) => {
                    metrics.connection_refused();
                    if let Some(suppressed) = metrics.logs.allow(LogKind::TlsHandshakeFailed) {
                        tracing::debug!(%peer, suppressed, "TLS handshake timed out");
                    }
                }
            }
        }
        (_, false) => serve_connection(tcp, ConnInfo { peer, tls: false }, &front, watcher).await,
    }
}

/// Waits for the first byte without consuming it; `None` if the peer closed.
async fn first_byte(tcp: &TcpStream) -> std::io::Result<Option<u8>> {
    let mut buf = [0_u8; 1];
    let n = tcp.peek(&mut buf).await?;
    Ok((n == 1).then_some(buf[0]))
}

async fn serve_connection<IO>(io: IO, info: ConnInfo, front: &Arc<Front>, watcher: Watcher)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let _open = front.dispatcher.metrics.connection_opened(info.tls);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let io = TokioIo::new(IdleIo::new(io, front.limits.idle_timeout, Arc::clone(&in_flight)));
    let shared = Arc::clone(front);
    let service = hyper::service::service_fn(move |req| {
        let guard = InFlight::new(Arc::clone(&in_flight));
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(shared.dispatcher.handle(req, info, guard).await) }
    });
    let streams = ConnStreams::default();
    let builder = front.builder(streams.clone());
    let conn = builder.serve_connection(io, service);
    if let Err(err) = streams.drive(watcher.watch(conn)).await
        && let Some(suppressed) = front.dispatcher.metrics.logs.allow(LogKind::ConnectionError)
    {
        tracing::debug!(peer = %info.peer, error = %err, suppressed, "connection ended with an error");
    }
}
