//! `tiphys apply` and `tiphys admin export` against real servers: a directory of manifests
//! (an AppProject, Argo CD's cluster, repository and repo-creds Secrets, an Application, and
//! a malformed document) is applied object by object; an export of the stopped server's data
//! dir, applied to a fresh server, restores the same objects, credentials included.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use crate::cli_apps::{REPO, Session, start_server};

const CLUSTER_TOKEN: &str = "cluster-token-123";
const REPO_PASSWORD: &str = "repo-password-456";
const CREDS_PASSWORD: &str = "creds-password-789";

const PROJECT: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: web
  namespace: argocd
spec:
  description: Web team
  sourceRepos: ['https://github.com/argoproj/*']
  destinations:
  - server: https://prod.example:6443
    namespace: '*'
";

fn cluster_secret() -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: prod-cluster
  labels:
    argocd.argoproj.io/secret-type: cluster
stringData:
  name: prod
  server: https://prod.example:6443/
  namespaces: web,shop
  config: |
    {{\"bearerToken\": \"{CLUSTER_TOKEN}\", \"tlsClientConfig\": {{\"insecure\": false, \"caData\": \"Q0EK\"}}}}
"
    )
}

fn repo_secret() -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: guestbook-repo
  labels:
    argocd.argoproj.io/secret-type: repository
data:
  url: {}
  password: {}
stringData:
  type: git
  name: guestbook
  project: web
  username: bot
",
        b64(REPO),
        b64(REPO_PASSWORD)
    )
}

fn creds_secret() -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata:
  name: github-creds
  labels: {{argocd.argoproj.io/secret-type: repo-creds}}
stringData:
  url: https://github.com/argoproj
  username: bot
  password: {CREDS_PASSWORD}
"
    )
}

fn application() -> String {
    serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "guestbook", "namespace": "argocd", "labels": {"team": "web"}},
        "spec": {
            "project": "web",
            "source": {"repoURL": REPO, "path": "guestbook", "targetRevision": "HEAD"},
            "destination": {"name": "prod", "namespace": "web"}
        }
    })
    .to_string()
}

/// The manifests, in files named so that the application sorts before what it needs; with
/// `malformed`, the secrets file's second document is broken.
fn write_manifests(dir: &Path, malformed: bool) {
    let broken = if malformed {
        "---\nthis is: [not yaml\n"
    } else {
        ""
    };
    std::fs::write(dir.join("00-app.json"), application()).unwrap();
    std::fs::write(dir.join("01-project.yaml"), PROJECT).unwrap();
    std::fs::write(
        dir.join("02-secrets.yaml"),
        format!("---\n{}{broken}---\n{}", cluster_secret(), repo_secret()),
    )
    .unwrap();
    std::fs::write(dir.join("03-creds.yml"), creds_secret()).unwrap();
    std::fs::write(dir.join("README.txt"), "not a manifest").unwrap();
}

#[test]
fn a_directory_is_applied_object_by_object_and_a_malformed_document_is_reported() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let dir = tempfile::tempdir().unwrap();
    write_manifests(dir.path(), true);
    let path = dir.path().to_str().unwrap();

    let run = admin.run(&["apply", "-f", path]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(
        run.out,
        "appproject.argoproj.io/web created\nsecret/prod-cluster created\nsecret/guestbook-repo created\n\
         secret/github-creds created\napplication.argoproj.io/guestbook created\n",
        "{run:?}"
    );
    let secrets_file = dir.path().join("02-secrets.yaml");
    assert!(
        run.err
            .contains(&format!("error: {}:2: malformed YAML", secrets_file.display())),
        "{}",
        run.err
    );
    assert!(run.err.contains("1 of 6 objects were not applied"), "{}", run.err);

    let project = admin.json(&["proj", "get", "web", "-o", "json"]);
    assert_eq!(project["spec"]["description"], "Web team");
    let cluster = admin.json(&["cluster", "get", "https://prod.example:6443", "-o", "json"]);
    assert_eq!(cluster["name"], "prod", "{cluster}");
    assert_eq!(cluster["namespaces"], serde_json::json!(["web", "shop"]));
    assert!(
        !cluster.to_string().contains(CLUSTER_TOKEN),
        "the API never shows it: {cluster}"
    );
    let repo = admin.json(&["repo", "get", REPO, "-o", "json"]);
    assert_eq!(repo["username"], "bot", "{repo}");
    assert_eq!(repo["project"], "web");
    assert_eq!(
        admin.ok(&["repocreds", "list", "-o", "name"]),
        "https://github.com/argoproj\n"
    );
    let app = admin.json(&["app", "get", "guestbook", "-o", "json"]);
    assert_eq!(app["spec"]["project"], "web");
    assert_eq!(app["spec"]["destination"]["name"], "prod");
    assert_eq!(app["metadata"]["labels"]["team"], "web");

    // Again: nothing changes, credentials included (the API never shows them back), and the
    // cluster's server is compared as stored (without the manifest's trailing slash).
    let run = admin.run(&["apply", "-f", path]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.out.contains("application.argoproj.io/guestbook unchanged"),
        "{run:?}"
    );
    assert!(
        run.out.contains("appproject.argoproj.io/web unchanged"),
        "{run:?}"
    );
    for secret in ["prod-cluster", "guestbook-repo", "github-creds"] {
        assert!(run.out.contains(&format!("secret/{secret} unchanged")), "{run:?}");
    }

    // From stdin.
    let run = admin.run_with(&["apply", "-f", "-"], &format!("{PROJECT}---\n[1, 2]\n"));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.out, "appproject.argoproj.io/web unchanged\n");
    assert!(
        run.err.contains("error: <stdin>:2: expected an object"),
        "{run:?}"
    );

    // One file, and a kind tiphys does not apply.
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n").unwrap();
    let err = admin.fails(&["apply", "-f", other.to_str().unwrap()], 1);
    assert!(err.contains("other.yaml:1: unsupported kind ConfigMap"), "{err}");
    let err = admin.fails(&["apply", "-f", "/nonexistent/manifests"], 3);
    assert!(err.contains("/nonexistent/manifests"), "{err}");
    // A caller without permissions gets one error per object, and the rest is still tried.
    let bob = Session::login(&server, "bob", &[]);
    let run = bob.run(&["apply", "-f", path]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.err.matches("permission denied").count(), 5, "{}", run.err);
}

/// A list answer without what differs between two servers holding the same objects.
fn normalized(mut list: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for key in [
                    "resourceVersion",
                    "uid",
                    "creationTimestamp",
                    "attemptedAt",
                    "reconciledAt",
                ] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut list);
    list
}

fn snapshot(session: &Session) -> Vec<Value> {
    [
        &["app", "list", "-o", "json"][..],
        &["proj", "list", "-o", "json"],
        &["cluster", "list", "-o", "json"],
        &["repo", "list", "-o", "json"],
        &["repocreds", "list", "-o", "json"],
    ]
    .iter()
    .map(|args| normalized(session.json(args)))
    .collect()
}

#[test]
fn an_export_of_the_data_dir_restores_everything_on_a_fresh_server() {
    let work = tempfile::tempdir().unwrap();
    let data_a = work.path().join("a");
    let (mut server_a, _config_a) = start_server(Some(&data_a));
    let admin_a = Session::login(&server_a, "admin", &[]);
    let manifests = work.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    write_manifests(&manifests, false);
    admin_a.ok(&["apply", "-f", manifests.to_str().unwrap()]);
    let before = snapshot(&admin_a);
    assert_eq!(before[0].as_array().unwrap().len(), 1, "{:?}", before[0]);

    // Through the API: no credentials, and a comment says so.
    let api_export = admin_a.ok(&["admin", "export"]);
    assert!(api_export.contains("# credentials left out"), "{api_export}");
    assert!(api_export.contains("kind: Application") && api_export.contains("kind: AppProject"));
    for secret in [CLUSTER_TOKEN, REPO_PASSWORD, CREDS_PASSWORD] {
        assert!(!api_export.contains(secret), "{api_export}");
    }
    // The data dir is locked while the server runs.
    let data = data_a.to_str().unwrap();
    let err = admin_a.fails(&["admin", "export", "--data-dir", data], 1);
    assert!(err.contains("stop it"), "{err}");
    admin_a.fails(&["admin", "export", "--include-secrets"], 2);

    assert!(server_a.terminate().success());
    let offline = admin_a.ok(&["admin", "export", "--data-dir", data]);
    assert!(
        offline.contains("credentials left out: config.bearerToken"),
        "{offline}"
    );
    assert!(!offline.contains(CLUSTER_TOKEN), "{offline}");
    let file = work.path().join("export.yaml");
    let run = admin_a.run(&[
        "admin",
        "export",
        "--data-dir",
        data,
        "--include-secrets",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let exported = std::fs::read_to_string(&file).unwrap();
    for secret in [CLUSTER_TOKEN, REPO_PASSWORD, CREDS_PASSWORD] {
        assert!(exported.contains(secret), "{secret} missing: {exported}");
    }
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the export holds credentials");

    // A fresh server: the export restores the same objects, credentials included.
    let data_b = work.path().join("b");
    let (mut server_b, _config_b) = start_server(Some(&data_b));
    let admin_b = Session::login(&server_b, "admin", &[]);
    let out = admin_b.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(out.contains("application.argoproj.io/guestbook created"), "{out}");
    assert!(out.contains("appproject.argoproj.io/web created"), "{out}");
    let after = snapshot(&admin_b);
    for (a, b) in before.iter().zip(&after) {
        assert_eq!(a, b);
    }
    // Applied again, nothing changes.
    let again = admin_b.ok(&["apply", "-f", file.to_str().unwrap()]);
    assert!(
        again.contains("application.argoproj.io/guestbook unchanged"),
        "{again}"
    );
    assert!(server_b.terminate().success());
    let restored = admin_b.ok(&[
        "admin",
        "export",
        "--data-dir",
        data_b.to_str().unwrap(),
        "--include-secrets",
    ]);
    for secret in [CLUSTER_TOKEN, REPO_PASSWORD, CREDS_PASSWORD] {
        assert!(restored.contains(secret), "{secret} not restored: {restored}");
    }
}

/// `apply` goes through the API, so Kubernetes' limits (names, labels, annotations, URLs with a
/// host) refuse each bad object with the server's message, and none of them is stored.
#[test]
fn apply_reports_each_object_over_a_limit_and_stores_none_of_them() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let before = snapshot(&admin);
    let app = |name: &str, labels: Value| {
        serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "labels": labels},
            "spec": {"source": {"repoURL": REPO, "path": "p"},
                     "destination": {"server": "https://kubernetes.default.svc", "namespace": "web"}}
        })
        .to_string()
    };
    let manifests = [
        app("a..b", serde_json::json!({})),
        app("ok-name", serde_json::json!({"team": "v".repeat(64)})),
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: AppProject\nmetadata:\n  name: web\n  annotations:\n    \
             note: {}\nspec:\n  sourceRepos: ['*']\n",
            "x".repeat(262_141)
        ),
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: c\n  labels:\n    argocd.argoproj.io/secret-type: \
         cluster\nstringData:\n  name: c\n  server: https:///x\n"
            .to_owned(),
    ];
    let run = admin.run_with(&["apply", "-f", "-"], &manifests.join("\n---\n"));
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.out, "", "{run:?}");
    for message in [
        "metadata.name: invalid application name \"a..b\": it and each of its dot-separated parts must \
         start and end with a lower case letter or digit (a DNS-1123 subdomain)",
        &format!(
            "metadata.labels[\"team\"]: invalid label value \"{}\": it has 64 characters; a label value \
             has at most 63",
            "v".repeat(64)
        ),
        "metadata.annotations: the annotations are 262145 bytes (keys and values), more than the limit \
         of 262144 bytes (256 KiB)",
        "server: invalid cluster server \"https:///x\": it has no host; it must be an http or https URL \
         with a host",
    ] {
        assert!(run.err.contains(message), "{message}\n{}", run.err);
    }
    assert_eq!(snapshot(&admin), before);
}

/// An Application for `--validate`: `typo` misspells `syncPolicy` (on the file's line 23 once
/// written by `unknown_fields_are_refused_warned_about_or_ignored`).
fn validated_app(name: &str, typo: bool) -> String {
    let sync = if typo { "syncPolcy" } else { "syncPolicy" };
    format!(
        "apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {name}
spec:
  project: default
  source: {{repoURL: '{REPO}', path: guestbook}}
  destination: {{server: https://kubernetes.default.svc, namespace: web}}
  {sync}:
    automated: {{prune: true}}
"
    )
}

/// `apply --validate`, as kubectl's: by default (`strict`) a document with a field the schema
/// does not know is refused, naming the file, document, line and field, while the file's other
/// documents are applied; `warn` applies it with a warning; `ignore` says nothing.
#[test]
fn unknown_fields_are_refused_warned_about_or_ignored() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("apps.yaml");
    std::fs::write(
        &file,
        format!(
            "# two applications\n{}---\n\n# the second\n{}",
            validated_app("fine", false),
            validated_app("typo", true)
        ),
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let error = format!("error: {path}:2: line 23: unknown field \"spec.syncPolcy\"");
    let warning = format!("warning: {path}:2: line 23: unknown field \"spec.syncPolcy\"");

    let run = admin.run(&["apply", "-f", path]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert_eq!(run.out, "application.argoproj.io/fine created\n", "{run:?}");
    assert!(run.err.contains(&error), "{}", run.err);
    assert!(run.err.contains("1 of 2 objects were not applied"), "{}", run.err);
    admin.fails(&["app", "get", "typo"], 5);
    let fine = admin.json(&["app", "get", "fine", "-o", "json"]);
    assert_eq!(fine["spec"]["syncPolicy"]["automated"]["prune"], true, "{fine}");
    // kubectl's spellings of strict: `true`, and the flag alone.
    for flag in ["--validate=true", "--validate"] {
        let run = admin.run(&["apply", flag, "-f", path]);
        assert_eq!(run.code, Some(1), "{flag}: {run:?}");
        assert!(run.err.contains(&error), "{flag}: {}", run.err);
    }

    let run = admin.run(&["apply", "--validate=warn", "-f", path]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.err.contains(&warning), "{}", run.err);
    assert!(
        run.out.contains("application.argoproj.io/typo created"),
        "{run:?}"
    );
    let typo = admin.json(&["app", "get", "typo", "-o", "json"]);
    assert_eq!(typo["spec"]["project"], "default");
    assert!(
        typo["spec"].get("syncPolicy").is_none(),
        "the server drops it: {typo}"
    );

    for flag in ["--validate=ignore", "--validate=false"] {
        let run = admin.run(&["apply", flag, "-f", path]);
        assert_eq!(run.code, Some(0), "{flag}: {run:?}");
        assert!(!run.err.contains("syncPolcy"), "{flag}: {}", run.err);
        assert!(
            run.out.contains("application.argoproj.io/typo unchanged"),
            "{run:?}"
        );
    }
    admin.fails(&["apply", "--validate=lenient", "-f", path], 2);

    // A Secret is checked against Kubernetes' Secret.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: r\n  labels:\n    \
                  argocd.argoproj.io/secret-type: repository\nstrngData:\n  url: https://github.com/org/r\n";
    let run = admin.run_with(&["apply", "-f", "-"], secret);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.err
            .contains("error: <stdin>:1: line 7: unknown field \"strngData\""),
        "{}",
        run.err
    );
    assert_eq!(admin.ok(&["repo", "list", "-o", "name"]), "");
}
