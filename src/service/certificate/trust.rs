//! What code that connects to a repository asks of the stored certificates: the CA
//! certificates to trust for a TLS host, and the host keys to accept from an SSH host.

use rustls_pki_types::CertificateDer;
use ssh_key::PublicKey;

use super::{HTTPS, SSH, Stored, key, tls};
use crate::registry::Kind;
use crate::state::ServerState;

/// The CA certificates kept for TLS host `server` (`host` or `host:port`: the bundle is kept
/// per host, as upstream's). Empty when none are kept.
pub fn ca_certificates_for(app: &ServerState, server: &str) -> Vec<CertificateDer<'static>> {
    let host = tls::host_of(server);
    app.registry
        .get(&key(HTTPS, host, ""))
        .map(|doc| tls::ders(&Stored::deserialize_doc(&doc).data()))
        .unwrap_or_default()
}

/// The host keys kept for SSH host `host` on `port` (entries for `host`, `[host]:port` off
/// port 22, and hashed names of either). Empty when none are kept.
pub fn known_host_keys_for(app: &ServerState, host: &str, port: u16) -> Vec<PublicKey> {
    let (_, docs) = app.registry.list(Kind::Certificate);
    docs.iter()
        .map(Stored::deserialize_doc)
        .filter(|cert| cert.cert_type == SSH)
        .map(|cert| cert.host_key())
        .filter(|entry| entry.is_for(host, port))
        .filter_map(|entry| entry.public_key())
        .collect()
}
