//! A cluster's `info` as the application-controller last wrote it to its cache in Redis
//! (`cluster|info|<server>`: connection state, server version, cache size and sync time, and
//! the count of applications), which upstream's argocd-server answers in every cluster
//! (`toAPIResponse` in server/cluster/cluster.go), copying the connection state and version
//! into the deprecated top-level fields.

use serde_json::Value;

use crate::state::ServerState;

/// The controller's info of each of `servers` (in their order), or `None` where there is none:
/// no controller cache, nothing written for that server, or Redis unreachable (logged; upstream
/// ignores that error too, and the cluster is answered without the info).
pub(crate) async fn load(state: &ServerState, servers: &[&str]) -> Vec<Option<Value>> {
    let none = || vec![None; servers.len()];
    let Some(cache) = state
        .controller_cache
        .as_ref()
        .filter(|_| state.registry.beside_controller())
    else {
        return none();
    };
    match cache.cluster_infos(servers).await {
        Ok(infos) => infos,
        Err(e) => {
            tracing::warn!("clusters answered without the controller's info: {e}");
            none()
        }
    }
}

/// Puts `info` into a cluster's answer `object`, with its connection state and server version
/// in the deprecated fields beside it.
pub(crate) fn apply(object: &mut serde_json::Map<String, Value>, info: &Value) {
    let field = |name: &str| info.get(name).cloned();
    object.insert(
        "connectionState".to_owned(),
        field("connectionState").unwrap_or_else(|| Value::Object(serde_json::Map::new())),
    );
    match field("serverVersion") {
        Some(version) => object.insert("serverVersion".to_owned(), version),
        None => object.remove("serverVersion"),
    };
    object.insert("info".to_owned(), info.clone());
}
