//! Project role tokens: `CreateToken` and `DeleteToken`, the bookkeeping of issued tokens on
//! the project. The check that lets a presented token in is `app::projects`.
//!
//! A role's tokens are recorded twice, as upstream does: `spec.roles[].jwtTokens` and
//! `status.jwtTokensByRole[<role>].items`, each entry `{iat, exp, id}`. Both lists always hold
//! the same entries (the union of both, by id, newest first; an entry without an id gets its
//! `iat` as id). A presented token is valid only while its role lists it with the same id,
//! issue time and expiry, so deleting the entry (or the role, or the project) revokes it at once
//! (SEC-08).
//!
//! The lists are the server's: a created project starts without tokens, and an update may drop
//! entries but never adds one (an old export applied again cannot bring a revoked token back).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{RESOURCE, project_key};
use crate::error::AppError;
use crate::principal::Principal;
use crate::registry::projects::{Roles, TokenEntry, merge_tokens};
use crate::registry::{Change, DocRef, RegistryError};
use crate::service::access::Access;
use crate::service::{Ctx, Reply};
use crate::state::ServerState;

/// Tries of a read-modify-write of a project that others may be writing at the same time.
const WRITE_ATTEMPTS: usize = 5;
/// Managing a project's tokens: `projects, update` (or membership of the role, see
/// [`token_target`]).
const UPDATE: Access<'static> = Access::detailed(RESOURCE, "update");

/// The tokens role `role` of `project` records (empty when it has none or does not exist).
pub fn role_tokens(project: &Value, role: &str) -> Vec<TokenEntry> {
    Roles::read(project)
        .role(role)
        .map(|r| r.tokens.clone())
        .unwrap_or_default()
}

/// The groups of role `role`, or `None` when the project has no such role.
pub fn role_groups(project: &Value, role: &str) -> Option<Vec<String>> {
    Roles::read(project).role(role).map(|r| r.groups.clone())
}

/// Writes the token lists of every role of `project` (spec and status alike) from `tokens`;
/// a role `tokens` has nothing for gets none, and status keeps no role the spec lacks.
fn write_tokens(project: &mut Value, tokens: &BTreeMap<String, Vec<TokenEntry>>) {
    let mut by_role = Map::new();
    if let Some(roles) = project.pointer_mut("/spec/roles").and_then(Value::as_array_mut) {
        for role in roles.iter_mut().filter_map(Value::as_object_mut) {
            let name = role
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            match tokens.get(&name).filter(|t| !t.is_empty()) {
                Some(list) => {
                    let list = serde_json::to_value(list).unwrap_or(Value::Null);
                    role.insert("jwtTokens".to_owned(), list.clone());
                    by_role.insert(name, json!({ "items": list }));
                }
                None => {
                    role.remove("jwtTokens");
                }
            }
        }
    }
    let Some(object) = project.as_object_mut() else {
        return;
    };
    let status = object
        .entry("status")
        .or_insert_with(|| Value::Object(Map::new()));
    if !status.is_object() {
        *status = Value::Object(Map::new());
    }
    if let Some(status) = status.as_object_mut() {
        if by_role.is_empty() {
            status.remove("jwtTokensByRole");
        } else {
            status.insert("jwtTokensByRole".to_owned(), Value::Object(by_role));
        }
    }
}

/// A project as a client sent it for creation: no tokens recorded (only `CreateToken` issues
/// them), no status.
pub fn strip_tokens(project: &mut Value) {
    if let Some(object) = project.as_object_mut() {
        object.remove("status");
    }
    write_tokens(project, &BTreeMap::new());
}

/// The tokens of `new` taken from `stored`: each role keeps the stored tokens of the role of
/// the same name; with `listed` (the project as the client sent it), only those the client
/// still lists (an update may revoke tokens by leaving them out, never add any).
pub fn carry_tokens(new: &mut Value, stored: &Value, listed: Option<&Value>) {
    let stored = Roles::read(stored);
    let listed = listed.map(Roles::read);
    let names: Vec<String> = Roles::read(new).0.into_iter().map(|r| r.name).collect();
    let mut tokens = BTreeMap::new();
    for name in names {
        let Some(kept) = stored.role(&name).map(|r| &r.tokens) else {
            continue;
        };
        let kept: Vec<TokenEntry> = match &listed {
            None => kept.to_vec(),
            Some(listed) => {
                let ids: Vec<&str> = listed
                    .role(&name)
                    .map(|r| r.tokens.iter().map(|e| e.id.as_str()).collect())
                    .unwrap_or_default();
                kept.iter()
                    .filter(|e| ids.contains(&e.id.as_str()))
                    .cloned()
                    .collect()
            }
        };
        tokens.insert(name, kept);
    }
    write_tokens(new, &tokens);
}

/// Role `role` of `project` with its tokens replaced.
fn set_role_tokens(project: &mut Value, role: &str, list: Vec<TokenEntry>) {
    let mut tokens: BTreeMap<String, Vec<TokenEntry>> = Roles::read(project)
        .0
        .into_iter()
        .map(|r| (r.name, r.tokens))
        .collect();
    tokens.insert(role.to_owned(), merge_tokens(list.into_iter()));
    write_tokens(project, &tokens);
}

// ---- who may manage a role's tokens ----

/// The project `project` when the caller may manage the tokens of its role `role`: with
/// `projects, update, <project>`, or as a member (by the groups of their token's claims) of
/// one of the role's groups. `Ok(None)`: allowed, but the project has no such role.
/// A missing project and a forbidden one give the same answer to a caller without `update`.
fn token_target(
    state: &ServerState,
    principal: &Principal,
    project: &str,
    role: &str,
) -> Result<Option<DocRef>, AppError> {
    let may_update = UPDATE.allows(state, principal, project);
    let Some(doc) = state.registry.get(&project_key(state, project)) else {
        return Err(if may_update {
            super::not_found(project)
        } else {
            refusal(state, principal, project)
        });
    };
    match role_groups(&doc.value(), role) {
        None if may_update => Ok(None),
        None => Err(refusal(state, principal, project)),
        Some(groups) => {
            let policy = state.rbac.policy();
            let member = crate::rbac::groups(&policy, principal)
                .iter()
                .any(|g| groups.iter().any(|rg| rg == g));
            if may_update || member {
                Ok(Some(doc))
            } else {
                Err(refusal(state, principal, project))
            }
        }
    }
}

/// The denial (with its audit line) for managing the tokens of `project`.
fn refusal(state: &ServerState, principal: &Principal, project: &str) -> AppError {
    UPDATE.deny(state, principal, project)
}

fn no_role(project: &str, role: &str) -> AppError {
    AppError::NotFound(format!("project {project:?} has no role {role:?}"))
}

/// Replaces `doc` by `value` unless someone else changed it since it was read.
async fn write_if_unchanged(state: &ServerState, doc: &DocRef, value: Value) -> Result<bool, AppError> {
    let change = Change::Update {
        key: doc.key.clone(),
        value,
        expect: Some(doc.rv),
    };
    match state.registry.apply(vec![change]).await {
        Ok(_) => Ok(true),
        Err(RegistryError::Conflict { .. }) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

fn busy(project: &str) -> AppError {
    AppError::Aborted(format!(
        "project {project:?} kept changing while its tokens were written; try again"
    ))
}

// ---- use cases ----

/// `ProjectTokenCreateRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
pub struct CreateTokenRequest {
    pub project: String,
    pub description: String,
    pub role: String,
    /// Seconds; 0: the token never expires.
    pub expires_in: i64,
    pub id: String,
}

/// Issues a token for a project role and records it on the role; answers `{token}`. The
/// token is handed out only once it is recorded, so it works from the first use.
pub async fn create_token(ctx: Ctx, req: CreateTokenRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let state = &ctx.app;
    let expires_in = u64::try_from(req.expires_in)
        .map_err(|_| AppError::InvalidArgument("expiresIn must not be negative".to_owned()))?;
    if req.id.len() > 256 || req.id.chars().any(|c| c.is_control() || c == '/') {
        return Err(AppError::InvalidArgument(
            "token id must be at most 256 printable characters without '/'".to_owned(),
        ));
    }
    let id = if req.id.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        req.id.clone()
    };
    for _ in 0..WRITE_ATTEMPTS {
        let doc = token_target(state, principal, &req.project, &req.role)?
            .ok_or_else(|| no_role(&req.project, &req.role))?;
        let mut value = doc.value();
        let mut tokens = role_tokens(&value, &req.role);
        if tokens.iter().any(|t| t.id == id) {
            return Err(AppError::InvalidArgument(format!(
                "role {:?} of project {:?} already has a token with id {id:?}; choose another id",
                req.role, req.project
            )));
        }
        let issued = state.auth.project_tokens.issue(
            &req.project,
            &req.role,
            Some(id.clone()),
            Duration::from_secs(expires_in),
        );
        tokens.push(TokenEntry {
            iat: issued.iat,
            exp: issued.exp.unwrap_or(0),
            id: issued.jti.clone(),
        });
        set_role_tokens(&mut value, &req.role, tokens);
        if write_if_unchanged(state, &doc, value).await? {
            tracing::info!(
                target: "audit",
                project = %req.project,
                role = %req.role,
                token = %issued.jti,
                by = %principal.subject(),
                "project token created"
            );
            return Ok(Reply::Message(json!({ "token": issued.token })));
        }
    }
    Err(busy(&req.project))
}

/// `ProjectTokenDeleteRequest`.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct DeleteTokenRequest {
    pub project: String,
    pub role: String,
    pub iat: i64,
    pub id: String,
}

/// Removes a token from its role: the one with id `id` when given, else those issued at
/// `iat`. Tokens it removes stop working at once. Removing what is not there succeeds, as
/// upstream's does.
pub async fn delete_token(ctx: Ctx, req: DeleteTokenRequest) -> Result<Reply, AppError> {
    let principal = ctx.caller.require()?;
    let state = &ctx.app;
    for _ in 0..WRITE_ATTEMPTS {
        let Some(doc) = token_target(state, principal, &req.project, &req.role)? else {
            return Ok(Reply::Message(json!({})));
        };
        let mut value = doc.value();
        let tokens = role_tokens(&value, &req.role);
        let before = tokens.len();
        let kept: Vec<TokenEntry> = tokens
            .into_iter()
            .filter(|t| {
                if req.id.is_empty() {
                    t.iat != req.iat
                } else {
                    t.id != req.id
                }
            })
            .collect();
        if kept.len() == before {
            return Ok(Reply::Message(json!({})));
        }
        set_role_tokens(&mut value, &req.role, kept);
        if write_if_unchanged(state, &doc, value).await? {
            tracing::info!(
                target: "audit",
                project = %req.project,
                role = %req.role,
                iat = req.iat,
                token = %req.id,
                by = %principal.subject(),
                "project token deleted"
            );
            return Ok(Reply::Message(json!({})));
        }
    }
    Err(busy(&req.project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> Value {
        json!({
            "metadata": {"name": "p1"},
            "spec": {"roles": [
                {"name": "ci", "groups": ["org:ci"], "jwtTokens": [{"iat": 100, "id": "a"}, {"iat": 50}]},
                {"name": "ops"}
            ]},
            "status": {"jwtTokensByRole": {
                "ci": {"items": [{"iat": 200, "exp": 300, "id": "b"}, {"iat": 100, "id": "a"}]},
                "gone": {"items": [{"iat": 1, "id": "x"}]}
            }}
        })
    }

    fn ids(tokens: &[TokenEntry]) -> Vec<&str> {
        tokens.iter().map(|t| t.id.as_str()).collect()
    }

    #[test]
    fn spec_and_status_are_merged_newest_first_and_ids_normalized() {
        let tokens = role_tokens(&project(), "ci");
        assert_eq!(ids(&tokens), ["b", "a", "50"]);
        assert_eq!(tokens[0].exp, 300);
        assert!(role_tokens(&project(), "ops").is_empty());
        assert!(
            role_tokens(&project(), "gone").is_empty(),
            "status of a removed role is ignored"
        );
        assert_eq!(role_groups(&project(), "ci"), Some(vec!["org:ci".to_owned()]));
        assert_eq!(role_groups(&project(), "nope"), None);
    }

    #[test]
    fn writing_keeps_spec_and_status_identical_and_drops_stale_roles() {
        let mut p = project();
        set_role_tokens(
            &mut p,
            "ops",
            vec![TokenEntry {
                iat: 7,
                exp: 0,
                id: "o".into(),
            }],
        );
        assert_eq!(p["spec"]["roles"][1]["jwtTokens"], json!([{"iat": 7, "id": "o"}]));
        assert_eq!(
            p["status"]["jwtTokensByRole"]["ops"]["items"],
            json!([{"iat": 7, "id": "o"}])
        );
        assert_eq!(
            p["spec"]["roles"][0]["jwtTokens"],
            p["status"]["jwtTokensByRole"]["ci"]["items"]
        );
        assert!(p["status"]["jwtTokensByRole"].get("gone").is_none());
        set_role_tokens(&mut p, "ops", Vec::new());
        assert!(p["spec"]["roles"][1].get("jwtTokens").is_none());
        assert!(p["status"]["jwtTokensByRole"].get("ops").is_none());
    }

    #[test]
    fn a_token_is_accepted_only_as_recorded() {
        let tokens = role_tokens(&project(), "ci");
        let claims = |jti, iat, exp| (jti, iat, exp);
        let ok = |(jti, iat, exp): (&str, i64, Option<i64>)| tokens.iter().any(|t| t.records(jti, iat, exp));
        assert!(ok(claims("b", 200, Some(300))));
        assert!(ok(claims("a", 100, None)));
        assert!(
            ok(claims("", 50, None)),
            "a token without id is matched by its issue time"
        );
        assert!(!ok(claims("b", 200, None)), "another expiry");
        assert!(!ok(claims("b", 201, Some(300))), "another issue time");
        assert!(!ok(claims("c", 200, Some(300))), "unknown id");
        assert!(!ok(claims("", 100, None)), "an entry with an id needs the id");
    }

    #[test]
    fn create_strips_and_update_can_only_remove() {
        let mut created = project();
        strip_tokens(&mut created);
        assert!(role_tokens(&created, "ci").is_empty());
        assert!(created["status"].get("jwtTokensByRole").is_none());

        // The client lists "a" (spec) and a forged "z"; "b" and "50" are left out.
        let client = json!({
            "spec": {"roles": [{"name": "ci", "jwtTokens": [{"iat": 100, "id": "a"}, {"iat": 999, "id": "z"}]}]},
            "status": {}
        });
        let mut new = client.clone();
        carry_tokens(&mut new, &project(), Some(&client));
        assert_eq!(ids(&role_tokens(&new, "ci")), ["a"]);
        assert_eq!(
            new["status"]["jwtTokensByRole"]["ci"]["items"],
            json!([{"iat": 100, "id": "a"}])
        );

        // Without a filter (upsert), every stored token of a kept role survives.
        let mut upsert = json!({"spec": {"roles": [{"name": "ci"}]}});
        carry_tokens(&mut upsert, &project(), None);
        assert_eq!(ids(&role_tokens(&upsert, "ci")), ["b", "a", "50"]);

        // A renamed role loses its tokens.
        let mut renamed =
            json!({"spec": {"roles": [{"name": "ci2", "jwtTokens": [{"iat": 100, "id": "a"}]}]}});
        let listed = renamed.clone();
        carry_tokens(&mut renamed, &project(), Some(&listed));
        assert!(role_tokens(&renamed, "ci2").is_empty());
    }
}
