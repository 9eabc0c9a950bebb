//! The oracle: Argo CD's decision procedure on top of the `casbin` crate,
//! written from Argo CD's model and enforcement steps (the reference notes on
//! upstream RBAC), not from tiphys's engine. Patterns are matched by libraries
//! of their own: `globset` for glob mode, the `regex` crate for regex mode.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use casbin::function_map::{OperatorFunction, dynamic_to_str};
use casbin::prelude::*;
use casbin::rhai::Dynamic;
use casbin::{DefaultRoleManager, RoleManager};
use parking_lot::RwLock;
use serde_json::{Map, Value};

use crate::case::{Case, Line, Mode, Request, Who};

/// Argo CD's Casbin model (`assets/model.conf`).
const MODEL: &str = "
[request_definition]
r = sub, res, act, obj

[policy_definition]
p = sub, res, act, obj, eft

[role_definition]
g = _, _

[policy_effect]
e = some(where (p.eft == allow)) && !some(where (p.eft == deny))

[matchers]
m = g(r.sub, p.sub) && globOrRegexMatch(r.res, p.res) && globOrRegexMatch(r.act, p.act) && globOrRegexMatch(r.obj, p.obj)
";

/// Argo CD's built-in policy, as data. Its lines have no quoting, so a plain
/// split reads them.
const BUILTIN: &str = include_str!("../../src/rbac/builtin-policy.csv");

fn builtin_lines() -> Vec<Line> {
    BUILTIN
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<String> = l.split(", ").map(str::to_owned).collect();
            match f.as_slice() {
                [p, sub, res, act, obj, eft] if p == "p" => Line::p(sub, res, act, obj, eft),
                [g, member, role] if g == "g" => Line::g(member, role),
                _ => panic!("unexpected built-in line {l:?}"),
            }
        })
        .collect()
}

thread_local! {
    // Casbin calls the matcher once per field of every line whose subject
    // matched; compiling each pattern once keeps debug runs fast.
    static GLOBS: RefCell<HashMap<String, Option<globset::GlobMatcher>>> = RefCell::default();
    static REGEXES: RefCell<HashMap<String, Option<regex::Regex>>> = RefCell::default();
}

/// Glob as Argo CD documents it: whole-value match, `*` spans `/` and
/// matches nothing, `\` escapes. A pattern that does not compile never matches.
pub fn glob_matches(value: &str, pattern: &str) -> bool {
    GLOBS.with_borrow_mut(|cache| {
        cache
            .entry(pattern.to_owned())
            .or_insert_with(|| {
                globset::GlobBuilder::new(pattern)
                    .literal_separator(false)
                    .backslash_escape(true)
                    .build()
                    .ok()
                    .map(|g| g.compile_matcher())
            })
            .as_ref()
            .is_some_and(|m| m.is_match(value))
    })
}

/// Regex mode: unanchored; None for a pattern that does not compile.
pub fn regex_matches(value: &str, pattern: &str) -> Option<bool> {
    REGEXES.with_borrow_mut(|cache| {
        cache
            .entry(pattern.to_owned())
            .or_insert_with(|| regex::Regex::new(pattern).ok())
            .as_ref()
            .map(|re| re.is_match(value))
    })
}

fn glob_fn(value: Dynamic, pattern: Dynamic) -> Dynamic {
    glob_matches(&dynamic_to_str(&value), &dynamic_to_str(&pattern)).into()
}

/// Upstream's regex matcher panics on an invalid pattern and Casbin turns the
/// panic into an error, which Argo CD reads as deny. Returning a non-boolean
/// makes the matcher's `&&` fail the same way here: the whole check errs.
fn regex_fn(value: Dynamic, pattern: Dynamic) -> Dynamic {
    match regex_matches(&dynamic_to_str(&value), &dynamic_to_str(&pattern)) {
        Some(hit) => hit.into(),
        None => Dynamic::UNIT,
    }
}

/// One Casbin enforcer over some policy lines.
pub struct Casbin {
    enforcer: Enforcer,
}

impl Casbin {
    pub fn new(mode: Mode, lines: &[Line]) -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut enforcer = runtime.block_on(async {
            let model = DefaultModel::from_str(MODEL).await.unwrap();
            Enforcer::new(model, MemoryAdapter::default()).await.unwrap()
        });
        let matcher = match mode {
            Mode::Glob => OperatorFunction::Arg2(glob_fn),
            Mode::Regex => OperatorFunction::Arg2(regex_fn),
        };
        enforcer.add_function("globOrRegexMatch", matcher);
        // Go's Casbin follows a chain of at most 10 bindings. The Rust crate
        // counts the subject itself against the same limit, so 11 gives Go's reach.
        let roles: Arc<RwLock<dyn RoleManager>> = Arc::new(RwLock::new(DefaultRoleManager::new(11)));
        enforcer.set_role_manager(roles).unwrap();
        let model = enforcer.get_mut_model();
        for line in lines {
            // A duplicate line changes nothing, so `false` (already there) is fine.
            let (sec, rule) = match line {
                Line::P { .. } => ("p", line.fields()),
                Line::G { .. } => ("g", line.fields()),
            };
            model.add_policy(sec, sec, rule);
        }
        enforcer.build_role_links().unwrap();
        Self { enforcer }
    }

    /// One Casbin check. An error (an invalid regex reached) is a deny, as in Argo CD.
    pub fn allows(&self, sub: &str, res: &str, act: &str, obj: &str) -> bool {
        matches!(self.enforcer.enforce((sub, res, act, obj)), Ok(true))
    }

    /// Whether some `g` line has `name` as its member (first field).
    fn binds(&self, name: &str) -> bool {
        self.enforcer
            .get_grouping_policy()
            .iter()
            .any(|rule| rule.first().is_some_and(|m| m == name))
    }
}

struct ProjectEnforcer {
    name: String,
    enforcer: Casbin,
}

/// Argo CD's API server decision for one `argocd-rbac-cm` and set of projects.
pub struct Argo {
    global: Casbin,
    projects: Vec<ProjectEnforcer>,
    default_role: String,
    scopes: Vec<String>,
}

impl Argo {
    pub fn new(case: &Case) -> Self {
        let mut base = builtin_lines();
        base.extend(case.lines.iter().cloned());
        let projects = case
            .projects
            .iter()
            .map(|project| {
                let mut lines = base.clone();
                lines.extend(project.runtime_policy());
                ProjectEnforcer {
                    name: project.name.clone(),
                    enforcer: Casbin::new(case.mode, &lines),
                }
            })
            .collect();
        Self {
            global: Casbin::new(case.mode, &base),
            projects,
            default_role: case.default_role.clone().unwrap_or_default(),
            scopes: match &case.scopes {
                Some(scopes) => scopes.clone(),
                None => vec!["groups".to_owned()],
            },
        }
    }

    /// `enforce()`: the default role first (its allow is final), then the subject.
    fn enforce(&self, enforcer: &Casbin, sub: &str, res: &str, act: &str, obj: &str) -> bool {
        (!self.default_role.is_empty() && enforcer.allows(&self.default_role, res, act, obj))
            || enforcer.allows(sub, res, act, obj)
    }

    pub fn decide(&self, request: &Request) -> bool {
        let (res, act, obj) = (&*request.res, &*request.act, &*request.obj);
        if !self.default_role.is_empty() && self.global.allows(&self.default_role, res, act, obj) {
            return true;
        }
        match &request.who {
            Who::Plain(sub) => self.global.allows(sub, res, act, obj),
            Who::Claims { user, claims } => {
                self.claims_allow(user, claims, res, act, obj) || self.global.allows("", res, act, obj)
            }
        }
    }

    /// `EnforceClaims` of the API server.
    fn claims_allow(&self, user: &str, claims: &Map<String, Value>, res: &str, act: &str, obj: &str) -> bool {
        let project = self.project_of(res, obj);
        if let Some(project) = project
            && let Some(token_project) = project_token(user)
        {
            // A project token: only within its own project, and by `enforce()`
            // on the project's enforcer (so the default role is tried again,
            // with the project's lines); its groups are not consulted.
            return token_project == project.name && self.enforce(&project.enforcer, user, res, act, obj);
        }
        let enforcer = project.map_or(&self.global, |p| &p.enforcer);
        if self.enforce(enforcer, user, res, act, obj) {
            return true;
        }
        self.groups(claims)
            .iter()
            .any(|group| enforcer.binds(group) && self.enforce(enforcer, group, res, act, obj))
    }

    /// The project a request's object belongs to, when that project exists.
    fn project_of(&self, res: &str, obj: &str) -> Option<&ProjectEnforcer> {
        let name = match res {
            "applications" | "applicationsets" | "repositories" | "clusters" | "logs" | "exec" => {
                obj.split_once('/')?.0
            }
            "projects" => obj,
            _ => return None,
        };
        self.projects.iter().find(|p| p.name == name)
    }

    /// The values of the claims named in `scopes`: a string, or a list's strings.
    fn groups<'c>(&self, claims: &'c Map<String, Value>) -> Vec<&'c str> {
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
}

/// The project of a `proj:<project>:<role>` subject (exactly three `:` parts).
fn project_token(subject: &str) -> Option<&str> {
    let parts: Vec<&str> = subject.split(':').collect();
    match parts.as_slice() {
        ["proj", project, _] => Some(project),
        _ => None,
    }
}

/// The oracle checked against the reference's verified facts, so that a
/// disagreement points at tiphys rather than at a misconfigured Casbin.
#[cfg(test)]
mod tests {
    use super::*;

    fn casbin(mode: Mode, lines: &[Line]) -> Casbin {
        Casbin::new(mode, lines)
    }

    #[test]
    fn glob_function_has_argo_semantics() {
        assert!(glob_matches("", "*"));
        assert!(glob_matches("a/b/c", "*/*"));
        assert!(glob_matches("default/ns/app", "default/*"));
        assert!(!glob_matches("test", "*/*"));
        assert!(glob_matches("web/b", "{web,db}/[a-c]"));
        assert!(!glob_matches("web/b", "{web,db}/[!a-c]"));
        assert!(glob_matches("get", "?et") && !glob_matches("et", "?et"));
        assert!(!glob_matches("App", "app"));
        assert!(!glob_matches("x", "e[[a*"), "an invalid pattern never matches");
    }

    #[test]
    fn deny_beats_allow_within_one_check_through_roles() {
        let c = casbin(
            Mode::Glob,
            &[
                Line::p("role:dev", "applications", "*", "*/*", "allow"),
                Line::p("alice", "applications", "delete", "*/*", "deny"),
                Line::g("alice", "role:dev"),
            ],
        );
        assert!(c.allows("alice", "applications", "get", "p/a"));
        assert!(!c.allows("alice", "applications", "delete", "p/a"));
        assert!(c.allows("role:dev", "applications", "delete", "p/a"));
    }

    #[test]
    fn effect_must_be_exactly_allow_or_deny() {
        let c = casbin(
            Mode::Glob,
            &[
                Line::p("alice", "clusters", "get", "*", "Allow"),
                Line::p("alice", "clusters", "list", "*", "allow"),
                Line::p("alice", "clusters", "list", "*", "Deny"),
            ],
        );
        assert!(!c.allows("alice", "clusters", "get", "x"));
        assert!(c.allows("alice", "clusters", "list", "x"));
    }

    #[test]
    fn role_chains_of_ten_bindings_work_and_eleven_do_not() {
        let mut lines = vec![Line::p("r10", "res", "get", "*", "allow")];
        lines.extend((0..11).map(|i| Line::g(&format!("r{i}"), &format!("r{}", i + 1))));
        let c = casbin(Mode::Glob, &lines);
        assert!(c.allows("r0", "res", "get", "x"), "10 bindings");
        lines[0] = Line::p("r11", "res", "get", "*", "allow");
        let c = casbin(Mode::Glob, &lines);
        assert!(!c.allows("r0", "res", "get", "x"), "11 bindings");
        assert!(c.allows("r1", "res", "get", "x"));
    }

    #[test]
    fn regex_is_unanchored_and_an_invalid_one_reached_denies_the_check() {
        let c = casbin(
            Mode::Regex,
            &[
                Line::p("alice", "applications", "update", "proj/app", "allow"),
                Line::p("bob", "clusters", "get", ".*", "allow"),
                Line::p("bob", "clusters", "get", "*", "allow"),
                Line::p("bob", "projects", "*", "x", "allow"),
                Line::p("bob", "repositories", "get", ".*", "allow"),
            ],
        );
        assert!(c.allows(
            "alice",
            "applicationsets",
            "update/apps/Deployment/ns/x",
            "xproj/app-2"
        ));
        assert!(
            !c.allows("bob", "clusters", "get", "x"),
            "the invalid `*` is reached"
        );
        assert!(
            !c.allows("bob", "projects", "get", "x"),
            "the invalid action is reached"
        );
        assert!(
            c.allows("bob", "repositories", "get", "x"),
            "the invalid lines are not reached"
        );
    }

    #[test]
    fn builtin_admin_and_its_regex_mode_failure() {
        let glob = casbin(Mode::Glob, &builtin_lines());
        assert!(glob.allows("admin", "applications", "sync", "p/a"));
        assert!(glob.allows("admin", "logs", "get", "p/a"));
        assert!(!glob.allows("admin", "extensions", "invoke", "x"));
        assert!(!glob.allows("admin", "applications", "get", "test"));
        let regex = casbin(Mode::Regex, &builtin_lines());
        assert!(!regex.allows("admin", "clusters", "get", "https://k"));
    }

    #[test]
    fn empty_and_star_subjects_are_plain_names() {
        let c = casbin(
            Mode::Glob,
            &[
                Line::p("", "clusters", "get", "*", "allow"),
                Line::p("*", "projects", "get", "*", "allow"),
            ],
        );
        assert!(c.allows("", "clusters", "get", "x"));
        assert!(!c.allows("alice", "clusters", "get", "x"));
        assert!(!c.allows("alice", "projects", "get", "x"));
        assert!(c.allows("*", "projects", "get", "x"));
    }
}
