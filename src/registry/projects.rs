//! What the server reads of a stored AppProject besides its JSON: its roles, with their
//! policies, groups and the tokens issued for them. RBAC (through `app::projects`), the
//! project-token check and the project use cases all read roles this one way.
//!
//! A role's tokens are recorded twice, as upstream does: `spec.roles[].jwtTokens` and
//! `status.jwtTokensByRole[<role>].items`, each entry `{iat, exp, id}`. Read together, they
//! are the union of both, by id, newest first; an entry without an id gets its `iat` as id.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::is_zero;

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
    pub fn normalized(mut self) -> Self {
        if self.id.is_empty() {
            self.id = self.iat.to_string();
        }
        self
    }

    /// Whether a presented token (its `jti`, `iat` and `exp`) is the one this entry records.
    pub fn records(&self, jti: &str, iat: i64, exp: Option<i64>) -> bool {
        let id_matches = if jti.is_empty() {
            self.id == iat.to_string()
        } else {
            self.id == jti
        };
        id_matches && self.iat == iat && self.exp == exp.unwrap_or(0)
    }
}

/// One role of a project, its token lists merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub policies: Vec<String>,
    pub groups: Vec<String>,
    pub tokens: Vec<TokenEntry>,
}

/// The roles of a project.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roles(pub Vec<Role>);

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProjectView {
    spec: SpecView,
    status: StatusView,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SpecView {
    roles: Vec<RoleView>,
}

/// Token lists are read entry by entry (see [`token_entries`]): an entry that does not read
/// must not take the role's policies and groups with it.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RoleView {
    name: String,
    policies: Vec<String>,
    groups: Vec<String>,
    jwt_tokens: Value,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct StatusView {
    jwt_tokens_by_role: BTreeMap<String, Value>,
}

impl Roles {
    /// The roles of a project's JSON (spec and status merged); none when it does not read as
    /// a project.
    pub fn read(project: &Value) -> Self {
        Self::from_view(ProjectView::deserialize(project).unwrap_or_default())
    }

    /// [`Roles::read`] from the stored JSON text.
    pub fn read_json(json: &[u8]) -> Self {
        Self::from_view(serde_json::from_slice(json).unwrap_or_default())
    }

    fn from_view(view: ProjectView) -> Self {
        let mut status = view.status.jwt_tokens_by_role;
        Self(
            view.spec
                .roles
                .into_iter()
                .map(|role| {
                    let from_status = status
                        .remove(&role.name)
                        .map(|i| token_entries(i.get("items")))
                        .unwrap_or_default();
                    Role {
                        tokens: merge_tokens(
                            token_entries(Some(&role.jwt_tokens))
                                .into_iter()
                                .chain(from_status),
                        ),
                        name: role.name,
                        policies: role.policies,
                        groups: role.groups,
                    }
                })
                .collect(),
        )
    }

    pub fn role(&self, name: &str) -> Option<&Role> {
        self.0.iter().find(|r| r.name == name)
    }
}

/// The token entries of a JSON list; an entry that is not one is left out.
fn token_entries(list: Option<&Value>) -> Vec<TokenEntry> {
    list.and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| TokenEntry::deserialize(item).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Entries by id (the last one read wins), newest first.
pub fn merge_tokens(entries: impl Iterator<Item = TokenEntry>) -> Vec<TokenEntry> {
    let mut by_id = BTreeMap::new();
    for entry in entries.map(TokenEntry::normalized) {
        by_id.insert(entry.id.clone(), entry);
    }
    let mut tokens: Vec<TokenEntry> = by_id.into_values().collect();
    tokens.sort_by(|a, b| b.iat.cmp(&a.iat).then_with(|| a.id.cmp(&b.id)));
    tokens
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_bad_token_entry_leaves_the_roles_policies_and_groups() {
        let project = json!({
            "spec": {"roles": [{
                "name": "ci",
                "policies": ["p, proj:p1:ci, applications, get, p1/*, deny"],
                "groups": ["org:ci"],
                "jwtTokens": [{"iat": "not a number"}, {"iat": 7, "id": "ok"}]
            }]},
            "status": {"jwtTokensByRole": {"ci": {"items": "not a list"}}}
        });
        let roles = Roles::read(&project);
        let role = roles.role("ci").expect("the role is read");
        assert_eq!(role.policies.len(), 1);
        assert_eq!(role.groups, ["org:ci"]);
        assert_eq!(role.tokens.len(), 1);
        assert_eq!(role.tokens[0].id, "ok");
    }
}
