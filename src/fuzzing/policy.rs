//! `policy.csv`: lines → rules, compiled in both match modes and decided.

use std::collections::BTreeMap;

use crate::rbac::policy::{Effect, Rule, Rules};
use crate::rbac::{FixedProjects, LoadOptions, Policy};

/// A policy that loads writes back to CSV that loads to the same rules and bindings; one
/// that does not load names a line of the text; compiled in either match mode, deciding the
/// requests its own rules name does not panic and is the same with or without the cache.
pub fn policy_csv(data: &[u8]) {
    let Some(text) = super::text(data) else { return };
    let mut rules = Rules::default();
    if let Err(err) = rules.add_text("policy.csv", text) {
        let lines = text.split('\n').count();
        assert!(
            (1..=lines).contains(&err.line) && !err.reason.is_empty(),
            "an error names a line of the text and says why: {err}"
        );
        return;
    }
    let written = write(&rules);
    let mut again = Rules::default();
    if let Err(err) = again.add_text("written", &written) {
        panic!("a loaded policy, written back, does not load: {err}\n{written}");
    }
    assert_eq!(
        again.rules, rules.rules,
        "rules changed on the way back:\n{written}"
    );
    assert_eq!(
        again.bindings, rules.bindings,
        "bindings changed on the way back:\n{written}"
    );

    for mode in ["glob", "regex"] {
        let data = BTreeMap::from([
            ("policy.csv".to_owned(), text.to_owned()),
            ("policy.matchMode".to_owned(), mode.to_owned()),
        ]);
        let policy = match Policy::from_config(&data, LoadOptions { builtin: false }) {
            Ok(policy) => policy,
            Err(err) => panic!("the text loaded as rules but not as a policy: {err}"),
        };
        let projects = FixedProjects(Vec::new());
        for rule in rules.rules.iter().take(16) {
            let subject = crate::rbac::Subject::Plain(&rule.subject);
            let cached = policy.decide(&projects, subject, &rule.resource, &rule.action, &rule.object);
            let uncached = policy.decide_uncached(
                &projects,
                &rule.subject,
                None,
                &rule.resource,
                &rule.action,
                &rule.object,
            );
            assert_eq!(cached, uncached, "the cache changed a decision for {rule:?}");
        }
    }
}

/// The rules as `policy.csv` text.
fn write(rules: &Rules) -> String {
    let mut out = String::new();
    for Rule {
        subject,
        resource,
        action,
        object,
        effect,
    } in &rules.rules
    {
        let effect = match effect {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
            Effect::Inert => "inert",
        };
        line(&mut out, &["p", subject, resource, action, object, effect]);
    }
    for (member, role) in &rules.bindings {
        line(&mut out, &["g", member, role]);
    }
    out
}

fn line(out: &mut String, fields: &[&str]) {
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // Quoted when the plain form would read differently: a comma or quote inside, or
        // blanks at either end (leading blanks are dropped, and the line is trimmed).
        let plain = !field.contains([',', '"'])
            && !field.starts_with(char::is_whitespace)
            && !field.ends_with(char::is_whitespace);
        if plain {
            out.push_str(field);
        } else {
            out.push('"');
            out.push_str(&field.replace('"', "\"\""));
            out.push('"');
        }
    }
    out.push('\n');
}
