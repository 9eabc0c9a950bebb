//! Runs a connection's HTTP/2 streams inside the connection's own task.
//!
//! hyper hands every new HTTP/2 stream to an executor. With tokio's, each
//! stream became a task of its own that either worker thread could run: a
//! task allocation, cross-thread wake-ups, and responses that finished one
//! by one and were written one by one. [`ConnStreams`] is the executor hyper
//! gets instead: its streams are polled by the task that serves the
//! connection, right after the connection itself. The streams of one read
//! then complete together, and their responses leave in one write.
//!
//! Connections still spread over the runtime's workers; what is given up is
//! running two streams of one connection on two cores at once. Handlers do
//! their blocking work (the store, bcrypt) on other threads, so that is rare.
//!
//! Kept hand-written for a measured reason (BENCHMARKS.md, "What changed on
//! 2026-11-23"): against tokio's executor, the same binary served gRPC at 103k
//! instead of 56k calls/s and REST over h2 at 119k instead of 61k requests/s.

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};

type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Rounds of "poll the connection, then its streams" in one wake-up while
/// streams keep finishing, so that their responses are flushed at once.
const ROUNDS: usize = 4;

/// The executor hyper gets for one connection.
#[derive(Clone, Default)]
pub struct ConnStreams {
    /// Streams hyper started since the driver last looked. hyper starts
    /// streams only while the driver polls the connection, so the driver
    /// always collects them in the same turn.
    started: Arc<Mutex<Vec<StreamFuture>>>,
}

impl<F> hyper::rt::Executor<F> for ConnStreams
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, stream: F) {
        // A panicking handler ends its own stream (hyper then resets it), not
        // the connection and every other stream on it, as a task of its own would.
        let stream = AssertUnwindSafe(stream).catch_unwind().map(|ended| {
            if ended.is_err() {
                tracing::error!("a request handler panicked; its stream was reset");
            }
        });
        match self.started.lock() {
            Ok(mut started) => started.push(Box::pin(stream)),
            // Only a panic while pushing could poison the lock; the stream
            // is dropped, which resets it.
            Err(_) => tracing::error!("stream executor lock poisoned; stream dropped"),
        }
    }
}

impl ConnStreams {
    /// Polls `conn` and the streams it starts until `conn` completes. Streams
    /// still running then belong to a connection that is gone, and are dropped.
    pub async fn drive<C: Future>(&self, conn: C) -> C::Output {
        let mut conn = pin!(conn);
        let mut running = FuturesUnordered::<StreamFuture>::new();
        poll_fn(|cx| {
            for _ in 0..ROUNDS {
                if let Poll::Ready(out) = conn.as_mut().poll(cx) {
                    return Poll::Ready(out);
                }
                if let Ok(mut started) = self.started.lock() {
                    running.extend(started.drain(..));
                }
                let mut finished = false;
                while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {
                    finished = true;
                }
                if !finished {
                    break;
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use hyper::rt::Executor;

    use super::*;

    /// A stand-in for hyper's connection: starts `n` streams on its first
    /// poll, then finishes once they all have.
    async fn connection(
        streams: ConnStreams,
        n: usize,
        done: Arc<AtomicUsize>,
        panic_at: Option<usize>,
    ) -> usize {
        for i in 0..n {
            let done = Arc::clone(&done);
            streams.execute(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                assert!(Some(i) != panic_at, "handler {i} fails");
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let expected = n - usize::from(panic_at.is_some());
        for _ in 0..1000 {
            if done.load(Ordering::SeqCst) == expected {
                return expected;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("streams did not finish");
    }

    #[tokio::test]
    async fn streams_run_inside_the_connection_task_until_done() {
        let streams = ConnStreams::default();
        let done = Arc::new(AtomicUsize::new(0));
        let out = streams
            .drive(connection(streams.clone(), 50, Arc::clone(&done), None))
            .await;
        assert_eq!(out, 50);
        assert_eq!(done.load(Ordering::SeqCst), 50);
    }

    #[tokio::test]
    async fn a_panicking_stream_ends_alone() {
        let streams = ConnStreams::default();
        let done = Arc::new(AtomicUsize::new(0));
        let out = streams
            .drive(connection(streams.clone(), 10, Arc::clone(&done), Some(3)))
            .await;
        assert_eq!(out, 9);
    }

    #[tokio::test]
    async fn streams_left_when_the_connection_ends_are_dropped() {
        let streams = ConnStreams::default();
        let dropped = Arc::new(AtomicUsize::new(0));
        struct CountDrop(Arc<AtomicUsize>);
        impl Drop for CountDrop {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let guard = CountDrop(Arc::clone(&dropped));
        let conn = {
            let streams = streams.clone();
            async move {
                streams.execute(async move {
                    let _guard = guard;
                    std::future::pending::<()>().await;
                });
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        streams.drive(conn).await;
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "a stream still pending when its connection ends is dropped with it"
        );
    }
}
