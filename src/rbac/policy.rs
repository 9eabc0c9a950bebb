//! Policy text → rules. Reads Argo CD's `policy.csv` format line by line with
//! upstream's rules: blank lines and lines starting with `#` are skipped, a
//! `p` line has exactly 6 fields and a `g` line exactly 3, any other first
//! field is an error (except Casbin's unused `r`, `e`, `m` sections, accepted
//! and ignored as upstream does), and one bad line rejects the whole text.

use std::collections::BTreeMap;
use std::fmt;

use super::csv::split_fields;

/// Argo CD's built-in policy: `role:readonly`, `role:admin`, and `admin` bound to it.
pub const BUILTIN_POLICY: &str = include_str!("builtin-policy.csv");

/// A rule's effect. Upstream compares the text exactly: anything other than
/// `allow` or `deny` (`Allow`, `allow # note`) makes a line that does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
    Inert,
}

/// `p, sub, res, act, obj, eft`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub subject: String,
    pub resource: String,
    pub action: String,
    pub object: String,
    pub effect: Effect,
}

/// Rules and role bindings (`g, member, role`) read from one or more texts.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    pub rules: Vec<Rule>,
    pub bindings: Vec<(String, String)>,
    /// Lines that load but probably do not do what their author meant.
    pub warnings: Vec<String>,
}

/// Where a bad line is: the `argocd-rbac-cm` key (or file) and the 1-based line in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    pub source: String,
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}: {}", self.source, self.line, self.reason)
    }
}

impl std::error::Error for PolicyError {}

impl Rules {
    /// Adds the lines of `text`, which came from `source` (used in messages).
    pub fn add_text(&mut self, source: &str, text: &str) -> Result<(), PolicyError> {
        for (index, raw) in text.split('\n').enumerate() {
            let fail = |reason: String| PolicyError {
                source: source.to_owned(),
                line: index + 1,
                reason,
            };
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_fields(line).map_err(&fail)?;
            match fields[0].as_str() {
                "p" => {
                    let [_, subject, resource, action, object, effect] =
                        <[String; 6]>::try_from(fields).map_err(|f| {
                            fail(format!(
                                "a 'p' line has 6 fields (p, subject, resource, action, object, effect), this one has {}",
                                f.len()
                            ))
                        })?;
                    let effect = match effect.as_str() {
                        "allow" => Effect::Allow,
                        "deny" => Effect::Deny,
                        other => {
                            self.warnings.push(format!(
                                "{source} line {}: effect {other:?} is neither \"allow\" nor \"deny\", so the line grants and denies nothing{}",
                                index + 1,
                                if other.contains('#') { " (a '#' after the first field does not start a comment)" } else { "" }
                            ));
                            Effect::Inert
                        }
                    };
                    self.rules.push(Rule {
                        subject,
                        resource,
                        action,
                        object,
                        effect,
                    });
                }
                "g" => {
                    let [_, member, role] = <[String; 3]>::try_from(fields).map_err(|f| {
                        fail(format!(
                            "a 'g' line has 3 fields (g, member, role), this one has {}",
                            f.len()
                        ))
                    })?;
                    self.bindings.push((member, role));
                }
                "r" | "e" | "m" => self.warnings.push(format!(
                    "{source} line {}: a {:?} line has no effect",
                    index + 1,
                    fields[0]
                )),
                other => {
                    return Err(fail(format!(
                        "a policy line starts with 'p' or 'g', not {other:?}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Roles that members are bound to but that have no rules of their own
    /// and no roles of their own (probably a typo), in name order.
    pub fn empty_roles(&self) -> Vec<&str> {
        let mut defined: std::collections::HashSet<&str> =
            self.rules.iter().map(|r| r.subject.as_str()).collect();
        defined.extend(self.bindings.iter().map(|(member, _)| member.as_str()));
        let mut empty: Vec<&str> = self
            .bindings
            .iter()
            .map(|(_, role)| role.as_str())
            .filter(|role| !defined.contains(role))
            .collect();
        empty.sort_unstable();
        empty.dedup();
        empty
    }
}

/// The user policy of an `argocd-rbac-cm` data map: `policy.csv`, then every
/// other `policy.<name>.csv` in byte-wise key order, each a source of its own.
pub fn user_policy_texts(data: &BTreeMap<String, String>) -> Vec<(&str, &str)> {
    let main = data.get_key_value("policy.csv");
    let overlays = data
        .iter()
        .filter(|(k, _)| k.starts_with("policy.") && k.ends_with(".csv") && k.as_str() != "policy.csv");
    main.into_iter()
        .chain(overlays)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Rules, PolicyError> {
        let mut rules = Rules::default();
        rules.add_text("policy.csv", text).map(|()| rules)
    }

    #[test]
    fn builtin_policy_loads() {
        let rules = load(BUILTIN_POLICY).unwrap();
        assert!(rules.rules.len() > 40);
        assert!(rules.bindings.contains(&("admin".into(), "role:admin".into())));
        assert!(rules.warnings.is_empty());
    }

    #[test]
    fn field_counts_are_strict() {
        let err = load("p, a, b, c, d\n").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.reason.contains("this one has 5"), "{err}");
        assert!(
            load("p, a, b, c, d, allow, extra")
                .unwrap_err()
                .reason
                .contains("has 7")
        );
        assert!(
            load("\n\ng, a")
                .unwrap_err()
                .to_string()
                .starts_with("policy.csv line 3:")
        );
        assert!(load("g, a, b, c").is_err());
        assert!(load("x, a, b").unwrap_err().reason.contains("not \"x\""));
        assert!(load("P, a, b, c, d, allow").is_err(), "case-sensitive");
        assert!(load(", a").is_err());
    }

    #[test]
    fn comments_only_at_line_start() {
        let rules = load("  # note\n\np, a, b, c, d, allow # trailing\n").unwrap();
        assert_eq!(rules.rules[0].effect, Effect::Inert);
        assert!(
            rules.warnings[0].contains("does not start a comment"),
            "{:?}",
            rules.warnings
        );
    }

    #[test]
    fn effect_must_be_exact() {
        for (eft, want) in [
            ("allow", Effect::Allow),
            ("deny", Effect::Deny),
            ("Allow", Effect::Inert),
            ("", Effect::Inert),
        ] {
            let rules = load(&format!("p, a, b, c, d, {eft}")).unwrap();
            assert_eq!(rules.rules[0].effect, want, "{eft:?}");
        }
    }

    #[test]
    fn unused_sections_are_accepted() {
        let rules = load("r, x\ne, y, z\nm, 1").unwrap();
        assert!(rules.rules.is_empty() && rules.warnings.len() == 3);
    }

    #[test]
    fn overlays_follow_policy_csv_in_byte_order() {
        let data: BTreeMap<String, String> = [
            ("policy.B.csv", "b"),
            ("policy.csv", "main"),
            ("policy.a.csv", "a"),
            ("policy.A.csv", "A"),
            ("policy.default", "role:readonly"),
            ("policy.matchMode", "glob"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let texts: Vec<&str> = user_policy_texts(&data).into_iter().map(|(_, v)| v).collect();
        assert_eq!(texts, ["main", "A", "b", "a"]);
    }

    #[test]
    fn empty_roles_are_reported() {
        let rules = load("g, alice, role:typo\ng, bob, role:dev\np, role:dev, a, b, c, allow").unwrap();
        assert_eq!(rules.empty_roles(), ["role:typo"]);
    }
}
