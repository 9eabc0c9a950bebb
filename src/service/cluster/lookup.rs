//! Which cluster a request names, and which clusters there are: the stored ones and, unless
//! argocd-cm says `cluster.inClusterEnabled: "false"`, the built-in in-cluster destination.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::AppError;
use crate::registry::{DocRef, Key, Kind};
use crate::service::project_rules::{IN_CLUSTER_NAME, IN_CLUSTER_SERVER};
use crate::service::redact;
use crate::state::ServerState;

/// `ClusterID`: how a path names a cluster (`/api/v1/clusters/{id.value}?id.type=…`).
#[derive(Deserialize, Default, Debug, Clone, PartialEq, Eq)]
#[serde(default)]
pub struct ClusterId {
    #[serde(rename = "type")]
    pub kind: String,
    pub value: String,
}

/// A cluster named by its server URL or by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Server(String),
    Name(String),
}

impl Lookup {
    /// `url` (the default) names the server; `name` the name; `name_escaped` a name whose
    /// slashes were sent as `%2F`.
    pub fn from_id(id: &ClusterId) -> Result<Self, AppError> {
        match id.kind.as_str() {
            "" | "url" => Ok(Lookup::Server(normalize_server(&id.value))),
            "name" => Ok(Lookup::Name(id.value.clone())),
            "name_escaped" => Ok(Lookup::Name(id.value.replace("%2F", "/"))),
            other => Err(AppError::InvalidArgument(format!(
                "unknown cluster id type {other:?}: use url, name or name_escaped"
            ))),
        }
    }

    /// What a request names: its `id` when it has a value, else its server, else its name.
    pub fn from_parts(id: Option<&ClusterId>, server: &str, name: &str) -> Result<Option<Self>, AppError> {
        if let Some(id) = id.filter(|id| !id.value.is_empty()) {
            return Self::from_id(id).map(Some);
        }
        Ok(if !server.is_empty() {
            Some(Lookup::Server(normalize_server(server)))
        } else if !name.is_empty() {
            Some(Lookup::Name(name.to_owned()))
        } else {
            None
        })
    }

    pub fn matches(&self, entry: &Entry) -> bool {
        match self {
            Lookup::Server(server) => &entry.server == server,
            Lookup::Name(name) => &entry.name == name,
        }
    }

    /// For messages: the URL with any password masked.
    pub fn describe(&self) -> String {
        match self {
            Lookup::Server(server) => format!("cluster {:?}", redact::url(server)),
            Lookup::Name(name) => format!("cluster named {name:?}"),
        }
    }
}

/// Server URLs compare without a trailing slash, and are stored without one.
pub fn normalize_server(server: &str) -> String {
    server.trim_end_matches('/').to_owned()
}

/// The RBAC object of a cluster: `<server>`, or `<project>/<server>` for a project-scoped one.
pub fn rbac_object(project: &str, server: &str) -> String {
    if project.is_empty() {
        server.to_owned()
    } else {
        format!("{project}/{server}")
    }
}

/// What the use cases read of a cluster.
#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct ClusterView {
    pub server: String,
    pub name: String,
    pub project: String,
}

impl ClusterView {
    pub fn read(value: &Value) -> Self {
        // Values reaching the use cases are canonical (typed by the schema), so a failure here
        // can only be a value that is not an object: it names nothing.
        Self::deserialize(value).unwrap_or_default()
    }
}

/// A cluster as the API shows it: stored, or the built-in in-cluster destination.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `None` for the built-in in-cluster destination that was never stored.
    pub stored: Option<DocRef>,
    pub value: Value,
    pub server: String,
    pub name: String,
    pub project: String,
}

impl Entry {
    fn new(stored: Option<DocRef>, value: Value) -> Self {
        let view = ClusterView::read(&value);
        Self {
            stored,
            value,
            server: view.server,
            name: view.name,
            project: view.project,
        }
    }

    pub fn from_doc(doc: DocRef) -> Self {
        let value = doc.value();
        Self::new(Some(doc), value)
    }

    /// The in-cluster destination as upstream shows it when no cluster secret describes it.
    pub fn builtin() -> Self {
        Self::new(
            None,
            json!({
                "server": IN_CLUSTER_SERVER,
                "name": IN_CLUSTER_NAME,
                "config": {"tlsClientConfig": {"insecure": false}},
            }),
        )
    }

    pub fn rbac_object(&self) -> String {
        rbac_object(&self.project, &self.server)
    }
}

/// `cluster.inClusterEnabled` from argocd-cm: anything but `"false"` enables it, as upstream.
pub fn in_cluster_enabled(state: &ServerState) -> bool {
    state
        .config
        .peek()
        .cm
        .get("cluster.inClusterEnabled")
        .is_none_or(|v| v.trim() != "false")
}

/// Every cluster the API shows, in server order (the built-in one last), with the registry
/// revision they are current at.
pub fn all(state: &ServerState) -> (u64, Vec<Entry>) {
    let enabled = in_cluster_enabled(state);
    let (rv, docs) = state.registry.list(Kind::Cluster);
    let mut entries: Vec<Entry> = docs
        .into_iter()
        .map(Entry::from_doc)
        .filter(|entry| enabled || entry.server != IN_CLUSTER_SERVER)
        .collect();
    if enabled && !entries.iter().any(|e| e.server == IN_CLUSTER_SERVER) {
        entries.push(Entry::builtin());
    }
    (rv, entries)
}

/// The cluster `lookup` names: by server straight from the registry, by name among all.
pub fn find(state: &ServerState, lookup: &Lookup) -> Option<Entry> {
    match lookup {
        Lookup::Server(server) => {
            let builtin = server == IN_CLUSTER_SERVER;
            if builtin && !in_cluster_enabled(state) {
                return None;
            }
            match state.registry.get(&Key::new(Kind::Cluster, "", server)) {
                Some(doc) => Some(Entry::from_doc(doc)),
                None => builtin.then(Entry::builtin),
            }
        }
        Lookup::Name(_) => all(state).1.into_iter().find(|e| lookup.matches(e)),
    }
}

/// How many applications deploy to each cluster: by destination server, or by destination
/// name for those that name their cluster instead.
#[derive(Debug, Default)]
pub struct AppCounts {
    by_server: HashMap<String, i64>,
    by_name: HashMap<String, i64>,
}

impl AppCounts {
    pub fn load(state: &ServerState) -> Self {
        let mut counts = Self::default();
        let (_, apps) = state.registry.list(Kind::Application);
        for app in apps {
            let summary = &app.summary;
            if !summary.dest_server.is_empty() {
                *counts
                    .by_server
                    .entry(normalize_server(&summary.dest_server))
                    .or_default() += 1;
            } else if !summary.dest_name.is_empty() {
                *counts.by_name.entry(summary.dest_name.clone()).or_default() += 1;
            }
        }
        counts
    }

    pub fn count(&self, entry: &Entry) -> i64 {
        self.by_server.get(&entry.server).copied().unwrap_or(0)
            + self.by_name.get(&entry.name).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: &str, value: &str) -> ClusterId {
        ClusterId {
            kind: kind.to_owned(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn ids_name_a_server_or_a_name() {
        assert_eq!(
            Lookup::from_id(&id("", "https://10.0.0.1:6443/")).unwrap(),
            Lookup::Server("https://10.0.0.1:6443".to_owned())
        );
        assert_eq!(
            Lookup::from_id(&id("url", "https://x")).unwrap(),
            Lookup::Server("https://x".to_owned())
        );
        assert_eq!(
            Lookup::from_id(&id("name", "prod")).unwrap(),
            Lookup::Name("prod".to_owned())
        );
        assert_eq!(
            Lookup::from_id(&id("name_escaped", "team%2Fprod")).unwrap(),
            Lookup::Name("team/prod".to_owned())
        );
        assert!(Lookup::from_id(&id("uri", "x")).is_err());
    }

    #[test]
    fn id_wins_over_server_and_name() {
        let by_id = Lookup::from_parts(Some(&id("name", "a")), "https://b", "c").unwrap();
        assert_eq!(by_id, Some(Lookup::Name("a".to_owned())));
        let empty_id = Lookup::from_parts(Some(&id("", "")), "https://b", "c").unwrap();
        assert_eq!(empty_id, Some(Lookup::Server("https://b".to_owned())));
        assert_eq!(
            Lookup::from_parts(None, "", "c").unwrap(),
            Some(Lookup::Name("c".to_owned()))
        );
        assert_eq!(Lookup::from_parts(None, "", "").unwrap(), None);
    }

    #[test]
    fn rbac_objects() {
        assert_eq!(rbac_object("", "https://x"), "https://x");
        assert_eq!(rbac_object("team", "https://x"), "team/https://x");
        let builtin = Entry::builtin();
        assert_eq!(builtin.rbac_object(), IN_CLUSTER_SERVER);
        assert_eq!(builtin.name, IN_CLUSTER_NAME);
    }

    #[test]
    fn lookups_describe_without_passwords() {
        let text = Lookup::Server("https://u:hunter2@x".to_owned()).describe();
        assert!(!text.contains("hunter2"), "{text}");
    }
}
