//! TLS material: PEM files or a generated self-signed certificate, the
//! version and cipher policy, and hot reload. New handshakes pick up a new
//! certificate within a second; open connections are not touched.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::crypto::{CryptoProvider, ring};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

/// A generated certificate is renewed when it has less than this left.
const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
const RELOAD_POLL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    // The cause is in the message, not the error chain: printed once.
    #[error("cannot read {path}: {cause}")]
    Read { path: PathBuf, cause: std::io::Error },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("certificate {cert} and key {key} do not belong together: {reason}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        reason: String,
    },
    #[error("cannot write {path}: {cause}")]
    Write { path: PathBuf, cause: std::io::Error },
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(String),
    #[error("{0}")]
    Policy(String),
}

/// Where the certificate comes from.
#[derive(Debug, Clone)]
pub enum CertSource {
    Files {
        cert: PathBuf,
        key: PathBuf,
    },
    /// Generated, kept under the data directory, renewed before it expires.
    SelfSigned {
        dir: PathBuf,
        names: Vec<String>,
    },
}

impl CertSource {
    fn paths(&self) -> (PathBuf, PathBuf) {
        match self {
            Self::Files { cert, key } => (cert.clone(), key.clone()),
            Self::SelfSigned { dir, .. } => (dir.join("tls.crt"), dir.join("tls.key")),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Self::Files { cert, .. } => format!("files ({})", cert.display()),
            Self::SelfSigned { dir, .. } => format!("self-signed ({})", dir.display()),
        }
    }
}

/// Versions and TLS 1.2 cipher suites in force.
#[derive(Debug, Clone)]
pub struct TlsPolicy {
    versions: Vec<&'static SupportedProtocolVersion>,
    provider: Arc<CryptoProvider>,
}

impl TlsPolicy {
    /// `min`/`max` are `1.2` or `1.3`; `ciphers` a colon-separated list of
    /// TLS 1.2 suites (TLS 1.3 suites are always on, as in Go).
    pub fn parse(min: &str, max: &str, ciphers: Option<&str>) -> Result<Self, TlsError> {
        let min_v = parse_version(min)?;
        let max_v = parse_version(max)?;
        if min_v > max_v {
            return Err(TlsError::Policy(format!(
                "--tlsminversion {min} is above --tlsmaxversion {max}"
            )));
        }
        let mut versions = Vec::new();
        if min_v <= 12 && max_v >= 12 {
            versions.push(&rustls::version::TLS12);
        }
        if max_v >= 13 {
            versions.push(&rustls::version::TLS13);
        }
        let mut provider = ring::default_provider();
        if let Some(list) = ciphers.filter(|c| !c.trim().is_empty()) {
            let mut chosen: Vec<SupportedCipherSuite> = tls13_suites();
            for name in list.split(':').map(str::trim).filter(|n| !n.is_empty()) {
                let suite = tls12_suites()
                    .into_iter()
                    .find(|s| s.suite().as_str() == Some(name))
                    .ok_or_else(|| {
                        TlsError::Policy(format!(
                            "unknown or unsupported TLS cipher suite {name:?}; supported: {}",
                            supported_cipher_names().join(", ")
                        ))
                    })?;
                chosen.push(suite);
            }
            provider.cipher_suites = chosen;
        }
        Ok(Self {
            versions,
            provider: Arc::new(provider),
        })
    }

    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    pub fn server_config(&self, resolver: Arc<CertResolver>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_protocol_versions(&self.versions)
            .map_err(|e| TlsError::Policy(format!("TLS settings rejected: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        // h2 first: browsers then get HTTP/2 for the UI as well (upstream
        // forces them to HTTP/1.1 and its SSE streams starve the connection pool).
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn parse_version(raw: &str) -> Result<u8, TlsError> {
    match raw.trim() {
        "1.2" => Ok(12),
        "1.3" => Ok(13),
        "1.0" | "1.1" => Err(TlsError::Policy(format!(
            "TLS {raw} is not supported (it is deprecated by RFC 8996); use 1.2 or 1.3"
        ))),
        other => Err(TlsError::Policy(format!(
            "unknown TLS version {other:?}; use 1.2 or 1.3"
        ))),
    }
}

fn tls13_suites() -> Vec<SupportedCipherSuite> {
    ring::ALL_CIPHER_SUITES
        .iter()
        .copied()
        .filter(|s| s.version() == &rustls::version::TLS13)
        .collect()
}

fn tls12_suites() -> Vec<SupportedCipherSuite> {
    ring::ALL_CIPHER_SUITES
        .iter()
        .copied()
        .filter(|s| s.version() == &rustls::version::TLS12)
        .collect()
}

/// The TLS 1.2 suites `--tlsciphers` accepts (TLS 1.3 suites are always enabled).
pub fn supported_cipher_names() -> Vec<&'static str> {
    tls12_suites().iter().filter_map(|s| s.suite().as_str()).collect()
}

/// Hands the current certificate to every handshake.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<CertifiedKey>,
    /// The current certificate's DNS and IP names (where a plaintext request may be redirected).
    names: ArcSwap<Vec<String>>,
}

impl CertResolver {
    pub(super) fn of(loaded: Loaded) -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(loaded.key),
            names: ArcSwap::from_pointee(loaded.names),
        })
    }

    pub fn names(&self) -> Arc<Vec<String>> {
        self.names.load_full()
    }

    /// New handshakes get `loaded`; open connections keep what they have.
    pub(super) fn swap(&self, loaded: Loaded) {
        self.current.store(Arc::new(loaded.key));
        self.names.store(Arc::new(loaded.names));
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A loaded certificate and the facts the reloader needs about it.
pub(super) struct Loaded {
    key: CertifiedKey,
    not_after: SystemTime,
    names: Vec<String>,
}

/// Loads (or for a self-signed source, creates) the certificate.
pub fn load(source: &CertSource, provider: &CryptoProvider) -> Result<Arc<CertResolver>, TlsError> {
    let loaded = match source {
        CertSource::Files { cert, key } => load_pair(cert, key, provider)?,
        CertSource::SelfSigned { dir, names } => ensure_self_signed(dir, names, provider)?,
    };
    Ok(CertResolver::of(loaded))
}

fn load_pair(cert_path: &Path, key_path: &Path, provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    let cert_pem = std::fs::read(cert_path).map_err(|cause| TlsError::Read {
        path: cert_path.into(),
        cause,
    })?;
    let key_pem = std::fs::read(key_path).map_err(|cause| TlsError::Read {
        path: key_path.into(),
        cause,
    })?;
    parse_pair(&cert_pem, &key_pem, cert_path, key_path, provider)
}

/// A certificate chain and its key, from PEM; `cert_path` and `key_path` name where they came
/// from in errors (a file, or a Secret's key).
pub(super) fn parse_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<Loaded, TlsError> {
    let invalid = |path: &Path, reason: String| TlsError::Invalid {
        path: path.into(),
        reason,
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(cert_path, format!("not a PEM certificate file: {e}")))?;
    let Some(leaf) = chain.first() else {
        return Err(invalid(cert_path, "contains no PEM CERTIFICATE block".into()));
    };
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| invalid(cert_path, format!("the first certificate cannot be parsed: {e}")))?;
    let not_after =
        UNIX_EPOCH + Duration::from_secs(parsed.validity().not_after.timestamp().max(0).unsigned_abs());
    warn_if_not_valid_now(cert_path, &parsed);
    let names = san_names(&parsed);
    if is_encrypted_key(key_pem) {
        return Err(invalid(
            key_path,
            "is an encrypted private key: tiphys needs it unencrypted (for example \
             `openssl pkey -in KEY -out PLAIN`), kept readable by the server alone"
                .into(),
        ));
    }
    let key_der = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| invalid(key_path, format!("contains no usable PEM private key: {e}")))?;
    let signing_key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| invalid(key_path, format!("unsupported private key: {e}")))?;
    let key = CertifiedKey::new(chain, signing_key);
    key.keys_match().map_err(|e| TlsError::Mismatch {
        cert: cert_path.into(),
        key: key_path.into(),
        reason: e.to_string(),
    })?;
    Ok(Loaded {
        key,
        not_after,
        names,
    })
}

/// Serving a certificate outside its validity is allowed (clients decide), but said: at start and
/// at every reload.
fn warn_if_not_valid_now(path: &Path, cert: &x509_parser::certificate::X509Certificate<'_>) {
    let now = x509_parser::time::ASN1Time::now();
    let validity = cert.validity();
    if now > validity.not_after {
        tracing::warn!(cert = %path.display(), not_after = %validity.not_after, "the TLS certificate has expired: clients will refuse it");
    } else if now < validity.not_before {
        tracing::warn!(cert = %path.display(), not_before = %validity.not_before, "the TLS certificate is not valid yet: clients will refuse it");
    }
}

/// A PKCS#8 encrypted key, or a traditional PEM key with an encryption header.
fn is_encrypted_key(pem: &[u8]) -> bool {
    let text = String::from_utf8_lossy(pem);
    text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || text.contains("Proc-Type: 4,ENCRYPTED")
}

fn san_names(cert: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            GeneralName::IPAddress(bytes) => ip_from_bytes(bytes).map(|ip| ip.to_string()),
            _ => None,
        })
        .collect()
}

fn ip_from_bytes(bytes: &[u8]) -> Option<std::net::IpAddr> {
    match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(std::net::IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(std::net::IpAddr::from),
        _ => None,
    }
}

/// Reuses the generated certificate while it is valid for long enough and
/// covers every wanted name; otherwise generates a new one.
fn ensure_self_signed(dir: &Path, names: &[String], provider: &CryptoProvider) -> Result<Loaded, TlsError> {
    let (cert_path, key_path) = CertSource::SelfSigned {
        dir: dir.into(),
        names: names.to_vec(),
    }
    .paths();
    if cert_path.exists() && key_path.exists() {
        match load_pair(&cert_path, &key_path, provider) {
            Ok(loaded) if is_fresh(&loaded, names) => return Ok(loaded),
            Ok(_) => tracing::info!(path = %cert_path.display(), "renewing the self-signed certificate"),
            Err(err) => tracing::warn!(error = %err, "replacing an unreadable self-signed certificate"),
        }
    }
    generate_self_signed(&cert_path, &key_path, names)?;
    tracing::info!(path = %cert_path.display(), names = ?names, "generated a self-signed certificate");
    load_pair(&cert_path, &key_path, provider)
}

/// Read on the system clock, not the state's: rustls and every client judge the certificate by it.
fn is_fresh(loaded: &Loaded, names: &[String]) -> bool {
    let renew_at = loaded.not_after.checked_sub(RENEW_BEFORE).unwrap_or(UNIX_EPOCH);
    SystemTime::now() < renew_at && names.iter().all(|n| loaded.names.contains(n))
}

fn generate_self_signed(cert_path: &Path, key_path: &Path, names: &[String]) -> Result<(), TlsError> {
    let (cert, key) = self_signed_pem(names, "tiphys")?;
    write_atomically(key_path, key.as_bytes(), 0o600)?;
    write_atomically(cert_path, cert.as_bytes(), 0o644)?;
    Ok(())
}

/// A new self-signed server certificate for `names`, of `organization`: (certificate, key) in
/// PEM.
pub(super) fn self_signed_pem(names: &[String], organization: &str) -> Result<(String, String), TlsError> {
    let generate = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(generate)?;
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, organization);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tiphys self-signed");
    // rcgen takes `time`'s OffsetDateTime: converted from SystemTime here, so tiphys itself
    // needs no `time` dependency.
    let now = SystemTime::now();
    params.not_before = (now - Duration::from_secs(5 * 60)).into();
    params.not_after = (now + SELF_SIGNED_VALIDITY).into();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(generate)?;
    let cert = params.self_signed(&key).map_err(generate)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Write to a sibling temp file, fsync, then rename: a crash leaves either the
/// old file or the new one, never half of one.
fn write_atomically(path: &Path, data: &[u8], mode: u32) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |cause| TlsError::Write {
        path: path.into(),
        cause,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .map_err(err)?;
    file.write_all(data).map_err(err)?;
    file.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)?;
    Ok(())
}

/// Polls the certificate files (or the generated certificate's expiry) and
/// swaps in a new certificate when it changes. A bad new file never takes
/// effect: the previous certificate stays and the error is logged.
pub fn spawn_reloader(
    resolver: Arc<CertResolver>,
    source: CertSource,
    provider: Arc<CryptoProvider>,
    cancel: CancellationToken,
) {
    tokio::spawn(async move {
        let (cert_path, key_path) = source.paths();
        let mut seen = fingerprint(&cert_path, &key_path);
        let mut ticker = tokio::time::interval(RELOAD_POLL);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = cancel.cancelled() => return,
            }
            let now = fingerprint(&cert_path, &key_path);
            let expiring = matches!(source, CertSource::SelfSigned { .. })
                && current_not_after(&resolver).is_some_and(|t| SystemTime::now() + RENEW_BEFORE > t);
            if now == seen && !expiring {
                continue;
            }
            seen = now;
            let result = match &source {
                CertSource::Files { cert, key } => load_pair(cert, key, &provider),
                CertSource::SelfSigned { dir, names } => ensure_self_signed(dir, names, &provider),
            };
            match result {
                Ok(loaded) => {
                    resolver.swap(loaded);
                    seen = fingerprint(&cert_path, &key_path);
                    tracing::info!(cert = %cert_path.display(), "TLS certificate reloaded");
                }
                Err(err) => {
                    tracing::warn!(error = %err, "new TLS certificate rejected; keeping the previous one")
                }
            }
        }
    });
}

fn current_not_after(resolver: &CertResolver) -> Option<SystemTime> {
    let key = resolver.current.load();
    let leaf = key.cert.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(parsed.validity().not_after.timestamp().max(0).unsigned_abs()))
}

type FileStamp = Option<(SystemTime, u64)>;

fn fingerprint(cert: &Path, key: &Path) -> (FileStamp, FileStamp) {
    let stamp = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    };
    (stamp(cert), stamp(key))
}

/// The names a generated certificate must cover.
pub fn self_signed_names(external_host: Option<&str>) -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if let Some(host) = gethostname::gethostname().to_str().filter(|h| !h.is_empty()) {
        names.push(host.to_owned());
    }
    if let Some(host) = external_host {
        names.push(host.to_owned());
    }
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_validated() {
        assert!(TlsPolicy::parse("1.3", "1.2", None).is_err());
        assert!(
            TlsPolicy::parse("1.0", "1.3", None)
                .unwrap_err()
                .to_string()
                .contains("RFC 8996")
        );
        assert!(TlsPolicy::parse("1.2", "1.3", None).is_ok());
    }

    #[test]
    fn unknown_cipher_is_named() {
        let err = TlsPolicy::parse("1.2", "1.3", Some("TLS_FOO"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("TLS_FOO") && err.contains("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
            "{err}"
        );
    }

    #[test]
    fn default_suites_serve_rsa_and_ecdsa() {
        let names = supported_cipher_names();
        assert!(names.iter().any(|n| n.contains("ECDHE_RSA")));
        assert!(names.iter().any(|n| n.contains("ECDHE_ECDSA")));
    }
}
