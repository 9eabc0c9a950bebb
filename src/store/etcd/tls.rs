//! TLS to etcd: the CA and client certificate files, read and checked before connecting (the
//! client reports a key that does not belong to its certificate as a bare "transport error"),
//! and, when a start fails, a handshake of our own with each member to tell why (the client
//! reports a member's refusal of the client certificate as a closed connection, without the
//! TLS alert that names the cause).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Certificate, Identity, TlsOptions};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, ClientConfig, InconsistentKeys, RootCertStore};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::AsyncReadExt as _;

use crate::store::StoreError;
use crate::tlsclient;

/// How long a diagnosis waits after its handshake for the member's verdict on the client
/// certificate: with TLS 1.3 it comes after the client considers the handshake done.
const VERDICT_WAIT: Duration = Duration::from_secs(1);

/// The TLS files of the options, read and checked.
pub(super) struct Material {
    ca: Option<Ca>,
    client: Option<ClientCert>,
}

struct Ca {
    path: PathBuf,
    pem: Vec<u8>,
    roots: RootCertStore,
}

struct ClientCert {
    cert_path: PathBuf,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Material {
    /// Reads the files; an error names `endpoints`, the file and what is wrong with it.
    pub(super) fn load(
        endpoints: &str,
        ca: Option<&Path>,
        client: Option<(&Path, &Path)>,
    ) -> Result<Self, StoreError> {
        let files = Files { endpoints };
        Ok(Self {
            ca: ca.map(|path| files.ca(path)).transpose()?,
            client: client.map(|(cert, key)| files.client(cert, key)).transpose()?,
        })
    }

    /// The client's settings: the CA given, else the system's roots (as the diagnosis uses).
    pub(super) fn tls_options(&self) -> TlsOptions {
        let tls = match &self.ca {
            Some(ca) => TlsOptions::new().ca_certificate(Certificate::from_pem(ca.pem.clone())),
            None => TlsOptions::new().with_native_roots(),
        };
        match &self.client {
            Some(client) => tls.identity(Identity::from_pem(
                client.cert_pem.clone(),
                client.key_pem.clone(),
            )),
            None => tls,
        }
    }

    /// Why TLS with each endpoint fails, for the endpoints where a handshake of our own (each
    /// bounded by `timeout`) fails; empty when none does, or none could be reached.
    pub(super) async fn diagnose(&self, endpoints: &[String], timeout: Duration) -> Vec<(String, String)> {
        let Ok(config) = self.client_config() else {
            return Vec::new();
        };
        let config = Arc::new(config);
        let probes = endpoints
            .iter()
            .map(|endpoint| handshake(Arc::clone(&config), endpoint, timeout));
        let errors = futures_util::future::join_all(probes).await;
        endpoints
            .iter()
            .zip(errors)
            .filter_map(|(endpoint, err)| Some((endpoint.clone(), self.explain(&err?))))
            .collect()
    }

    fn client_config(&self) -> Result<ClientConfig, rustls::Error> {
        let roots = match &self.ca {
            Some(ca) => ca.roots.clone(),
            None => tlsclient::roots(&[])?,
        };
        let builder = ClientConfig::builder_with_provider(tlsclient::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let mut config = match &self.client {
            Some(client) => builder.with_client_auth_cert(client.chain.clone(), client.key.clone_key())?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }

    /// What a user has to fix, followed by rustls's own words.
    fn explain(&self, err: &rustls::Error) -> String {
        format!("{} ({err})", self.cause(err))
    }

    fn cause(&self, err: &rustls::Error) -> String {
        use rustls::Error as E;
        match (err, &self.client) {
            (E::InvalidCertificate(CertificateError::UnknownIssuer), _) => match &self.ca {
                Some(ca) => format!(
                    "the member's certificate is not signed by the etcd CA certificate {}",
                    ca.path.display()
                ),
                None => "the member's certificate is not signed by a CA the system trusts; give the etcd CA \
                         certificate"
                    .to_owned(),
            },
            (
                E::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                ),
                _,
            ) => "the member's certificate does not name the endpoint's host".to_owned(),
            (E::InvalidCertificate(_), _) => "the member's certificate was refused".to_owned(),
            (
                E::AlertReceived(AlertDescription::CertificateRequired | AlertDescription::BadCertificate),
                None,
            ) => "the member requires a client certificate; give the etcd client certificate and key"
                .to_owned(),
            (E::AlertReceived(alert), Some(client)) if refuses_certificate(*alert) => format!(
                "the member refused the client certificate {}; is it signed by a CA in the member's \
                 --trusted-ca-file, and still valid?",
                client.cert_path.display()
            ),
            _ => "the TLS handshake failed".to_owned(),
        }
    }
}

/// Alerts by which a server refuses the client's certificate.
fn refuses_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRequired
    )
}

/// The TLS error of a handshake with `endpoint` and of the member's first answer, if any.
async fn handshake(config: Arc<ClientConfig>, endpoint: &str, timeout: Duration) -> Option<rustls::Error> {
    let url = url::Url::parse(endpoint).ok()?;
    let port = url.port_or_known_default()?;
    let host = match url.host()? {
        url::Host::Domain(name) => name.to_owned(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => ip.to_string(),
    };
    let name = ServerName::try_from(host.clone()).ok()?;
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    let tcp = tokio::time::timeout(timeout, connect).await.ok()?.ok()?;
    let handshake = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
    let mut tls = match tokio::time::timeout(timeout, handshake).await.ok()? {
        Ok(tls) => tls,
        Err(e) => return rustls_error(&e),
    };
    let mut byte = [0u8; 1];
    match tokio::time::timeout(VERDICT_WAIT.min(timeout), tls.read(&mut byte)).await {
        Ok(Err(e)) => rustls_error(&e),
        _ => None,
    }
}

fn rustls_error(err: &std::io::Error) -> Option<rustls::Error> {
    err.get_ref()?.downcast_ref::<rustls::Error>().cloned()
}

/// Reads the files, with errors that name the endpoints.
struct Files<'a> {
    endpoints: &'a str,
}

impl Files<'_> {
    fn invalid(&self, what: String) -> StoreError {
        StoreError::Invalid(format!("etcd at {}: {what}", self.endpoints))
    }

    fn ca(&self, path: &Path) -> Result<Ca, StoreError> {
        let pem = self.read(path, "CA certificate")?;
        let mut roots = RootCertStore::empty();
        for cert in self.certificates(&pem, path, "CA certificate")? {
            roots.add(cert).map_err(|e| {
                self.invalid(format!(
                    "the CA certificate {} cannot be used: {e}",
                    path.display()
                ))
            })?;
        }
        Ok(Ca {
            path: path.to_owned(),
            pem,
            roots,
        })
    }

    fn client(&self, cert_path: &Path, key_path: &Path) -> Result<ClientCert, StoreError> {
        let cert_pem = self.read(cert_path, "client certificate")?;
        let key_pem = self.read(key_path, "client key")?;
        let chain = self.certificates(&cert_pem, cert_path, "client certificate")?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            self.invalid(format!(
                "the client key {} holds no PEM private key ({e})",
                key_path.display()
            ))
        })?;
        match CertifiedKey::from_der(chain.clone(), key.clone_key(), &tlsclient::provider()) {
            Ok(_) => {}
            Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
                return Err(self.invalid(format!(
                    "the client key {} does not belong to the client certificate {}",
                    key_path.display(),
                    cert_path.display()
                )));
            }
            Err(e) => {
                return Err(self.invalid(format!(
                    "the client key {} cannot be used: {e}",
                    key_path.display()
                )));
            }
        }
        Ok(ClientCert {
            cert_path: cert_path.to_owned(),
            cert_pem,
            key_pem,
            chain,
            key,
        })
    }

    fn read(&self, path: &Path, what: &str) -> Result<Vec<u8>, StoreError> {
        let pem = std::fs::read(path)
            .map_err(|e| self.invalid(format!("cannot read the {what} {}: {e}", path.display())))?;
        if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(self.invalid(format!("the {what} {} is not PEM", path.display())));
        }
        Ok(pem)
    }

    fn certificates(
        &self,
        pem: &[u8],
        path: &Path,
        what: &str,
    ) -> Result<Vec<CertificateDer<'static>>, StoreError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| self.invalid(format!("the {what} {} is not valid PEM ({e})", path.display())))?;
        if certs.is_empty() {
            return Err(self.invalid(format!(
                "the {what} {} holds no PEM CERTIFICATE block",
                path.display()
            )));
        }
        Ok(certs)
    }
}
