//! `tiphys app …` from the real CLI against a real server, over native gRPC and gRPC-Web:
//! the application lifecycle with `-o json` and `-o name`, the exit codes of not found,
//! denied and invalid requests, and the generic caller's server stream.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::TestServer;

pub const PASSWORD: &str = "correct-horse-1";
pub const REPO: &str = "https://github.com/argoproj/argocd-example-apps.git";
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";
const MODES: [&[&str]; 2] = [&[], &["--grpc-web"]];

/// A plaintext server with `admin` and `bob` (login only, no permissions), both with
/// [`PASSWORD`].
pub fn start_server(data_dir: Option<&Path>) -> (TestServer, tempfile::TempDir) {
    start_server_with(data_dir, &[])
}

/// [`start_server`], with more server flags.
pub fn start_server_with(data_dir: Option<&Path>, extra: &[&str]) -> (TestServer, tempfile::TempDir) {
    let config = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash(PASSWORD, 4).unwrap();
    let write = |name: &str, text: String| std::fs::write(config.path().join(name), text).unwrap();
    write(
        "argocd-cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  accounts.bob: login\n"
            .into(),
    );
    write(
        "argocd-secret.yaml",
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\nstringData:\n  \
             admin.password: '{hash}'\n  accounts.bob.password: '{hash}'\n"
        ),
    );
    let config_dir = config.path().to_str().unwrap().to_owned();
    let mut args = vec!["--insecure".to_owned(), "--config-dir".to_owned(), config_dir];
    if let Some(dir) = data_dir {
        args.push(format!("--data-dir={}", dir.display()));
    }
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    (TestServer::start(&args), config)
}

/// What a CLI run gave.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub out: String,
    pub err: String,
}

/// A CLI user with a private config file, logged in to one server.
pub struct Session {
    dir: tempfile::TempDir,
    pub addr: String,
}

impl Session {
    /// `tiphys login` as `user`, with the connection flags of `mode` saved in the context.
    pub fn login(server: &TestServer, user: &str, mode: &[&str]) -> Self {
        let session = Self::anonymous(server);
        let mut args = vec![
            "login",
            &session.addr,
            "--plaintext",
            "--username",
            user,
            "--password",
            PASSWORD,
        ];
        args.extend_from_slice(mode);
        session.ok(&args);
        session
    }

    /// A user with no saved session.
    pub fn anonymous(server: &TestServer) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            addr: format!("127.0.0.1:{}", server.port),
        }
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("tiphys/config")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn run_with(&self, args: &[&str], stdin: &str) -> Run {
        let out = crate::support::cli_with(args, Some(&self.config()), stdin);
        Run {
            code: out.status.code(),
            out: String::from_utf8_lossy(&out.stdout).into(),
            err: String::from_utf8_lossy(&out.stderr).into(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, "")
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let run = self.run(args);
        assert_eq!(run.code, Some(0), "{args:?} failed: {run:?}");
        run.out
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// Runs a command that must fail with `code`; returns its stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let run = self.run(args);
        assert_eq!(run.code, Some(code), "{args:?} should exit {code}: {run:?}");
        run.err
    }
}

pub fn create_args<'a>(name: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "app",
        "create",
        name,
        "--repo",
        REPO,
        "--path",
        "guestbook",
        "--dest-server",
        IN_CLUSTER,
        "--dest-namespace",
        "default",
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn application_lifecycle_with_json_and_name_output() {
    for mode in MODES {
        let (server, _config) = start_server(None);
        let admin = Session::login(&server, "admin", mode);

        let app = admin.json(&create_args("guestbook", &["-o", "json"]));
        assert_eq!(app["metadata"]["name"], "guestbook", "{mode:?}: {app}");
        assert_eq!(app["spec"]["source"]["path"], "guestbook");
        assert_eq!(app["spec"]["project"], "default");
        let out = admin.ok(&create_args("guestbook", &[]));
        assert_eq!(out, "application 'guestbook' unchanged\n");
        let err = admin.fails(&create_args("guestbook", &["--revision", "v9"]), 3);
        assert!(err.contains("use upsert flag"), "{err}");
        let out = admin.ok(&create_args("guestbook", &["--revision", "v9", "--upsert"]));
        assert_eq!(out, "application 'guestbook' updated\n");

        // A second application from a manifest, in YAML.
        let manifest = admin.dir().join("app.yaml");
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: helm-guestbook\n\
                 spec:\n  project: default\n  source:\n    repoURL: {REPO}\n    path: helm-guestbook\n\
                 \x20 destination:\n    name: in-cluster\n    namespace: web\n"
            ),
        )
        .unwrap();
        let out = admin.ok(&["app", "create", "-f", manifest.to_str().unwrap(), "-o", "name"]);
        assert_eq!(out, "argocd/helm-guestbook\n");

        assert_eq!(
            admin.ok(&["app", "list", "-o", "name"]),
            "argocd/guestbook\nargocd/helm-guestbook\n"
        );
        let list = admin.json(&["app", "list", "-o", "json"]);
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["guestbook", "helm-guestbook"]);
        let table = admin.ok(&["app", "list"]);
        assert!(
            table.starts_with("NAME") && table.contains("SYNCPOLICY"),
            "{table}"
        );
        assert!(
            table.contains("argocd/guestbook") && table.contains("v9"),
            "{table}"
        );
        let yaml = admin.ok(&["app", "get", "argocd/guestbook", "-o", "yaml"]);
        assert!(yaml.contains("targetRevision: v9"), "{yaml}");
        let description = admin.ok(&["app", "get", "guestbook"]);
        assert!(
            description.contains("Name:               argocd/guestbook"),
            "{description}"
        );

        let set = admin.json(&[
            "app",
            "set",
            "guestbook",
            "--revision",
            "v1",
            "--dest-namespace",
            "web",
            "-o",
            "json",
        ]);
        assert_eq!(set["spec"]["source"]["targetRevision"], "v1");
        assert_eq!(set["spec"]["destination"]["namespace"], "web");
        assert_eq!(
            set["spec"]["source"]["path"], "guestbook",
            "other fields are kept"
        );

        let synced = admin.json(&[
            "app",
            "sync",
            "guestbook",
            "--prune",
            "--revision",
            "v2",
            "-o",
            "json",
        ]);
        assert_eq!(synced["operation"]["sync"]["revision"], "v2", "{synced}");
        assert_eq!(synced["operation"]["sync"]["prune"], true);
        let err = admin.fails(&["app", "sync", "guestbook"], 6);
        assert!(err.contains("already in progress"), "{err}");
        let out = admin.ok(&["app", "terminate-op", "guestbook"]);
        assert!(out.contains("operation terminating"), "{out}");
        let app = admin.json(&["app", "get", "guestbook", "-o", "json"]);
        assert!(app.get("operation").is_none(), "{app}");
        admin.fails(&["app", "terminate-op", "guestbook"], 6);

        // Deleting asks first; only `y` confirms.
        let run = admin.run_with(&["app", "delete", "guestbook"], "n\n");
        assert_eq!(run.code, Some(1), "{run:?}");
        assert!(run.err.contains("not confirmed"), "{run:?}");
        admin.ok(&["app", "get", "guestbook", "-o", "name"]);
        let run = admin.run_with(&["app", "delete", "guestbook"], "y\n");
        assert_eq!(run.code, Some(0), "{run:?}");
        admin.ok(&["app", "delete", "argocd/helm-guestbook", "-y"]);
        admin.fails(&["app", "get", "guestbook"], 5);
        assert_eq!(admin.ok(&["app", "list", "-o", "name"]), "");
    }
}

#[test]
fn exit_codes_tell_not_found_denied_and_invalid_apart() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    admin.ok(&create_args("guestbook", &[]));

    // Not found: 5.
    let err = admin.fails(&["app", "get", "nope"], 5);
    assert!(err.contains("not found"), "{err}");
    admin.fails(&["app", "delete", "nope", "-y"], 5);
    admin.fails(&["proj", "get", "nope"], 5);

    // Permission denied, or not logged in: 4.
    let bob = Session::login(&server, "bob", &[]);
    assert_eq!(bob.ok(&["app", "list", "-o", "name"]), "", "bob sees nothing");
    let err = bob.fails(&["app", "get", "guestbook"], 4);
    assert!(err.contains("permission denied"), "{err}");
    bob.fails(&create_args("other", &[]), 4);
    bob.fails(&["app", "sync", "guestbook"], 4);
    let anonymous = Session::anonymous(&server);
    let err = anonymous.fails(&["app", "list", "--server", &anonymous.addr, "--plaintext"], 4);
    assert!(err.contains("Unauthenticated"), "{err}");

    // Invalid input: 3, from the server or found locally.
    let err = admin.fails(
        &[
            "app",
            "create",
            "bad",
            "--repo",
            "javascript:alert(1)",
            "--dest-server",
            IN_CLUSTER,
            "--dest-namespace",
            "default",
        ],
        3,
    );
    assert!(err.contains("javascript"), "{err}");
    let err = admin.fails(&create_args("Bad_Name", &[]), 3);
    assert!(err.contains("invalid application name"), "{err}");
    let err = admin.fails(&["app", "set", "guestbook"], 3);
    assert!(err.contains("nothing to set"), "{err}");
    let broken = admin.dir().join("broken.yaml");
    std::fs::write(&broken, "metadata: [\n").unwrap();
    let err = admin.fails(&["app", "create", "-f", broken.to_str().unwrap()], 3);
    assert!(err.contains("broken.yaml") && err.contains("malformed"), "{err}");

    // The command line itself: clap's 2.
    admin.fails(&create_args("x", &["--dest-name", "in-cluster"]), 2);
}

/// A client of the generic caller, on `admin`'s session, over native gRPC or gRPC-Web.
pub async fn session_client(
    admin: &Session,
    grpc_web: bool,
    request_timeout: Option<Duration>,
) -> tiphys::cli::client::Client {
    use tiphys::cli::client::{Client, Target};
    use tiphys::cli::conn::ClientOpts;
    let opts = ClientOpts {
        server: Some(admin.addr.clone()),
        plaintext: true,
        grpc_web,
        auth_token: Some(session_token(admin)),
        request_timeout,
        ..ClientOpts::default()
    };
    let target = Target {
        opts,
        context: None,
        user: None,
    };
    Client::connect_to(&admin.config(), target).await.unwrap()
}

#[tokio::test]
async fn the_generic_caller_reads_a_server_stream() {
    let (server, _config) = start_server(None);
    let admin = Session::login(&server, "admin", &[]);
    admin.ok(&create_args("guestbook", &[]));
    for grpc_web in [false, true] {
        let client = session_client(&admin, grpc_web, None).await;
        let path = "/application.ApplicationService/Watch";
        let mut stream = tiphys::cli::call::stream(&client, "watch", path, &json!({"name": "guestbook"}))
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .expect("the stream is open");
        assert_eq!(event["type"], "ADDED", "{event}");
        assert_eq!(event["application"]["metadata"]["name"], "guestbook");

        let list = tiphys::cli::call::unary(
            &client,
            "list",
            "/application.ApplicationService/List",
            &json!({}),
        )
        .await
        .unwrap();
        assert_eq!(list["items"][0]["metadata"]["name"], "guestbook");
        let err = tiphys::cli::call::unary(
            &client,
            "get",
            "/application.ApplicationService/Get",
            &json!({"name": "nope"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            tiphys::cli::exit::kind_of(&err),
            Some(tiphys::cli::exit::Kind::NotFound)
        );
        assert!(err.to_string().starts_with("get: "), "{err}");
    }
}

/// The session token saved in the user's config.
pub fn session_token(session: &Session) -> String {
    let text = std::fs::read_to_string(session.config()).unwrap();
    let cfg: Value = serde_yaml_ng::from_str(&text).unwrap();
    cfg["users"][0]["auth-token"].as_str().unwrap().to_owned()
}

#[test]
fn projects_clusters_and_repositories_from_the_cli() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let (mut server, _config) = start_server(Some(&data));
    let admin = Session::login(&server, "admin", &[]);

    // Projects, their destinations, sources, roles and tokens.
    let out = admin.ok(&[
        "proj",
        "create",
        "web",
        "--dest",
        "https://prod.example:6443,web",
        "--src",
        "https://github.com/argoproj/*",
        "--description",
        "Web team",
    ]);
    assert_eq!(out, "project 'web' created\n");
    admin.fails(&["proj", "create", "bad", "--dest", "no-namespace"], 3);
    admin.ok(&["proj", "add-destination", "web", "prod", "shop", "--name"]);
    admin.fails(&["proj", "add-destination", "web", "prod", "shop", "--name"], 3);
    admin.ok(&["proj", "add-source", "web", "https://gitlab.example/*"]);
    admin.ok(&["proj", "role", "create", "web", "ci"]);
    admin.ok(&["proj", "role", "add-policy", "web", "ci", "-a", "sync", "-o", "*"]);
    admin.fails(
        &[
            "proj",
            "role",
            "add-policy",
            "web",
            "nope",
            "-a",
            "get",
            "-o",
            "*",
        ],
        3,
    );
    let token = admin.ok(&[
        "proj",
        "role",
        "create-token",
        "web",
        "ci",
        "-e",
        "1h",
        "--id",
        "t1",
        "-t",
    ]);
    assert_eq!(token.trim().split('.').count(), 3, "{token}");
    let project = admin.json(&["proj", "get", "web", "-o", "json"]);
    assert_eq!(
        project["spec"]["destinations"],
        json!([
            {"server": "https://prod.example:6443", "namespace": "web"},
            {"name": "prod", "namespace": "shop"}
        ])
    );
    assert_eq!(
        project["spec"]["sourceRepos"],
        json!(["https://github.com/argoproj/*", "https://gitlab.example/*"])
    );
    let role = &project["spec"]["roles"][0];
    assert_eq!(
        role["policies"],
        json!(["p, proj:web:ci, applications, sync, web/*, allow"])
    );
    let iat = role["jwtTokens"][0]["iat"].as_i64().unwrap().to_string();
    admin.ok(&["proj", "role", "delete-token", "web", "ci", &iat]);
    // Gone now, and a time no token was issued at: not found (5), never "deleted".
    for missing in [iat.as_str(), "12345"] {
        let err = admin.fails(&["proj", "role", "delete-token", "web", "ci", missing], 5);
        assert!(
            err.contains(&format!(
                "role 'ci' of project 'web' has no token issued at {missing}"
            )),
            "{err}"
        );
    }
    assert_eq!(admin.ok(&["proj", "list", "-o", "name"]), "default\nweb\n");
    assert!(admin.ok(&["proj", "list"]).contains("Web team"));

    // A cluster from a kubeconfig context (its server and CA file) with a given token: nothing
    // is made in the cluster, so it need not exist.
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(work.path().join("ca.pem"), "CA\n").unwrap();
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example:6443\n\
         \x20   certificate-authority: ca.pem\ncontexts:\n- name: prod-admin\n  context: {cluster: prod, user: bot}\n\
         users:\n- name: bot\n  user: {token: kube-token-1}\n",
    )
    .unwrap();
    let kube = kubeconfig.to_str().unwrap();
    let out = admin.ok(&[
        "cluster",
        "add",
        "prod-admin",
        "--kubeconfig",
        kube,
        "--name",
        "prod",
        "--bearer-token",
        "kube-token-1",
    ]);
    assert_eq!(out, "Cluster 'https://prod.example:6443' added\n");
    admin.fails(&["cluster", "add", "elsewhere", "--kubeconfig", kube], 3);
    let cluster = admin.json(&["cluster", "get", "prod", "-o", "json"]);
    assert_eq!(cluster["server"], "https://prod.example:6443");
    assert!(cluster["config"].get("bearerToken").is_none(), "{cluster}");
    admin.ok(&[
        "cluster",
        "set",
        "prod",
        "--namespace",
        "web",
        "--namespace",
        "shop",
    ]);
    let cluster = admin.json(&["cluster", "get", "https://prod.example:6443", "-o", "json"]);
    assert_eq!(cluster["namespaces"], json!(["web", "shop"]));
    let names = admin.ok(&["cluster", "list", "-o", "name"]);
    assert!(names.contains("https://prod.example:6443\n"), "{names}");

    // Repositories and credential templates.
    admin.ok(&[
        "repo",
        "add",
        REPO,
        "--username",
        "bot",
        "--password",
        "pw-1",
        "--project",
        "web",
    ]);
    let run = admin.run_with(
        &[
            "repo",
            "add",
            "https://charts.example",
            "--type",
            "helm",
            "--name",
            "charts",
            "--username",
            "u",
        ],
        "pw-2\n",
    );
    assert_eq!(run.code, Some(0), "the password comes from stdin: {run:?}");
    let repo = admin.json(&["repo", "get", REPO, "-o", "json"]);
    assert_eq!(repo["username"], "bot");
    assert!(repo.get("password").is_none(), "{repo}");
    let table = admin.ok(&["repo", "list"]);
    assert!(table.contains("helm") && table.contains("charts"), "{table}");
    admin.ok(&[
        "repocreds",
        "add",
        "https://github.com/argoproj",
        "--username",
        "bot",
        "--password",
        "pw-3",
    ]);
    assert_eq!(
        admin.ok(&["repocreds", "list", "-o", "name"]),
        "https://github.com/argoproj\n"
    );
    admin.ok(&["repo", "rm", "https://charts.example"]);
    admin.fails(&["repo", "get", "https://charts.example"], 5);

    // The credentials were stored (seen offline, as only the store shows them).
    assert!(server.terminate().success());
    let export = admin.ok(&[
        "admin",
        "export",
        "--data-dir",
        data.to_str().unwrap(),
        "--include-secrets",
    ]);
    for secret in ["kube-token-1", "pw-1", "pw-3"] {
        assert!(export.contains(secret), "{secret} not stored: {export}");
    }
    assert!(
        !export.contains("pw-2"),
        "the removed repository is gone: {export}"
    );
    let (server, _config) = start_server(Some(&data));
    let admin = Session::login(&server, "admin", &[]);
    admin.ok(&["cluster", "rm", "prod", "-y"]);
    admin.fails(&["cluster", "get", "prod"], 5);
    admin.ok(&["repocreds", "rm", "https://github.com/argoproj"]);
    assert_eq!(admin.ok(&["proj", "delete", "web"]), "project 'web' deleted\n");
    admin.fails(&["proj", "delete", "default"], 3);
}
