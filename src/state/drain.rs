//! How a stopping server looks to the use cases: `/healthz` turns 503 first (while the
//! server still serves), then every open stream ends at once with [`SHUTTING_DOWN`], so
//! clients reconnect elsewhere instead of being cut when the shutdown deadline passes.
//! The server decides when each happens (`server::Server::serve`); this only carries it.

use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt as _};
use tokio_util::sync::CancellationToken;

/// What a stream ended by shutdown tells its client (gRPC `UNAVAILABLE`, the SSE error event).
pub const SHUTTING_DOWN: &str = "server shutting down, reconnect";

#[derive(Default)]
pub struct Drain {
    /// Fired when shutdown begins: `/healthz` answers 503 from then on.
    draining: CancellationToken,
    /// Fired when the server stops accepting: open streams end.
    streams_end: CancellationToken,
}

impl Drain {
    pub fn is_serving(&self) -> bool {
        !self.draining.is_cancelled()
    }

    pub fn stop_serving(&self) {
        self.draining.cancel();
    }

    pub fn end_streams(&self) {
        self.streams_end.cancel();
    }

    /// `stream` until it ends or the server ends streams; then one last item, `ended()`.
    pub fn bound<S, T, E>(&self, stream: S, ended: fn() -> E) -> BoxStream<'static, Result<T, E>>
    where
        S: Stream<Item = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let end = self.streams_end.clone();
        stream::unfold(Some(Box::pin(stream)), move |inner| {
            let end = end.clone();
            async move {
                let mut inner = inner?;
                tokio::select! {
                    // Shutdown first: a busy stream must not postpone its end.
                    biased;
                    () = end.cancelled() => Some((Err(ended()), None)),
                    item = inner.next() => item.map(|item| (item, Some(inner))),
                }
            }
        })
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn streams_end_with_the_message_once_ended_and_not_before() {
        let drain = Drain::default();
        let mut open = drain.bound(stream::iter([Ok::<_, &str>(1)]).chain(stream::pending()), || {
            SHUTTING_DOWN
        });
        let mut finished = drain.bound(stream::iter([Ok::<_, &str>(2)]), || SHUTTING_DOWN);
        assert_eq!(open.next().await, Some(Ok(1)));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), open.next())
                .await
                .is_err(),
            "an open stream stays open while serving"
        );
        assert_eq!(finished.next().await, Some(Ok(2)));
        assert_eq!(
            finished.next().await,
            None,
            "a stream that ends is not given the message"
        );
        drain.stop_serving();
        assert!(!drain.is_serving());
        drain.end_streams();
        assert_eq!(open.next().await, Some(Err(SHUTTING_DOWN)));
        assert_eq!(open.next().await, None);
        let mut late = drain.bound(stream::iter([Ok::<_, &str>(3)]), || SHUTTING_DOWN);
        assert_eq!(
            late.next().await,
            Some(Err(SHUTTING_DOWN)),
            "a stream opened after the end ends at once"
        );
    }
}
