//! A cluster's connection state and server version as answers show them, from tiphys's own
//! checks (`crate::clusters`): the last check, re-checked in the background once it is due
//! (a failure sooner than a success). A cluster never checked is checked now when one cluster
//! is asked for (`wait`), else in the background and shown `Unknown` meanwhile, so that a list
//! never waits for every cluster.

use std::sync::Arc;

use serde_json::{Value, json};

use super::lookup::Entry;
use crate::app::App;
use crate::clusters::{Checked, ClusterError, Clusters, Target};
use crate::service::sensitive::unknown_state;

const NOT_CONTACTED: &str = "this server does not contact clusters (--cluster-access off)";

/// What an answer shows of the cluster's connection.
pub struct Shown {
    pub state: Value,
    pub server_version: Option<String>,
}

/// The connection of the cluster `entry`, as answered.
pub async fn shown(app: &App, entry: &Entry, wait: bool) -> Shown {
    let Some(clusters) = &app.clusters else {
        return unknown(NOT_CONTACTED);
    };
    let target = match Target::read(&entry.value) {
        Ok(target) => target,
        Err(err) => return failed(entry, &err),
    };
    let namespaces = namespaces(&entry.value);
    let key = key(&target);
    let checked = match clusters.states().recorded(&key) {
        (Some(found), due) => {
            if due {
                spawn_check(clusters, target, namespaces, key);
            }
            found
        }
        (None, _) if !wait => {
            if clusters.states().claim_first_check(&key) {
                spawn_check(clusters, target, namespaces, key);
            }
            return unknown("being checked");
        }
        (None, _) => check(clusters, &target, &namespaces, &key).await,
    };
    from_checked(entry, &checked)
}

/// Forgets what tiphys keeps of the cluster `entry` (InvalidateCache), so that the next answer
/// checks it anew.
pub fn forget(app: &App, entry: &Entry) {
    if let (Some(clusters), Ok(target)) = (&app.clusters, Target::read(&entry.value)) {
        clusters.forget(&target.server);
        clusters.states().forget(&key(&target));
    }
}

/// Checks are kept by the connection settings as well as the server, so that a cluster whose
/// credentials change (through the API or its Secret) is checked anew.
fn key(target: &Target) -> String {
    use std::hash::BuildHasher as _;
    let hash = foldhash::fast::FixedState::with_seed(0).hash_one(target);
    format!("{}\u{0}{hash:016x}", target.server)
}

fn namespaces(value: &Value) -> Vec<String> {
    value
        .get("namespaces")
        .and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn spawn_check(clusters: &Arc<Clusters>, target: Target, namespaces: Vec<String>, key: String) {
    let clusters = Arc::clone(clusters);
    tokio::spawn(async move {
        check(&clusters, &target, &namespaces, &key).await;
    });
}

async fn check(clusters: &Clusters, target: &Target, namespaces: &[String], key: &str) -> Checked {
    let outcome = clusters.check(target, namespaces).await;
    clusters.states().record(key, outcome, None)
}

fn unknown(why: &str) -> Shown {
    Shown {
        state: unknown_state(why),
        server_version: None,
    }
}

fn failed(entry: &Entry, err: &ClusterError) -> Shown {
    Shown {
        state: json!({"status": "Failed", "message": message(entry, err)}),
        server_version: None,
    }
}

fn from_checked(entry: &Entry, checked: &Checked) -> Shown {
    let at = checked.at.to_string();
    match &checked.outcome {
        Ok(reached) => Shown {
            state: json!({"status": "Successful", "message": "", "attemptedAt": at}),
            server_version: Some(reached.server_version.clone()),
        },
        // Nothing to check against: not a failure of the cluster's.
        Err(err @ ClusterError::NoInCluster(_)) => Shown {
            state: json!({"status": "Unknown", "message": err.to_string(), "attemptedAt": at}),
            server_version: None,
        },
        Err(err) => Shown {
            state: json!({"status": "Failed", "message": message(entry, err), "attemptedAt": at}),
            server_version: None,
        },
    }
}

/// The failure, naming the cluster and never its credentials.
fn message(entry: &Entry, err: &ClusterError) -> String {
    let config = entry.value.get("config");
    let secret = |field: &str| {
        config
            .and_then(|c| c.get(field))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let text = err.message_without(&[secret("bearerToken"), secret("password")]);
    format!(
        "Unable to connect to cluster {}: {text}",
        crate::service::redact::url(&entry.server)
    )
}
