//! TLS certificates for repository hosts: a host's PEM bundle (what `argocd-tls-certs-cm` holds
//! under the host name) read into X.509 certificates with x509-parser.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls_pki_types::CertificateDer;
use x509_parser::pem::Pem;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Upstream's cap on the certificates of one stream.
const MAX_CERTIFICATES: usize = 256;

/// One certificate of a bundle, and what a list shows of it.
#[derive(Debug, Clone)]
pub struct ParsedCert {
    /// The certificate alone, PEM.
    pub pem: String,
    pub der: Vec<u8>,
    /// The subject in Go's `pkix.Name.String()` form (`CN=x,O=y`, last RDN first).
    pub subject: String,
    /// The public key algorithm, lower case as upstream shows it: rsa, ecdsa, ed25519, dsa.
    pub algorithm: String,
}

/// Every certificate of a PEM bundle. Refused, with the reason: no certificate, a block that is
/// not valid PEM, a private key (it has no business in a trust store), any other block type, and
/// a certificate that does not parse.
pub fn parse_bundle(data: &[u8]) -> Result<Vec<ParsedCert>, String> {
    let mut out = Vec::new();
    for (n, pem) in Pem::iter_from_buffer(data).enumerate() {
        let n = n + 1;
        let pem = pem.map_err(|e| format!("PEM block {n}: not valid PEM ({e})"))?;
        if pem.label.contains("PRIVATE KEY") {
            return Err(format!(
                "PEM block {n} is a private key ({}): give certificates only",
                pem.label
            ));
        }
        if pem.label != "CERTIFICATE" {
            return Err(format!("PEM block {n} is a {:?}, not a CERTIFICATE", pem.label));
        }
        let (_, cert) = X509Certificate::from_der(&pem.contents)
            .map_err(|e| format!("PEM block {n}: not an X.509 certificate ({e})"))?;
        out.push(ParsedCert {
            pem: to_pem(&pem.contents),
            subject: go_subject(&cert),
            algorithm: algorithm(&cert).to_owned(),
            der: pem.contents.clone(),
        });
        if out.len() > MAX_CERTIFICATES {
            return Err(format!("more than {MAX_CERTIFICATES} certificates"));
        }
    }
    if out.is_empty() {
        return Err("no PEM certificate found (expected -----BEGIN CERTIFICATE-----)".to_owned());
    }
    Ok(out)
}

/// The DER of each certificate of an already validated bundle.
pub fn ders(data: &[u8]) -> Vec<CertificateDer<'static>> {
    parse_bundle(data)
        .map(|certs| certs.into_iter().map(|c| CertificateDer::from(c.der)).collect())
        .unwrap_or_default()
}

fn to_pem(der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

fn algorithm(cert: &X509Certificate<'_>) -> &'static str {
    match cert.public_key().algorithm.algorithm.to_id_string().as_str() {
        "1.2.840.113549.1.1.1" => "rsa",
        "1.2.840.10045.2.1" => "ecdsa",
        "1.3.101.112" => "ed25519",
        "1.2.840.10040.4.1" => "dsa",
        _ => "unknown",
    }
}

/// Go's short names of the attributes it knows; others are shown by their OID.
fn attribute_name(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.5" => "SERIALNUMBER",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "2.5.4.17" => "POSTALCODE",
        _ => return None,
    })
}

/// The subject as upstream shows it (RFC 2253 order: the last RDN first, comma separated).
fn go_subject(cert: &X509Certificate<'_>) -> String {
    let mut rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|attr| {
                    let oid = attr.attr_type().to_id_string();
                    let value = attr.as_str().map(escape).unwrap_or_default();
                    match attribute_name(&oid) {
                        Some(name) => format!("{name}={value}"),
                        None => format!("{oid}={value}"),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.reverse();
    rdns.join(",")
}

/// RFC 4514 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The host of a TLS server name (`host` or `host:port`), as upstream keys its bundles.
pub fn host_of(server: &str) -> &str {
    server.split(':').next().unwrap_or(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_pem(cn: &str) -> String {
        let mut params = rcgen::CertificateParams::new(vec![cn.to_owned()]).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Acme, Inc");
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn bundles_are_read_certificate_by_certificate() {
        let bundle = format!("{}{}", cert_pem("a.example"), cert_pem("b.example"));
        let certs = parse_bundle(bundle.as_bytes()).unwrap();
        assert_eq!(certs.len(), 2);
        assert_eq!(certs[0].subject, "CN=a.example,O=Acme\\, Inc");
        assert_eq!(certs[0].algorithm, "ecdsa");
        assert!(certs[1].pem.starts_with("-----BEGIN CERTIFICATE-----\n"));
        assert_eq!(ders(bundle.as_bytes()).len(), 2);
    }

    #[test]
    fn bad_bundles_are_refused_with_the_reason() {
        let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        for (data, reason) in [
            ("".to_owned(), "no PEM certificate"),
            ("hello".to_owned(), "no PEM certificate"),
            (
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_owned(),
                "not an X.509 certificate",
            ),
            (key, "private key"),
        ] {
            let err = parse_bundle(data.as_bytes()).unwrap_err();
            assert!(err.contains(reason), "{data:?}: {err}");
        }
    }

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(host_of("git.example:8443"), "git.example");
        assert_eq!(host_of("git.example"), "git.example");
    }
}
