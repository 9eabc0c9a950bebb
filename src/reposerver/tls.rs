//! How the channel to the repo server is made: plaintext, or TLS that accepts any
//! certificate (upstream's default) or checks it against the CA of `argocd-repo-server-tls`
//! (`--repo-server-strict-tls`), as upstream's reposerver/apiclient does.

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use rustls::ClientConfig;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tonic::transport::{Channel, Endpoint};

use super::Config;

/// A lazily connected channel: each connection attempt bounded by `timeout`.
pub fn channel(config: &Config, timeout: Duration) -> anyhow::Result<Channel> {
    let address = config.address.clone();
    let origin: Uri = format!("http://{address}")
        .parse()
        .map_err(|e| anyhow::anyhow!("--repo-server {address:?}: {e}"))?;
    let tls = if config.plaintext {
        None
    } else {
        Some(Arc::new(client_config(config)?))
    };
    let host = origin
        .host()
        .unwrap_or_default()
        .trim_matches(['[', ']'])
        .to_owned();
    let connector = tower::service_fn(move |_: Uri| {
        let (tls, host, address) = (tls.clone(), host.clone(), address.clone());
        async move {
            match tokio::time::timeout(timeout, crate::tlsclient::dial(&address, tls, &host)).await {
                Ok(result) => result,
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {}s", timeout.as_secs()),
                )),
            }
        }
    });
    Ok(Endpoint::from(origin)
        .timeout(timeout)
        .connect_with_connector_lazy(connector))
}

fn client_config(config: &Config) -> anyhow::Result<ClientConfig> {
    let mut tls = if config.strict_tls {
        let mut roots = rustls::RootCertStore::empty();
        for path in config.ca_files.iter().filter(|p| p.exists()) {
            let pem = std::fs::read(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            }
        }
        if roots.is_empty() {
            anyhow::bail!(
                "--repo-server-strict-tls: no CA certificate in {}",
                config
                    .ca_files
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" or ")
            );
        }
        crate::tlsclient::verifying(roots)?
    } else {
        crate::tlsclient::insecure()?
    };
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tls)
}
