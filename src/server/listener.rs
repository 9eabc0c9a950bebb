//! The accept loop: sniff the first byte (TLS or plaintext), handshake with a
//! deadline, serve HTTP/1.1 or HTTP/2 on the connection, drain on shutdown.
//! The caller owns the socket and the shutdown signal.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulConnection, GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::config::Limits;
use super::conn::ConnInfo;
use super::dispatch::Dispatcher;
use super::idle::{IdleIo, InFlight, Requests};
use super::loglimit::LogKind;
use super::stream_executor::ConnStreams;

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// HTTP/2 flow-control windows the server grants, per stream and per connection.
const WINDOW: u32 = 1 << 20;
/// Bytes queued per HTTP/2 stream beyond what the client's window lets out.
const SEND_BUFFER: usize = 64 << 10;

/// Connections beyond `--max-connections` that are answered (503 / UNAVAILABLE) at once; more
/// than this are closed without an answer, as answering costs a handshake each.
const REFUSING_AT_ONCE: usize = 64;

pub struct Front {
    pub dispatcher: Dispatcher,
    /// `None` in `--insecure` mode.
    pub tls: Option<TlsAcceptor>,
    pub limits: Limits,
    /// One permit per connection served (`--max-connections`).
    serving: Arc<Semaphore>,
    /// One permit per connection being refused.
    refusing: Arc<Semaphore>,
}

/// The room a connection takes, held until it closes.
enum Slot {
    Serving(#[allow(dead_code)] OwnedSemaphorePermit),
    Refusing(#[allow(dead_code)] OwnedSemaphorePermit),
}

impl Front {
    pub fn new(dispatcher: Dispatcher, tls: Option<TlsAcceptor>, limits: Limits) -> Self {
        Self {
            dispatcher,
            tls,
            serving: Arc::new(Semaphore::new(limits.max_connections.min(Semaphore::MAX_PERMITS))),
            refusing: Arc::new(Semaphore::new(REFUSING_AT_ONCE)),
            limits,
        }
    }

    /// Room for one more connection: to serve it, to refuse it, or none.
    fn slot(&self) -> Option<Slot> {
        if let Ok(permit) = Arc::clone(&self.serving).try_acquire_owned() {
            return Some(Slot::Serving(permit));
        }
        Arc::clone(&self.refusing)
            .try_acquire_owned()
            .ok()
            .map(Slot::Refusing)
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
            // What a client may send before the server reads it: per stream, and for the whole
            // connection however many streams it opens (hyper's defaults, stated here as limits).
            .initial_stream_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            // What the server queues per stream for a client that does not read: with many
            // streams (watches) on one connection, hyper's 400 KiB each would add up.
            .max_send_buf_size(SEND_BUFFER)
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
                let Some(slot) = front.slot() else {
                    // Closed at once: the server is answering as many refusals as it will.
                    let metrics = &front.dispatcher.metrics;
                    metrics.over_capacity();
                    if let Some(suppressed) = metrics.logs.allow(LogKind::OverCapacity) {
                        tracing::warn!(%peer, suppressed, max = front.limits.max_connections,
                            "connection closed unanswered: --max-connections reached and many refusals under way");
                    }
                    continue;
                };
                let front = Arc::clone(&front);
                let watcher = graceful.watcher();
                let cancel = shutdown.clone();
                tokio::spawn(async move { handle(tcp, peer, slot, front, watcher, cancel).await });
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
    slot: Slot,
    front: Arc<Front>,
    watcher: Watcher,
    cancel: CancellationToken,
) {
    let _ = tcp.set_nodelay(true);
    let metrics = &front.dispatcher.metrics;
    let over_capacity = matches!(slot, Slot::Refusing(_));
    if over_capacity {
        metrics.over_capacity();
        if let Some(suppressed) = metrics.logs.allow(LogKind::OverCapacity) {
            tracing::warn!(%peer, suppressed, max = front.limits.max_connections,
                "--max-connections reached: refusing a connection (503 / UNAVAILABLE)");
        }
    }
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
                Ok(Ok(tls)) => {
                    let info = ConnInfo {
                        peer,
                        tls: true,
                        over_capacity,
                    };
                    serve_connection(tls, info, &front, watcher).await;
                }
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
        (_, false) => {
            let info = ConnInfo {
                peer,
                tls: false,
                over_capacity,
            };
            serve_connection(tcp, info, &front, watcher).await;
        }
    }
    drop(slot);
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
    let requests = Arc::new(Requests::default());
    let io = TokioIo::new(IdleIo::new(io, front.limits.idle_timeout, Arc::clone(&requests)));
    let shared = Arc::clone(front);
    // Only a refused connection waits for its one answer.
    let answered = info.over_capacity.then(|| Arc::new(Notify::new()));
    let on_answer = answered.clone();
    let service = hyper::service::service_fn(move |req| {
        let guard = InFlight::new(Arc::clone(&requests));
        let shared = Arc::clone(&shared);
        let on_answer = on_answer.clone();
        // Boxed: hyper keeps room for one request's future in every HTTP/1 connection, idle or
        // not, and the dispatcher's is some kilobytes.
        let handled = Box::pin(async move { shared.dispatcher.handle(req, info, guard).await });
        async move {
            let response = handled.await;
            if let Some(answered) = on_answer {
                answered.notify_one();
            }
            Ok::<_, Infallible>(response)
        }
    });
    let streams = ConnStreams::default();
    let builder = front.builder(streams.clone());
    // The connection is built in each arm, not before: a local moved into the awaited future
    // would keep its own room in this function's state, in every connection's task.
    let ended = match answered {
        Some(answered) => {
            let conn = builder.serve_connection(io, service);
            Box::pin(refuse(conn, &streams, &answered, front.limits.handshake_timeout)).await
        }
        None => {
            streams
                .drive(watcher.watch(builder.serve_connection(io, service)))
                .await
        }
    };
    if let Err(err) = ended
        && let Some(suppressed) = front.dispatcher.metrics.logs.allow(LogKind::ConnectionError)
    {
        tracing::debug!(peer = %info.peer, error = %err, suppressed, "connection ended with an error");
    }
}

/// Serves a connection beyond `--max-connections` for one answer (503 / UNAVAILABLE, or a health
/// probe's), then closes it gracefully (HTTP/2: GOAWAY), all within twice `deadline`.
async fn refuse<C>(
    conn: C,
    streams: &ConnStreams,
    answered: &Notify,
    deadline: Duration,
) -> Result<(), C::Error>
where
    C: GracefulConnection,
{
    let closing = GracefulShutdown::new();
    let served = streams.drive(closing.watcher().watch(conn));
    let close = async {
        let _ = tokio::time::timeout(deadline, answered.notified()).await;
        closing.shutdown().await;
    };
    match tokio::time::timeout(deadline * 2, async { tokio::join!(served, close).0 }).await {
        Ok(ended) => ended,
        Err(_) => Ok(()),
    }
}
