//! `tiphys admin settings rbac can|validate` (offline, on policy files as CSV
//! and as argocd-rbac-cm manifests) and `tiphys account can-i` (the server's
//! answer for the logged-in caller), from the real binary.

use std::path::{Path, PathBuf};

use crate::support::TestServer;

/// A directory of policy and project files for one test.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

/// What a run printed and how it exited.
#[derive(Debug)]
struct Run {
    code: i32,
    out: String,
    err: String,
}

fn tiphys(args: &[&str], config: Option<&Path>, stdin: &str) -> Run {
    let out = crate::support::cli_with(args, config, stdin);
    Run {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into(),
        err: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// `tiphys admin settings rbac can ARGS… --policy-file POLICY`.
fn can(policy: &str, args: &[&str]) -> Run {
    let mut all = vec!["admin", "settings", "rbac", "can", "--policy-file", policy];
    all.extend_from_slice(args);
    tiphys(&all, None, "")
}

fn validate(policy: &str) -> Run {
    tiphys(
        &["admin", "settings", "rbac", "validate", "--policy-file", policy],
        None,
        "",
    )
}

#[track_caller]
fn yes(policy: &str, args: &[&str]) -> Run {
    let run = can(policy, args);
    assert_eq!((run.code, run.out.as_str()), (0, "Yes\n"), "{args:?}: {run:?}");
    run
}

#[track_caller]
fn no(policy: &str, args: &[&str]) -> Run {
    let run = can(policy, args);
    assert_eq!((run.code, run.out.as_str()), (1, "No\n"), "{args:?}: {run:?}");
    run
}

#[track_caller]
fn fails(policy: &str, args: &[&str]) -> Run {
    let run = can(policy, args);
    assert_eq!(run.code, 1, "{args:?}: {run:?}");
    assert!(run.out.is_empty(), "no answer on an error: {run:?}");
    run
}

/// `ARGS… --claims CLAIMS [--project-file P]…`
fn with_claims<'a>(args: &[&'a str], claims: &'a str, projects: &[&'a str]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.extend(["--claims", claims]);
    for project in projects {
        all.extend(["--project-file", project]);
    }
    all
}

const CSV: &str = "\
# Developers: read everything of project web, sync its apps.
p, role:dev, applications, get, web/*, allow
p, role:dev, applications, sync, web/*, allow
p, role:dev, applications, delete, web/prod-*, deny
p, role:dev, repositories, get, *, allow
g, alice, role:dev
p, carol, projects, get, web, allow
p, carol, certificates, get, *, allow
p, my-org:ops, clusters, get, *, allow
";

fn manifest(data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\n  namespace: argocd\ndata:\n{data}"
    )
}

#[test]
fn can_answers_yes_and_no_from_a_csv_policy() {
    let files = Files::new();
    let csv = files.write("policy.csv", CSV);
    yes(&csv, &["alice", "get", "applications", "web/guestbook"]);
    yes(&csv, &["alice", "sync", "applications", "web/ns/guestbook"]);
    no(&csv, &["alice", "sync", "applications", "db/guestbook"]);
    no(&csv, &["alice", "delete", "applications", "web/prod-x"]);
    no(&csv, &["bob", "get", "applications", "web/guestbook"]);
    // Aliases of resources.
    yes(&csv, &["alice", "get", "app", "web/a"]);
    yes(&csv, &["alice", "get", "apps", "web/a"]);
    yes(&csv, &["alice", "get", "repo", "https://github.com/x/y"]);
    yes(&csv, &["carol", "get", "proj", "web"]);
    no(&csv, &["carol", "get", "project", "db"]);
    yes(&csv, &["carol", "get", "cert"]);
    // Empty or `*` sub-resource of a project-scoped resource is `*/*`.
    yes(&csv, &["admin", "get", "applications"]);
    yes(&csv, &["admin", "get", "applications", "*"]);
    yes(&csv, &["alice", "get", "repositories"]);
    // web/* does not cover every project.
    no(&csv, &["alice", "get", "applications", "*"]);
    yes(&csv, &["admin", "get", "clusters", "*"]);
    // The built-in policy is in by default, and can be left out.
    yes(&csv, &["admin", "delete", "applications", "p/a"]);
    no(
        &csv,
        &[
            "admin",
            "delete",
            "applications",
            "p/a",
            "--use-builtin-policy=false",
        ],
    );
    no(&csv, &["admin", "get", "applications", "--use-builtin-policy=0"]);
    yes(
        &csv,
        &["alice", "get", "app", "web/a", "--use-builtin-policy=false"],
    );
    yes(&csv, &["admin", "get", "app", "--use-builtin-policy"]);
    // A default role for everyone.
    no(&csv, &["bob", "get", "clusters", "*"]);
    yes(
        &csv,
        &["bob", "get", "clusters", "*", "--default-role", "role:readonly"],
    );
    no(
        &csv,
        &[
            "bob",
            "update",
            "clusters",
            "*",
            "--default-role",
            "role:readonly",
        ],
    );
}

#[test]
fn quiet_prints_nothing() {
    let files = Files::new();
    let csv = files.write("p.csv", CSV);
    let run = can(&csv, &["-q", "alice", "get", "app", "web/a"]);
    assert_eq!((run.code, run.out.as_str(), run.err.as_str()), (0, "", ""));
    let run = can(&csv, &["--quiet", "alice", "delete", "app", "web/a"]);
    assert_eq!((run.code, run.out.as_str(), run.err.as_str()), (1, "", ""));
    // Even the SSO-group warning stays quiet.
    let run = can(&csv, &["-q", "my-org:ops", "get", "clusters", "*"]);
    assert_eq!((run.code, run.out.as_str(), run.err.as_str()), (0, "", ""));
}

#[test]
fn strict_mode_refuses_actions_a_resource_does_not_have() {
    let files = Files::new();
    let csv = files.write("p.csv", CSV);
    for (action, resource) in [
        ("fly", "applications"),
        ("get", "accounts"),
        ("sync", "projects"),
        ("get", "write-repositories"),
        ("get", "widgets"),
        ("update", "certificates"),
    ] {
        let run = fails(&csv, &["admin", action, resource, "x"]);
        assert!(
            run.err.contains("error in RBAC request:"),
            "{action} {resource}: {run:?}"
        );
    }
    let run = fails(&csv, &["admin", "fly", "app"]);
    assert!(
        run.err.contains("\"fly\"") && run.err.contains("applications"),
        "{run:?}"
    );
    // Paths after update/, delete/, action/ are fine; so is asking without --strict.
    yes(
        &csv,
        &["admin", "update/apps/Deployment/ns/web", "applications", "p/a"],
    );
    yes(&csv, &["admin", "action/apps/Deployment/restart", "app", "p/a"]);
    no(&csv, &["admin", "fly", "applications", "p/a", "--strict=false"]);
    no(&csv, &["bob", "get", "write-repositories", "x", "--strict=false"]);
}

#[test]
fn an_sso_group_with_only_p_lines_gets_a_warning() {
    let files = Files::new();
    let csv = files.write("p.csv", CSV);
    let run = yes(&csv, &["my-org:ops", "get", "clusters", "https://k8s"]);
    assert!(
        run.err.contains("warning:") && run.err.contains("my-org:ops") && run.err.contains("`g`"),
        "{run:?}"
    );
    // No warning when the server would allow anyway (here through the default role).
    let run = yes(
        &csv,
        &[
            "my-org:ops",
            "get",
            "clusters",
            "x",
            "--default-role",
            "role:readonly",
        ],
    );
    assert!(run.err.is_empty(), "{run:?}");
    // Roles and bound names are not groups that are ignored.
    let run = yes(&csv, &["role:dev", "get", "app", "web/a"]);
    assert!(run.err.is_empty(), "{run:?}");
    // The server agrees: as a group from a token, it grants nothing.
    no(
        &csv,
        &[
            "-",
            "get",
            "clusters",
            "https://k8s",
            "--claims",
            r#"{"sub":"x","groups":["my-org:ops"]}"#,
        ],
    );
}

#[test]
fn a_policy_that_does_not_load_is_reported_with_file_and_line() {
    let files = Files::new();
    let bad = files.write("bad.csv", "p, alice, applications, get, */*, allow\n\ng, alice\n");
    let run = fails(&bad, &["alice", "get", "app"]);
    assert!(
        run.err.contains(&format!("{bad}: line 3:")) && run.err.contains("'g' line has 3 fields"),
        "{run:?}"
    );
    let bad = files.write(
        "cm.yaml",
        &manifest("  policy.csv: |\n    p, alice, applications, get, */*, allow\n    p, alice, \"open, x\n"),
    );
    let run = fails(&bad, &["alice", "get", "app"]);
    // Line 2 of policy.csv is line 9 of the manifest.
    assert!(
        run.err.contains(&format!("{bad}:9: policy.csv line 2:")),
        "{run:?}"
    );
    assert!(run.err.contains("not closed"), "{run:?}");
    // The server refuses the same policy at the same line.
    let config = tempfile::tempdir().unwrap();
    std::fs::copy(&bad, config.path().join("argocd-rbac-cm.yaml")).unwrap();
    let config_dir = config.path().to_str().unwrap();
    let log = match TestServer::spawn(tempfile::tempdir().unwrap(), &["--config-dir", config_dir]) {
        Ok(_) => panic!("the server started on a bad policy"),
        Err(log) => log,
    };
    assert!(log.contains("argocd-rbac-cm.yaml:9: policy.csv line 2:"), "{log}");
    let run = fails(
        &files.write("nope.yaml", &manifest("  policy.default: 1\n")),
        &["a", "get", "app"],
    );
    assert!(
        run.err
            .contains("data.policy.default: expected a string, got a number"),
        "{run:?}"
    );
    let run = fails(
        &files.dir.path().join("missing.csv").to_string_lossy(),
        &["a", "get", "app"],
    );
    assert!(
        run.err.contains("cannot read the policy file") && run.err.contains("missing.csv"),
        "{run:?}"
    );
}

#[test]
fn a_manifest_brings_overlays_default_role_and_match_mode() {
    let files = Files::new();
    let cm = files.write(
        "argocd-rbac-cm.yaml",
        &manifest(
            "  policy.default: role:readonly\n  policy.csv: |\n    g, alice, role:dev\n  policy.team.csv: |\n    p, role:dev, applications, sync, web/*, allow\n",
        ),
    );
    yes(&cm, &["alice", "sync", "app", "web/a"]);
    no(&cm, &["alice", "sync", "app", "db/a"]);
    // policy.default gives everyone role:readonly; --default-role replaces it.
    yes(&cm, &["nobody", "get", "app", "db/a"]);
    yes(&cm, &["nobody", "get", "clusters", "x"]);
    no(
        &cm,
        &["nobody", "get", "clusters", "x", "--default-role", "role:none"],
    );
    yes(
        &cm,
        &["nobody", "sync", "app", "web/a", "--default-role", "role:dev"],
    );

    // Regex mode: unanchored unless anchored, and the built-in policy breaks.
    let regex = files.write(
        "regex.yaml",
        &manifest(
            "  policy.matchMode: regex\n  policy.csv: |\n    p, alice, applications, get, ^web/[a-z]+$, allow\n    p, bob, applications, (get|sync), prod, allow\n",
        ),
    );
    yes(&regex, &["alice", "get", "app", "web/guestbook"]);
    no(&regex, &["alice", "get", "app", "web/ns/guestbook"]);
    yes(&regex, &["bob", "sync", "app", "xprod-2/a"]);
    let run = no(&regex, &["admin", "get", "app", "p/a"]);
    assert!(
        run.err.contains("regex mode") && run.err.contains("built-in"),
        "{run:?}"
    );
    // The same text in glob mode means something else.
    let glob = files.write("glob.csv", "p, bob, applications, (get|sync), prod, allow\n");
    no(&glob, &["bob", "sync", "app", "prod"]);
}

#[test]
fn claims_decide_as_the_server_does() {
    let files = Files::new();
    let cm = files.write(
        "cm.yaml",
        &manifest(
            "  scopes: '[groups, email]'\n  policy.csv: |\n    g, my-org:admins, role:admin\n    g, carol@example.org, role:readonly\n    p, dave, clusters, get, *, allow\n",
        ),
    );
    let c = |args: &[&'static str], claims: &'static str| with_claims(args, claims, &[]);
    // A group from the claims, bound by a g line.
    yes(
        &cm,
        &c(
            &["-", "delete", "app", "p/a"],
            r#"{"sub":"x","groups":["my-org:admins"]}"#,
        ),
    );
    no(
        &cm,
        &c(
            &["-", "delete", "app", "p/a"],
            r#"{"sub":"x","groups":["my-org:devs"]}"#,
        ),
    );
    // email is a scope here, so it is a group too.
    yes(
        &cm,
        &c(
            &["-", "get", "clusters", "x"],
            r#"{"sub":"x","email":"carol@example.org"}"#,
        ),
    );
    no(
        &cm,
        &c(
            &["-", "update", "clusters", "x"],
            r#"{"sub":"x","email":"carol@example.org"}"#,
        ),
    );
    // The user id: federated_claims.user_id first, then sub.
    yes(
        &cm,
        &c(
            &["-", "get", "clusters", "x"],
            r#"{"sub":"opaque","federated_claims":{"user_id":"dave"}}"#,
        ),
    );
    yes(&cm, &c(&["-", "get", "clusters", "x"], r#"{"sub":"dave"}"#));
    no(&cm, &c(&["-", "get", "clusters", "x"], r#"{"sub":"erin"}"#));
    // The default scopes are only `groups`.
    let csv = files.write("p.csv", "g, carol@example.org, role:readonly\n");
    no(
        &csv,
        &c(
            &["-", "get", "clusters", "x"],
            r#"{"sub":"x","email":"carol@example.org"}"#,
        ),
    );
    yes(
        &csv,
        &c(
            &["-", "get", "clusters", "x"],
            r#"{"sub":"x","groups":"carol@example.org"}"#,
        ),
    );

    // Mistakes in the arguments.
    let run = fails(&cm, &c(&["-", "get", "app"], "{nope"));
    assert!(run.err.contains("--claims is not valid JSON"), "{run:?}");
    let run = fails(&cm, &c(&["-", "get", "app"], r#"["groups"]"#));
    assert!(
        run.err.contains("must be a JSON object") && run.err.contains("an array"),
        "{run:?}"
    );
    let run = fails(&cm, &c(&["alice", "get", "app"], r#"{"sub":"alice"}"#));
    assert!(run.err.contains("SUBJECT as `-`"), "{run:?}");
    let run = fails(&cm, &["-", "get", "app"]);
    assert!(run.err.contains("--claims"), "{run:?}");
}

const PROJECTS: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: web
  namespace: argocd
spec:
  sourceRepos: ['*']
  roles:
  - name: deployer
    description: CI
    policies:
    - p, proj:web:deployer, applications, sync, web/*, allow
    - p, proj:web:deployer, applications, sync, web/frozen, deny
    groups:
    - my-org:web-team
---
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: db
spec:
  roles:
  - name: deployer
    policies:
    - p, proj:db:deployer, applications, sync, db/*, allow
";

#[test]
fn project_tokens_and_role_groups_from_project_files() {
    let files = Files::new();
    let csv = files.write(
        "p.csv",
        "p, role:ci, applications, sync, */*, allow\ng, proj:web:deployer, role:ci\n",
    );
    let projects = files.write("projects.yaml", PROJECTS);
    let token = r#"{"sub":"proj:web:deployer","iss":"argocd"}"#;
    let p = [projects.as_str()];
    yes(
        &csv,
        &with_claims(&["-", "sync", "app", "web/guestbook"], token, &p),
    );
    // The project's own deny applies.
    no(&csv, &with_claims(&["-", "sync", "app", "web/frozen"], token, &p));
    // A token acts only within its project, whatever the global policy says.
    no(&csv, &with_claims(&["-", "sync", "app", "db/a"], token, &p));
    // Every role may get its project.
    yes(&csv, &with_claims(&["-", "get", "proj", "web"], token, &p));
    // Without the project file the token is just a subject of the global policy.
    yes(&csv, &with_claims(&["-", "sync", "app", "db/a"], token, &[]));

    // A role's groups bind SSO users to the role.
    let group = r#"{"sub":"u","groups":["my-org:web-team"]}"#;
    yes(
        &csv,
        &with_claims(&["-", "sync", "app", "web/guestbook"], group, &p),
    );
    no(&csv, &with_claims(&["-", "sync", "app", "db/a"], group, &p));
    no(
        &csv,
        &with_claims(&["-", "sync", "app", "web/guestbook"], group, &[]),
    );

    // A plain SUBJECT never consults projects (as upstream's tool): a note says so.
    let run = no(
        &csv,
        &[
            "my-org:web-team",
            "sync",
            "app",
            "web/guestbook",
            "--project-file",
            &projects,
        ],
    );
    assert!(
        run.err.contains("--project-file only matters with --claims"),
        "{run:?}"
    );

    // Files that are not AppProjects, or define a project twice.
    let not_project = files.write("cm.yaml", &manifest("  policy.csv: ''\n"));
    let run = fails(
        &csv,
        &[
            "-",
            "get",
            "app",
            "--claims",
            token,
            "--project-file",
            &not_project,
        ],
    );
    assert!(
        run.err.contains(&not_project) && run.err.contains("not AppProject"),
        "{run:?}"
    );
    let run = fails(
        &csv,
        &[
            "-",
            "get",
            "app",
            "--claims",
            token,
            "--project-file",
            &projects,
            "--project-file",
            &projects,
        ],
    );
    assert!(run.err.contains("defined twice"), "{run:?}");
}

#[test]
fn validate_reports_valid_invalid_and_empty_policies() {
    let files = Files::new();
    let run = validate(&files.write("ok.csv", CSV));
    assert_eq!((run.code, run.out.as_str()), (0, "Policy is valid.\n"), "{run:?}");
    assert!(run.err.is_empty(), "no warnings: {run:?}");

    // Too few fields: invalid, with the line.
    let bad = files.write(
        "few.csv",
        "p, alice, applications, get, */*, allow\np, bob, applications, get, */*\n",
    );
    let run = validate(&bad);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.err.starts_with(&format!(
            "Policy is invalid: {bad}: line 2: a 'p' line has 6 fields"
        )),
        "{run:?}"
    );
    assert!(!run.out.contains("valid."), "{run:?}");
    // An unbalanced quote: invalid.
    let bad = files.write("quote.csv", "p, \"role:x, applications, get, */*, allow\n");
    let run = validate(&bad);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.err.contains("Policy is invalid:") && run.err.contains("line 1:"),
        "{run:?}"
    );
    // An effect other than allow/deny: valid, but the line does nothing.
    let run = validate(&files.write(
        "effect.csv",
        "p, alice, applications, get, */*, allow # ok\np, bob, clusters, get, *, Allow\n",
    ));
    assert_eq!((run.code, run.out.as_str()), (0, "Policy is valid.\n"), "{run:?}");
    assert!(
        run.err.contains("line 1: effect") && run.err.contains("does not start a comment"),
        "{run:?}"
    );
    assert!(run.err.contains("line 2: effect \"Allow\""), "{run:?}");
    // A role used in a g line with no permissions: a warning (built-in roles are fine).
    let run = validate(&files.write(
        "roles.csv",
        "g, alice, role:typo\ng, bob, role:admin\ng, carol, role:other\n",
    ));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.err
            .contains("user defined roles not found in policies: role:other, role:typo"),
        "{run:?}"
    );
    assert!(!run.err.contains("role:admin"), "{run:?}");

    // Manifests: an invalid regex in regex mode is a warning; a bad line is located in the file.
    let run = validate(&files.write(
        "regex.yaml",
        &manifest(
            "  policy.matchMode: regex\n  policy.csv: |\n    p, alice, applications, get, */*, allow\n",
        ),
    ));
    assert_eq!((run.code, run.out.as_str()), (0, "Policy is valid.\n"), "{run:?}");
    assert!(
        run.err.contains("warning:") && run.err.contains("\"*/*\""),
        "{run:?}"
    );
    let bad = files.write(
        "bad.yaml",
        &manifest("  policy.csv: |\n    p, a, b, c, d, allow\n  policy.x.csv: |\n    q, a, b\n"),
    );
    let run = validate(&bad);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.err
            .contains(&format!("Policy is invalid: {bad}:10: policy.x.csv line 1:")),
        "{run:?}"
    );
    let run = validate(&files.write("scalar.yaml", &manifest("  policy.csv: [p]\n")));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.err.contains("data.policy.csv: expected a string, got a list"),
        "{run:?}"
    );

    // Nothing at all: empty.
    for (name, text) in [
        ("empty.csv", ""),
        ("blank.csv", "\n  \n"),
        ("empty.yaml", &manifest("  policy.default: role:readonly\n")),
    ] {
        let run = validate(&files.write(name, text));
        assert_eq!(run.code, 1, "{name}: {run:?}");
        assert!(
            run.err.contains("Policy is empty or could not be loaded."),
            "{name}: {run:?}"
        );
        assert!(run.out.is_empty(), "{run:?}");
    }
    // A manifest of the wrong kind is not mistaken for CSV.
    let run = validate(&files.write("project.yaml", PROJECTS.split("---").next().unwrap()));
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.err.contains("kind is AppProject"), "{run:?}");
}

// --- account can-i: the server's answer for the caller -------------------

fn config_path(dir: &Path) -> PathBuf {
    dir.join("tiphys/config")
}

#[test]
fn account_can_i_asks_the_server() {
    let config_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        config_dir.path().join("argocd-rbac-cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\ndata:\n  policy.csv: |\n    p, role:admin, extensions, invoke, metrics, allow\n",
    )
    .unwrap();
    let server = TestServer::start(&["--insecure", "--config-dir", config_dir.path().to_str().unwrap()]);
    let addr = format!("127.0.0.1:{}", server.port);
    let data_dir = server.dir.path().join("data");
    let run = tiphys(
        &[
            "admin",
            "initial-password",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ],
        None,
        "",
    );
    assert_eq!(run.code, 0, "{run:?}");
    let password = run.out.trim_end().to_owned();

    let home = tempfile::tempdir().unwrap();
    let config = config_path(home.path());
    let run = tiphys(
        &["login", &addr, "--plaintext", "--username", "admin"],
        Some(&config),
        &format!("{password}\n"),
    );
    assert_eq!(run.code, 0, "{run:?}");

    for mode in [&[][..], &["--grpc-web"][..]] {
        let ask = |args: &[&str]| {
            let mut all = vec!["account", "can-i"];
            all.extend_from_slice(args);
            all.extend_from_slice(mode);
            tiphys(&all, Some(&config), "")
        };
        let run = ask(&["get", "applications", "*/*"]);
        assert_eq!((run.code, run.out.as_str()), (0, "yes\n"), "{mode:?}: {run:?}");
        let run = ask(&["sync", "applications", "default/guestbook"]);
        assert_eq!((run.code, run.out.as_str()), (0, "yes\n"), "{mode:?}: {run:?}");
        // The user policy is in force on the server too.
        let run = ask(&["invoke", "extensions", "metrics"]);
        assert_eq!((run.code, run.out.as_str()), (0, "yes\n"), "{mode:?}: {run:?}");
        // "no" is an answer, not an error: admin has no other extensions.
        let run = ask(&["invoke", "extensions", "other"]);
        assert_eq!((run.code, run.out.as_str()), (0, "no\n"), "{mode:?}: {run:?}");
        // A question the server does not understand is an error.
        let run = ask(&["fly", "applications", "*/*"]);
        assert_eq!(run.code, 1, "{mode:?}: {run:?}");
        assert!(
            run.err.contains("InvalidArgument") || run.err.contains("unknown action"),
            "{run:?}"
        );
    }

    // Not logged in: the server refuses to answer.
    let nobody = tempfile::tempdir().unwrap();
    let run = tiphys(
        &[
            "account",
            "can-i",
            "get",
            "applications",
            "*/*",
            "--server",
            &addr,
            "--plaintext",
        ],
        Some(&config_path(nobody.path())),
        "",
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.err.contains("Unauthenticated"), "{run:?}");
}
