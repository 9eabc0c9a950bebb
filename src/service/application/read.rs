//! List and Get: the applications a caller may see, filtered as the query asks.

use super::pages;
use super::query::{Filter, PageParams};
use super::{
    AppQuery, RESOURCE, doc_object, namespace_of, not_served, rbac_object, refresh, resources, served,
};
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::HIDDEN_DENIAL;
use crate::registry::{DocRef, Key, Kind};
use crate::service::access::{Access, Missing};
use crate::service::limits::check_namespace;
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

pub async fn list(ctx: Ctx, q: AppQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let filter = Filter::new(&ctx.app, &q)?;
    if let Some(params) = PageParams::parse(&q)? {
        return pages::list(&ctx, principal, &filter, &params);
    }
    let (resource_version, docs) = ctx.app.registry.list(Kind::Application);
    let items = Access::hidden(RESOURCE, "get").visible(
        &ctx.app,
        principal,
        docs.into_iter().filter(|doc| filter.matches(doc)),
        |doc| doc_object(&ctx.app, doc),
    );
    Ok(Reply::List {
        resource_version,
        items,
        page: None,
    })
}

/// The application `name` in `app_ns` if the caller may perform `action` on it. See the module
/// comment for what a missing or hidden application answers.
pub(super) fn authorized(
    state: &ServerState,
    principal: &Principal,
    app_ns: &str,
    name: &str,
    project_hint: &str,
    action: &str,
) -> Result<DocRef, AppError> {
    let ns = namespace_of(state, app_ns);
    if !app_ns.is_empty() {
        check_namespace(&ns)?;
    }
    if !served(state, &ns) {
        // Upstream answers a namespace it does not serve as it answers a hidden application,
        // whoever asks and whatever project they name.
        let project = if project_hint.is_empty() {
            "*"
        } else {
            project_hint
        };
        let object = rbac_object(&state.namespace, project, &ns, name);
        return Err(not_served(state, principal, &object, HIDDEN_DENIAL.to_owned()));
    }
    // An application outside the project the caller named is answered as missing: the answer
    // must not depend on whether a same-named application exists elsewhere (SEC-13).
    let found = state
        .registry
        .get(&Key::new(Kind::Application, &ns, name))
        .filter(|doc| project_hint.is_empty() || doc.summary.project == project_hint);
    Access::hidden(RESOURCE, action).load(
        state,
        principal,
        found,
        |doc| doc_object(state, doc),
        || {
            let project = if project_hint.is_empty() {
                "*"
            } else {
                project_hint
            };
            Missing::at(
                rbac_object(&state.namespace, project, &ns, name),
                AppError::NotFound(format!("applications.argoproj.io \"{name}\" not found")),
            )
        },
    )
}

pub async fn get(ctx: Ctx, q: AppQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let project = q
        .projects
        .first()
        .or(q.project.first())
        .cloned()
        .unwrap_or_default();
    let doc = authorized(&ctx.app, principal, &q.app_namespace, &q.name, &project, "get")?;
    let doc = match &q.refresh {
        Some(kind) if ctx.app.registry.beside_controller() => {
            refresh::refreshed(&ctx.app, &doc, kind).await?
        }
        _ => doc,
    };
    Ok(resources::with_tree_health(&ctx.app, doc).await)
}
