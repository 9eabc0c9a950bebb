//! The client of destination clusters: what tiphys itself asks the clusters applications deploy
//! to, with the credentials of their cluster Secrets (`config.rs`, `exec.rs`), every call bounded
//! in time and its failures named (`error.rs`).
//!
//! Today that is the connection check behind a cluster's `connectionState` and
//! `serverVersion`: the server's version (`/version`, as `major.minor` like the controller's
//! `GetServerVersion` in gitops-engine), then one authorised read, so that a token the cluster
//! rejects or an identity without rights shows as Failed with the reason. When the controller
//! runs, its view of the cluster (its cache in Redis) is the better source; this is what a
//! server without one, or before the controller has looked, can say.

pub mod config;
pub mod error;
pub mod exec;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};

pub use self::config::{IN_CLUSTER_SERVER, Target};
pub use self::error::ClusterError;
use self::exec::{Credential, ExecCache, ExecConfig};
use crate::checks::Checks;

/// Limits of the cluster client (`--cluster-*` flags).
#[derive(Debug, Clone)]
pub struct Limits {
    /// One call's bound, credentials included.
    pub timeout: Duration,
    /// An exec provider's run at most.
    pub exec_timeout: Duration,
    /// How old a successful connection state may get before it is checked again.
    pub check_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            exec_timeout: Duration::from_secs(60),
            check_interval: Duration::from_secs(180),
        }
    }
}

/// What a successful check learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    /// `major.minor`, as Argo CD shows it.
    pub server_version: String,
}

/// One check's outcome.
pub type Checked = crate::checks::Checked<Reached, ClusterError>;

/// A client built for a target, with the exec credential it carries (if any).
type Built = (kube::Client, Option<Credential>);

/// The cluster client: one per server, shared by every call.
pub struct Clusters {
    limits: Limits,
    /// The API server of `--kube`: the in-cluster destination when tiphys runs with one.
    in_cluster: Option<kube::Client>,
    /// Its configuration, for clients that impersonate someone there.
    in_cluster_config: Option<Box<kube::Config>>,
    exec: ExecCache,
    clients: Mutex<HashMap<Target, Built>>,
    states: Checks<Reached, ClusterError>,
}

impl std::fmt::Debug for Clusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clusters")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Clusters {
    /// `in_cluster`: the client of the API server tiphys keeps its objects on, if it does.
    pub fn new(limits: Limits, in_cluster: Option<kube::Client>) -> Self {
        Self {
            exec: ExecCache::new(limits.exec_timeout),
            states: Checks::new(limits.check_interval),
            clients: Mutex::new(HashMap::new()),
            in_cluster,
            in_cluster_config: None,
            limits,
        }
    }

    /// The configuration of the in-cluster client, so that calls there can impersonate.
    #[must_use]
    pub fn with_in_cluster_config(mut self, config: Option<Box<kube::Config>>) -> Self {
        self.in_cluster_config = config;
        self
    }

    /// The table of connection checks, by the caller's key.
    pub fn states(&self) -> &Checks<Reached, ClusterError> {
        &self.states
    }

    /// Forgets the clients and credentials kept for `server` (a caller asked to invalidate
    /// them); its checks are the caller's to forget.
    pub fn forget(&self, server: &str) {
        lock(&self.clients).retain(|target, _| {
            if target.server != server {
                return true;
            }
            if let Some(exec) = target.exec() {
                self.exec.forget(&exec);
            }
            false
        });
    }

    /// Runs `call` with a client of `target`, bounded by the call timeout. A cluster reached
    /// through an exec provider that answers 401 gets one more try with a new credential, as
    /// client-go's exec authenticator does.
    pub async fn call<T, F, Fut>(&self, target: &Target, call: F) -> Result<T, ClusterError>
    where
        F: Fn(kube::Client) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let bound = self.limits.timeout;
        let once = async |fresh: bool| -> Result<T, ClusterError> {
            let client = self.client_fresh(target, fresh).await?;
            call(client).await.map_err(|e| ClusterError::from_kube(&e))
        };
        tokio::time::timeout(bound, async {
            match once(false).await {
                Err(ClusterError::Unauthorized(_)) if target.exec().is_some() => once(true).await,
                other => other,
            }
        })
        .await
        .unwrap_or(Err(ClusterError::Timeout(bound)))
    }

    /// The cluster's version (`major.minor`), asked with its credentials: what upstream's
    /// Create asks before it stores a cluster.
    pub async fn server_version(&self, target: &Target) -> Result<Reached, ClusterError> {
        self.call(target, |client| async move {
            let version = client.apiserver_version().await?;
            Ok(Reached {
                server_version: format!("{}.{}", version.major, version.minor),
            })
        })
        .await
    }

    /// Checks that the cluster answers and accepts its credentials. `namespaces`: the
    /// cluster's, when it is limited to some; the authorised read is then made in the first.
    /// The caller records the outcome in [`Self::states`] under a key of its own.
    pub async fn check(&self, target: &Target, namespaces: &[String]) -> Result<Reached, ClusterError> {
        let outcome = self
            .call(target, |client| {
                let namespace = namespaces.first().cloned();
                async move {
                    let version = client.apiserver_version().await?;
                    // /version answers anyone the API server authenticates: an identity without
                    // rights shows only on a read that needs them.
                    let one = ListParams::default().limit(1);
                    match namespace {
                        None => Api::<Namespace>::all(client)
                            .list_metadata(&one)
                            .await
                            .map(drop)?,
                        Some(ns) => Api::<Pod>::namespaced(client, &ns)
                            .list_metadata(&one)
                            .await
                            .map(drop)?,
                    }
                    Ok(Reached {
                        server_version: format!("{}.{}", version.major, version.minor),
                    })
                }
            })
            .await;
        if let Err(err) = &outcome {
            tracing::info!(server = %crate::urlmask::mask(&target.server), "cluster check failed: {err}");
        }
        outcome
    }

    /// A client of `target`, for callers that make their own calls (bounded by them).
    pub async fn client(&self, target: &Target) -> Result<kube::Client, ClusterError> {
        self.client_fresh(target, false).await
    }

    /// A client of `target`: the one built before unless `fresh` or its exec credential is no
    /// longer fresh.
    async fn client_fresh(&self, target: &Target, fresh: bool) -> Result<kube::Client, ClusterError> {
        if target.is_in_cluster() {
            return match &target.impersonate {
                None => self.in_cluster_client().await,
                Some(user) => self.in_cluster_acting(target, user),
            };
        }
        let exec = target.exec();
        if fresh && let Some(exec) = &exec {
            self.exec.forget(exec);
        }
        let credential = match &exec {
            Some(exec) => Some(self.credential(exec).await?),
            None => None,
        };
        if let Some((client, used)) = lock(&self.clients).get(target)
            && *used == credential
        {
            return Ok(client.clone());
        }
        let config = target.kube_config(credential.as_ref()).await?;
        let client = kube::Client::try_from(config).map_err(|e| ClusterError::Config(e.to_string()))?;
        let mut clients = lock(&self.clients);
        if clients.len() >= 10_000 {
            clients.clear();
        }
        clients.insert(target.clone(), (client.clone(), credential));
        Ok(client)
    }

    async fn credential(&self, exec: &ExecConfig) -> Result<Credential, ClusterError> {
        Ok(self.exec.credential(exec, jiff::Timestamp::now()).await?)
    }

    /// A client of the cluster tiphys runs in that impersonates `user`, kept by `target`.
    fn in_cluster_acting(&self, target: &Target, user: &str) -> Result<kube::Client, ClusterError> {
        if let Some((client, _)) = lock(&self.clients).get(target) {
            return Ok(client.clone());
        }
        let mut config = match &self.in_cluster_config {
            Some(config) => (**config).clone(),
            None => kube::Config::incluster().map_err(|e| {
                ClusterError::NoInCluster(format!(
                    "{IN_CLUSTER_SERVER} is the cluster tiphys runs in, and it runs in none it can reach \
                     (no --kube, and no pod ServiceAccount: {e})"
                ))
            })?,
        };
        config.auth_info.impersonate = Some(user.to_owned());
        let client = kube::Client::try_from(config).map_err(|e| ClusterError::Config(e.to_string()))?;
        let mut clients = lock(&self.clients);
        if clients.len() >= 10_000 {
            clients.clear();
        }
        clients.insert(target.clone(), (client.clone(), None));
        Ok(client)
    }

    /// The cluster tiphys runs in: `--kube`'s API server, else the pod's ServiceAccount.
    async fn in_cluster_client(&self) -> Result<kube::Client, ClusterError> {
        if let Some(client) = &self.in_cluster {
            return Ok(client.clone());
        }
        let config = kube::Config::incluster().map_err(|e| {
            ClusterError::NoInCluster(format!(
                "{IN_CLUSTER_SERVER} is the cluster tiphys runs in, and it runs in none it can reach \
                 (no --kube, and no pod ServiceAccount: {e})"
            ))
        })?;
        kube::Client::try_from(config).map_err(|e| ClusterError::Config(e.to_string()))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
