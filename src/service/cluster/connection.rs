//! A cluster's connection state and server version as answers show them, from tiphys's own
//! checks (`crate::clusters`): the last check, re-checked in the background once it is due
//! (a failure sooner than a success). A cluster never checked is checked now when one cluster
//! is asked for (`wait`), else in the background and shown `Unknown` meanwhile, so that a list
//! never waits for every cluster.

use std::sync::Arc;

use serde_json::{Value, json};

use super::lookup::Entry;
use crate::clusters::{Checked, ClusterError, Clusters, Target};
use crate::error::AppError;
use crate::service::sensitive::unknown_state;
use crate::state::ServerState;

pub(crate) const NOT_CONTACTED: &str = "this server does not contact clusters (--cluster-access off)";

/// What an answer shows of the cluster's connection.
pub struct Shown {
    pub state: Value,
    pub server_version: Option<String>,
}

/// The connection of the cluster `entry`, as answered.
pub async fn shown(app: &ServerState, entry: &Entry, wait: bool) -> Shown {
    let Some(clusters) = &app.clusters else {
        return unknown(NOT_CONTACTED);
    };
    let target = match Target::read(&entry.value) {
        Ok(target) => target,
        Err(err) => return failed(entry, &err),
    };
    let namespaces = namespaces(&entry.value);
    let key = key(&target, &namespaces);
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

/// A cluster's `info` as answered: the controller's (`cached`) where it wrote one, else the
/// application count; and the connection state the more telling of the controller's and
/// tiphys's own: a failure seen by either (the controller's cache can be stale after a token is
/// revoked; tiphys's check is narrower than the controller's sync), else a success, else the
/// controller's `Unknown` and its reason. Equal ones: the controller's, as argocd-server
/// answers. The server version is the controller's, else the one tiphys's check learnt.
pub fn combine(cached: Option<&Value>, own: Shown, applications: i64) -> Value {
    let rank = |state: Option<&Value>| match state.and_then(|s| s.get("status")).and_then(Value::as_str) {
        Some("Failed") => 2,
        Some("Successful") => 1,
        _ => 0,
    };
    let mut info = cached
        .cloned()
        .unwrap_or_else(|| json!({"applicationsCount": applications}));
    let controllers = cached.and_then(|c| c.get("connectionState"));
    if cached.is_none() || rank(Some(&own.state)) > rank(controllers) {
        info["connectionState"] = own.state;
    }
    let has_version = info
        .get("serverVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if let (false, Some(version)) = (has_version, own.server_version) {
        info["serverVersion"] = Value::String(version);
    }
    info
}

/// Create asks the cluster its version before it stores it, as upstream's does
/// (server/cluster/cluster.go): a cluster these credentials cannot reach is refused, saying why,
/// and one that answers starts Successful. Nothing is asked with `--cluster-access off`.
pub async fn reach_before_create(app: &ServerState, value: &Value) -> Result<(), AppError> {
    let Some(clusters) = &app.clusters else {
        return Ok(());
    };
    let target = Target::read(value).map_err(|e| AppError::InvalidArgument(e.to_string()))?;
    let server = crate::service::redact::url(&target.server);
    let why = match clusters.server_version(&target).await {
        Ok(reached) => {
            record(app, value, &target, reached);
            return Ok(());
        }
        Err(err) => err,
    };
    let message = format!(
        "cannot register cluster {server}: asking its version failed: {}",
        masked(value, &why)
    );
    Err(refusal(&why, message))
}

/// A cluster that could not be used, in the error table: its settings are the caller's to
/// fix, an unreachable one may come back, the rest (credentials, certificate) is a
/// precondition the cluster does not meet.
pub fn refusal(err: &ClusterError, message: String) -> AppError {
    match err {
        ClusterError::Config(_) => AppError::InvalidArgument(message),
        ClusterError::Refused(_) | ClusterError::Unreachable(_) | ClusterError::Timeout(_) => {
            AppError::Unavailable(message)
        }
        _ => AppError::FailedPrecondition(message),
    }
}

/// Records that `target`, the connection of the cluster `value`, was just reached (a Create, a
/// rotated token): it starts Successful.
pub fn record(app: &ServerState, value: &Value, target: &Target, reached: crate::clusters::Reached) {
    if let Some(clusters) = &app.clusters {
        let key = key(target, &namespaces(value));
        clusters.states().record(&key, Ok(reached), None);
    }
}

/// Forgets what tiphys keeps of the cluster `entry` (InvalidateCache), so that the next answer
/// checks it anew.
pub fn forget(app: &ServerState, entry: &Entry) {
    if let (Some(clusters), Ok(target)) = (&app.clusters, Target::read(&entry.value)) {
        clusters.forget(&target.server);
        clusters.states().forget(&key(&target, &namespaces(&entry.value)));
    }
}

/// Checks are kept by the connection settings and the namespaces as well as the server, so that
/// a cluster whose credentials change (through the API or its Secret) is checked anew, and so is
/// one whose namespaces change: the check asks a namespaced cluster for its first namespace's
/// pods, where a cluster-wide one is asked for its namespaces.
fn key(target: &Target, namespaces: &[String]) -> String {
    use std::hash::BuildHasher as _;
    let hash = foldhash::fast::FixedState::with_seed(0).hash_one((target, namespaces));
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
    format!(
        "Unable to connect to cluster {}: {}",
        crate::service::redact::url(&entry.server),
        masked(&entry.value, err)
    )
}

/// `err`'s message with the cluster's token and password masked, should a library quote them.
fn masked(cluster: &Value, err: &ClusterError) -> String {
    let config = cluster.get("config");
    let secret = |field: &str| {
        config
            .and_then(|c| c.get(field))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    err.message_without(&[secret("bearerToken"), secret("password")])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(status: &str, version: Option<&str>) -> Shown {
        Shown {
            state: json!({"status": status, "message": format!("own {status}")}),
            server_version: version.map(str::to_owned),
        }
    }

    #[test]
    fn a_failure_seen_by_either_wins_then_a_success_then_the_controllers_word() {
        let controller = |status: &str| {
            json!({"connectionState": {"status": status, "message": format!("controller {status}")},
                   "serverVersion": "1.34", "applicationsCount": 2, "cacheInfo": {"resourcesCount": 9}})
        };
        let state = |info: &Value| info["connectionState"]["message"].as_str().unwrap().to_owned();
        for (cached, mine, shown) in [
            ("Successful", "Failed", "own Failed"),
            ("Failed", "Successful", "controller Failed"),
            ("Failed", "Failed", "controller Failed"),
            ("Unknown", "Successful", "own Successful"),
            ("Successful", "Successful", "controller Successful"),
            ("Unknown", "Unknown", "controller Unknown"),
        ] {
            let info = combine(Some(&controller(cached)), own(mine, Some("1.99")), 5);
            assert_eq!(state(&info), shown, "{cached} / {mine}");
            assert_eq!(info["serverVersion"], "1.34", "the controller's version");
            assert_eq!(info["applicationsCount"], 2);
            assert_eq!(info["cacheInfo"]["resourcesCount"], 9);
        }
        let info = combine(None, own("Successful", Some("1.99")), 5);
        assert_eq!(
            info,
            json!({"applicationsCount": 5, "serverVersion": "1.99",
                                "connectionState": {"status": "Successful", "message": "own Successful"}})
        );
        let info = combine(
            Some(&json!({"connectionState": {"status": "Unknown"}})),
            own("Successful", Some("1.99")),
            0,
        );
        assert_eq!(
            info["serverVersion"], "1.99",
            "no version from the controller: tiphys's"
        );
    }

    #[test]
    fn a_check_is_kept_per_credentials_and_namespaces() {
        let cluster = |token: &str, namespaces: Value| {
            json!({"server": "https://127.0.0.1:6443", "namespaces": namespaces,
                   "config": {"bearerToken": token}})
        };
        let key_of = |value: &Value| key(&Target::read(value).unwrap(), &namespaces(value));
        let first = key_of(&cluster("a", json!([])));
        assert_eq!(
            first,
            key_of(&cluster("a", json!([]))),
            "the same settings: one check"
        );
        assert_eq!(
            first,
            key_of(&cluster("a", json!([""]))),
            "an empty name is no namespace"
        );
        let others = [
            key_of(&cluster("b", json!([]))),
            key_of(&cluster("a", json!(["team-a"]))),
            key_of(&cluster("a", json!(["team-b"]))),
            key_of(&cluster("a", json!(["team-a", "team-b"]))),
        ];
        for (i, other) in others.iter().enumerate() {
            assert_ne!(&first, other, "setting {i} is checked anew");
            assert!(
                other.starts_with("https://127.0.0.1:6443\u{0}"),
                "the server leads: {other}"
            );
        }
        assert_ne!(others[1], others[2]);
        assert_ne!(others[1], others[3]);
    }
}
