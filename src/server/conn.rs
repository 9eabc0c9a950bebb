//! Facts about the connection a request arrived on, attached to every request.

use std::net::SocketAddr;

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
