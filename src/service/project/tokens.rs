//! Project role tokens: `CreateToken` and `DeleteToken`, the bookkeeping of issued tokens on
//! the project, and the check that lets a presented token in ([`RegistryTokens`]).
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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{RESOURCE, project_key};
use crate::auth::sessions::{ProjectTokenClaims, ProjectTokens};
use crate::error::AppError;
use crate::json::is_zero;
use crate::principal::Principal;
use crate::registry::{Change, DocRef, Key, Kind, Registry, RegistryError};
use crate::rpc::{Ctx, Reply};
use crate::server::state::AppState;

/// Tries of a read-modify-write of a project that others may be writing at the same time.
const WRITE_ATTEMPTS: usize = 5;

/// One issued token as a role records it (`JWTToken`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(default)]
pub struct TokenEntry {
    pub iat: i64,
    /// Unix seconds; 0: no expiry.
    #[serde(skip_serializing_if = "is_zero")]
    pub exp: i64,
    #[serde(skip_serializing_if = "is_zero")]
    pub id: String,
}

impl TokenEntry {
    /// The entry's identity: its id, or its issue time for an entry without one.
    fn normalized(mut self) -> Self {
        if self.id.is_empty() {
            self.id = self.iat.to_string();
        }
        self
    }

    /// Whether a presented token is the one this entry records.
    fn records(&self, claims: &ProjectTokenClaims<'_>) -> bool {
        let id_matches = if claims.jti.is_empty() {
            self.id == claims.iat.to_string()
        } else {
            self.id == claims.jti
        };
        id_matches && self.iat == claims.iat && self.exp == claims.exp.unwrap_or(0)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TokensView {
    spec: SpecView,
    status: StatusView,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SpecView {
    roles: Vec<RoleView>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RoleView {
    name: String,
    groups: Vec<String>,
    jwt_tokens: Vec<TokenEntry>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StatusView {
    jwt_tokens_by_role: BTreeMap<String, ItemsView>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ItemsView {
    items: Vec<TokenEntry>,
}

/// The roles of a project JSON with their groups and tokens (spec and status merged).
struct Roles(Vec<(String, Vec<String>, Vec<TokenEntry>)>);

impl Roles {
    fn read(project: &Value) -> Self {
        let view = TokensView::deserialize(project).unwrap_or_default();
        let mut status = view.status.jwt_tokens_by_role;
        Self(
            view.spec
                .roles
                .into_iter()
                .map(|role| {
                    let from_status = status.remove(&role.name).map(|i| i.items).unwrap_or_default();
                    let tokens = merge(role.jwt_tokens.into_iter().chain(from_status));
                    (role.name, role.groups, tokens)
                })
                .collect(),
        )
    }

    fn role(&self, name: &str) -> Option<(&[String], &[TokenEntry])> {
        self.0
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, groups, tokens)| (groups.as_slice(), tokens.as_slice()))
    }
}

/// Entries by id (the last one read wins), newest first.
fn merge(entries: impl Iterator<Item = TokenEntry>) -> Vec<TokenEntry> {
    let mut by_id = BTreeMap::new();
    for entry in entries.map(TokenEntry::normalized) {
        by_id.insert(entry.id.clone(), entry);
    }
    let mut tokens: Vec<TokenEntry> = by_id.into_values().collect();
    tokens.sort_by(|a, b| b.iat.cmp(&a.iat).then_with(|| a.id.cmp(&b.id)));
    tokens
}

/// The tokens role `role` of `project` records (empty when it has none or does not exist).
pub fn role_tokens(project: &Value, role: &str) -> Vec<TokenEntry> {
    Roles::read(project)
        .role(role)
        .map(|(_, tokens)| tokens.to_vec())
        .unwrap_or_default()
}

/// The groups of role `role`, or `None` when the project has no such role.
pub fn role_groups(project: &Value, role: &str) -> Option<Vec<String>> {
    Roles::read(project).role(role).map(|(groups, _)| groups.to_vec())
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
    let names: Vec<String> = Roles::read(new).0.into_iter().map(|(n, _, _)| n).collect();
    let mut tokens = BTreeMap::new();
    for name in names {
        let Some((_, kept)) = stored.role(&name) else {
            continue;
        };
        let kept: Vec<TokenEntry> = match &listed {
            None => kept.to_vec(),
            Some(listed) => {
                let ids: Vec<&str> = listed
                    .role(&name)
                    .map(|(_, t)| t.iter().map(|e| e.id.as_str()).collect())
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
        .map(|(name, _, tokens)| (name, tokens))
        .collect();
    tokens.insert(role.to_owned(), merge(list.into_iter()));
    write_tokens(project, &tokens);
}

// ---- who may manage a role's tokens ----

/// The project `project` when the caller may manage the tokens of its role `role`: with
/// `projects, update, <project>`, or as a member (by the groups of their token's claims) of
/// one of the role's groups. `Ok(None)`: allowed, but the project has no such role.
/// A missing project and a forbidden one give the same answer to a caller without `update`.
fn token_target(
    state: &AppState,
    principal: &Principal,
    project: &str,
    role: &str,
) -> Result<Option<DocRef>, AppError> {
    let may_update = state.rbac.allows(principal, RESOURCE, "update", project);
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
            let member = policy
                .groups(principal.claims())
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
fn refusal(state: &AppState, principal: &Principal, project: &str) -> AppError {
    match state.rbac.enforce(principal, RESOURCE, "update", project) {
        Err(err) => err,
        Ok(()) => AppError::PermissionDenied("permission denied".to_owned()),
    }
}

fn no_role(project: &str, role: &str) -> AppError {
    AppError::NotFound(format!("project {project:?} has no role {role:?}"))
}

/// Replaces `doc` by `value` unless someone else changed it since it was read.
async fn write_if_unchanged(state: &AppState, doc: &DocRef, value: Value) -> Result<bool, AppError> {
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
    let state = &ctx.state;
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
        let issued = state.sessions.issue_project_token(
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
    let state = &ctx.state;
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

// ---- authentication ----

/// Checks presented project tokens against the AppProjects in the registry (given to
/// `Sessions::set_project_tokens` at start). Each project's roles are parsed once per stored
/// version.
pub struct RegistryTokens {
    registry: Arc<Registry>,
    namespace: String,
    parsed: Mutex<HashMap<String, (u64, Arc<Roles>)>>,
}

impl RegistryTokens {
    pub fn new(registry: Arc<Registry>, namespace: &str) -> Self {
        Self {
            registry,
            namespace: namespace.to_owned(),
            parsed: Mutex::new(HashMap::new()),
        }
    }

    fn roles(&self, project: &str) -> Option<Arc<Roles>> {
        let doc = self
            .registry
            .get(&Key::new(Kind::AppProject, &self.namespace, project))?;
        let mut parsed = self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((rv, roles)) = parsed.get(project)
            && *rv == doc.rv
        {
            return Some(Arc::clone(roles));
        }
        let value: Value = serde_json::from_slice(&doc.json).unwrap_or(Value::Null);
        let roles = Arc::new(Roles::read(&value));
        // Bounded by the number of projects; a deleted project's entry is dropped here.
        parsed.retain(|name, _| {
            self.registry
                .get(&Key::new(Kind::AppProject, &self.namespace, name))
                .is_some()
        });
        parsed.insert(project.to_owned(), (doc.rv, Arc::clone(&roles)));
        Some(roles)
    }
}

impl ProjectTokens for RegistryTokens {
    fn check(&self, project: &str, role: &str, claims: &ProjectTokenClaims<'_>) -> Result<(), String> {
        let roles = self
            .roles(project)
            .ok_or_else(|| format!("project {project} does not exist"))?;
        let (_, tokens) = roles
            .role(role)
            .ok_or_else(|| format!("project {project} has no role {role}"))?;
        if tokens.iter().any(|t| t.records(claims)) {
            Ok(())
        } else {
            Err(format!(
                "the token is not (or no longer) a token of role {role} of project {project}"
            ))
        }
    }
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
        let claims = |jti, iat, exp| ProjectTokenClaims { jti, iat, exp };
        let ok = |c: ProjectTokenClaims<'_>| tokens.iter().any(|t| t.records(&c));
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
