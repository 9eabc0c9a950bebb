//! What a request may send and how often: the rate limit checked from the headers, and the body
//! limits of each protocol and of a caller without a session.

use axum::body::Body;
use http::Response;
use http::header::CONTENT_LENGTH;

use super::responses::refusal;
use super::{Dispatcher, UNAUTHENTICATED_BODY_BYTES};
use crate::principal::{BodyLimit, OverLimit, RequestContext};
use crate::principal::{Caller, Credentials};
use crate::server::protocol::Protocol;
use crate::server::rate_limit::LOGIN_METHOD;

impl Dispatcher {
    /// The refusal of a request over its caller's rate limit (429 / `RESOURCE_EXHAUSTED`, with
    /// `Retry-After`), or `None` to serve it. A refused login is audited here: its use case,
    /// which audits the others, never runs.
    pub(super) async fn over_rate(
        &self,
        protocol: Protocol,
        method: &http::Method,
        path: &str,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Option<Response<Body>> {
        // The parts, not the request: a future holding `&Request<B>` would need `B: Sync`.
        let context = extensions.get::<RequestContext>()?;
        let counted = self.rate_classes.of(protocol, method, path, &context.caller)?;
        let err = self
            .app
            .auth
            .rate_limits
            .check(counted.class, counted.bucket)
            .await
            .err()?;
        if let Some(method) = counted.login {
            crate::audit::refused_login(method, &context.caller, &err);
            if method == LOGIN_METHOD {
                let outcomes = &self.app.auth.logins.outcomes;
                outcomes
                    .throttled
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Some(refusal(protocol, headers, err))
    }

    /// How much a request may send: the protocol's limit, or, for a caller without a valid
    /// session, [`UNAUTHENTICATED_BODY_BYTES`]. Git webhooks prove who sent them with a
    /// signature over the body, so they get the REST limit without a session.
    pub(super) fn body_limit(&self, protocol: Protocol, caller: &Caller, path: &str) -> BodyLimit {
        let full = match protocol {
            Protocol::Grpc | Protocol::GrpcWeb => BodyLimit {
                bytes: self.grpc_request_limit.0,
                over: OverLimit::TooLarge {
                    noun: "request message",
                    why: self.grpc_request_limit.1,
                },
            },
            Protocol::Rest => BodyLimit {
                bytes: self.max_body_bytes,
                over: OverLimit::TooLarge {
                    noun: "request body",
                    why: "--max-body-bytes",
                },
            },
            // The dashboard's files take no body, and identify no one.
            Protocol::Ui => {
                return BodyLimit {
                    bytes: UNAUTHENTICATED_BODY_BYTES.min(self.max_body_bytes),
                    over: OverLimit::TooLarge {
                        noun: "request body",
                        why: "the dashboard takes none",
                    },
                };
            }
        };
        let webhook = protocol == Protocol::Rest && path == crate::api::webhook::PATH;
        if caller.has_access() || full.bytes <= UNAUTHENTICATED_BODY_BYTES || webhook {
            return full;
        }
        BodyLimit {
            bytes: UNAUTHENTICATED_BODY_BYTES,
            over: OverLimit::Unauthenticated {
                rejected: matches!(caller.credentials, Credentials::Rejected(_)),
            },
        }
    }
}

pub(super) fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// The bytes of body a request may send under `limit`: a gRPC message comes with its 5-byte
/// prefix, and gRPC-Web text is base64 (a third longer, padded per chunk).
pub(super) fn raw_body_limit(protocol: Protocol, limit: BodyLimit, headers: &http::HeaderMap) -> u64 {
    const FRAME: u64 = 5;
    match protocol {
        Protocol::Rest | Protocol::Ui => limit.bytes,
        Protocol::Grpc => limit.bytes.saturating_add(FRAME),
        Protocol::GrpcWeb => {
            let framed = limit.bytes.saturating_add(FRAME);
            let text = crate::server::protocol::media_type(headers)
                .is_some_and(|m| m.starts_with("application/grpc-web-text"));
            if text {
                framed.div_ceil(3).saturating_mul(4).saturating_add(4096)
            } else {
                framed
            }
        }
    }
}
