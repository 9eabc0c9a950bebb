//! What the services of objects holding credentials (clusters, repositories, credential
//! templates) share: the "not found" answer, registry errors that never echo a
//! URL, canonical Go-style JSON for answers built by hand, and the URL rules.
//!
//! These objects are never answered as stored (`Reply::Doc`/`Reply::List` send the stored
//! JSON): answers are built with [`canonical`] after `crate::service::redact`.

use serde_json::Value;

use super::{Ctx, Reply, redact};
use crate::state::ServerState;

use crate::error::AppError;
use crate::registry::{Change, DocRef, Kind, RegistryError};
use crate::schema::Schema;

/// Full protobuf names of the messages these services answer with.
pub const CLUSTER: &str = Kind::Cluster.message();
pub const CLUSTER_LIST: &str = "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.ClusterList";
pub const REPOSITORY: &str = Kind::Repository.message();
pub const REPOSITORY_LIST: &str =
    "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepositoryList";
pub const REPO_CREDS: &str = Kind::RepoCreds.message();
pub const REPO_CREDS_LIST: &str =
    "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.RepoCredsList";

/// What a lookup answers, to a caller allowed to know it, when nothing matched (see
/// `service::access` for everyone else).
pub fn not_found(what: &str) -> AppError {
    AppError::NotFound(format!("{what} not found"))
}

/// A registry failure as the caller sees it: the registry's own messages name the key, a URL
/// here, so they are replaced with ones that name `what` ("cluster", "repository", …) only.
pub fn store_error(what: &str, err: RegistryError) -> AppError {
    match err {
        RegistryError::NotFound(_) => AppError::NotFound(format!("{what} not found")),
        RegistryError::AlreadyExists(_) => AppError::AlreadyExists(format!("{what} already exists")),
        RegistryError::Conflict { .. } => AppError::Aborted(format!(
            "the {what} was changed by someone else: get the latest version and apply the change again"
        )),
        // Schema errors name a field and a JSON type, never a value; store errors name no key.
        other => AppError::from(other),
    }
}

/// Applies one change; the new document (`None` after a deletion).
pub async fn write(state: &ServerState, what: &str, change: Change) -> Result<Option<DocRef>, AppError> {
    state
        .registry
        .apply_one(change)
        .await
        .map_err(|e| store_error(what, e))
}

/// `value` as message `message` would be encoded in REST: unknown fields dropped, zero values
/// omitted and always-present fields added, exactly as a stored document looks.
pub fn canonical(message: &str, value: &Value) -> Result<Value, AppError> {
    let schema = Schema::get();
    let desc = schema
        .message(message)
        .map_err(|e| AppError::Internal(e.into()))?;
    let msg = schema
        .from_json(&desc, value)
        .map_err(|e| AppError::InvalidArgument(e.to_string()))?;
    Ok(schema.to_json(&msg))
}

/// `{metadata: {resourceVersion}, items}` of list message `message`, canonical.
pub fn list(message: &str, resource_version: u64, items: Vec<Value>) -> Result<Value, AppError> {
    canonical(
        message,
        &serde_json::json!({
            "metadata": {"resourceVersion": resource_version.to_string()},
            "items": items,
        }),
    )
}

/// An empty list of message `message` as of now, for a caller who has a session: the answer
/// to listing write repositories and write credentials, which tiphys never keeps.
pub fn none_kept(ctx: &Ctx, message: &str) -> Result<Reply, AppError> {
    ctx.caller.require()?;
    Ok(Reply::Message(list(
        message,
        ctx.app.registry.revision(),
        Vec::new(),
    )?))
}

/// The connection state of an object tiphys never connects to: no attempt, so no `attemptedAt`.
pub fn unknown_state(why: &str) -> Value {
    serde_json::json!({"status": "Unknown", "message": why})
}

/// URLs with a password in them are refused: the URL is the object's identity, shown in
/// every list and used as its RBAC object, so a password there would be everywhere.
pub fn check_no_password(what: &str, url: &str) -> Result<(), AppError> {
    if redact::has_password(url) {
        Err(AppError::InvalidArgument(format!(
            "invalid {what}: the URL holds a password; give credentials in their own fields"
        )))
    } else {
        Ok(())
    }
}

/// Whether two values are the same once stored as `message`.
pub fn same_as_stored(message: &str, stored: &Value, new: &Value) -> Result<bool, AppError> {
    Ok(canonical(message, stored)? == canonical(message, new)?)
}

/// A request's JSON object field as a mutable map, creating it when missing.
pub fn object_mut(value: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    if !value.is_object() {
        *value = Value::Object(serde_json::Map::new());
    }
    value.as_object_mut()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::{Key, Kind};

    #[test]
    fn registry_errors_never_name_the_url() {
        let key = Key::new(Kind::Repository, "", "https://bot@git.example/secret-name.git");
        for err in [
            RegistryError::NotFound(key.clone()),
            RegistryError::AlreadyExists(key.clone()),
            RegistryError::Conflict {
                key,
                expected: 1,
                actual: 2,
            },
        ] {
            let text = store_error("repository", err).to_string();
            assert!(!text.contains("secret-name"), "{text}");
            assert!(text.contains("repository"), "{text}");
        }
    }

    #[test]
    fn canonical_adds_always_present_fields() {
        let value = canonical(CLUSTER, &json!({"server": "https://x", "bogus": 1})).unwrap();
        assert_eq!(value["server"], "https://x");
        assert_eq!(value["name"], "");
        assert!(value["info"]["connectionState"].is_object(), "{value}");
        assert_eq!(value["info"]["applicationsCount"], 0);
        assert!(value.get("bogus").is_none());
        let list = list(REPOSITORY_LIST, 7, Vec::new()).unwrap();
        assert_eq!(list["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn passwords_in_urls_are_refused() {
        assert!(check_no_password("repository", "https://u:p@h/x").is_err());
        assert!(check_no_password("repository", "https://u@h/x").is_ok());
        let err = check_no_password("repository", "https://u:hunter2@h/x").unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
    }
}
