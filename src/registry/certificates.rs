//! The stored form of repository certificates (`RepositoryCertificate`) and their keys in the
//! registry: one object per TLS host (its PEM bundle) and one per SSH host key (host and key
//! type). The certificate service writes them; on an installation the ConfigMap mapping
//! (`kube_configmaps.rs`) reads and writes them as upstream's ConfigMaps hold them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::kind::{Key, Kind};

pub const SSH: &str = "ssh";
pub const HTTPS: &str = "https";

/// The registry key of a TLS host's bundle or of one SSH key of a host.
pub fn certificate_key(cert_type: &str, host: &str, sub_type: &str) -> Key {
    let name = if cert_type == SSH {
        format!("{SSH} {host} {sub_type}")
    } else {
        format!("{HTTPS} {host}")
    };
    Key::new(Kind::Certificate, "", &name)
}

/// The stored form of a TLS bundle.
pub fn tls_object(host: &str, pem: &[u8]) -> Value {
    json!({"serverName": host, "certType": HTTPS, "certData": STANDARD.encode(pem)})
}

/// The stored form of an SSH key: `data` is what follows the key type on its known_hosts line.
pub fn ssh_object(host: &str, sub_type: &str, data: &str) -> Value {
    json!({
        "serverName": host,
        "certType": SSH,
        "certSubType": sub_type,
        "certData": STANDARD.encode(data.as_bytes()),
    })
}
