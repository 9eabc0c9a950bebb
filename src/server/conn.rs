//! The connection a request arrived on (the request's identity is
//! `principal::RequestContext`).

use std::net::SocketAddr;

#[derive(Clone, Copy, Debug)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    /// The connection is TLS terminated by this server.
    pub tls: bool,
    /// The server holds `--max-connections` others: every request on this one is refused.
    pub over_capacity: bool,
}
