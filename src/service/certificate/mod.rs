//! `certificate.CertificateService`: the TLS certificates and SSH known-host keys tiphys keeps
//! for repository hosts, as upstream's `server/certificate/certificate.go` and
//! `util/db/certificate.go` serve them (RBAC resource `certificates`, object `""`).
//!
//! Each TLS host (one PEM bundle, as in `argocd-tls-certs-cm`) and each SSH host key (one line
//! of `argocd-ssh-known-hosts-cm`) is an object of the registry, seeded from those ConfigMaps
//! in `--config-dir` at start (`seed`); on an installation (`--kube`) the registry keeps them in
//! those ConfigMaps themselves, as upstream does (`registry/kube_configmaps.rs`). Every write is
//! checked for real (X.509 parsing, SSH key decoding) and all-or-nothing: a request with one bad
//! entry stores none.
//!
//! [`trust`] answers "which CA certificates, which host keys for host H" for code that connects
//! to repositories.

pub mod known_hosts;
pub mod seed;
pub mod tls;
pub mod trust;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};

use self::known_hosts::HostKey;
use super::access::Access;
use super::sensitive::{canonical, same_as_stored};
use crate::error::AppError;
use crate::registry::{Change, DocRef, Key, Kind, RegistryError};
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

pub const RESOURCE: &str = "certificates";
const LIST: &str = "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepositoryCertificateList";

pub use crate::registry::certificates::{HTTPS, SSH};

/// A stored certificate object, as the registry holds it.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default, rename_all = "camelCase")]
pub struct Stored {
    pub server_name: String,
    pub cert_type: String,
    pub cert_sub_type: String,
    /// Base64 of the PEM bundle (https) or of the key's base64 blob (ssh): `bytes` in JSON.
    pub cert_data: String,
}

impl Stored {
    pub fn deserialize_doc(doc: &DocRef) -> Self {
        Self::deserialize(doc.value()).unwrap_or_default()
    }

    pub fn data(&self) -> Vec<u8> {
        STANDARD.decode(&self.cert_data).unwrap_or_default()
    }

    pub fn host_key(&self) -> HostKey {
        HostKey {
            host: self.server_name.clone(),
            sub_type: self.cert_sub_type.clone(),
            data: String::from_utf8_lossy(&self.data()).into_owned(),
        }
    }
}

/// The registry key of a TLS host's bundle or of one SSH key of a host.
pub fn key(cert_type: &str, host: &str, sub_type: &str) -> Key {
    crate::registry::certificates::certificate_key(cert_type, host, sub_type)
}

/// The stored form of a TLS bundle.
pub fn tls_value(host: &str, pem: &[u8]) -> Value {
    crate::registry::certificates::tls_object(host, pem)
}

/// The stored form of an SSH key.
pub fn ssh_value(entry: &HostKey) -> Value {
    crate::registry::certificates::ssh_object(&entry.host, &entry.sub_type, &entry.data)
}

/// `RepositoryCertificateQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct Query {
    pub host_name_pattern: String,
    pub cert_type: String,
    pub cert_sub_type: String,
}

/// Which stored certificates a query selects.
struct Selector {
    ssh: bool,
    https: bool,
    host: Option<regex::Regex>,
    sub_type: String,
}

impl Selector {
    fn new(q: &Query) -> Result<Self, AppError> {
        let (ssh, https) = match q.cert_type.as_str() {
            "" | "*" => (true, true),
            SSH => (true, false),
            HTTPS | "tls" => (false, true),
            other => {
                return Err(AppError::InvalidArgument(format!(
                    "unknown certificate type {other:?}: use https or ssh"
                )));
            }
        };
        let host = match q.host_name_pattern.as_str() {
            "" => None,
            pattern => Some(host_glob(pattern)?),
        };
        let sub_type = if q.cert_sub_type == "*" {
            String::new()
        } else {
            q.cert_sub_type.clone()
        };
        Ok(Self {
            ssh,
            https,
            host,
            sub_type,
        })
    }

    fn selects(&self, cert: &Stored) -> bool {
        let kind = match cert.cert_type.as_str() {
            SSH => self.ssh && (self.sub_type.is_empty() || self.sub_type == cert.cert_sub_type),
            _ => self.https,
        };
        kind && self.host.as_ref().is_none_or(|re| re.is_match(&cert.server_name))
    }
}

/// A host-name pattern as Go's `filepath.Match` reads it (`*`, `?`, `[a-z]`, `[^a-z]`, `\`
/// escapes), as an anchored regular expression.
fn host_glob(pattern: &str) -> Result<regex::Regex, AppError> {
    let bad = || AppError::InvalidArgument(format!("invalid host name pattern {pattern:?}"));
    let mut re = String::from("^");
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '*' => re.push_str("[^/]*"),
            '?' => re.push_str("[^/]"),
            '\\' => re.push_str(&regex::escape(&chars.next().ok_or_else(bad)?.to_string())),
            '[' => {
                re.push('[');
                let mut first = true;
                loop {
                    let c = chars.next().ok_or_else(bad)?;
                    match c {
                        ']' if !first => break,
                        '^' | '!' if first => re.push('^'),
                        '\\' => re.push_str(&regex::escape(&chars.next().ok_or_else(bad)?.to_string())),
                        '-' => re.push('-'),
                        c => re.push_str(&regex::escape(&c.to_string())),
                    }
                    first = false;
                }
                re.push(']');
            }
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    regex::Regex::new(&re).map_err(|_| bad())
}

/// Every stored certificate, SSH keys first, each kind by host.
fn stored(app: &ServerState) -> Vec<(DocRef, Stored)> {
    let (_, docs) = app.registry.list(Kind::Certificate);
    let mut all: Vec<_> = docs
        .into_iter()
        .map(|doc| {
            let cert = Stored::deserialize_doc(&doc);
            (doc, cert)
        })
        .collect();
    all.sort_by(|(_, a), (_, b)| {
        (a.cert_type != SSH, &a.server_name, &a.cert_sub_type).cmp(&(
            b.cert_type != SSH,
            &b.server_name,
            &b.cert_sub_type,
        ))
    });
    all
}

/// What a list shows of a stored certificate: one item per SSH key (its fingerprint) or per
/// certificate of a TLS bundle (its subject and key algorithm), without the data, as upstream.
fn listed(cert: &Stored) -> Vec<Value> {
    match cert.cert_type.as_str() {
        SSH => {
            let info = cert
                .host_key()
                .public_key()
                .map(|k| HostKey::fingerprint(&k))
                .unwrap_or_default();
            vec![item(cert, &cert.cert_sub_type, &info, "")]
        }
        _ => match tls::parse_bundle(&cert.data()) {
            Ok(certs) => certs
                .iter()
                .map(|c| item(cert, &c.algorithm, &c.subject, ""))
                .collect(),
            Err(why) => vec![item(cert, "invalid", &why, "")],
        },
    }
}

/// One answered certificate of `cert`'s host and type.
fn item(cert: &Stored, sub_type: &str, info: &str, data: &str) -> Value {
    json!({
        "serverName": cert.server_name,
        "certType": cert.cert_type,
        "certSubType": sub_type,
        "certData": STANDARD.encode(data.as_bytes()),
        "certInfo": info,
    })
}

fn list_of(items: Vec<Value>) -> Result<Reply, AppError> {
    Ok(Reply::Message(canonical(LIST, &json!({"items": items}))?))
}

/// ListCertificates, `certificates, get`.
pub async fn list(ctx: Ctx, q: Query) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    Access::detailed(RESOURCE, "get").check(&ctx.app, principal, "")?;
    let selector = Selector::new(&q)?;
    let items = stored(&ctx.app)
        .iter()
        .filter(|(_, cert)| selector.selects(cert))
        .flat_map(|(_, cert)| listed(cert))
        .collect();
    list_of(items)
}

/// `RepositoryCertificateCreateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub certificates: CertificateList,
    pub upsert: bool,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CertificateList {
    /// (`null` when empty, as the JSON codec writes an empty list.)
    pub items: Option<Vec<Stored>>,
}

/// One entry of a create request, checked.
struct Checked {
    key: Key,
    value: Value,
    /// What the answer lists for it.
    answer: Vec<Value>,
    what: String,
}

fn check(given: &Stored) -> Result<Checked, String> {
    let data = STANDARD
        .decode(&given.cert_data)
        .map_err(|_| format!("{}: certData is not base64", given.server_name))?;
    match given.cert_type.as_str() {
        HTTPS => {
            if !known_hosts::is_host_name(&given.server_name)
                && given.server_name.parse::<std::net::IpAddr>().is_err()
            {
                return Err(format!("invalid host name {:?}", given.server_name));
            }
            let certs = tls::parse_bundle(&data).map_err(|e| format!("{}: {e}", given.server_name))?;
            Ok(Checked {
                key: key(HTTPS, &given.server_name, ""),
                value: tls_value(&given.server_name, &data),
                answer: certs.iter().map(|c| item(given, "", "", &c.pem)).collect(),
                what: format!("TLS certificate for server {:?}", given.server_name),
            })
        }
        SSH => {
            let text = String::from_utf8(data)
                .map_err(|_| format!("{}: the key data is not text", given.server_name))?;
            let (entry, public) = HostKey::parsed(&given.server_name, &given.cert_sub_type, &text)?;
            Ok(Checked {
                key: key(SSH, &entry.host, &entry.sub_type),
                value: ssh_value(&entry),
                answer: vec![item(
                    given,
                    &entry.sub_type,
                    &HostKey::fingerprint(&public),
                    &entry.data,
                )],
                what: format!("SSH key for {:?} (subtype {:?})", entry.host, entry.sub_type),
            })
        }
        other => Err(format!("unknown certificate type {other:?}: use https or ssh")),
    }
}

/// CreateCertificate, `certificates, create`: every entry is checked before anything is
/// written. An entry equal to the stored one is left as is (and not listed as created); a
/// different one needs `upsert`.
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    Access::detailed(RESOURCE, "create").check(&ctx.app, principal, "")?;
    let items = req.certificates.items.unwrap_or_default();
    if items.is_empty() {
        return Err(AppError::InvalidArgument("no certificates given".to_owned()));
    }
    let mut changes = Vec::new();
    let mut created = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for item in &items {
        let checked = check(item).map_err(AppError::InvalidArgument)?;
        if !seen.insert(checked.key.clone()) {
            return Err(AppError::InvalidArgument(format!(
                "{} is given twice",
                checked.what
            )));
        }
        let change = match ctx.app.registry.get(&checked.key) {
            None => Change::Create {
                key: checked.key,
                value: checked.value,
            },
            Some(doc) if same_as_stored(Kind::Certificate.message(), &doc.value(), &checked.value)? => {
                continue;
            }
            Some(_) if !req.upsert => {
                return Err(AppError::AlreadyExists(format!(
                    "{} already exists and is different; use upsert to replace it",
                    checked.what
                )));
            }
            Some(doc) => Change::Update {
                key: checked.key,
                value: checked.value,
                expect: Some(doc.rv),
            },
        };
        changes.push(change);
        created.extend(checked.answer);
    }
    apply(&ctx.app, changes).await?;
    list_of(created)
}

/// DeleteCertificate, `certificates, delete`: removes what the query selects (everything for
/// an empty query, as upstream) and answers what was removed.
pub async fn delete(ctx: Ctx, q: Query) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    Access::detailed(RESOURCE, "delete").check(&ctx.app, principal, "")?;
    let selector = Selector::new(&q)?;
    let mut changes = Vec::new();
    let mut removed = Vec::new();
    for (doc, cert) in stored(&ctx.app) {
        if !selector.selects(&cert) {
            continue;
        }
        match cert.cert_type.as_str() {
            SSH => removed.push(item(&cert, &cert.cert_sub_type, "", &cert.host_key().data)),
            _ => removed.extend(
                tls::parse_bundle(&cert.data())
                    .unwrap_or_default()
                    .iter()
                    .map(|c| item(&cert, "", "", &c.pem)),
            ),
        }
        changes.push(Change::Delete {
            key: doc.key.clone(),
            expect: Some(doc.rv),
        });
    }
    apply(&ctx.app, changes).await?;
    list_of(removed)
}

async fn apply(app: &ServerState, changes: Vec<Change>) -> Result<(), AppError> {
    if changes.is_empty() {
        return Ok(());
    }
    app.registry.apply(changes).await.map_err(|e| match e {
        RegistryError::AlreadyExists(_) | RegistryError::Conflict { .. } => {
            AppError::Aborted("the certificates were changed by someone else: try again".to_owned())
        }
        other => AppError::from(other),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_globs_follow_filepath_match() {
        let m = |p: &str, h: &str| host_glob(p).unwrap().is_match(h);
        assert!(m("*.example.com", "git.example.com"));
        assert!(!m("*.example.com", "example.com"));
        assert!(m("git?.example", "git1.example"));
        assert!(m("[a-c]*", "bitbucket.org"));
        assert!(!m("[^a-c]*", "bitbucket.org"));
        assert!(m("a.b", "a.b"));
        assert!(!m("a.b", "axb"), "a dot is literal");
        assert!(host_glob("[abc").is_err());
    }

    #[test]
    fn queries_select_by_type_and_subtype() {
        let ssh = Stored {
            server_name: "github.com".into(),
            cert_type: SSH.into(),
            cert_sub_type: "ssh-ed25519".into(),
            cert_data: String::new(),
        };
        let https = Stored {
            cert_type: HTTPS.into(),
            ..ssh.clone()
        };
        let q = |t: &str, s: &str| {
            Selector::new(&Query {
                host_name_pattern: String::new(),
                cert_type: t.into(),
                cert_sub_type: s.into(),
            })
        };
        assert!(q("", "").unwrap().selects(&ssh));
        assert!(q("tls", "").unwrap().selects(&https));
        assert!(!q("https", "").unwrap().selects(&ssh));
        assert!(!q("ssh", "ssh-rsa").unwrap().selects(&ssh));
        assert!(q("ssh", "*").unwrap().selects(&ssh));
        assert!(q("x509", "").is_err());
    }
}
