//! Closes a connection that has had no traffic and no request in flight for
//! the idle timeout (HTTP/1 keep-alive and HTTP/2 alike).
//!
//! Reads and writes only set a flag: resetting a timer (and reading the
//! clock) on every read and write cost measurably on busy HTTP/2
//! connections. A timer instead fires every quarter of the timeout and
//! counts the quiet quarters, so an idle connection is closed between 1 and
//! 1.25 timeouts after its last traffic.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// Checks per timeout.
const TICKS: u32 = 4;

pin_project! {
    pub struct IdleIo<T> {
        #[pin]
        inner: T,
        timer: Pin<Box<Sleep>>,
        tick: Duration,
        // Traffic since the last tick.
        active: bool,
        quiet_ticks: u32,
        in_flight: Arc<AtomicUsize>,
    }
}

impl<T> IdleIo<T> {
    pub fn new(inner: T, timeout: Duration, in_flight: Arc<AtomicUsize>) -> Self {
        let tick = timeout / TICKS;
        Self {
            inner,
            timer: Box::pin(tokio::time::sleep(tick)),
            tick,
            active: false,
            quiet_ticks: 0,
            in_flight,
        }
    }
}

impl<T: AsyncRead> AsyncRead for IdleIo<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        match this.inner.poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    *this.active = true;
                }
                Poll::Ready(result)
            }
            Poll::Pending => {
                while this.timer.as_mut().poll(cx).is_ready() {
                    if std::mem::take(this.active) || this.in_flight.load(Ordering::Acquire) > 0 {
                        *this.quiet_ticks = 0;
                    } else {
                        *this.quiet_ticks += 1;
                        if *this.quiet_ticks >= TICKS {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "idle connection",
                            )));
                        }
                    }
                    this.timer.as_mut().reset(Instant::now() + *this.tick);
                }
                Poll::Pending
            }
        }
    }
}

impl<T: AsyncWrite> AsyncWrite for IdleIo<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.inner.poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            *this.active = true;
        }
        polled
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
        let this = self.project();
        let polled = this.inner.poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            *this.active = true;
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
