//! Watch, with the applications watch's semantics (`application/watch.rs`): without a
//! resourceVersion, or for one named set, an `ADDED` per matching set first; then live changes,
//! RBAC checked per event, ending with the caller's session.

use std::sync::Arc;

use serde::Deserialize;

use super::{RESOURCE, doc_object, listed_namespace, shown};
use crate::error::AppError;
use crate::registry::{DocRef, Kind};
use crate::service::access::Access;
use crate::service::application::selector::Selector;
use crate::service::application::watch::{events, subscribe};
use crate::service::{Ctx, Reply};

/// `ApplicationSetWatchQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchQuery {
    pub name: String,
    pub projects: Vec<String>,
    pub selector: String,
    pub app_set_namespace: String,
    pub resource_version: String,
}

pub async fn watch(ctx: Ctx, q: WatchQuery) -> Result<Reply, AppError> {
    ctx.caller.require()?;
    let selector = Selector::parse(&q.selector)?;
    let ns = listed_namespace(&q.app_set_namespace)?;
    let (initial, sub) = subscribe(
        &ctx,
        Kind::ApplicationSet,
        &q.resource_version,
        !q.name.is_empty(),
    )
    .await?;
    let state = Arc::clone(&ctx.app);
    let caller = ctx.caller.clone();
    let visible: Arc<dyn Fn(&DocRef) -> bool + Send + Sync> = Arc::new(move |doc: &DocRef| {
        shown(&state, ns.as_deref(), &doc.key.namespace)
            && (q.name.is_empty() || doc.key.name == q.name)
            && (q.projects.is_empty() || q.projects.contains(&doc.summary.project))
            && selector.matches(&doc.summary.labels)
            && Access::hidden(RESOURCE, "get").allows(&state, &caller.principal, &doc_object(&state, doc))
    });
    Ok(events(&ctx, initial, sub, visible, "applicationSet"))
}
