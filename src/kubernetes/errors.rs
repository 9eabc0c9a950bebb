//! What the API server's refusals mean to the registry: each becomes a [`StoreError`] whose
//! message names the API server, the verb and the resource, so that a ServiceAccount missing a
//! verb or an unreachable API server is clear from the first failed request.

use crate::store::{Expect, StoreError};

use super::Connection;

/// The request that failed, as RBAC names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
        }
    }
}

/// `err`, from `verb` on `resource` in `namespace`, as the registry reports it. A conflict
/// (409 Conflict) is [`StoreError::Conflict`], so that the registry's write loop catches up and
/// plans again as it does on etcd; a refusal (401, 403) says which verb on which resource the
/// server's identity lacks; a failure to reach the server is [`StoreError::Unavailable`].
/// An empty `namespace` is a cluster-wide request (`--application-namespaces`).
pub fn store_error(
    err: kube::Error,
    connection: &Connection,
    verb: Verb,
    resource: &str,
    namespace: &str,
) -> StoreError {
    let url = &connection.url;
    let verb = verb.as_str();
    let place = if namespace.is_empty() {
        "in all namespaces (cluster-wide)".to_owned()
    } else {
        format!("in namespace {namespace}")
    };
    match err {
        kube::Error::Api(status) => match status.code {
            409 if status.reason == "Conflict" => StoreError::Conflict {
                key: format!("{resource} {namespace}"),
                expected: Expect::Any,
                actual: None,
            },
            401 => StoreError::Forbidden(format!(
                "the Kubernetes API server at {url} does not accept this server's credentials \
                 (to {verb} {resource} {place}): {}",
                status.message
            )),
            403 => StoreError::Forbidden(format!(
                "this server's identity may not {verb} {resource} {place} on the \
                 Kubernetes API server at {url}: grant it that verb (argocd-server's Role and \
                 ClusterRole have it): {}",
                status.message
            )),
            code if code >= 500 || code == 429 => StoreError::Unavailable(format!(
                "the Kubernetes API server at {url} could not {verb} {resource} \
                 {place} ({code} {}): {}",
                status.reason, status.message
            )),
            code => StoreError::Invalid(format!(
                "the Kubernetes API server at {url} refused to {verb} {resource} \
                 {place} ({code} {}): {}",
                status.reason, status.message
            )),
        },
        other => StoreError::Unavailable(format!(
            "the Kubernetes API server at {url} is unreachable (to {verb} {resource} \
             {place}): {other}"
        )),
    }
}
