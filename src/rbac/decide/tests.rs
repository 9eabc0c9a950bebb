//! Every trap of Argo CD's RBAC (the reference's checklist), one test each.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value, json};

use super::*;
use crate::rbac::project::{FixedProjects, ProjectRole};

fn policy(csv: &str) -> Policy {
    Policy::from_csv(csv, LoadOptions::default()).unwrap()
}

fn config(pairs: &[(&str, &str)]) -> Policy {
    let data: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Policy::from_config(&data, LoadOptions::default()).unwrap()
}

fn no_projects() -> FixedProjects {
    FixedProjects::default()
}

/// A signed-in user with these claims.
fn user(p: &Policy, name: &str, claims: &Value, res: &str, act: &str, obj: &str) -> bool {
    user_in(p, &no_projects(), name, claims, res, act, obj)
}

fn user_in(
    p: &Policy,
    projects: &dyn ProjectSource,
    name: &str,
    claims: &Value,
    res: &str,
    act: &str,
    obj: &str,
) -> bool {
    let claims: &Map<String, Value> = claims.as_object().unwrap();
    p.decide(
        projects,
        Subject::Claims {
            user: name,
            claims: Some(claims),
        },
        res,
        act,
        obj,
    )
}

fn account(p: &Policy, name: &str, res: &str, act: &str, obj: &str) -> bool {
    p.decide(
        &no_projects(),
        Subject::Claims {
            user: name,
            claims: None,
        },
        res,
        act,
        obj,
    )
}

fn anonymous(p: &Policy, res: &str, act: &str, obj: &str) -> bool {
    p.decide(&no_projects(), Subject::Plain(""), res, act, obj)
}

#[test]
fn glob_star_crosses_slashes_and_matches_empty() {
    let p = policy("p, alice, applications, get, default/*, allow\np, alice, clusters, get, *, allow");
    assert!(
        account(&p, "alice", "applications", "get", "default/ns/app"),
        "2-part pattern, 3-part object"
    );
    assert!(
        account(&p, "alice", "clusters", "get", ""),
        "* matches the empty object"
    );
    let admin = policy("");
    assert!(
        !account(&admin, "admin", "applications", "get", "test"),
        "*/* needs a slash"
    );
    assert!(account(&admin, "admin", "applications", "get", "a/b/c"));
}

#[test]
fn deny_only_overrides_allows_of_the_same_check() {
    let p = policy(
        "p, alice, applications, delete, */*, deny\ng, devs, role:dev\np, role:dev, applications, *, */*, allow",
    );
    let claims = json!({"groups": ["devs"]});
    assert!(
        user(&p, "alice", &claims, "applications", "delete", "p/a"),
        "the group's check allows; alice's deny is another check"
    );
    let p = policy(
        "g, alice, role:dev\np, role:dev, applications, *, */*, allow\np, alice, applications, delete, */*, deny",
    );
    assert!(
        !account(&p, "alice", "applications", "delete", "p/a"),
        "within one check the deny wins"
    );
    assert!(account(&p, "alice", "applications", "sync", "p/a"));
}

#[test]
fn token_group_counts_only_when_first_field_of_a_g_line() {
    let p = policy(
        "p, devs, applications, get, */*, allow\np, ops, applications, get, */*, allow\ng, ops, role:nothing",
    );
    assert!(
        !user(
            &p,
            "bob",
            &json!({"groups": ["devs"]}),
            "applications",
            "get",
            "p/a"
        ),
        "devs is only a p subject"
    );
    assert!(user(
        &p,
        "bob",
        &json!({"groups": ["ops"]}),
        "applications",
        "get",
        "p/a"
    ));
}

#[test]
fn field_counts_are_strict() {
    for bad in [
        "p, a, b, c, allow",
        "p, a, b, c, d, allow, x",
        "g, a",
        "g, a, b, c",
        "x, a, b",
    ] {
        let err = Policy::from_csv(bad, LoadOptions::default()).unwrap_err();
        assert!(err.to_string().starts_with("policy.csv line 1: "), "{bad}: {err}");
    }
}

#[test]
fn effect_must_be_exactly_allow_or_deny() {
    let p = policy("p, alice, clusters, get, *, Allow\np, alice, clusters, delete, *, allow # really");
    assert!(!account(&p, "alice", "clusters", "get", "x"));
    assert!(!account(&p, "alice", "clusters", "delete", "x"));
    assert_eq!(p.warnings().len(), 2);
    let p = policy("p, alice, clusters, get, *, allow\np, alice, clusters, get, *, Deny");
    assert!(
        account(&p, "alice", "clusters", "get", "x"),
        "`Deny` is not a deny either"
    );
}

#[test]
fn trailing_blanks_inside_fields_are_kept() {
    let p = policy("p, alice, applications, get, foo/* , allow");
    assert!(!account(&p, "alice", "applications", "get", "foo/x"));
    assert!(account(&p, "alice", "applications", "get", "foo/x "));
}

#[test]
fn quoted_fields_may_hold_commas() {
    let p = policy("p, \"role:q\", logs, get, \"ns/a,b\", allow\ng, erin, \"role:q\"");
    assert!(account(&p, "erin", "logs", "get", "ns/a,b"));
    assert!(!account(&p, "erin", "logs", "get", "ns/a"));
    assert!(Policy::from_csv("p, a\"b, c, d, e, allow", LoadOptions::default()).is_err());
    assert!(Policy::from_csv("p, \"a, c, d, e, allow", LoadOptions::default()).is_err());
}

#[test]
fn regex_mode_is_unanchored_and_applies_to_resource_and_action() {
    let p = config(&[
        ("policy.matchMode", "regex"),
        ("policy.csv", "p, alice, applications, update, proj/app, allow"),
    ]);
    assert!(account(
        &p,
        "alice",
        "applicationsets",
        "update/apps/Deployment/ns/x",
        "xproj/app-2"
    ));
    let anchored = config(&[
        ("policy.matchMode", "regex"),
        ("policy.csv", "p, alice, ^applications$, ^get$, ^proj/.*$, allow"),
    ]);
    assert!(!account(&anchored, "alice", "applicationsets", "get", "proj/a"));
    assert!(account(&anchored, "alice", "applications", "get", "proj/a"));
}

#[test]
fn regex_invalid_pattern_reached_denies_the_check() {
    let p = config(&[
        ("policy.matchMode", "regex"),
        (
            "policy.csv",
            "p, alice, applications, get, .*, allow\np, alice, applications, get, *, allow",
        ),
    ]);
    assert!(!account(&p, "alice", "applications", "get", "p/a"));
    assert!(
        !p.warnings().is_empty(),
        "the invalid pattern is reported at load"
    );
}

#[test]
fn builtin_policy_denies_in_regex_mode() {
    let p = config(&[("policy.matchMode", "regex")]);
    assert!(!account(&p, "admin", "applications", "get", "p/a"));
    assert!(!account(&p, "admin", "clusters", "get", "https://k"));
    let glob = config(&[("policy.matchMode", "glob")]);
    assert!(account(&glob, "admin", "clusters", "get", "https://k"));
}

#[test]
fn subjects_are_exact_and_case_sensitive_in_both_modes() {
    let p = policy("p, *, clusters, get, *, allow\ng, Alice, role:admin");
    assert!(!account(&p, "bob", "clusters", "get", "x"));
    assert!(!account(&p, "alice", "clusters", "update", "x"));
    assert!(account(&p, "Alice", "clusters", "update", "x"));
    let p = policy("p, *, *, *, *, deny\ng, bob, role:admin");
    assert!(
        account(&p, "bob", "clusters", "update", "x"),
        "a deny for `*` denies only a subject named `*`"
    );
}

#[test]
fn role_inheritance_is_transitive_and_depth_limited() {
    let mut csv = String::from("p, role:r10, clusters, get, *, allow\n");
    for i in 0..10 {
        csv.push_str(&format!("g, role:r{i}, role:r{}\n", i + 1));
    }
    csv.push_str("g, alice, role:r1\ng, bob, role:r0\ng, role:r10, role:r0\n");
    let p = policy(&csv);
    assert!(account(&p, "alice", "clusters", "get", "x"), "9 bindings");
    assert!(!account(&p, "bob", "clusters", "get", "x"), "11 bindings");
    assert!(
        account(&p, "role:r0", "clusters", "get", "x"),
        "10 bindings, and the cycle ends"
    );
}

#[test]
fn default_role_allow_is_final_and_its_deny_is_not() {
    let p = config(&[
        ("policy.default", "role:readonly"),
        (
            "policy.csv",
            "p, alice, clusters, get, *, deny\np, role:readonly, repositories, get, *, deny\np, alice, repositories, get, *, allow",
        ),
    ]);
    assert!(
        account(&p, "alice", "clusters", "get", "x"),
        "nothing revokes the default role's allow"
    );
    assert!(
        account(&p, "alice", "repositories", "get", "x"),
        "a deny in the default role only fails that check"
    );
    assert!(anonymous(&p, "clusters", "get", "x"));
    assert!(!anonymous(&p, "repositories", "get", "x"));
}

#[test]
fn anonymous_gets_only_the_default_role_and_empty_subject_lines() {
    let p = policy("p, , clusters, get, *, allow\np, alice, projects, get, *, allow");
    assert!(anonymous(&p, "clusters", "get", "x"));
    assert!(!anonymous(&p, "projects", "get", "x"));
    assert!(
        account(&p, "bob", "clusters", "get", "x"),
        "upstream checks `\"\"` for everyone last"
    );
}

#[test]
fn scopes_choose_the_group_claims() {
    let p = config(&[
        ("scopes", "[groups, email]"),
        (
            "policy.csv",
            "g, carol@example.org, role:admin\ng, team-a, role:readonly",
        ),
    ]);
    let claims = json!({"email": "carol@example.org", "groups": "team-a"});
    assert!(
        user(&p, "u1", &claims, "clusters", "delete", "x"),
        "email via scopes"
    );
    assert!(
        user(&p, "u1", &json!({"groups": "team-a"}), "clusters", "get", "x"),
        "a string claim is one group"
    );
    let none = config(&[("scopes", "[]"), ("policy.csv", "g, team-a, role:readonly")]);
    assert!(!user(
        &none,
        "u1",
        &json!({"groups": ["team-a"]}),
        "clusters",
        "get",
        "x"
    ));
    let default = config(&[("policy.csv", "g, team-a, role:readonly")]);
    assert_eq!(default.scopes(), ["groups"]);
    assert!(user(
        &default,
        "u1",
        &json!({"groups": ["x", 3, "team-a"]}),
        "clusters",
        "get",
        "x"
    ));
    assert!(
        Policy::from_config(
            &BTreeMap::from([("scopes".to_owned(), "{a: b}".to_owned())]),
            LoadOptions::default()
        )
        .is_err()
    );
}

#[test]
fn user_id_equal_to_a_group_name_is_the_group() {
    let p = policy("g, devs, role:admin");
    assert!(account(&p, "devs", "clusters", "delete", "x"));
}

#[test]
fn builtin_admin_and_readonly() {
    let p = policy("");
    assert!(account(&p, "admin", "applications", "sync", "p/a"));
    assert!(
        account(&p, "admin", "logs", "get", "p/a"),
        "inherited from readonly"
    );
    assert!(!account(&p, "admin", "extensions", "invoke", "x"));
    assert!(!account(&p, "admin", "gpgkeys", "update", ""));
    assert!(!account(&p, "admin", "accounts", "create", "x"));
    let no_builtin = Policy::from_csv("", LoadOptions { builtin: false }).unwrap();
    assert!(!account(&no_builtin, "admin", "applications", "get", "p/a"));
}

#[test]
fn update_and_update_subresource_are_separate_actions() {
    let p = policy("p, alice, applications, update, */*, allow");
    assert!(account(&p, "alice", "applications", "update", "p/a"));
    assert!(!account(
        &p,
        "alice",
        "applications",
        "update/apps/Deployment/ns/x",
        "p/a"
    ));
}

fn project(name: &str, roles: Vec<ProjectRole>) -> Arc<ProjectRoles> {
    Arc::new(ProjectRoles {
        name: name.to_owned(),
        roles,
    })
}

fn role(name: &str, policies: &[&str], groups: &[&str]) -> ProjectRole {
    ProjectRole {
        name: name.to_owned(),
        policies: policies.iter().map(|s| (*s).to_owned()).collect(),
        groups: groups.iter().map(|s| (*s).to_owned()).collect(),
    }
}

fn web_and_db() -> FixedProjects {
    FixedProjects(vec![
        project(
            "web",
            vec![role(
                "deployer",
                &["p, proj:web:deployer, applications, sync, web/*, allow"],
                &["web-team"],
            )],
        ),
        project(
            "db",
            vec![role(
                "reader",
                &["p, proj:db:reader, applications, get, db/*, allow"],
                &[],
            )],
        ),
    ])
}

#[test]
fn project_token_acts_only_within_its_project() {
    let p = config(&[(
        "policy.csv",
        "p, proj:web:deployer, applications, get, */*, allow",
    )]);
    let projects = web_and_db();
    let none = json!({});
    assert!(user_in(
        &p,
        &projects,
        "proj:web:deployer",
        &none,
        "applications",
        "sync",
        "web/app"
    ));
    assert!(
        user_in(
            &p,
            &projects,
            "proj:web:deployer",
            &none,
            "projects",
            "get",
            "web"
        ),
        "automatic get"
    );
    assert!(
        !user_in(
            &p,
            &projects,
            "proj:web:deployer",
            &none,
            "applications",
            "get",
            "db/app"
        ),
        "another existing project: denied even though global allows"
    );
    assert!(
        user_in(
            &p,
            &projects,
            "proj:web:deployer",
            &none,
            "applications",
            "get",
            "gone/app"
        ),
        "no such project: the global policy decides"
    );
    assert!(
        !user_in(
            &p,
            &projects,
            "proj:web:nobody",
            &none,
            "applications",
            "sync",
            "web/app"
        ),
        "the role must exist"
    );
}

#[test]
fn project_policies_apply_only_to_their_projects_objects() {
    let sneaky = FixedProjects(vec![project(
        "web",
        vec![role(
            "dev",
            &["p, proj:web:dev, applications, get, db/*, allow"],
            &["devs"],
        )],
    )]);
    let p = policy("");
    let claims = json!({"groups": ["devs"]});
    assert!(!user_in(
        &p,
        &sneaky,
        "bob",
        &claims,
        "applications",
        "get",
        "db/app"
    ));
    assert!(
        user_in(&p, &sneaky, "bob", &claims, "projects", "get", "web"),
        "group members get their project"
    );
    assert!(!user_in(&p, &sneaky, "bob", &claims, "projects", "get", "db"));
}

#[test]
fn project_groups_bind_to_the_role() {
    let p = policy("");
    let projects = web_and_db();
    assert!(user_in(
        &p,
        &projects,
        "carol",
        &json!({"groups": ["web-team"]}),
        "applications",
        "sync",
        "web/app"
    ));
    assert!(!user_in(
        &p,
        &projects,
        "carol",
        &json!({"groups": ["web-team"]}),
        "applications",
        "sync",
        "db/app"
    ));
    assert!(!user_in(
        &p,
        &projects,
        "carol",
        &json!({"groups": ["other"]}),
        "applications",
        "sync",
        "web/app"
    ));
}

#[test]
fn project_token_gets_the_default_role_with_the_project_layer() {
    // Upstream decides a token through `enforce()`, which tries the default role
    // first, on the enforcer that holds the project's lines (found by the
    // Casbin oracle test, tests/rbac_oracle).
    let p = config(&[("policy.default", "role:web-viewer")]);
    let projects = FixedProjects(vec![project(
        "web",
        vec![
            role("deployer", &[], &[]),
            role(
                "viewer",
                &["p, proj:web:viewer, applications, get, web/*, allow"],
                &["role:web-viewer"],
            ),
        ],
    )]);
    let token = |act: &str| {
        user_in(
            &p,
            &projects,
            "proj:web:deployer",
            &json!({}),
            "applications",
            act,
            "web/app",
        )
    };
    assert!(token("get"), "the default role reaches proj:web:viewer");
    assert!(!token("sync"));
    assert!(
        !user_in(
            &p,
            &projects,
            "proj:db:x",
            &json!({}),
            "applications",
            "get",
            "web/app"
        ),
        "another project's token is still refused"
    );
}

#[test]
fn project_token_denies_apply() {
    let p = config(&[(
        "policy.csv",
        "p, proj:web:deployer, applications, sync, web/secret, deny",
    )]);
    let projects = web_and_db();
    assert!(!user_in(
        &p,
        &projects,
        "proj:web:deployer",
        &json!({}),
        "applications",
        "sync",
        "web/secret"
    ));
    assert!(user_in(
        &p,
        &projects,
        "proj:web:deployer",
        &json!({}),
        "applications",
        "sync",
        "web/other"
    ));
}

#[test]
fn broken_project_policy_falls_back_to_global() {
    let projects = FixedProjects(vec![project(
        "web",
        vec![role("dev", &["p, proj:web:dev, applications, get"], &["devs"])],
    )]);
    let p = policy("g, devs, role:readonly");
    let claims = json!({"groups": ["devs"]});
    assert!(
        user_in(&p, &projects, "bob", &claims, "applications", "get", "web/app"),
        "global grants survive"
    );
    assert!(!user_in(
        &p,
        &projects,
        "proj:web:dev",
        &json!({}),
        "applications",
        "sync",
        "web/app"
    ));
}

/// Projects whose generation a test can bump.
struct Changing {
    inner: Mutex<Vec<Arc<ProjectRoles>>>,
    generation: AtomicU64,
}

impl ProjectSource for Changing {
    fn project(&self, name: &str) -> Option<Arc<ProjectRoles>> {
        self.inner
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.name == name)
            .cloned()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

#[test]
fn cached_decisions_follow_project_changes() {
    let source = Changing {
        inner: Mutex::new(vec![project("web", vec![role("dev", &[], &["devs"])])]),
        generation: AtomicU64::new(1),
    };
    let p = policy("");
    let claims = json!({"groups": ["devs"]});
    assert!(!user_in(
        &p,
        &source,
        "bob",
        &claims,
        "applications",
        "sync",
        "web/app"
    ));
    *source.inner.lock().unwrap() = vec![project(
        "web",
        vec![role(
            "dev",
            &["p, proj:web:dev, applications, sync, web/*, allow"],
            &["devs"],
        )],
    )];
    source.generation.store(2, Ordering::SeqCst);
    assert!(user_in(
        &p,
        &source,
        "bob",
        &claims,
        "applications",
        "sync",
        "web/app"
    ));
}

#[test]
fn cached_and_uncached_agree() {
    let p = config(&[
        ("policy.default", "role:readonly"),
        (
            "policy.csv",
            "g, devs, role:admin\np, bob, clusters, delete, *, deny",
        ),
    ]);
    for (res, act, obj) in [
        ("clusters", "delete", "x"),
        ("clusters", "get", "x"),
        ("applications", "sync", "a/b"),
    ] {
        let claims = json!({"groups": ["devs"]});
        let first = user(&p, "bob", &claims, res, act, obj);
        let again = user(&p, "bob", &claims, res, act, obj);
        let groups = ["devs"];
        let raw = p.decide_uncached(&no_projects(), "bob", Some(&groups), res, act, obj);
        assert_eq!((first, again), (raw, raw), "{res} {act} {obj}");
    }
}
