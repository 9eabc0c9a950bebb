//! The response body wrapper every response leaves through: it keeps the
//! connection's in-flight count up while the body streams (so the idle timer
//! never cuts a long watch) and records the gRPC outcome from the trailers.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;

use super::metrics::{Metrics, Outcome};
use super::protocol::{GRPC_STATUS, Protocol};

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

/// A gRPC outcome that is only known when the trailers arrive.
pub struct PendingOutcome {
    pub metrics: Arc<Metrics>,
    pub protocol: Protocol,
    pub elapsed: Duration,
}

impl PendingOutcome {
    fn finish(self, outcome: Outcome) {
        self.metrics.observe(self.protocol, outcome, self.elapsed);
    }
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
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(pending) = this.pending.take()
                {
                    let code = trailers
                        .get(GRPC_STATUS)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("2");
                    pending.finish(Outcome::from_grpc(code));
                }
            }
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
