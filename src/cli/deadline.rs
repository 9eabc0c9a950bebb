//! Time bounds of client commands, so that a server that accepts connections but never
//! answers cannot make the CLI wait forever: a connect timeout (TCP and the TLS handshake)
//! and a request timeout (a whole unary call, headers to trailers). Server streams are exempt
//! from the request timeout; dead peers under them are found by keep-alives (see `conn`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokio::time::{Instant, Sleep};
use tower::Service;

use super::conn::GrpcTransport;
use super::exit;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A request extension that exempts a call from the request timeout (server streams).
#[derive(Debug, Clone, Copy)]
pub struct Streaming;

/// A flag's duration: Go syntax, more than zero (a zero bound would fail every call).
pub fn parse_timeout(raw: &str) -> Result<Duration, String> {
    let duration = crate::config::parse_go_duration(raw.trim())?;
    if duration.is_zero() {
        return Err(format!("{raw:?} must be more than 0 (such as 10s or 1m)"));
    }
    Ok(duration)
}

/// A duration as the flags take it: `2s`, `1m30s`, `250ms`.
pub fn show(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let secs = millis / 1000;
    match (secs / 3600, secs / 60 % 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// Which bound ran out, on which server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Timeout {
    #[error("connecting to {server} timed out after {} (--connect-timeout)", show(*.after))]
    Connect { server: String, after: Duration },
    #[error("the server at {server} did not answer within {} (--request-timeout)", show(*.after))]
    Request { server: String, after: Duration },
}

impl Timeout {
    /// As the status generated clients see (tonic keeps a boxed `Status` as it is).
    pub fn status(&self) -> tonic::Status {
        tonic::Status::deadline_exceeded(self.to_string())
    }

    fn io(self) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::TimedOut, self)
    }
}

/// Whether a status says a bound ran out (ours, or the server's own deadline).
pub fn is_timeout(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::DeadlineExceeded
}

/// The failure a command ends with when a bound ran out: the "unavailable" exit code.
pub fn failure(message: String) -> anyhow::Error {
    anyhow::Error::new(exit::Failure {
        kind: exit::Kind::Unavailable,
        message,
    })
}

/// `fut`, given `after` to finish: a connection attempt (TCP, then TLS).
pub async fn connecting<T>(
    server: &str,
    after: Duration,
    fut: impl Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(after, fut).await.unwrap_or_else(|_| {
        Err(Timeout::Connect {
            server: server.to_owned(),
            after,
        }
        .io())
    })
}

/// Our timeout anywhere in an error's chain (hyper and tonic wrap connector errors, and
/// `io::Error` hides its inner error from `source()`), as a status; else the error as it is.
pub fn classify(err: BoxError) -> BoxError {
    match timeout_in(&*err) {
        Some(status) => Box::new(status),
        None => err,
    }
}

/// The status of our timeout, if one is in `err`'s chain.
pub fn timeout_in(err: &(dyn std::error::Error + 'static)) -> Option<tonic::Status> {
    find(err).map(|timeout| timeout.status())
}

fn find(err: &(dyn std::error::Error + 'static)) -> Option<Timeout> {
    if let Some(timeout) = err.downcast_ref::<Timeout>() {
        return Some(timeout.clone());
    }
    let inner = err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| find(inner));
    inner.or_else(|| err.source().and_then(find))
}

/// A connector (gRPC-Web's) bounded by the connect timeout, its TLS handshake included.
#[derive(Clone)]
pub struct BoundedConnector<C> {
    pub inner: C,
    pub server: String,
    pub after: Duration,
}

impl<C> Service<http::Uri> for BoundedConnector<C>
where
    C: Service<http::Uri> + Send,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<C::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connect = self.inner.call(uri);
        let timeout = Timeout::Connect {
            server: self.server.clone(),
            after: self.after,
        };
        let after = self.after;
        Box::pin(async move {
            match tokio::time::timeout(after, connect).await {
                Ok(result) => result.map_err(Into::into),
                Err(_) => Err(Box::new(timeout) as BoxError),
            }
        })
    }
}

/// A transport whose unary calls must be over (trailers read) within `after`.
#[derive(Clone)]
pub struct Deadline {
    pub inner: GrpcTransport,
    pub server: String,
    pub after: Duration,
}

impl Service<http::Request<tonic::body::Body>> for Deadline {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(classify)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let streaming = request.extensions().get::<Streaming>().is_some();
        let call = self.inner.call(request);
        if streaming {
            return Box::pin(async move { call.await.map_err(classify) });
        }
        let timeout = Timeout::Request {
            server: self.server.clone(),
            after: self.after,
        };
        let deadline = Instant::now() + self.after;
        Box::pin(async move {
            match tokio::time::timeout_at(deadline, call).await {
                Ok(Ok(response)) => Ok(response.map(|body| {
                    tonic::body::Body::new(DeadlineBody {
                        inner: body,
                        sleep: Box::pin(tokio::time::sleep_until(deadline)),
                        timeout,
                    })
                })),
                Ok(Err(err)) => Err(classify(err)),
                Err(_) => Err(Box::new(timeout.status()) as BoxError),
            }
        })
    }
}

/// A response body that fails once the call's deadline passes (a server that sent its
/// headers and then stopped).
struct DeadlineBody {
    inner: tonic::body::Body,
    sleep: Pin<Box<Sleep>>,
    timeout: Timeout,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(self.timeout.status()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_go_style_and_never_zero() {
        assert_eq!(parse_timeout("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_timeout(" 1m30s "), Ok(Duration::from_secs(90)));
        assert!(parse_timeout("0").unwrap_err().contains("more than 0"));
        assert!(parse_timeout("0s").is_err() && parse_timeout("abc").is_err());
    }

    #[test]
    fn durations_show_as_typed() {
        assert_eq!(show(Duration::from_secs(2)), "2s");
        assert_eq!(show(Duration::from_secs(60)), "1m");
        assert_eq!(show(Duration::from_secs(90)), "1m30s");
        assert_eq!(show(Duration::from_millis(1500)), "1500ms");
        assert_eq!(show(Duration::from_secs(3600)), "1h0m0s");
    }

    #[test]
    fn a_timeout_is_found_through_wrappers() {
        let timeout = Timeout::Connect {
            server: "127.0.0.1:1".to_owned(),
            after: Duration::from_secs(1),
        };
        let wrapped: BoxError = Box::new(std::io::Error::other(timeout.clone().io()));
        let status = tonic::Status::from_error(classify(wrapped));
        assert!(is_timeout(&status));
        assert_eq!(
            status.message(),
            "connecting to 127.0.0.1:1 timed out after 1s (--connect-timeout)"
        );
        let other: BoxError = "refused".into();
        assert_eq!(classify(other).to_string(), "refused");
    }
}
