//! Who is calling (the one place that works it out) and the renewal of a login token close
//! to expiry, handed back where only the client can read it.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use http::{HeaderValue, Response};

use super::Dispatcher;
use crate::auth::cookie::CookieScope;
use crate::auth::{Ambiguous, Carrier, Channel};
use crate::principal::{AuthInfo, BodyLimit, ClientScheme, RequestContext};
use crate::principal::{Caller, Credentials};
use crate::server::conn::ConnInfo;
use crate::server::edge;
use crate::server::protocol::Protocol;
use crate::service::SessionCookie;

impl Dispatcher {
    /// The one place that works out who the caller is. Static UI files need
    /// no identity, so they skip the token check.
    pub(super) async fn identify(
        &self,
        headers: &http::HeaderMap,
        protocol: Protocol,
        conn: ConnInfo,
        scheme: ClientScheme,
    ) -> Result<(RequestContext, Option<Renewal>), Ambiguous> {
        let ip = edge::client_ip(headers, conn.peer.ip(), &self.trusted_proxies);
        let channel = match protocol {
            Protocol::Grpc | Protocol::GrpcWeb => Channel::Grpc,
            Protocol::Rest => Channel::Http,
            Protocol::Ui => {
                let context = RequestContext {
                    caller: Caller::anonymous(ip),
                    auth: AuthInfo::default(),
                    scheme,
                    fenced: false,
                    body_limit: BodyLimit::NONE,
                };
                return Ok((context, None));
            }
        };
        // Read your writes on every replica: the view catches up with the registry before the
        // request reads it. On etcd the token check's quorum read also learns how far (see
        // `registry::fence`), so a request waits for etcd once, not twice.
        let began = Instant::now();
        let identified = self.app.auth.authenticator.identify(headers, channel, ip).await?;
        let fence = self.app.registry.fresh_since(began).await;
        let renewal = match (&identified.caller.credentials, identified.renewed) {
            (Credentials::Valid(presented), Some(token)) => Some(Renewal {
                token,
                presented: Arc::clone(presented),
                carrier: identified.carrier,
                chunks: identified.cookie_chunks,
            }),
            _ => None,
        };
        let context = RequestContext {
            caller: identified.caller,
            auth: AuthInfo {
                carrier: identified.carrier,
                cookie_chunks: identified.cookie_chunks,
            },
            scheme,
            fenced: fence.is_ok(),
            body_limit: BodyLimit::NONE,
        };
        Ok((context, renewal))
    }

    /// Hands a renewed login token back where only the client can read it:
    /// `renew-token` metadata on native gRPC (the CLI), a fresh HttpOnly
    /// cookie for a browser. Never a header a page script could read.
    pub(super) async fn hand_back(
        &self,
        response: &mut Response<Body>,
        protocol: Protocol,
        scheme: ClientScheme,
        renewal: &Renewal,
    ) {
        // The call itself may have ended the session (logout, a password
        // change): then the renewed token must not outlive it.
        let authenticator = &self.app.auth.authenticator;
        if authenticator.still_valid(&renewal.presented).await.is_err()
            || authenticator.still_valid(&renewal.token).await.is_err()
        {
            return;
        }
        let token = renewal.token.as_str();
        match (protocol, renewal.carrier) {
            (Protocol::Grpc, _) => {
                if let Ok(v) = HeaderValue::from_str(token) {
                    response.headers_mut().insert("renew-token", v);
                }
            }
            (Protocol::Rest, Some(Carrier::Cookie))
                // Login and logout already set (or cleared) the cookie.
                if !response.headers().contains_key(http::header::SET_COOKIE) =>
            {
                let scope = CookieScope::new(&self.app.basehref, scheme);
                let cookie = SessionCookie::Set(token.to_owned());
                if let Err(err) = crate::api::cookies::write(response, &scope, &cookie, renewal.chunks) {
                    tracing::warn!(error = %err, "cannot hand back a renewed session cookie");
                }
            }
            _ => {}
        }
    }
}

/// A fresh login token for a caller whose token is close to expiry.
pub(super) struct Renewal {
    token: String,
    /// The token the request presented.
    presented: Arc<str>,
    carrier: Option<Carrier>,
    chunks: usize,
}
