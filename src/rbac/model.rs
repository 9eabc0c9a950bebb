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

use super::matcher::{MatchMode, Matcher, Unmatchable};
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

type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// One subject's rules, those naming a resource exactly kept apart so that a
/// check only tests the rules that can apply to the request's resource.
#[derive(Debug, Default)]
struct RuleSet {
    by_resource: Map<String, Vec<CompiledRule>>,
    other: Vec<CompiledRule>,
}

/// One layer of rules: built-in plus user policy, or one project's roles.
#[derive(Debug, Default)]
pub struct Compiled {
    /// Rule sets, one per subject, found through `set_of`.
    sets: Vec<RuleSet>,
    set_of: Map<String, usize>,
    roles: Map<String, Vec<String>>,
    /// For each member of a `g` line: the rule sets of itself and of every
    /// role it reaches in this layer alone (what a check without a project
    /// layer walks), so such a check neither walks nor hashes names.
    closures: Map<String, Box<[usize]>>,
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
        let mut sets: Vec<RuleSet> = Vec::new();
        let mut set_of: Map<String, usize> = Map::default();
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
            let index = *set_of.entry(rule.subject.clone()).or_insert_with(|| {
                sets.push(RuleSet::default());
                sets.len() - 1
            });
            let set = &mut sets[index];
            match compiled.resource.as_ref() {
                Matcher::Equals(resource) => set
                    .by_resource
                    .entry(resource.clone())
                    .or_default()
                    .push(compiled),
                _ => set.other.push(compiled),
            }
        }
        let mut roles: Map<String, Vec<String>> = Map::default();
        for (member, role) in &source.bindings {
            let list = roles.entry(member.clone()).or_default();
            if !list.contains(role) {
                list.push(role.clone());
            }
        }
        problems.dedup();
        let mut compiled = Self {
            sets,
            set_of,
            roles,
            closures: Map::default(),
            problems,
        };
        let closures = compiled
            .roles
            .keys()
            .map(|member| {
                let sets = reachable(&[&compiled], member)
                    .into_iter()
                    .filter_map(|name| compiled.set_of.get(name).copied())
                    .collect();
                (member.clone(), sets)
            })
            .collect();
        compiled.closures = closures;
        compiled
    }

    /// Whether `name` is the member (first field) of some `g` line.
    pub fn binds(&self, name: &str) -> bool {
        self.roles.contains_key(name)
    }

    /// Whether `name` is the subject of some `p` line.
    pub fn has_rules(&self, name: &str) -> bool {
        self.set_of.contains_key(name)
    }

    fn rules_of(&self, name: &str) -> Option<&RuleSet> {
        self.set_of.get(name).map(|&i| &self.sets[i])
    }

    pub fn problems(&self) -> &[String] {
        &self.problems
    }
}

/// What one name's own rules say about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Nothing,
    Allow,
    /// A matching deny, or an invalid regex reached: the check fails.
    Deny,
}

/// One request against one or two layers (global, project). A decision makes
/// several checks (default role, user, groups) that share most roles, so each
/// name's verdict is worked out once and remembered.
pub struct Evaluation<'a> {
    layers: &'a [&'a Compiled],
    resource: &'a str,
    action: &'a str,
    object: &'a str,
    verdicts: Map<&'a str, Verdict>,
    /// With one layer: verdicts by rule set (None: not worked out yet).
    by_set: Vec<Option<Verdict>>,
}

impl<'a> Evaluation<'a> {
    pub fn new(layers: &'a [&'a Compiled], resource: &'a str, action: &'a str, object: &'a str) -> Self {
        Self {
            layers,
            resource,
            action,
            object,
            verdicts: Map::default(),
            by_set: Vec::new(),
        }
    }

    /// One Casbin check: some rule of `subject` or a role it reaches allows,
    /// and none of them denies.
    pub fn check(&mut self, subject: &'a str) -> bool {
        let layers = self.layers;
        if let [layer] = layers {
            return match (layer.closures.get(subject), layer.set_of.get(subject)) {
                (Some(sets), _) => self.combine_sets(layer, sets),
                (None, Some(&set)) => self.combine_sets(layer, &[set]),
                (None, None) => false,
            };
        }
        let mut allowed = false;
        for name in reachable(layers, subject) {
            match self.verdict(name) {
                Verdict::Deny => return false,
                Verdict::Allow => allowed = true,
                Verdict::Nothing => {}
            }
        }
        allowed
    }

    /// [`Evaluation::check`] for a group from a token, which counts only when
    /// it is the member of some `g` line.
    pub fn check_member(&mut self, name: &'a str) -> bool {
        let layers = self.layers;
        match layers {
            [layer] => match layer.closures.get(name) {
                Some(sets) => self.combine_sets(layer, sets),
                None => false,
            },
            _ => layers.iter().any(|layer| layer.binds(name)) && self.check(name),
        }
    }

    /// A check over rule sets of the single layer: a deny anywhere fails it.
    fn combine_sets(&mut self, layer: &Compiled, sets: &[usize]) -> bool {
        if self.by_set.is_empty() {
            self.by_set = vec![None; layer.sets.len()];
        }
        let mut allowed = false;
        for &set in sets {
            let verdict = match self.by_set[set] {
                Some(known) => known,
                None => {
                    let verdict = self.scan(&layer.sets[set]);
                    self.by_set[set] = Some(verdict);
                    verdict
                }
            };
            match verdict {
                Verdict::Deny => return false,
                Verdict::Allow => allowed = true,
                Verdict::Nothing => {}
            }
        }
        allowed
    }

    /// The verdict of `name`'s rules in every layer (several layers).
    fn verdict(&mut self, name: &'a str) -> Verdict {
        if let Some(&known) = self.verdicts.get(name) {
            return known;
        }
        let mut verdict = Verdict::Nothing;
        for layer in self.layers {
            match layer.rules_of(name).map(|set| self.scan(set)) {
                Some(Verdict::Deny) => {
                    verdict = Verdict::Deny;
                    break;
                }
                Some(Verdict::Allow) => verdict = Verdict::Allow,
                _ => {}
            }
        }
        self.verdicts.insert(name, verdict);
        verdict
    }

    /// What one rule set says about the request.
    fn scan(&self, set: &RuleSet) -> Verdict {
        let exact = set.by_resource.get(self.resource).into_iter().flatten();
        let mut verdict = Verdict::Nothing;
        for (rule, resource_known) in exact
            .map(|r| (r, true))
            .chain(set.other.iter().map(|r| (r, false)))
        {
            match self.test(rule, resource_known) {
                (Err(_), _) | (Ok(true), Effect::Deny) => return Verdict::Deny,
                (Ok(true), Effect::Allow) => verdict = Verdict::Allow,
                _ => {}
            }
        }
        verdict
    }

    /// Casbin evaluates the fields left to right and stops at the first
    /// mismatch, so an invalid regex only counts once the fields before it matched.
    fn test(&self, rule: &CompiledRule, resource_known: bool) -> (Result<bool, Unmatchable>, Effect) {
        let hit = (|| {
            if !resource_known && !rule.resource.matches(self.resource)? {
                return Ok(false);
            }
            if !rule.action.matches(self.action)? {
                return Ok(false);
            }
            rule.object.matches(self.object)
        })();
        (hit, rule.effect)
    }
}

/// One Casbin check on its own (tests and tools).
pub fn check(layers: &[&Compiled], subject: &str, resource: &str, action: &str, object: &str) -> bool {
    Evaluation::new(layers, resource, action, object).check(subject)
}

/// Past this many names a set beats a list for "seen already".
const SMALL: usize = 32;

/// `subject` and every role it reaches within [`MAX_ROLE_DEPTH`] bindings.
fn reachable<'a>(layers: &[&'a Compiled], subject: &'a str) -> Vec<&'a str> {
    let mut seen = vec![subject];
    let mut seen_set: Option<std::collections::HashSet<&str, foldhash::fast::RandomState>> = None;
    let mut frontier = vec![subject];
    for _ in 0..MAX_ROLE_DEPTH {
        let mut next = Vec::new();
        for name in frontier {
            for layer in layers {
                for role in layer.roles.get(name).into_iter().flatten() {
                    let role = role.as_str();
                    let new = match &mut seen_set {
                        Some(set) => set.insert(role),
                        None => !seen.contains(&role),
                    };
                    if new {
                        seen.push(role);
                        next.push(role);
                        if seen_set.is_none() && seen.len() > SMALL {
                            seen_set = Some(seen.iter().copied().collect());
                        }
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
