//! An application's deep links and its resources' (argocd-cm `application.links` and
//! `resource.links`), as upstream's server/application/application.go serves them (ListLinks,
//! ListResourceLinks, getObjectsForDeepLinks); the links themselves are made by
//! [`crate::service::deeplinks`].
//!
//! Both need `applications, get`. A resource's links need the resource in the application's
//! tree, read live from the destination (as GetResource reads it), except the application
//! itself (`argoproj.io/Application` named as the application), which is answered from the
//! store as upstream answers it. The cluster is the destination's, when one is configured and
//! the project permits it (upstream leaves the cluster out, and for a resource the project
//! too, when the destination names no known cluster).

use serde::Deserialize;
use serde_json::Value;

use super::authorized;
use super::live::{ResourceRequest, authorize, live_object, masked};
use crate::error::AppError;
use crate::registry::{DocRef, Key, Kind};
use crate::service::cluster::lookup::{self, Lookup};
use crate::service::deeplinks::{self, Objects, sanitized_cluster, sanitized_project};
use crate::service::project_rules::ProjectRules;
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// `ListAppLinksRequest` (its application namespace is `namespace`).
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct LinksQuery {
    pub name: String,
    pub namespace: String,
    pub project: String,
}

/// The application's links, over `app` and `cluster`.
pub async fn list_links(ctx: Ctx, q: LinksQuery) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorized(&ctx.app, principal, &q.namespace, &q.name, &q.project, "get")?;
    let settings = ctx.app.config.peek();
    let app = doc.value();
    let (cluster, _) = cluster_and_project(&ctx.app, &doc)?;
    let objects = Objects {
        app: Some(app),
        cluster,
        ..Objects::default()
    };
    Ok(Reply::Message(deeplinks::evaluate(
        &settings.deep_links.application,
        objects,
        &doc.key.name,
    )))
}

/// The links of one of the application's resources, over `resource`, `app`, `cluster` and
/// `project`.
pub async fn list_resource_links(ctx: Ctx, q: ResourceRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let doc = authorize(&ctx.app, principal, &q, "get")?;
    let app = doc.value();
    let itself = q.kind == "Application" && q.group == "argoproj.io" && q.name == q.resource_name;
    let resource = if itself {
        app.clone()
    } else {
        masked(&ctx.app, live_object(&ctx.app, &doc, &q).await?)
    };
    let name = resource
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (cluster, project) = cluster_and_project(&ctx.app, &doc)?;
    let objects = Objects {
        resource: Some(resource),
        app: Some(app),
        cluster,
        project,
    };
    let settings = ctx.app.config.peek();
    Ok(Reply::Message(deeplinks::evaluate(
        &settings.deep_links.resource,
        objects,
        &name,
    )))
}

/// The destination cluster and the project, as the links see them: both absent when the
/// destination names no configured cluster; an error when the project does not permit it.
fn cluster_and_project(
    state: &ServerState,
    doc: &DocRef,
) -> Result<(Option<Value>, Option<Value>), AppError> {
    let app = doc.value();
    let dest = |f: &str| {
        app.pointer(&format!("/spec/destination/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let found = Lookup::from_parts(None, &dest("server"), &dest("name"))?
        .and_then(|lookup| lookup::find(state, &lookup));
    let Some(entry) = found else {
        tracing::warn!(application = %doc.key.name, "deep links: cannot validate the destination cluster");
        return Ok((None, None));
    };
    let project_name = &doc.summary.project;
    let ns = &state.namespace;
    let rules = ProjectRules::load(&state.registry, ns, project_name)?;
    rules
        .check_destination(project_name, &entry.server, &entry.name, &dest("namespace"))
        .map_err(|_| AppError::FailedPrecondition("error getting destination cluster".to_owned()))?;
    let project = state
        .registry
        .get(&Key::new(Kind::AppProject, ns, project_name))
        .map(|p| sanitized_project(p.value()));
    Ok((Some(sanitized_cluster(&entry.value)), project))
}
