//! `gpgkey.GPGKeyService`: the OpenPGP public keys commits may be signed with, as upstream's
//! `server/gpgkey/gpgkey.go` and `util/db/gpgkeys.go` serve them (RBAC resource `gpgkeys`,
//! object `""`). Each key is an object of the registry under its key ID, seeded from
//! `argocd-gpg-keys-cm` (`super::certificate::seed`). Keys are parsed with rPGP
//! ([`crate::openpgp`]): anything but armored public keys is refused, nothing stored. On an
//! installation (`--kube`) the registry keeps them in `argocd-gpg-keys-cm`, as upstream.

use serde::Deserialize;
use serde_json::{Value, json};

use super::access::Access;
use super::sensitive::{canonical, not_found, same_as_stored};
use crate::error::AppError;
use crate::openpgp::{key_id_of, parse_public_keys};
use crate::registry::{Change, DocRef, Key, Kind, RegistryError};
use crate::service::{Ctx, Reply};

pub const RESOURCE: &str = "gpgkeys";
const LIST: &str = "github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1.GnuPGPublicKeyList";
const CREATED: &str = "gpgkey.GnuPGPublicKeyCreateResponse";

fn key(key_id: &str) -> Key {
    Key::new(Kind::GpgKey, "", key_id)
}

/// The stored objects of the keys in `armored`; with `expected_id` (a ConfigMap key), the text
/// must hold exactly that one key, as upstream requires of `argocd-gpg-keys-cm`.
pub fn stored_objects(armored: &str, expected_id: Option<&str>) -> Result<Vec<(Key, Value)>, String> {
    let keys = parse_public_keys(armored)?;
    if let Some(expected) = expected_id {
        let want = key_id_of(expected).ok_or_else(|| format!("{expected:?} is not a GnuPG key ID"))?;
        match keys.as_slice() {
            [only] if only.key_id == want => {}
            [only] => {
                return Err(format!("the key under {expected:?} has key ID {}", only.key_id));
            }
            _ => return Err(format!("{} keys under {expected:?}: give one", keys.len())),
        }
    }
    Ok(keys.iter().map(|k| (key(&k.key_id), k.object())).collect())
}

/// `GnuPGPublicKeyQuery`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct Query {
    #[serde(rename = "keyID")]
    pub key_id: String,
}

fn without_data(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        object.remove("keyData");
    }
    value
}

/// List, `gpgkeys, get`: every key (narrowed to `keyID` when given), without its data.
pub async fn list(ctx: Ctx, q: Query) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    Access::detailed(RESOURCE, "get").check(&ctx.app, principal, "")?;
    let wanted = match q.key_id.as_str() {
        "" => None,
        id => Some(checked_id(id)?),
    };
    let (resource_version, docs) = ctx.app.registry.list(Kind::GpgKey);
    let items: Vec<Value> = docs
        .iter()
        .filter(|doc| wanted.as_ref().is_none_or(|id| &doc.key.name == id))
        .map(|doc| without_data(doc.value()))
        .collect();
    let list = json!({
        "metadata": {"resourceVersion": resource_version.to_string()},
        "items": items,
    });
    Ok(Reply::Message(canonical(LIST, &list)?))
}

fn checked_id(id: &str) -> Result<String, AppError> {
    key_id_of(id).ok_or_else(|| {
        AppError::InvalidArgument(format!(
            "{id:?} is not a GnuPG key ID: give 16 hex digits (or the 40-digit fingerprint)"
        ))
    })
}

/// The stored key with ID (or fingerprint) `id`, if the caller may `action` GnuPG keys.
fn stored_key(ctx: &Ctx, action: &str, id: &str) -> Result<DocRef, AppError> {
    let principal = ctx.caller.require()?;
    Access::detailed(RESOURCE, action).check(&ctx.app, principal, "")?;
    let id = checked_id(id)?;
    ctx.app
        .registry
        .get(&key(&id))
        .ok_or_else(|| not_found(&format!("GnuPG key {id}")))
}

/// Get, `gpgkeys, get`: one key with its data.
pub async fn get(ctx: Ctx, q: Query) -> Result<Reply, AppError> {
    let doc = stored_key(&ctx, "get", &q.key_id)?;
    Ok(Reply::Doc(doc))
}

/// `GnuPGPublicKeyCreateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CreateRequest {
    pub publickey: PublicKey,
    pub upsert: bool,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct PublicKey {
    #[serde(rename = "keyData")]
    pub key_data: String,
}

/// Create, `gpgkeys, create`: every key of the armored text. A key already kept is skipped
/// (listed in `skipped`, as upstream), unless `upsert` and its data differ: then it is replaced.
pub async fn create(ctx: Ctx, req: CreateRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    Access::detailed(RESOURCE, "create").check(&ctx.app, principal, "")?;
    let objects = stored_objects(&req.publickey.key_data, None)
        .map_err(|e| AppError::InvalidArgument(format!("invalid GnuPG public key: {e}")))?;
    let mut changes = Vec::new();
    let mut created = Vec::new();
    let mut skipped = Vec::new();
    for (key, value) in objects {
        match ctx.app.registry.get(&key) {
            None => changes.push(Change::Create {
                key,
                value: value.clone(),
            }),
            Some(doc) if req.upsert && !same_as_stored(Kind::GpgKey.message(), &doc.value(), &value)? => {
                changes.push(Change::Update {
                    key,
                    value: value.clone(),
                    expect: Some(doc.rv),
                })
            }
            Some(_) => {
                skipped.push(key.name);
                continue;
            }
        }
        created.push(value);
    }
    if !changes.is_empty() {
        ctx.app.registry.apply(changes).await.map_err(|e| match e {
            RegistryError::AlreadyExists(_) | RegistryError::Conflict { .. } => {
                AppError::Aborted("the GnuPG keys were changed by someone else: try again".to_owned())
            }
            other => AppError::from(other),
        })?;
    }
    let answer = json!({"created": {"items": created}, "skipped": skipped});
    Ok(Reply::Message(canonical(CREATED, &answer)?))
}

/// Delete, `gpgkeys, delete`.
pub async fn delete(ctx: Ctx, q: Query) -> Result<Reply, AppError> {
    let doc = stored_key(&ctx, "delete", &q.key_id)?;
    ctx.app
        .registry
        .apply_one(Change::Delete {
            key: doc.key.clone(),
            expect: Some(doc.rv),
        })
        .await
        .map_err(|e| super::sensitive::store_error("GnuPG key", e))?;
    Ok(Reply::empty())
}
