//! Closes a connection on which no request has been in flight for the idle timeout (HTTP/1
//! keep-alive and HTTP/2 alike).
//!
//! Idle means "no requests", not "no bytes": hyper pings idle HTTP/2 connections, and a client
//! may ping too, so traffic alone would keep an unused connection open for ever. A request
//! that is arriving slowly is bounded by the header read timeout instead, and one whose body or
//! response is still moving counts as in flight.
//!
//! A timer fires every quarter of the timeout and counts the quarters with no request in flight
//! and none begun, so an idle connection is closed between 1 and 1.25 timeouts after its last
//! request ended. Nothing is done per read or write.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Checks per timeout.
const TICKS: u32 = 4;

/// The requests of one connection.
#[derive(Default, Debug)]
pub struct Requests {
    in_flight: AtomicUsize,
    begun: AtomicU64,
}

/// One request in flight, until dropped (with the response body).
pub struct InFlight(Arc<Requests>);

impl InFlight {
    pub fn new(requests: Arc<Requests>) -> Self {
        requests.begun.fetch_add(1, Ordering::Relaxed);
        requests.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(requests)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project! {
    pub struct IdleIo<T> {
        #[pin]
        inner: T,
        timer: Pin<Box<Sleep>>,
        tick: Duration,
        // Requests begun as of the last tick.
        seen: u64,
        quiet_ticks: u32,
        requests: Arc<Requests>,
    }
}

impl<T> IdleIo<T> {
    pub fn new(inner: T, timeout: Duration, requests: Arc<Requests>) -> Self {
        let tick = timeout / TICKS;
        Self {
            inner,
            timer: Box::pin(tokio::time::sleep(tick)),
            tick,
            seen: 0,
            quiet_ticks: 0,
            requests,
        }
    }
}

impl<T: AsyncRead> AsyncRead for IdleIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let polled = this.inner.poll_read(cx, buf);
        if polled.is_pending() {
            while this.timer.as_mut().poll(cx).is_ready() {
                let begun = this.requests.begun.load(Ordering::Relaxed);
                if begun != *this.seen || this.requests.in_flight.load(Ordering::Acquire) > 0 {
                    *this.seen = begun;
                    *this.quiet_ticks = 0;
                } else {
                    *this.quiet_ticks += 1;
                    if *this.quiet_ticks >= TICKS {
                        return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "idle connection")));
                    }
                }
                this.timer.as_mut().reset(Instant::now() + *this.tick);
            }
        }
        polled
    }
}

impl<T: AsyncWrite> AsyncWrite for IdleIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
