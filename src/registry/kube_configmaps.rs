//! Repository certificates and GnuPG keys on an installation (`--kube`): the ConfigMaps of the
//! control namespace where upstream's argocd-server keeps them (util/db/certificate.go,
//! util/db/gpgkeys.go, util/settings/settings.go SaveTLSCertificateData,
//! SaveSSHKnownHostsData and SaveGPGPublicKeyData), so that the repo-server, which mounts
//! them, trusts what tiphys adds, and an edit made with kubectl is what tiphys serves.
//!
//! - `argocd-tls-certs-cm`: one key per server name, its PEM bundle (several certificates
//!   concatenated) as given.
//! - `argocd-ssh-known-hosts-cm`: the key `ssh_known_hosts`, known_hosts lines. As upstream,
//!   a line is split at its first two spaces into host, key type and data (a comment after the
//!   key is part of the data), comment and blank lines are dropped by the first write, a new
//!   key is appended, an upserted one is changed in its line, and the text ends in a newline.
//! - `argocd-gpg-keys-cm`: one key per GnuPG key ID, the ASCII-armoured key.
//!
//! Each entry is an object of the registry (the certificate service's keys, `certificates.rs`),
//! at the ConfigMap's `resourceVersion` when it last changed. A write reads the ConfigMap,
//! checks that what the plan replaces is still what it holds (else a conflict: the registry
//! catches up and plans again), and replaces it with that `resourceVersion` as the
//! precondition. An entry that does not decode (a GnuPG key kubectl put under the wrong ID) is
//! reported and left out; the rest is served. A ConfigMap that is missing (upstream's install
//! manifests create all three) is created by the first write, labelled as those manifests do.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use serde_json::Value;

use super::certificates::{HTTPS, SSH, certificate_key, ssh_object, tls_object};
use super::doc::{Doc, DocRef, Draft};
use super::kind::{Key, Kind};
use super::kube_secrets::SecretFailure;
use super::{Planned, RegistryError};
use crate::kubernetes::Verb;
use crate::openpgp::{key_id_of, parse_public_keys};
use crate::schema::{Schema, SchemaError};
use crate::store::{Expect, StoreError};

/// The key of `argocd-ssh-known-hosts-cm` that holds the lines.
const KNOWN_HOSTS_KEY: &str = "ssh_known_hosts";

/// One of the three ConfigMaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CertMap {
    TlsCerts,
    KnownHosts,
    GpgKeys,
}

/// The kinds kept in ConfigMaps, and where (certificates in two).
pub(super) const CONFIG_MAP_KINDS: [(Kind, CertMap); 3] = [
    (Kind::Certificate, CertMap::TlsCerts),
    (Kind::Certificate, CertMap::KnownHosts),
    (Kind::GpgKey, CertMap::GpgKeys),
];

/// A known_hosts line as upstream reads it (cert.go TokenizeSSHKnownHostsEntry).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Line {
    host: String,
    sub_type: String,
    data: String,
}

impl Line {
    /// `None` for a blank or comment line, or one without three fields.
    fn parse(line: &str) -> Option<Self> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let mut parts = line.splitn(3, ' ');
        let (host, sub_type, data) = (parts.next()?, parts.next()?, parts.next()?);
        Some(Self {
            host: host.to_owned(),
            sub_type: sub_type.to_owned(),
            data: data.to_owned(),
        })
    }

    fn text(&self) -> String {
        format!("{} {} {}", self.host, self.sub_type, self.data)
    }
}

fn lines_of(text: &str) -> Vec<Line> {
    text.lines().filter_map(Line::parse).collect()
}

impl CertMap {
    pub(super) fn name(self) -> &'static str {
        match self {
            CertMap::TlsCerts => "argocd-tls-certs-cm",
            CertMap::KnownHosts => "argocd-ssh-known-hosts-cm",
            CertMap::GpgKeys => "argocd-gpg-keys-cm",
        }
    }

    /// The ConfigMap an object of the registry is kept in.
    pub(super) fn holding(key: &Key) -> Option<Self> {
        match key.kind {
            Kind::GpgKey => Some(CertMap::GpgKeys),
            Kind::Certificate if key.name.starts_with(&format!("{SSH} ")) => Some(CertMap::KnownHosts),
            Kind::Certificate => Some(CertMap::TlsCerts),
            _ => None,
        }
    }

    /// The objects `data` holds, each at `rv`; an entry that does not decode is reported.
    pub(super) fn docs(self, data: &BTreeMap<String, String>, rv: u64) -> Vec<DocRef> {
        let mut out = Vec::new();
        for (key, value) in self.objects(data) {
            let what = key.to_string();
            match doc(key, &value, rv) {
                Ok(doc) => out.push(doc),
                Err(e) => tracing::warn!("{what} of ConfigMap {} is not served: {e}", self.name()),
            }
        }
        out
    }

    fn objects(self, data: &BTreeMap<String, String>) -> Vec<(Key, Value)> {
        match self {
            CertMap::TlsCerts => data
                .iter()
                .map(|(host, pem)| (certificate_key(HTTPS, host, ""), tls_object(host, pem.as_bytes())))
                .collect(),
            CertMap::KnownHosts => lines_of(data.get(KNOWN_HOSTS_KEY).map_or("", String::as_str))
                .into_iter()
                .map(|l| {
                    let key = certificate_key(SSH, &l.host, &l.sub_type);
                    (key, ssh_object(&l.host, &l.sub_type, &l.data))
                })
                .collect(),
            CertMap::GpgKeys => data
                .iter()
                .filter_map(|(id, armored)| match gpg_object(id, armored) {
                    Ok(value) => Some((Key::new(Kind::GpgKey, "", id), value)),
                    Err(e) => {
                        tracing::warn!("GnuPG key {id:?} of ConfigMap {} is not served: {e}", self.name());
                        None
                    }
                })
                .collect(),
        }
    }

    /// The ConfigMap's data once `planned` (changes of objects it keeps) is applied.
    fn data_after(self, data: &BTreeMap<String, String>, planned: &[&Planned]) -> BTreeMap<String, String> {
        let mut data = data.clone();
        match self {
            CertMap::TlsCerts | CertMap::GpgKeys => {
                for plan in planned {
                    match &plan.draft {
                        Some(draft) => {
                            let value = draft_value(draft);
                            data.insert(map_key(self, &plan.key, &value), entry_text(self, &value));
                        }
                        None => {
                            let value = plan.current.as_ref().map(|c| c.value()).unwrap_or_default();
                            data.remove(&map_key(self, &plan.key, &value));
                        }
                    }
                }
            }
            CertMap::KnownHosts => {
                let mut lines = lines_of(data.get(KNOWN_HOSTS_KEY).map_or("", String::as_str));
                for plan in planned {
                    let value = match (&plan.draft, &plan.current) {
                        (Some(draft), _) => draft_value(draft),
                        (None, Some(current)) => current.value(),
                        (None, None) => continue,
                    };
                    let line = Line {
                        host: text_field(&value, "serverName"),
                        sub_type: text_field(&value, "certSubType"),
                        data: entry_text(self, &value),
                    };
                    let same = |l: &Line| l.host == line.host && l.sub_type == line.sub_type;
                    if plan.draft.is_none() {
                        lines.retain(|l| !same(l));
                    } else if let Some(at) = lines.iter_mut().find(|l| same(l)) {
                        at.data = line.data;
                    } else {
                        lines.push(line);
                    }
                }
                let text: Vec<String> = lines.iter().map(Line::text).collect();
                data.insert(KNOWN_HOSTS_KEY.to_owned(), format!("{}\n", text.join("\n")));
            }
        }
        data
    }
}

/// The object of a GnuPG key kept under `id`: exactly one key, with that ID, as upstream
/// requires of the ConfigMap; its data as the ConfigMap has it.
fn gpg_object(id: &str, armored: &str) -> Result<Value, String> {
    let want = key_id_of(id)
        .filter(|k| k == id)
        .ok_or("the key is not a GnuPG key ID")?;
    let keys = parse_public_keys(armored)?;
    let [only] = keys.as_slice() else {
        return Err(format!("{} keys under one ID: give one", keys.len()));
    };
    if only.key_id != want {
        return Err(format!("the key has key ID {}", only.key_id));
    }
    let mut value = only.object();
    value["keyData"] = Value::from(armored);
    Ok(value)
}

fn draft_value(draft: &Draft) -> Value {
    serde_json::from_slice(&draft.json).unwrap_or_default()
}

fn text_field(value: &Value, field: &str) -> String {
    value
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The data key an object is kept under (TLS: the server name; GnuPG: the key ID).
fn map_key(map: CertMap, key: &Key, value: &Value) -> String {
    match map {
        CertMap::GpgKeys => key.name.clone(),
        _ => text_field(value, "serverName"),
    }
}

/// What the ConfigMap holds of an object: the PEM bundle, the key's data, the armoured key.
fn entry_text(map: CertMap, value: &Value) -> String {
    match map {
        CertMap::GpgKeys => text_field(value, "keyData"),
        _ => {
            let bytes = STANDARD.decode(text_field(value, "certData")).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

/// The view's document of one entry: its JSON in the schema's canonical form, at `rv`.
fn doc(key: Key, value: &Value, rv: u64) -> Result<DocRef, SchemaError> {
    let schema = Schema::get();
    let canonical = schema.to_json(&schema.from_json(&schema.message(key.kind.message())?, value)?);
    let draft = Draft::new(key, &canonical)?;
    Ok(Arc::new(Doc::at(&draft, rv)?))
}

/// The data of a ConfigMap a watch delivered (upstream reads `data` only).
pub(super) fn data_of(object: &DynamicObject) -> BTreeMap<String, String> {
    object
        .data
        .get("data")
        .and_then(|d| serde_json::from_value(d.clone()).ok())
        .unwrap_or_default()
}

/// A ConfigMap's revision.
pub(super) fn rv_of(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

fn conflict(map: CertMap, expected: Expect, actual: Option<u64>) -> SecretFailure {
    SecretFailure::Registry(RegistryError::Store(StoreError::Conflict {
        key: format!("configmaps/{}", map.name()),
        expected,
        actual,
    }))
}

/// Applies `planned` to ConfigMap `map` (read, checked, replaced on its `resourceVersion`):
/// the ConfigMap as written.
pub(super) async fn write(
    api: &Api<ConfigMap>,
    map: CertMap,
    planned: &[&Planned],
) -> Result<ConfigMap, SecretFailure> {
    let name = map.name();
    let existing = api
        .get_opt(name)
        .await
        .map_err(|e| SecretFailure::Api(e, Verb::Get))?;
    let data = existing.as_ref().and_then(|c| c.data.clone()).unwrap_or_default();
    let rv = existing.as_ref().map_or(0, |c| rv_of(&c.metadata));
    // What each plan replaces must be what the ConfigMap holds now.
    let now: BTreeMap<Key, Value> = map
        .docs(&data, rv)
        .into_iter()
        .map(|d| (d.key.clone(), d.value()))
        .collect();
    for plan in planned {
        let expected = plan.current.as_ref().map(|c| c.value());
        if now.get(&plan.key) != expected.as_ref() {
            let expect = plan
                .current
                .as_ref()
                .map_or(Expect::Absent, |c| Expect::ModRevision(c.rv));
            return Err(conflict(map, expect, Some(rv)));
        }
    }
    let data = map.data_after(&data, planned);
    let lost = |e: kube::Error, verb| match e {
        kube::Error::Api(status) if status.code == 409 => conflict(map, Expect::ModRevision(rv), None),
        e => SecretFailure::Api(e, verb),
    };
    match existing {
        Some(mut cm) => {
            cm.data = Some(data);
            api.replace(name, &PostParams::default(), &cm)
                .await
                .map_err(|e| lost(e, Verb::Update))
        }
        None => {
            let labels = [
                ("app.kubernetes.io/name", name),
                ("app.kubernetes.io/part-of", "argocd"),
            ];
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(
                        labels
                            .iter()
                            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                            .collect(),
                    ),
                    ..ObjectMeta::default()
                },
                data: Some(data),
                ..ConfigMap::default()
            };
            api.create(&PostParams::default(), &cm)
                .await
                .map_err(|e| lost(e, Verb::Create))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hosts_lines_split_as_upstream() {
        let l = Line::parse("github.com ssh-ed25519 AAAA comment here").unwrap();
        assert_eq!(l.host, "github.com");
        assert_eq!(l.data, "AAAA comment here");
        assert_eq!(l.text(), "github.com ssh-ed25519 AAAA comment here");
        assert!(Line::parse("# github.com ssh-ed25519 AAAA").is_none());
        assert!(Line::parse("   ").is_none());
        assert!(Line::parse("github.com ssh-ed25519").is_none());
    }

    #[test]
    fn objects_are_kept_in_their_config_map() {
        let tls = certificate_key(HTTPS, "git.example", "");
        let ssh = certificate_key(SSH, "git.example", "ssh-ed25519");
        assert_eq!(CertMap::holding(&tls), Some(CertMap::TlsCerts));
        assert_eq!(CertMap::holding(&ssh), Some(CertMap::KnownHosts));
        assert_eq!(
            CertMap::holding(&Key::new(Kind::GpgKey, "", "ABCDEF0123456789")),
            Some(CertMap::GpgKeys)
        );
        assert_eq!(CertMap::holding(&Key::new(Kind::Cluster, "", "x")), None);
    }
}
