//! The name of the Kubernetes Secret a cluster, repository or credential template was declared
//! in (`tiphys apply` of Argo CD's declarative Secrets), kept in the object's `secretName`
//! field: tiphys's own field 1000 of each message, which upstream's clients skip.
//!
//! The name makes such a Secret round-trip. An export gives it back under its name, and
//! re-applying it with another `server` or `url` moves the object it declared, as `kubectl
//! apply` updates the Secret the manifest names, instead of adding a second object and leaving
//! the first. The object's identity stays its URL (the store key, the RBAC object); the name is
//! a second key, unique within a kind.
//!
//! A write that names no Secret keeps the stored name: upstream's clients do not know the field
//! and send every update without it.

use serde_json::Value;

use super::access::Access;
use super::limits::check_secret_name;
use super::redact;
use super::sensitive::{object_mut, store_error};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key, Kind};
use crate::state::ServerState;

pub const FIELD: &str = "secretName";

/// The Secret name `value` carries ("" for none).
pub fn of(value: &Value) -> &str {
    value.get(FIELD).and_then(Value::as_str).unwrap_or_default()
}

/// A write's value, settled: its name checked, or the stored object's name when it has none.
pub fn settle(value: &mut Value, stored: Option<&Value>) -> Result<(), AppError> {
    let name = of(value);
    if !name.is_empty() {
        return check_secret_name(name);
    }
    let kept = stored.map(of).unwrap_or_default();
    if !kept.is_empty()
        && let Some(object) = object_mut(value)
    {
        object.insert(FIELD.to_owned(), Value::from(kept));
    }
    Ok(())
}

/// The stored object of `kind`, other than the one at `except`, declared under `name`. Writes
/// are rare and a kind holds few objects, so a scan is enough.
fn holder(state: &ServerState, kind: Kind, name: &str, except: &Key) -> Option<DocRef> {
    if name.is_empty() {
        return None;
    }
    let (_, docs) = state.registry.list(kind);
    docs.into_iter()
        .find(|doc| &doc.key != except && of(&doc.value()) == name)
}

fn taken(kind: Kind, name: &str, holder: &DocRef) -> AppError {
    AppError::AlreadyExists(format!(
        "secretName: the Secret {name:?} already declares the {} {}; two objects cannot share one Secret",
        kind.singular(),
        redact::url(&holder.key.name)
    ))
}

/// What a create (or upsert) at `key` does with the Secret its value names.
#[derive(Debug)]
pub enum Claim {
    /// No other object holds the name.
    Free,
    /// The object declared under the name lives at another URL: the write moves it to `key`.
    Moves(DocRef),
}

/// The claim of a create of `value` at `key`, where `existing` is the value stored there.
/// `visible` is asked before another object is said to hold the name (SEC-14).
pub fn claim(
    state: &ServerState,
    kind: Kind,
    key: &Key,
    value: &Value,
    existing: Option<&Value>,
    visible: impl FnOnce(&DocRef) -> Result<(), AppError>,
) -> Result<Claim, AppError> {
    let name = of(value);
    if name.is_empty() {
        return Ok(Claim::Free);
    }
    if let Some(stored) = existing.map(of).filter(|s| !s.is_empty() && *s != name) {
        return Err(AppError::AlreadyExists(format!(
            "secretName: the {} {} was declared in the Secret {stored:?}, so the Secret {name:?} cannot \
             declare it too: delete one of the two",
            kind.singular(),
            redact::url(&key.name)
        )));
    }
    let Some(holder) = holder(state, kind, name, key) else {
        return Ok(Claim::Free);
    };
    visible(&holder)?;
    if existing.is_some() {
        return Err(taken(kind, name, &holder));
    }
    Ok(Claim::Moves(holder))
}

/// For an update of the object at `key` to `value`: a new name must be free.
pub fn check_free(
    state: &ServerState,
    kind: Kind,
    key: &Key,
    value: &Value,
    visible: impl FnOnce(&DocRef) -> Result<(), AppError>,
) -> Result<(), AppError> {
    let name = of(value);
    match holder(state, kind, name, key) {
        Some(holder) => {
            visible(&holder)?;
            Err(taken(kind, name, &holder))
        }
        None => Ok(()),
    }
}

/// The refusal of a create without `upsert` that would move `from` to the URL `to`.
pub fn move_needs_upsert(kind: Kind, value: &Value, from: &DocRef, to: &str) -> AppError {
    AppError::InvalidArgument(format!(
        "the Secret {:?} declares the {} {}; use upsert to move it to {}",
        of(value),
        kind.singular(),
        redact::url(&from.key.name),
        redact::url(to)
    ))
}

/// Moves the object `from` to `key`, now holding `value`, in one commit that fails if `from`
/// changed meanwhile or `key` was taken; the object as written.
pub async fn move_to(
    state: &ServerState,
    what: &str,
    from: &DocRef,
    key: Key,
    value: Value,
) -> Result<Option<DocRef>, AppError> {
    let changes = vec![
        Change::Delete {
            key: from.key.clone(),
            expect: Some(from.rv),
        },
        Change::Create { key, value },
    ];
    let mut docs = state
        .registry
        .apply(changes)
        .await
        .map_err(|e| store_error(what, e))?;
    Ok(docs.pop().flatten())
}

/// A create at `key` of an object whose RBAC object is `object`.
pub struct Create<'a> {
    pub kind: Kind,
    /// What one such object is called in messages.
    pub what: &'a str,
    pub key: Key,
    pub object: &'a str,
    pub upsert: bool,
}

/// The steps every create of a repository or credential template takes before it compares
/// with what is stored at its key (one procedure for both, so they cannot drift apart): the
/// Secret name is settled against `stored`, and when the Secret declares an object at another
/// URL, that object moves here. A move needs `upsert`, and `update` on both RBAC objects
/// (`object_of` tells a stored object's). `Some(written)`: the move was the write; `None`: the
/// create goes on.
pub async fn settle_create(
    state: &ServerState,
    principal: &Principal,
    access: Access<'_>,
    create: &Create<'_>,
    value: &mut Value,
    stored: Option<&Value>,
    object_of: impl Fn(&DocRef) -> String,
) -> Result<Option<Option<DocRef>>, AppError> {
    settle(value, stored)?;
    let claimed = claim(state, create.kind, &create.key, value, stored, |holder| {
        access.check_taken(state, principal, create.object, &object_of(holder))
    })?;
    let Claim::Moves(from) = claimed else {
        return Ok(None);
    };
    if !create.upsert {
        return Err(move_needs_upsert(create.kind, value, &from, &create.key.name));
    }
    let update = access.to("update");
    update.check(state, principal, &object_of(&from))?;
    update.check(state, principal, create.object)?;
    let moved = move_to(
        state,
        create.what,
        &from,
        create.key.clone(),
        std::mem::take(value),
    )
    .await?;
    Ok(Some(moved))
}
