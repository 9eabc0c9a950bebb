//! The request body wrapper every request arrives through ([`Bounded`]: its limit, and a
//! bounded drain of what a handler left unread), and the response body wrapper every
//! response leaves through: it keeps the
//! connection's in-flight count up while the body streams (so the idle timer
//! never cuts a long watch) and records a gRPC or gRPC-Web outcome where its
//! final status is: the trailers, or the gRPC-Web trailer frame.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use super::dispatch::RequestBody;
use super::idle::InFlight;
use super::metrics::Metrics;
use super::outcome::{Outcome, TrailerScan};
use super::protocol::Protocol;
use crate::principal::{BodyLimit, BodyRefused};

/// An outcome known only at the end of the body.
pub struct PendingOutcome {
    pub metrics: Arc<Metrics>,
    pub protocol: Protocol,
    pub route: usize,
    pub elapsed: Duration,
    /// gRPC-Web: reads the trailer frame; `None`: native gRPC, the HTTP trailers.
    pub scan: Option<TrailerScan>,
}

impl PendingOutcome {
    fn finish(self, outcome: Outcome) {
        self.metrics
            .observe(self.protocol, self.route, outcome, self.elapsed);
    }
}

/// The outcome `frame` settles, if it does.
fn settled(pending: &mut PendingOutcome, frame: &Frame<Bytes>) -> Option<Outcome> {
    if let Some(trailers) = frame.trailers_ref() {
        return Some(Outcome::from_trailers(trailers));
    }
    let (scan, data) = (pending.scan.as_mut()?, frame.data_ref()?);
    scan.feed(data)
}

pin_project! {
    pub struct ObservedBody {
        #[pin]
        inner: Body,
        pending: Option<PendingOutcome>,
        _in_flight: InFlight,
    }

    impl PinnedDrop for ObservedBody {
        fn drop(this: Pin<&mut Self>) {
            // Dropped before the trailers: the client went away mid-stream.
            if let Some(pending) = this.project().pending.take() {
                pending.finish(Outcome::ClientError);
            }
        }
    }
}

impl ObservedBody {
    pub fn new(inner: Body, pending: Option<PendingOutcome>, in_flight: InFlight) -> Self {
        Self {
            inner,
            pending,
            _in_flight: in_flight,
        }
    }
}

impl http_body::Body for ObservedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(pending) = this.pending.as_mut()
                    && let Some(outcome) = settled(pending, frame)
                    && let Some(pending) = this.pending.take()
                {
                    pending.finish(outcome);
                }
            }
            // The body ended without a final status.
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                if let Some(pending) = this.pending.take() {
                    pending.finish(Outcome::ServerError);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// After a response, what is left of a request body the handler did not read is read and
/// thrown away, up to this much and for up to [`DRAIN_TIME`]: a client that sends its whole
/// body before it reads the answer (or, like curl, stops when it sees an error status) then
/// ends its stream itself, instead of meeting a reset mid-upload that some clients (curl 7.x)
/// report as a stream error without the status.
pub const DRAIN_BYTES: u64 = 8 << 20;
pub const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Every request body, as handlers see it: it stops at the request's limit (set once the
/// caller is known) with a [`BodyRefused`], and when dropped unread it is drained in the
/// background (see [`DRAIN_BYTES`]), whichever path refused or answered the request.
pub struct Bounded<B: RequestBody> {
    /// `None` once it ended, failed or was refused.
    inner: Option<B>,
    read: u64,
    /// Raw bytes the body may have (gRPC: the message limit plus framing).
    raw_limit: u64,
    limit: BodyLimit,
}

impl<B: RequestBody> Bounded<B> {
    pub fn new(inner: B) -> Self {
        Self {
            inner: Some(inner),
            read: 0,
            raw_limit: u64::MAX,
            limit: BodyLimit::NONE,
        }
    }

    /// Reading more than `raw_limit` bytes fails with `limit`'s refusal.
    pub fn set_limit(&mut self, raw_limit: u64, limit: BodyLimit) {
        self.raw_limit = raw_limit;
        self.limit = limit;
    }
}

impl<B: RequestBody> http_body::Body for Bounded<B> {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = std::task::ready!(Pin::new(inner).poll_frame(cx));
        let result = match polled {
            Some(Ok(frame)) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                this.read = this.read.saturating_add(len);
                if this.read > this.raw_limit {
                    // Kept for the drain: the client still reads the refusal.
                    return Poll::Ready(Some(Err(BodyRefused::new(this.limit).into())));
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Some(Err(err)) => Some(Err(err.into())),
            None => None,
        };
        this.inner = None;
        Poll::Ready(result)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), http_body::Body::size_hint)
    }
}

impl<B: RequestBody> Drop for Bounded<B> {
    fn drop(&mut self) {
        let Some(rest) = self.inner.take() else {
            return;
        };
        if rest.is_end_stream() {
            return;
        }
        // Outside a runtime (unit tests) the body is just dropped.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(rest));
        }
    }
}

/// Reads and discards what is left of a request body, within [`DRAIN_BYTES`] and
/// [`DRAIN_TIME`]. Dropping it then ends the stream: over HTTP/2 with `RST_STREAM(NO_ERROR)`
/// once the response is complete (RFC 9113 §8.1), over HTTP/1.1 by closing the connection.
async fn drain<B: RequestBody>(mut body: B) {
    use http_body_util::BodyExt as _;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    let mut left = DRAIN_BYTES;
    while left > 0 {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, |d| d.len() as u64);
                left = left.saturating_sub(len);
            }
            Ok(None) => return,
            Ok(Some(Err(err))) => {
                tracing::debug!(error = %err, drained = DRAIN_BYTES - left, "request body ended while drained");
                return;
            }
            Err(_) => break,
        }
    }
    tracing::debug!(drained = DRAIN_BYTES - left, "stopped draining a request body");
}
