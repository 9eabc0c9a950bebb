//! The response body wrapper every response leaves through: it keeps the
//! connection's in-flight count up while the body streams (so the idle timer
//! never cuts a long watch) and records a gRPC or gRPC-Web outcome where its
//! final status is: the trailers, or the gRPC-Web trailer frame.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use super::metrics::Metrics;
use super::outcome::{Outcome, TrailerScan};
use super::protocol::Protocol;

/// Counts one in-flight request of a connection until dropped.
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub fn new(counter: Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(counter)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

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
