//! One compiled `argocd-rbac-cm` and Argo CD's decision procedure over it.
//!
//! A decision is the OR of separate Casbin checks, never one check over all
//! of the caller's names, so a `deny` only overrides allows of the same check:
//!
//! 1. the default role (`policy.default`), on the global policy: an allow is final;
//! 2. for an authenticated caller, with the layer of the project the object
//!    belongs to (if that project exists):
//!    - a project token (`proj:<p>:<r>`) is decided by the default role again
//!      and its own check, and only within its project;
//!    - otherwise the default role again, the user, then each group from the
//!      claims named in `scopes` that is the member of some `g` line;
//! 3. the plain subject (`""` for an authenticated or anonymous caller), global policy.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Map, Value};

use super::cache::DecisionCache;
use super::matcher::MatchMode;
use super::model::{Compiled, Evaluation};
use super::policy::{BUILTIN_POLICY, PolicyError, Rules, user_policy_texts};
use super::project::{ProjectRoles, ProjectSource, project_of, project_subject};

/// Who a decision is for.
#[derive(Clone, Copy, Debug)]
pub enum Subject<'a> {
    /// A bare subject name: an anonymous caller (`""`) or `rbac can ROLE`.
    Plain(&'a str),
    /// An authenticated caller: their user id and token claims (for groups).
    Claims {
        user: &'a str,
        claims: Option<&'a Map<String, Value>>,
    },
    /// An authenticated caller whose groups are already known (a user of one provider among
    /// several: `<provider>:<group>`), not read through `scopes`.
    Grouped { user: &'a str, groups: &'a [String] },
}

/// How a policy is loaded.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// Include Argo CD's built-in roles (the server always does).
    pub builtin: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { builtin: true }
    }
}

/// A compiled policy version. Immutable: a reload builds a new one, which
/// starts with empty caches, so no decision outlives the policy it came from.
pub struct Policy {
    global: Compiled,
    default_role: String,
    scopes: Vec<String>,
    mode: MatchMode,
    lines: usize,
    warnings: Vec<String>,
    cache: DecisionCache,
    /// Compiled project layers, reused while the project is unchanged.
    projects: Mutex<HashMap<String, ProjectLayer>>,
}

/// A project as last seen, and its compiled layer (None: its policy does not load).
type ProjectLayer = (Arc<ProjectRoles>, Arc<Option<Compiled>>);

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("lines", &self.lines)
            .field("default_role", &self.default_role)
            .field("scopes", &self.scopes)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// A problem with `argocd-rbac-cm` that keeps the policy from loading.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Line(PolicyError),
    #[error("scopes: {0}")]
    Scopes(String),
}

impl Policy {
    /// Compiles an `argocd-rbac-cm` data map.
    pub fn from_config(data: &BTreeMap<String, String>, options: LoadOptions) -> Result<Self, LoadError> {
        let mut rules = Rules::default();
        if options.builtin {
            rules
                .add_text("built-in policy", BUILTIN_POLICY)
                .map_err(LoadError::Line)?;
        }
        let mut lines = 0;
        for (source, text) in user_policy_texts(data) {
            rules.add_text(source, text).map_err(LoadError::Line)?;
            lines += text.lines().count();
        }
        let scopes = parse_scopes(data.get("scopes").map(String::as_str))?;
        let mode = MatchMode::from_setting(data.get("policy.matchMode").map(String::as_str));
        let default_role = data.get("policy.default").cloned().unwrap_or_default();
        Ok(Self::new(rules, default_role, scopes, mode, lines))
    }

    /// A policy from plain CSV (the policy tools' `--policy-file` in CSV form).
    pub fn from_csv(text: &str, options: LoadOptions) -> Result<Self, LoadError> {
        let data = BTreeMap::from([("policy.csv".to_owned(), text.to_owned())]);
        Self::from_config(&data, options)
    }

    fn new(rules: Rules, default_role: String, scopes: Vec<String>, mode: MatchMode, lines: usize) -> Self {
        let global = Compiled::new(&rules, mode);
        let mut warnings = rules.warnings.clone();
        warnings.extend(global.problems().iter().cloned());
        Self {
            global,
            default_role,
            scopes,
            mode,
            lines,
            warnings,
            cache: DecisionCache::default(),
            projects: Mutex::default(),
        }
    }

    /// The same policy with another default role (and an empty cache, since
    /// the default role takes part in every decision).
    pub fn with_default_role(mut self, role: &str) -> Self {
        role.clone_into(&mut self.default_role);
        self.cache = DecisionCache::default();
        self
    }

    pub fn default_role(&self) -> &str {
        &self.default_role
    }

    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    pub fn mode(&self) -> MatchMode {
        self.mode
    }

    /// Lines of user policy (for metrics and logs).
    pub fn user_lines(&self) -> usize {
        self.lines
    }

    /// Whether `name` is the member of some `g` line of the global policy.
    pub fn binds(&self, name: &str) -> bool {
        self.global.binds(name)
    }

    /// Whether `name` is the subject of some `p` line of the global policy.
    pub fn has_rules(&self, name: &str) -> bool {
        self.global.has_rules(name)
    }

    /// Lines that loaded but do nothing or can never match.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The groups a caller's claims put them in: the values of each claim named
    /// in `scopes`, in order (a string, or the strings of a list).
    pub fn groups<'c>(&self, claims: Option<&'c Map<String, Value>>) -> Vec<&'c str> {
        let Some(claims) = claims else { return Vec::new() };
        let mut groups = Vec::new();
        for scope in &self.scopes {
            match claims.get(scope) {
                Some(Value::String(s)) => groups.push(s.as_str()),
                Some(Value::Array(items)) => groups.extend(items.iter().filter_map(Value::as_str)),
                _ => {}
            }
        }
        groups
    }

    /// The decision, from the cache when this policy has made it before.
    pub fn decide(
        &self,
        projects: &dyn ProjectSource,
        subject: Subject<'_>,
        resource: &str,
        action: &str,
        object: &str,
    ) -> bool {
        let (user, groups) = match subject {
            Subject::Plain(name) => (name, None),
            Subject::Claims { user, claims } => (user, Some(self.groups(claims))),
            Subject::Grouped { user, groups } => (user, Some(groups.iter().map(String::as_str).collect())),
        };
        let generation = projects.generation();
        let key = DecisionCache::key(user, groups.as_deref(), resource, action, object);
        if let Some(allowed) = self.cache.get(&key, generation) {
            return allowed;
        }
        let allowed = self.decide_uncached(projects, user, groups.as_deref(), resource, action, object);
        self.cache.put(key, generation, allowed);
        allowed
    }

    /// [`Policy::decide`] without the cache (benchmarks and tests).
    pub fn decide_uncached(
        &self,
        projects: &dyn ProjectSource,
        user: &str,
        groups: Option<&[&str]>,
        resource: &str,
        action: &str,
        object: &str,
    ) -> bool {
        let global_layers = [&self.global];
        let mut global = Evaluation::new(&global_layers, resource, action, object);
        if self.default_allows(&mut global) {
            return true;
        }
        let Some(groups) = groups else {
            return global.check(user);
        };
        let project = project_of(resource, object).and_then(|name| projects.project(name));
        let Some(project) = project else {
            return self.claims_allow(&mut global, user, groups) || global.check("");
        };
        if let Some((token_project, role)) = project_subject(user)
            && (token_project != project.name || !project.has_role(role))
        {
            // A project token acts only within its own project, and only while the role exists.
            return global.check("");
        }
        let layer = self.project_layer(&project);
        let allowed = match layer.as_ref() {
            Some(compiled) => {
                let layers = [&self.global, compiled];
                let mut scoped = Evaluation::new(&layers, resource, action, object);
                self.claims_allow_in_project(&mut scoped, user, groups)
            }
            None => self.claims_allow_in_project(&mut global, user, groups),
        };
        allowed || global.check("")
    }

    fn default_allows<'a>(&'a self, evaluation: &mut Evaluation<'a>) -> bool {
        !self.default_role.is_empty() && evaluation.check(&self.default_role)
    }

    /// The claims check with the project's layer: a project token by the
    /// default role and its own check (no groups), anyone else as
    /// [`Policy::claims_allow`].
    fn claims_allow_in_project<'a>(
        &'a self,
        evaluation: &mut Evaluation<'a>,
        user: &'a str,
        groups: &[&'a str],
    ) -> bool {
        if project_subject(user).is_some() {
            // Upstream decides the token through the same `enforce` as a user,
            // which tries the default role first: here, with the project's lines.
            return self.default_allows(evaluation) || evaluation.check(user);
        }
        self.claims_allow(evaluation, user, groups)
    }

    /// The default role again (with these layers), the user, then each group
    /// that is the member of some `g` line.
    fn claims_allow<'a>(
        &'a self,
        evaluation: &mut Evaluation<'a>,
        user: &'a str,
        groups: &[&'a str],
    ) -> bool {
        if self.default_allows(evaluation) || evaluation.check(user) {
            return true;
        }
        groups.iter().any(|group| evaluation.check_member(group))
    }

    /// The compiled layer of `project`; None inside when its policy does not
    /// load (upstream then decides with the global policy alone).
    fn project_layer(&self, project: &Arc<ProjectRoles>) -> Arc<Option<Compiled>> {
        let mut layers = self.projects.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((seen, layer)) = layers.get(&project.name)
            && Arc::ptr_eq(seen, project)
        {
            return Arc::clone(layer);
        }
        let layer = Arc::new(match project.rules() {
            Ok(rules) => Some(Compiled::new(&rules, self.mode)),
            Err(err) => {
                tracing::warn!(project = %project.name, error = %err, "project role policy does not load; deciding without it");
                None
            }
        });
        layers.insert(project.name.clone(), (Arc::clone(project), Arc::clone(&layer)));
        layer
    }
}

/// `scopes` is a YAML list (`'[groups, email]'`); missing or empty means `[groups]`.
fn parse_scopes(value: Option<&str>) -> Result<Vec<String>, LoadError> {
    let text = value.map(str::trim).unwrap_or_default();
    if text.is_empty() {
        return Ok(vec!["groups".to_owned()]);
    }
    let parsed: Option<Vec<String>> = serde_yaml_ng::from_str(text)
        .map_err(|e| LoadError::Scopes(format!("not a YAML list of claim names: {e}")))?;
    Ok(parsed.unwrap_or_else(|| vec!["groups".to_owned()]))
}

#[cfg(test)]
mod tests;
