//! What the dispatcher knows about a request before it hands it on: the
//! connection it arrived on, the client's scheme, and who is calling.

use std::net::SocketAddr;

use crate::auth::Carrier;
use crate::principal::Caller;

#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    /// The connection is TLS terminated by this server.
    pub tls: bool,
}

/// The scheme the client used, as far as the server can tell: TLS here, or a
/// trusted proxy that says it terminated https.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientScheme {
    Http,
    Https,
}

/// How the request authenticated.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuthInfo {
    pub carrier: Option<Carrier>,
    /// `argocd.token*` cookies the request carried.
    pub cookie_chunks: usize,
}

/// The one request extension the dispatcher sets for handlers (each
/// extension is an allocation of its own, on every request).
#[derive(Clone, Debug)]
pub struct RequestContext {
    pub caller: Caller,
    pub auth: AuthInfo,
    pub scheme: ClientScheme,
}

impl RequestContext {
    /// A request's caller; anonymous from an unknown address if the
    /// dispatcher did not say (only tests call handlers directly).
    pub fn caller_of(extensions: &http::Extensions) -> Caller {
        extensions
            .get::<Self>()
            .map(|c| c.caller.clone())
            .unwrap_or_else(|| Caller::anonymous(std::net::Ipv4Addr::UNSPECIFIED.into()))
    }
}
