//! Compiled rules and one Casbin check with Argo CD's model:
//!
//! ```text
//! allowed(sub, res, act, obj) =
//!     some rule of a role reachable from sub matches with effect allow
//!     and no such rule matches with effect deny
//! ```
//!
//! Upstream's Casbin scans every line for every check. Here rules are indexed
//! by subject, so a check only looks at the rules of the subject and of the
//! roles it reaches (at most [`MAX_ROLE_DEPTH`] bindings away, as Casbin), and
//! every distinct pattern is compiled once per policy version.

use std::collections::HashMap;
use std::sync::Arc;

use super::matcher::{MatchMode, Matcher};
use super::policy::{Effect, Rules};

/// Casbin's role hierarchy limit: a chain of 10 bindings works, 11 does not.
pub const MAX_ROLE_DEPTH: usize = 10;

#[derive(Debug)]
struct CompiledRule {
    resource: Arc<Matcher>,
    action: Arc<Matcher>,
    object: Arc<Matcher>,
    effect: Effect,
}

/// One layer of rules: built-in plus user policy, or one project's roles.
#[derive(Debug, Default)]
pub struct Compiled {
    rules: HashMap<String, Vec<CompiledRule>>,
    roles: HashMap<String, Vec<String>>,
    /// Patterns that cannot work, with the rule that holds them (for `validate`).
    problems: Vec<String>,
}

impl Compiled {
    pub fn new(source: &Rules, mode: MatchMode) -> Self {
        let mut patterns: HashMap<&str, Arc<Matcher>> = HashMap::new();
        let mut problems = Vec::new();
        let mut intern = |pattern| -> Arc<Matcher> {
            let matcher = patterns
                .entry(pattern)
                .or_insert_with(|| Arc::new(Matcher::compile(pattern, mode)));
            Arc::clone(matcher)
        };
        let mut rules: HashMap<String, Vec<CompiledRule>> = HashMap::new();
        for rule in &source.rules {
            let compiled = CompiledRule {
                resource: intern(rule.resource.as_str()),
                action: intern(rule.action.as_str()),
                object: intern(rule.object.as_str()),
                effect: rule.effect,
            };
            for (field, matcher) in [
                (&rule.resource, &compiled.resource),
                (&rule.action, &compiled.action),
                (&rule.object, &compiled.object),
            ] {
                if let Some(why) = matcher.problem() {
                    problems.push(format!("pattern {field:?} of subject {:?}: {why}", rule.subject));
                }
            }
            rules.entry(rule.subject.clone()).or_default().push(compiled);
        }
        let mut roles: HashMap<String, Vec<String>> = HashMap::new();
        for (member, role) in &source.bindings {
            let list = roles.entry(member.clone()).or_default();
            if !list.contains(role) {
                list.push(role.clone());
            }
        }
        problems.dedup();
        Self {
            rules,
            roles,
            problems,
        }
    }

    /// Whether `name` is the member (first field) of some `g` line.
    pub fn binds(&self, name: &str) -> bool {
        self.roles.contains_key(name)
    }

    /// Whether `name` is the subject of some `p` line.
    pub fn has_rules(&self, name: &str) -> bool {
        self.rules.contains_key(name)
    }

    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

/// One Casbin check for one subject over one or two layers (global, project).
pub fn check(layers: &[&Compiled], subject: &str, resource: &str, action: &str, object: &str) -> bool {
    let mut allowed = false;
    for name in reachable(layers, subject) {
        for layer in layers {
            let Some(rules) = layer.rules.get(name) else {
                continue;
            };
            for rule in rules {
                // Casbin evaluates left to right and stops at the first false,
                // so an invalid regex only counts once the fields before it matched.
                let hit = rule.resource.matches(resource).and_then(|hit| {
                    if !hit {
                        return Ok(false);
                    }
                    if !rule.action.matches(action)? {
                        return Ok(false);
                    }
                    rule.object.matches(object)
                });
                match (hit, rule.effect) {
                    (Err(_), _) | (Ok(true), Effect::Deny) => return false,
                    (Ok(true), Effect::Allow) => allowed = true,
                    _ => {}
                }
            }
        }
    }
    allowed
}

/// `subject` and every role it reaches within [`MAX_ROLE_DEPTH`] bindings.
fn reachable<'a>(layers: &[&'a Compiled], subject: &'a str) -> Vec<&'a str> {
    let mut seen = vec![subject];
    let mut frontier = vec![subject];
    for _ in 0..MAX_ROLE_DEPTH {
        let mut next = Vec::new();
        for name in frontier {
            for layer in layers {
                for role in layer.roles.get(name).into_iter().flatten() {
                    if !seen.contains(&role.as_str()) {
                        seen.push(role);
                        next.push(role.as_str());
                    }
                }
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(text: &str, mode: MatchMode) -> Compiled {
        let mut rules = Rules::default();
        rules.add_text("test", text).unwrap();
        Compiled::new(&rules, mode)
    }

    fn allows(policy: &str, sub: &str, res: &str, act: &str, obj: &str) -> bool {
        check(&[&compiled(policy, MatchMode::Glob)], sub, res, act, obj)
    }

    #[test]
    fn deny_beats_allow_within_one_subject_and_its_roles() {
        let p = "p, role:dev, applications, *, */*, allow\np, alice, applications, delete, */*, deny\ng, alice, role:dev";
        assert!(allows(p, "alice", "applications", "get", "a/b"));
        assert!(!allows(p, "alice", "applications", "delete", "a/b"));
        let p = "p, alice, applications, *, */*, allow\np, role:dev, applications, delete, */*, deny\ng, alice, role:dev";
        assert!(
            !allows(p, "alice", "applications", "delete", "a/b"),
            "an inherited deny counts"
        );
    }

    #[test]
    fn subjects_are_exact_strings() {
        let p = "p, *, applications, get, */*, allow\np, Alice, applications, get, */*, allow";
        assert!(!allows(p, "bob", "applications", "get", "a/b"));
        assert!(!allows(p, "alice", "applications", "get", "a/b"));
        assert!(allows(p, "*", "applications", "get", "a/b"));
        let regex = compiled("p, .*, applications, get, .*, allow", MatchMode::Regex);
        assert!(!check(&[&regex], "alice", "applications", "get", "a/b"));
    }

    #[test]
    fn role_depth_is_limited_to_ten_and_cycles_end() {
        let mut p = String::from("p, r10, res, get, *, allow\np, r11, res, get, *, allow\n");
        for i in 0..11 {
            p.push_str(&format!("g, r{i}, r{}\n", i + 1));
        }
        p.push_str("g, r11, r0\n");
        let c = compiled(&p, MatchMode::Glob);
        assert!(check(&[&c], "r0", "res", "get", "x"), "10 bindings reach r10");
        let only_r11 = compiled(
            &p.replacen("p, r10, res, get, *, allow\n", "", 1),
            MatchMode::Glob,
        );
        assert!(
            !check(&[&only_r11], "r0", "res", "get", "x"),
            "11 bindings are too many"
        );
        assert!(check(&[&only_r11], "r1", "res", "get", "x"));
    }

    #[test]
    fn invalid_regex_reached_denies_even_with_an_allow() {
        let c = compiled(
            "p, alice, applications, get, .*, allow\np, alice, applications, get, *, allow\np, alice, clusters, *, x, allow",
            MatchMode::Regex,
        );
        assert!(!check(&[&c], "alice", "applications", "get", "p/a"));
        assert!(
            !check(&[&c], "alice", "clusters", "get", "x"),
            "action `*` is reached and invalid"
        );
        assert!(
            !check(&[&c], "alice", "repositories", "get", "x"),
            "nothing matches"
        );
        let ok = compiled(
            "p, alice, applications, get, .*, allow\np, alice, clusters, get, *, allow",
            MatchMode::Regex,
        );
        assert!(ok.problems().len() == 1);
        assert!(
            check(&[&ok], "alice", "applications", "get", "p/a"),
            "the bad line is never reached"
        );
    }

    #[test]
    fn layers_share_roles_and_rules() {
        let global = compiled("g, alice, proj:p:dev", MatchMode::Glob);
        let project = compiled("p, proj:p:dev, applications, get, p/*, allow", MatchMode::Glob);
        assert!(check(&[&global, &project], "alice", "applications", "get", "p/x"));
        assert!(!check(&[&global], "alice", "applications", "get", "p/x"));
    }
}
