//! Get with `refresh`, beside Argo CD's application-controller: as upstream's `Get`
//! (server/application/application.go) with `RefreshApp` (util/argo/argo.go), the request is
//! the `argocd.argoproj.io/refresh` annotation (and `argocd.argoproj.io/hydrate`), and the
//! answer is the first later version of the application from which the controller has removed
//! it, having compared the application again.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::AppError;
use crate::registry::{Change, DocRef, Kind};
use crate::state::ServerState;

const REFRESH: &str = "argocd.argoproj.io/refresh";
const HYDRATE: &str = "argocd.argoproj.io/hydrate";
/// How long a refresh waits for the controller (upstream waits for the request's deadline).
const REFRESH_WAIT: Duration = Duration::from_secs(60);

/// `doc` once the controller has answered a refresh of `kind` (`hard`, or else `normal`).
pub async fn refreshed(state: &ServerState, doc: &DocRef, kind: &str) -> Result<DocRef, AppError> {
    let kind = if kind == "hard" { "hard" } else { "normal" };
    let registry = &state.registry;
    // Subscribed before the write, so that the controller's answer cannot slip by.
    let mut events = registry
        .watch(Kind::Application, registry.revision_of(Kind::Application))
        .await
        .map_err(|e| AppError::Unavailable(e.to_string()))?;
    let asked = super::rechecked(|| async {
        let latest = registry
            .get(&doc.key)
            .ok_or_else(|| AppError::NotFound(format!("application {:?} not found", doc.key.name)))?;
        let mut value = latest.value();
        let meta = value
            .as_object_mut()
            .map(|o| o.entry("metadata").or_insert_with(|| Value::Object(Map::new())));
        if let Some(meta) = meta.and_then(Value::as_object_mut) {
            let annotations = meta
                .entry("annotations")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(annotations) = annotations.as_object_mut() {
                annotations.insert(REFRESH.to_owned(), Value::from(kind));
                annotations.insert(HYDRATE.to_owned(), Value::from("normal"));
            }
        }
        let change = Change::Update {
            key: latest.key.clone(),
            value,
            expect: Some(latest.rv),
        };
        let written = registry.apply_one(change).await?;
        Ok(written.map_or(latest.rv, |d| d.rv))
    })
    .await?;
    let answered = async {
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| AppError::Unavailable(e.to_string()))?;
            if event.doc.key != doc.key || event.doc.rv <= asked {
                continue;
            }
            if event.kind == crate::registry::EventType::Deleted {
                return Err(AppError::NotFound(format!(
                    "application {:?} was deleted",
                    doc.key.name
                )));
            }
            let refreshed = event.doc.value();
            if refreshed["metadata"]["annotations"].get(REFRESH).is_none() {
                return Ok(std::sync::Arc::clone(&event.doc));
            }
        }
        Err(AppError::Unavailable("the server is stopping".to_owned()))
    };
    tokio::time::timeout(REFRESH_WAIT, answered)
        .await
        .map_err(|_| AppError::Unavailable("application refresh deadline exceeded".to_owned()))?
}
