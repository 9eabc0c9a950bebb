//! `application.ApplicationService`: Applications in the registry, authorised per object with
//! upstream's RBAC objects (`<project>/<name>`, or `<project>/<namespace>/<name>` outside the
//! server's namespace) and checked against their project's restrictions.
//!
//! A missing application and one the caller may not see give the same answer (SEC-13): a
//! caller who could see an application of that name gets "not found", anyone else gets the
//! same fixed "permission denied" as for an existing application they may not see.

mod actions;
mod deletion;
mod impersonation;
mod links;
mod live;
mod logs;
mod masking;
mod mutation;
mod pages;
mod query;
mod read;
mod refresh;
mod rendered;
mod resources;
pub(crate) mod selector;
mod server_side_diff;
pub mod source;
mod sync;
mod validation;
pub(crate) mod watch;
mod windows;
mod write;

use serde::Deserialize;

pub use self::actions::{list_resource_actions, run_resource_action, run_resource_action_v2};
pub use self::links::{list_links, list_resource_links};
pub use self::live::{delete_resource, get_resource, list_events, patch_resource};
pub use self::logs::pod_logs;
use self::query::Filter;
use self::read::authorized;
pub use self::read::{get, list};
pub use self::resources::{ResourcesQuery, managed_resources, resource_tree, watch_resource_tree};
pub use self::server_side_diff::{DiffQuery, server_side_diff};
pub use self::sync::{rollback, sync, terminate_operation};
use self::validation::{AppView, client_fields, default_project, keep_server_fields, validate};
pub use self::watch::watch;
use self::windows::assigned_windows;
pub use self::windows::{SyncWindowsQuery, sync_windows};
pub use self::write::{
    CreateRequest, DeleteRequest, PatchRequest, UpdateRequest, UpdateSpecRequest, create, delete, patch,
    update, update_spec,
};
use crate::error::AppError;
use crate::principal::Principal;
use crate::rbac::Refusal;
use crate::registry::DocRef;

use crate::state::ServerState;

const RESOURCE: &str = "applications";
/// How long a write whose application other writes keep changing between its check and its
/// commit goes on trying, and how many attempts it makes at most. Upstream's `updateApp`
/// (server/application/application.go) tries ten times against the API server; a writer here
/// can lose more often in a row (a busy writer's commits are grouped), so the bound is in time.
const RECHECK_FOR: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_ATTEMPTS: u32 = 1000;
/// The longest pause between attempts.
const MAX_PAUSE_MS: u64 = 8;

/// Runs `attempt` (read the application, authorize against what it read, write on the
/// condition that it is still that version) again when another write came in between, so the
/// check always judges the very object the write replaces: a move into another project cannot
/// slip between them.
pub(crate) async fn rechecked<T, Fut>(mut attempt: impl FnMut() -> Fut) -> Result<T, AppError>
where
    Fut: Future<Output = Result<T, AppError>>,
{
    let deadline = tokio::time::Instant::now() + RECHECK_FOR;
    let mut tried = 0;
    loop {
        tried += 1;
        match attempt().await {
            // A short random pause lets a writer that keeps winning the race finish its turn,
            // so the loser's next read is not already stale.
            Err(AppError::Aborted(_)) if tried < MAX_ATTEMPTS && tokio::time::Instant::now() < deadline => {
                let jitter = u64::from(crate::random::bytes(1)[0]) % MAX_PAUSE_MS + 1;
                tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
            }
            done => return done,
        }
    }
}

/// `ApplicationQuery` (List, Get, Watch).
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct AppQuery {
    pub name: String,
    pub projects: Vec<String>,
    pub project: Vec<String>,
    pub resource_version: String,
    pub selector: String,
    pub repo: String,
    pub app_namespace: String,
    /// Get: `normal` or `hard` asks the controller to compare again, and answers once it has.
    pub refresh: Option<String>,
    /// tiphys's pages, filters and facets (see `query.rs`).
    pub limit: i64,
    #[serde(rename = "continue")]
    pub continue_token: String,
    pub sort: String,
    pub filter: Vec<String>,
    pub search: String,
    pub facets: Vec<String>,
}

/// The RBAC object of an application (upstream's `RBACName`).
pub fn rbac_object(server_ns: &str, project: &str, app_ns: &str, name: &str) -> String {
    if app_ns.is_empty() || app_ns == server_ns {
        format!("{project}/{name}")
    } else {
        format!("{project}/{app_ns}/{name}")
    }
}

fn doc_object(state: &ServerState, doc: &DocRef) -> String {
    rbac_object(
        &state.namespace,
        &doc.summary.project,
        &doc.key.namespace,
        &doc.key.name,
    )
}

fn namespace_of(state: &ServerState, requested: &str) -> String {
    if requested.is_empty() {
        state.namespace.clone()
    } else {
        requested.to_owned()
    }
}

/// Whether applications in `ns` are served: the control namespace, or one that
/// `--application-namespaces` enables (upstream's `isNamespaceEnabled`).
pub(crate) fn served(state: &ServerState, ns: &str) -> bool {
    state.app_namespaces.enabled(ns, &state.namespace)
}

/// The refusal of an application in a namespace that is not served, recorded once; `message`
/// is upstream's answer where it refuses the same request.
fn not_served(state: &ServerState, principal: &Principal, object: &str, message: String) -> AppError {
    super::access::refuse(state, principal, Refusal::AppNamespace, object, message)
}
