use std::sync::Arc;

use clap::Parser as _;

use super::files::block_scalar_lines;
use super::projects::parse_projects;
use super::*;
use crate::cli::{Cli, Command};
use crate::rbac::{ProjectRole, ProjectRoles};

fn can_args(args: &[&str]) -> CanArgs {
    let mut all = vec!["tiphys", "admin", "settings", "rbac", "can"];
    all.extend_from_slice(args);
    let cli = Cli::try_parse_from(all).unwrap();
    let Command::Admin(super::super::admin::AdminCommand::Settings(
        super::super::admin::SettingsCommand::Rbac(RbacCommand::Can(args)),
    )) = cli.command
    else {
        panic!("not rbac can");
    };
    args
}

#[test]
fn flags_parse_as_upstream() {
    let a = can_args(&["alice", "get", "app", "--policy-file", "p.csv"]);
    assert_eq!(
        (a.subject.as_str(), a.action.as_str(), a.resource.as_str()),
        ("alice", "get", "app")
    );
    assert_eq!(a.subresource, None);
    assert!(a.use_builtin_policy && a.strict && !a.quiet);
    assert!(a.default_role.is_empty());
    let a = can_args(&[
        "alice",
        "get",
        "app",
        "p/a",
        "--policy-file",
        "p.csv",
        "--use-builtin-policy=false",
        "--strict=0",
        "-q",
        "--default-role",
        "role:x",
    ]);
    assert_eq!(a.subresource.as_deref(), Some("p/a"));
    assert!(!a.use_builtin_policy && !a.strict && a.quiet);
    assert_eq!(a.default_role, "role:x");
    // A bare flag is true and does not swallow the next positional.
    let a = can_args(&["--strict", "alice", "get", "app", "--policy-file", "p.csv"]);
    assert!(a.strict && a.subject == "alice");
    let a = can_args(&[
        "-",
        "get",
        "app",
        "--policy-file",
        "p",
        "--project-file",
        "a",
        "--project-file",
        "b",
    ]);
    assert_eq!(a.project_files.len(), 2);
    assert!(Cli::try_parse_from(["tiphys", "admin", "settings", "rbac", "can", "a", "get", "app"]).is_err());
    assert!(parse_go_bool("nope").is_err());
    assert_eq!(parse_go_bool("F"), Ok(false));
}

#[test]
fn csv_and_manifest_forms() {
    let csv = PolicyFile::parse("p.csv", "p, alice, applications, get, */*, allow\n").unwrap();
    assert!(!csv.manifest);
    assert_eq!(
        csv.data["policy.csv"],
        "p, alice, applications, get, */*, allow\n"
    );
    // Comment lines and one-line CSV are YAML scalars, not manifests.
    let csv = PolicyFile::parse("p.csv", "# a: b\ng, a: b, c\n").unwrap();
    assert!(!csv.manifest);

    let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.default: role:readonly\n  policy.csv: |\n    p, a, b, c, d, allow\n  policy.extra.csv: p, x, y, z, w, allow\n";
    let cm = PolicyFile::parse("cm.yaml", text).unwrap();
    assert!(cm.manifest && cm.warnings.is_empty(), "{:?}", cm.warnings);
    assert_eq!(cm.data["policy.default"], "role:readonly");
    assert_eq!(cm.block_lines.get("policy.csv"), Some(&7));
    assert_eq!(cm.block_lines.get("policy.extra.csv"), None);

    // Without kind, a data mapping is enough.
    let cm = PolicyFile::parse("cm.yaml", "data:\n  policy.csv: \"\"\n").unwrap();
    assert!(cm.manifest && cm.is_empty());
    let cm = PolicyFile::parse("cm.yaml", "kind: ConfigMap\nmetadata:\n  name: argocd-cm\n").unwrap();
    assert!(
        cm.data.is_empty() && cm.warnings[0].contains("not argocd-rbac-cm"),
        "{:?}",
        cm.warnings
    );
}

#[test]
fn manifest_errors_are_clear() {
    let err = PolicyFile::parse("cm.yaml", "kind: ConfigMap\ndata:\n  policy.default: 3\n").unwrap_err();
    assert_eq!(
        err,
        "cm.yaml: data.policy.default: expected a string, got a number; quote the value"
    );
    let err = PolicyFile::parse("cm.yaml", "kind: ConfigMap\ndata:\n  scopes: [a, b]\n").unwrap_err();
    assert!(
        err.contains("data.scopes: expected a string, got a list"),
        "{err}"
    );
    let err = PolicyFile::parse("cm.yaml", "kind: ConfigMap\ndata:\n  policy.csv:\n").unwrap_err();
    assert!(err.contains("write \"\""), "{err}");
    let err = PolicyFile::parse("cm.yaml", "kind: ConfigMap\ndata: text\n").unwrap_err();
    assert!(err.contains("data must be a mapping"), "{err}");
    let err = PolicyFile::parse("proj.yaml", "kind: AppProject\nmetadata:\n  name: x\n").unwrap_err();
    assert_eq!(
        err,
        "proj.yaml: kind is AppProject; expected an argocd-rbac-cm ConfigMap manifest or a CSV policy"
    );
}

#[test]
fn several_documents_pick_argocd_rbac_cm() {
    let text = "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  url: x\n---\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.csv: p, a, b, c, d, allow\n";
    let cm = PolicyFile::parse("all.yaml", text).unwrap();
    assert_eq!(cm.data["policy.csv"], "p, a, b, c, d, allow");
    let text = "kind: ConfigMap\ndata: {}\n---\nkind: ConfigMap\ndata: {}\n";
    assert!(
        PolicyFile::parse("all.yaml", text)
            .unwrap_err()
            .contains("not exactly one named")
    );
}

#[test]
fn load_errors_name_the_file_and_line() {
    let csv = PolicyFile::parse("p.csv", "p, a, b, c, d, allow\np, a, b\n").unwrap();
    let err = csv.load(true).unwrap_err();
    assert!(err.starts_with("p.csv: line 2: a 'p' line has 6 fields"), "{err}");
    let text = "kind: ConfigMap\ndata:\n  policy.csv: |\n    p, a, b, c, d, allow\n    x, y\n";
    let cm = PolicyFile::parse("cm.yaml", text).unwrap();
    let err = cm.load(false).unwrap_err();
    assert!(
        err.starts_with("cm.yaml:5: policy.csv line 2: a policy line starts with"),
        "{err}"
    );
    let cm = PolicyFile::parse("cm.yaml", "kind: ConfigMap\ndata:\n  scopes: '{a: 1}'\n").unwrap();
    assert!(cm.load(false).unwrap_err().starts_with("cm.yaml: scopes: "));
}

#[test]
fn warnings_are_placed_in_the_file() {
    let csv = PolicyFile::parse("p.csv", "\np, a, b, c, d, allow # note\n").unwrap();
    let policy = csv.load(false).unwrap();
    let placed: Vec<String> = policy.warnings().iter().map(|w| csv.locate_warning(w)).collect();
    assert!(placed[0].starts_with("p.csv: line 2: effect"), "{placed:?}");
    let cm = PolicyFile::parse(
        "cm.yaml",
        "kind: ConfigMap\ndata:\n  policy.matchMode: regex\n  policy.matchmode: x\n  policy.csv: |\n    p, a, b, c, *, allow\n",
    )
    .unwrap();
    assert!(
        cm.warnings
            .iter()
            .any(|w| w.contains("data.policy.matchmode is not")),
        "{:?}",
        cm.warnings
    );
    let policy = cm.load(false).unwrap();
    let placed: Vec<String> = policy.warnings().iter().map(|w| cm.locate_warning(w)).collect();
    assert!(placed[0].starts_with("cm.yaml: pattern \"*\""), "{placed:?}");
}

#[test]
fn object_forms() {
    assert_eq!(object_for("applications", ""), "*/*");
    assert_eq!(object_for("repositories", "*"), "*/*");
    assert_eq!(object_for("applications", "p/a"), "p/a");
    assert_eq!(object_for("projects", "*"), "*");
    assert_eq!(object_for("certificates", ""), "");
}

#[test]
fn claims_give_the_user_as_the_server_does() {
    let claims = |raw: &str| parse_claims(raw).unwrap();
    assert_eq!(
        claims_user(&claims(r#"{"sub":"x","federated_claims":{"user_id":"u"}}"#)),
        "u"
    );
    assert_eq!(
        claims_user(&claims(r#"{"sub":"x","federated_claims":{"user_id":""}}"#)),
        "x"
    );
    assert_eq!(claims_user(&claims(r#"{"sub":7}"#)), "");
    assert_eq!(
        claims_user(&claims(r#"{"sub":"alice:login","iss":"argocd"}"#)),
        "alice"
    );
    assert_eq!(
        claims_user(&claims(r#"{"sub":"ci:apiKey","iss":"argocd"}"#)),
        "ci"
    );
    assert_eq!(
        claims_user(&claims(r#"{"sub":"alice:login","iss":"dex"}"#)),
        "alice:login"
    );
    assert_eq!(
        claims_user(&claims(r#"{"sub":"proj:web:ci","iss":"argocd"}"#)),
        "proj:web:ci"
    );
    assert!(
        parse_claims("[1]")
            .unwrap_err()
            .to_string()
            .contains("got an array")
    );
    assert!(
        parse_claims("{")
            .unwrap_err()
            .to_string()
            .contains("not valid JSON")
    );
}

#[test]
fn project_files() {
    let text = "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: web\nspec:\n  roles:\n  - name: deployer\n    policies:\n    - p, proj:web:deployer, applications, sync, web/*, allow\n    groups: [my-org:web]\n  - name: empty\n---\nkind: AppProject\nmetadata:\n  name: db\n---\n";
    let projects = parse_projects("p.yaml", text).unwrap();
    assert_eq!(projects.len(), 2);
    assert_eq!(projects[0].roles[0].groups, ["my-org:web"]);
    assert_eq!(projects[0].roles[1].policies, Vec::<String>::new());
    assert!(projects[1].roles.is_empty());
    let err = parse_projects("p.yaml", "kind: ConfigMap\n").unwrap_err();
    assert_eq!(err, "p.yaml: document 1: kind is ConfigMap, not AppProject");
    let err = parse_projects("p.yaml", "kind: AppProject\nmetadata: {}\n").unwrap_err();
    assert!(err.contains("no metadata.name"), "{err}");
    let err = parse_projects(
        "p.yaml",
        "kind: AppProject\nmetadata: {name: w}\nspec:\n  roles:\n  - name: r\n    policies: [1]\n",
    )
    .unwrap_err();
    assert!(
        err.contains("spec.roles[0].policies: expected strings, got a number"),
        "{err}"
    );
}

#[test]
fn ignored_group_grants_are_spotted() {
    let file = PolicyFile::csv(
        "p.csv",
        "p, org:team, applications, get, */*, allow\np, org:bound, a, b, c, allow\ng, org:bound, role:x\n",
    );
    let policy = file.load(true).unwrap();
    assert!(ignored_group_grant(&policy, "org:team"));
    assert!(!ignored_group_grant(&policy, "org:bound"));
    assert!(!ignored_group_grant(&policy, "role:team"));
    assert!(!ignored_group_grant(&policy, "alice"));

    // The warning is only for grants the server would really not give.
    let none = FixedProjects::default();
    let policy = file.load(true).unwrap();
    assert!(!group_allowed_by_server(
        &policy,
        &none,
        "org:team",
        "applications",
        "get",
        "p/a"
    ));
    // A fresh policy: `with_default_role` keeps the decisions already cached.
    let policy = file.load(true).unwrap().with_default_role("role:readonly");
    assert!(group_allowed_by_server(
        &policy,
        &none,
        "org:team",
        "applications",
        "get",
        "p/a"
    ));
    let roles = ProjectRoles {
        name: "p".to_owned(),
        roles: vec![ProjectRole {
            name: "r".to_owned(),
            policies: vec!["p, proj:p:r, clusters, get, p/*, allow".to_owned()],
            groups: vec!["org:team".to_owned()],
        }],
    };
    let projects = FixedProjects(vec![Arc::new(roles)]);
    let policy = file.load(true).unwrap();
    assert!(group_allowed_by_server(
        &policy, &projects, "org:team", "clusters", "get", "p/x"
    ));
    let cm = PolicyFile::parse(
        "cm.yaml",
        "data:\n  scopes: '[]'\n  policy.csv: g, org:team, role:admin\n",
    )
    .unwrap();
    let policy = cm.load(true).unwrap();
    assert!(
        !group_allowed_by_server(&policy, &none, "org:team", "applications", "get", "p/a"),
        "no scopes"
    );
}

#[test]
fn block_scalar_lines_are_found() {
    let text = "kind: ConfigMap\ndata:\n  # note\n  \"policy.a.csv\": |-\n    p\n  policy.csv: |\n    x\n\n    y\nmetadata:\n  policy.b.csv: |\n";
    let lines = block_scalar_lines(text);
    assert_eq!(lines.get("policy.a.csv"), Some(&4));
    assert_eq!(lines.get("policy.csv"), Some(&6));
    assert_eq!(lines.get("policy.b.csv"), None, "not under data");
}
