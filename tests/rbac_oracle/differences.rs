//! Where tiphys differs from upstream Argo CD on purpose (README, "Differences
//! from upstream, on purpose"): one named test each, showing the difference.
//! The property tests' generator stays away from these inputs.
//!
//! | difference | test |
//! |---|---|
//! | glob `?` alone needs a character | `glob_question_mark_alone_needs_a_character` |
//! | glob `ab*ba` does not match `aba` | `glob_prefix_and_suffix_do_not_overlap` |
//! | glob `?[a]` works on non-ASCII text | `glob_question_mark_then_class_on_non_ascii` |
//! | glob `a{` closes at the end instead of failing checks | `glob_unclosed_brace_closes_at_the_end` |
//! | cache keys are not joined with `$$` | `decision_cache_does_not_join_with_dollars` |
//! | a token of a removed project role gets nothing | `project_token_of_a_removed_role_gets_nothing` |
//! | `scopes` that are not a list fail the load | `scopes_that_are_not_a_list_fail_the_load` |
//! | regex `\p{Letter}` is accepted | `regex_long_unicode_class_names_are_accepted` |
//! | regex nested repeats over 1000 are accepted | `regex_nested_repeats_over_a_thousand_are_accepted` |
//!
//! For glob, the oracle uses `globset`, which follows the documented glob rules
//! as tiphys does, not the matcher of the Go library upstream uses; so the
//! first three tests show tiphys and the oracle agreeing where upstream would
//! not. Upstream's answer is given in each test's comment.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tiphys::rbac::{FixedProjects, LoadOptions, Policy, ProjectRole, ProjectRoles, Subject};

use crate::case::{Case, Line, Mode, Project, Request, Role, Who};
use crate::oracle::{Argo, glob_matches, regex_matches};

fn load(pairs: &[(&str, &str)]) -> Result<Policy, tiphys::rbac::LoadError> {
    let data: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Policy::from_config(&data, LoadOptions::default())
}

/// `alice` (no groups) asks for `res, act, obj`.
fn alice(policy: &Policy, res: &str, act: &str, obj: &str) -> bool {
    let claims = Map::new();
    policy.decide(
        &FixedProjects::default(),
        Subject::Claims {
            user: "alice",
            claims: Some(&claims),
        },
        res,
        act,
        obj,
    )
}

/// A policy granting `alice` `applications, get` on `pattern`.
fn glob_grant(pattern: &str) -> Policy {
    load(&[(
        "policy.csv",
        &format!("p, alice, applications, get, {pattern}, allow"),
    )])
    .unwrap()
}

#[test]
fn glob_question_mark_alone_needs_a_character() {
    // Upstream's glob library also matches `?` against the empty string.
    let p = glob_grant("web/?");
    assert!(alice(&p, "applications", "get", "web/a"));
    assert!(!alice(&p, "applications", "get", "web/"));
    assert!(!glob_matches("", "?") && glob_matches("a", "?"));
    let alone = load(&[("policy.csv", "p, alice, clusters, get, ?, allow")]).unwrap();
    assert!(!alice(&alone, "clusters", "get", ""));
}

#[test]
fn glob_prefix_and_suffix_do_not_overlap() {
    // Upstream's glob library matches `ab*ba` against `aba` (prefix and suffix share the `b`).
    let p = glob_grant("ab*ba");
    assert!(!alice(&p, "applications", "get", "aba"));
    assert!(alice(&p, "applications", "get", "abba"));
    assert!(!glob_matches("aba", "ab*ba"));
}

#[test]
fn glob_question_mark_then_class_on_non_ascii() {
    // Upstream's glob library fails `?[a]` on a value whose first character is not ASCII.
    let p = glob_grant("web/?[a]");
    assert!(alice(&p, "applications", "get", "web/éa"));
    assert!(alice(&p, "applications", "get", "web/xa"));
    // globset misses it too (its `?` is one byte), hence ASCII-only requests.
    assert!(!glob_matches("web/éa", "web/?[a]"));
}

#[test]
fn glob_unclosed_brace_closes_at_the_end() {
    // Upstream's glob library fails on `a{`, and Argo CD then fails every check
    // that reaches the pattern, even one that another line allows.
    let p = load(&[(
        "policy.csv",
        "p, alice, applications, get, web/a{, allow\np, alice, applications, get, */*, allow",
    )])
    .unwrap();
    assert!(alice(&p, "applications", "get", "web/a"));
    assert!(
        alice(&p, "applications", "get", "web/b"),
        "the other line still allows"
    );
    // globset refuses the pattern: the oracle would never match it.
    assert!(!glob_matches("web/a", "web/a{"));
}

#[test]
fn decision_cache_does_not_join_with_dollars() {
    // Casbin's cached enforcer keys a decision by the request joined with `$$`,
    // so these two requests share a key and the second gets the first's answer.
    let first = ["a$$b", "c", "get", "x"];
    let second = ["a", "b$$c", "get", "x"];
    assert_eq!(first.join("$$"), second.join("$$"));
    let p = load(&[("policy.csv", "p, a$$b, c, get, x, allow")]).unwrap();
    let ask = |[sub, res, act, obj]: [&str; 4]| {
        p.decide(&FixedProjects::default(), Subject::Plain(sub), res, act, obj)
    };
    assert!(ask(first));
    assert!(!ask(second), "tiphys answers the second request on its own");
    assert!(ask(first));
    let case = Case {
        mode: Mode::Glob,
        lines: vec![Line::p("a$$b", "c", "get", "x", "allow")],
        overlay: 1,
        default_role: None,
        scopes: None,
        projects: vec![],
    };
    let plain = |[sub, res, act, obj]: [&str; 4]| Request {
        who: Who::Plain(sub.to_owned()),
        res: res.to_owned(),
        act: act.to_owned(),
        obj: obj.to_owned(),
    };
    assert!(
        !Argo::new(&case).decide(&plain(second)),
        "an uncached Casbin agrees"
    );
}

#[test]
fn project_token_of_a_removed_role_gets_nothing() {
    // Upstream decides a project token without asking whether its role still
    // exists (token revocation is checked at sign-in), so a global line naming
    // the role keeps granting. tiphys grants nothing to such a token.
    let case = Case {
        mode: Mode::Glob,
        lines: vec![Line::p("proj:web:gone", "applications", "sync", "web/*", "allow")],
        overlay: 1,
        default_role: None,
        scopes: None,
        projects: vec![Project {
            name: "web".to_owned(),
            roles: vec![Role {
                name: "deployer".to_owned(),
                policies: vec![],
                groups: vec![],
            }],
        }],
    };
    let request = Request {
        who: Who::Claims {
            user: "proj:web:gone".to_owned(),
            claims: Map::new(),
        },
        res: "applications".to_owned(),
        act: "sync".to_owned(),
        obj: "web/app".to_owned(),
    };
    assert!(!case.admits(&request), "the generator never asks this");
    assert!(Argo::new(&case).decide(&request), "upstream allows");
    let (policy, projects) = case.tiphys();
    assert!(!crate::case::tiphys_decides(&policy, &projects, &request));
    // With the role in place, both allow (a fresh policy: decisions are cached).
    let (policy, _) = case.tiphys();
    let web = FixedProjects(vec![Arc::new(ProjectRoles {
        name: "web".to_owned(),
        roles: vec![ProjectRole {
            name: "gone".to_owned(),
            policies: vec![],
            groups: vec![],
        }],
    })]);
    assert!(crate::case::tiphys_decides(&policy, &web, &request));
}

#[test]
fn scopes_that_are_not_a_list_fail_the_load() {
    // Upstream logs the YAML error and keeps its default scopes (`[groups]`).
    for bad in ["groups", "{groups: email}"] {
        let err = load(&[("scopes", bad), ("policy.csv", "g, devs, role:admin")]).unwrap_err();
        assert!(err.to_string().starts_with("scopes:"), "{bad}: {err}");
    }
    let listed = load(&[("scopes", "[groups]"), ("policy.csv", "g, devs, role:admin")]).unwrap();
    let claims: Map<String, Value> = json!({"groups": ["devs"]}).as_object().unwrap().clone();
    assert!(listed.decide(
        &FixedProjects::default(),
        Subject::Claims {
            user: "bob",
            claims: Some(&claims)
        },
        "clusters",
        "delete",
        "x"
    ));
}

fn regex_grant(pattern: &str) -> Policy {
    load(&[
        ("policy.matchMode", "regex"),
        (
            "policy.csv",
            &format!("p, alice, clusters, get, {pattern}, allow\np, alice, clusters, get, ^x$, allow"),
        ),
    ])
    .unwrap()
}

#[test]
fn regex_long_unicode_class_names_are_accepted() {
    // Go's regexp knows `\p{L}` but refuses `\p{Letter}`; upstream's check
    // then fails (deny), even for `x`, which the other line allows.
    let p = regex_grant(r"^\p{Letter}+$");
    assert!(alice(&p, "clusters", "get", "x"));
    assert!(alice(&p, "clusters", "get", "kube"));
    assert_eq!(regex_matches("kube", r"^\p{Letter}+$"), Some(true));
}

#[test]
fn regex_nested_repeats_over_a_thousand_are_accepted() {
    // Go refuses nested repeats whose counts multiply past 1000; upstream's
    // check then fails (deny).
    let p = regex_grant("^(a{100}){20}$");
    assert!(alice(&p, "clusters", "get", &"a".repeat(2000)));
    assert!(alice(&p, "clusters", "get", "x"));
    assert!(!alice(&p, "clusters", "get", "a"));
}
