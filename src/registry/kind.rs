//! What the registry holds: kinds of objects and their keys.

use std::fmt;

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

/// The kinds of object the API serves, each stored under its own key prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Application,
    AppProject,
    Cluster,
    Repository,
    RepoCreds,
    /// The repositories upstream's source hydrator pushes to, and their credential templates:
    /// Repository and RepoCreds records of their own.
    WriteRepository,
    WriteRepoCreds,
    /// A TLS certificate bundle or an SSH known-host key for repository hosts.
    Certificate,
    /// An OpenPGP public key.
    GpgKey,
    ApplicationSet,
}

impl Kind {
    /// The generation of this kind's protobuf layout, part of every encoding stored beside a
    /// record (`record::encode_proto_entry`). Bump it when a field of the kind's messages takes
    /// another number: encodings stored before then are not served (a reply encodes such an
    /// object from its JSON until a write stores the new encoding), where serving them would put
    /// a field under a number a client reads as another field.
    pub(crate) const fn wire_generation(self) -> u64 {
        match self {
            // ApplicationSetSpec's fields 6 to 9 took upstream's numbers (2026-12-01).
            Kind::ApplicationSet => 1,
            _ => 0,
        }
    }

    pub const ALL: [Kind; 10] = [
        Kind::Application,
        Kind::AppProject,
        Kind::Cluster,
        Kind::Repository,
        Kind::RepoCreds,
        Kind::WriteRepository,
        Kind::WriteRepoCreds,
        Kind::Certificate,
        Kind::GpgKey,
        Kind::ApplicationSet,
    ];

    /// The key segment (also the Kubernetes-style plural).
    pub fn segment(self) -> &'static str {
        match self {
            Kind::Application => "applications",
            Kind::AppProject => "appprojects",
            Kind::Cluster => "clusters",
            Kind::Repository => "repositories",
            Kind::RepoCreds => "repocreds",
            Kind::WriteRepository => "write-repositories",
            Kind::WriteRepoCreds => "write-repocreds",
            Kind::Certificate => "certificates",
            Kind::GpgKey => "gpgkeys",
            Kind::ApplicationSet => "applicationsets",
        }
    }

    /// What one object of this kind is called in messages.
    pub fn singular(self) -> &'static str {
        match self {
            Kind::Application => "application",
            Kind::AppProject => "project",
            Kind::Cluster => "cluster",
            Kind::Repository => "repository",
            Kind::RepoCreds => "repository credentials",
            Kind::WriteRepository => "write repository",
            Kind::WriteRepoCreds => "write repository credentials",
            Kind::Certificate => "certificate",
            Kind::GpgKey => "GnuPG public key",
            Kind::ApplicationSet => "applicationset",
        }
    }

    /// The protobuf message that describes an object of this kind.
    pub const fn message(self) -> &'static str {
        match self {
            Kind::Application => "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.Application",
            Kind::AppProject => "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.AppProject",
            Kind::Cluster => "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.Cluster",
            Kind::Repository | Kind::WriteRepository => {
                "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.Repository"
            }
            Kind::RepoCreds | Kind::WriteRepoCreds => {
                "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepoCreds"
            }
            Kind::Certificate => {
                "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepositoryCertificate"
            }
            Kind::GpgKey => "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.GnuPGPublicKey",
            Kind::ApplicationSet => {
                "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.ApplicationSet"
            }
        }
    }

    /// Whether objects carry Kubernetes `metadata` (applications, projects and application
    /// sets); the others are plain records keyed by their URL.
    pub fn has_metadata(self) -> bool {
        matches!(self, Kind::Application | Kind::AppProject | Kind::ApplicationSet)
    }

    /// Whether objects hold credentials (tokens, passwords, keys): their records are sealed
    /// at rest (`sealing.rs`).
    pub fn holds_credentials(self) -> bool {
        matches!(
            self,
            Kind::Cluster | Kind::Repository | Kind::RepoCreds | Kind::WriteRepository | Kind::WriteRepoCreds
        )
    }

    /// The store keys of every object of this kind start with this.
    pub(crate) fn store_prefix(self) -> String {
        format!("{PREFIX}{}/", self.segment())
    }

    fn from_segment(segment: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.segment() == segment)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.segment())
    }
}

/// Store keys of objects start with this; nothing else in the store does.
pub(crate) const PREFIX: &str = "/registry/";
/// Store keys of the objects' protobuf encodings: the object's key under this prefix instead.
const PROTO_PREFIX: &str = "/registry-pb/";

/// Characters escaped in key segments, so that a name holding `/` (a URL) stays one segment.
const SEGMENT: &AsciiSet = &CONTROLS.add(b'/').add(b'%').add(b' ');

/// An object's identity: kind, namespace and name. Clusters are named by server URL,
/// repositories and credential templates by repository URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> Self {
        Self {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    pub(crate) fn store_key(&self) -> String {
        format!(
            "{PREFIX}{}/{}/{}",
            self.kind.segment(),
            utf8_percent_encode(&self.namespace, SEGMENT),
            utf8_percent_encode(&self.name, SEGMENT)
        )
    }

    /// Where the object's protobuf encoding is stored.
    pub(crate) fn proto_store_key(&self) -> String {
        let key = self.store_key();
        format!("{PROTO_PREFIX}{}", &key[PREFIX.len()..])
    }

    /// The record key an encoding's store key belongs to (`None`: not an encoding's key). A
    /// copy of the store writes the two in one commit, so that they keep sharing a revision.
    pub(crate) fn record_of_encoding(store_key: &str) -> Option<String> {
        Some(format!("{PREFIX}{}", store_key.strip_prefix(PROTO_PREFIX)?))
    }

    pub(crate) fn from_store_key(key: &str) -> Option<Self> {
        let mut parts = key.strip_prefix(PREFIX)?.split('/');
        let kind = Kind::from_segment(parts.next()?)?;
        let namespace = percent_decode_str(parts.next()?).decode_utf8().ok()?.into_owned();
        let name = percent_decode_str(parts.next()?).decode_utf8().ok()?.into_owned();
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            kind,
            namespace,
            name,
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {:?}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_names_round_trip_through_store_keys() {
        let key = Key::new(Kind::Cluster, "", "https://10.0.0.1:6443/a%2Fb path");
        let stored = key.store_key();
        assert_eq!(stored.matches('/').count(), 4, "{stored}");
        assert_eq!(Key::from_store_key(&stored), Some(key.clone()));
        // The encoding's key is outside the objects' prefix, so a load never reads it.
        assert!(
            !key.proto_store_key().starts_with(PREFIX),
            "{}",
            key.proto_store_key()
        );
    }
}
