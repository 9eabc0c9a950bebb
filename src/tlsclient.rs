//! TLS client settings shared by every outgoing connection tiphys makes: the
//! CLI to its server (`cli::conn`), the server to the identity provider
//! (`oidc::http`) and the handshake that explains a failed start on etcd
//! (`store::etcd::tls`). One crypto provider (rustls on `ring`), one way to build
//! the trust store, and one "accept any certificate" verifier for the options
//! that ask for it by name (`--insecure`, `oidc.tls.insecure.skip.verify`), and the dial of a
//! TCP (or TLS) connection for tonic channels (the CLI's, the repo server client's).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, ring};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

/// The crypto provider of every TLS client (the server side uses `ring` too).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The system's trusted roots plus `extra` (a private CA). A system root that
/// rustls cannot use is skipped; an unusable `extra` one is an error, since
/// someone configured it on purpose.
pub fn roots(extra: &[CertificateDer<'static>]) -> Result<RootCertStore, rustls::Error> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    for cert in extra {
        roots.add(cert.clone())?;
    }
    Ok(roots)
}

/// A client configuration that checks the server's certificate against `roots`.
pub fn verifying(roots: RootCertStore) -> Result<ClientConfig, rustls::Error> {
    Ok(ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// A TCP connection, or TLS over one.
pub type ClientStream =
    tokio_util::either::Either<tokio::net::TcpStream, tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

/// Connects to `address` (`host:port`), with TLS by `tls` when given, checked against `host`.
pub async fn dial(
    address: &str,
    tls: Option<Arc<ClientConfig>>,
    host: &str,
) -> std::io::Result<hyper_util::rt::TokioIo<ClientStream>> {
    use tokio_util::either::Either;
    let tcp = tokio::net::TcpStream::connect(address).await?;
    let _ = tcp.set_nodelay(true);
    let stream = match tls {
        None => Either::Left(tcp),
        Some(config) => {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            Either::Right(
                tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await?,
            )
        }
    };
    Ok(hyper_util::rt::TokioIo::new(stream))
}

/// A client configuration that accepts any server certificate.
pub fn insecure() -> Result<ClientConfig, rustls::Error> {
    let provider = provider();
    Ok(ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(NoVerification::new(provider)))
        .with_no_client_auth())
}

/// The certificate is not checked, but the handshake signature still is, so
/// the session is at least bound to the presented key.
#[derive(Debug)]
pub struct NoVerification(Arc<CryptoProvider>);

impl NoVerification {
    pub fn new(provider: Arc<CryptoProvider>) -> Self {
        Self(provider)
    }
}

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
