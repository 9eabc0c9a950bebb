//! Sessions, contexts and accounts from the real CLI against a real server,
//! over native gRPC and gRPC-Web. Every run uses its own `--config` file.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::TestServer;

const MODES: [&[&str]; 2] = [&[], &["--grpc-web"]];

/// A CLI user with a private config file.
struct User {
    dir: tempfile::TempDir,
}

impl User {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("tiphys/config")
    }

    fn config_text(&self) -> String {
        std::fs::read_to_string(self.config()).unwrap()
    }

    fn config_yaml(&self) -> serde_json::Value {
        serde_yaml_ng::from_str(&self.config_text()).unwrap()
    }

    /// The token saved for context `name`.
    fn saved_token(&self, name: &str) -> Option<String> {
        let cfg = self.config_yaml();
        let user = cfg["contexts"].as_array()?.iter().find(|c| c["name"] == name)?["user"]
            .as_str()?
            .to_owned();
        cfg["users"].as_array()?.iter().find(|u| u["name"] == user)?["auth-token"]
            .as_str()
            .map(str::to_owned)
    }

    /// Runs the CLI with this user's config and `stdin`; returns (success, stdout, stderr).
    fn run(&self, args: &[&str], stdin: &str) -> (bool, String, String) {
        run_cli(args, Some(&self.config()), stdin)
    }

    fn ok(&self, args: &[&str], stdin: &str) -> String {
        let (ok, out, err) = self.run(args, stdin);
        assert!(ok, "{args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }

    fn fails(&self, args: &[&str], stdin: &str) -> String {
        let (ok, out, err) = self.run(args, stdin);
        assert!(!ok, "{args:?} should fail:\nstdout: {out}\nstderr: {err}");
        err
    }
}

fn run_cli(args: &[&str], config: Option<&Path>, stdin: &str) -> (bool, String, String) {
    let out = crate::support::cli_with(args, config, stdin);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A plaintext (h2c) server whose admin may create API keys, plus any `extra_cm` keys.
fn start_server(extra_cm: &str, args: &[&str]) -> (TestServer, tempfile::TempDir) {
    let config_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        config_dir.path().join("argocd-cm.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  accounts.admin: apiKey\n{extra_cm}"
        ),
    )
    .unwrap();
    let mut all = vec!["--insecure", "--config-dir", config_dir.path().to_str().unwrap()];
    all.extend_from_slice(args);
    (TestServer::start(&all), config_dir)
}

fn data_dir(server: &TestServer) -> String {
    server.dir.path().join("data").to_str().unwrap().to_owned()
}

fn initial_password(server: &TestServer) -> String {
    let (ok, out, err) = run_cli(
        &["admin", "initial-password", "--data-dir", &data_dir(server)],
        None,
        "",
    );
    assert!(ok, "{err}");
    assert!(err.contains("This password must be changed"), "{err}");
    let password = out.strip_suffix('\n').expect("ends with a newline");
    assert_eq!(password.len(), 20, "{out:?}");
    password.to_owned()
}

fn with(args: &[&str], mode: &[&str]) -> Vec<String> {
    args.iter().chain(mode).map(|s| (*s).to_owned()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn login_api_keys_password_change_and_logout() {
    for mode in MODES {
        let (server, _config_dir) = start_server("", &[]);
        let addr = format!("127.0.0.1:{}", server.port);
        let user = User::new();
        let password = initial_password(&server);

        // Login: the username on the command line, the password piped on stdin.
        let login = with(&["login", &addr, "--plaintext", "--username", "admin"], mode);
        let out = user.ok(&strs(&login), &format!("{password}\n"));
        assert!(out.contains("'admin' logged in successfully"), "{mode:?}: {out}");
        assert!(out.contains(&format!("Context '{addr}' updated")), "{out}");
        let mode_bits = std::fs::metadata(user.config()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode_bits, 0o600, "the config holds tokens");
        let session = user.saved_token(&addr).expect("token saved");

        // Later commands take the server, flags and token from the context.
        let out = user.ok(&["account", "get-user-info", "-o", "json"], "");
        let info: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(info["loggedIn"], true, "{mode:?}: {out}");
        assert_eq!(info["username"], "admin");
        assert_eq!(info["iss"], "argocd");
        let out = user.ok(&["account", "get-user-info"], "");
        assert!(
            out.contains("Logged In: true") && out.contains("Username: admin"),
            "{out}"
        );
        let out = user.ok(&["account", "list"], "");
        assert!(
            out.starts_with("NAME") && out.contains("admin") && out.contains("apiKey"),
            "{out}"
        );
        let out = user.ok(&["account", "can-i", "update", "accounts", "admin"], "");
        assert_eq!(out, "yes\n");

        // An API key works on its own and stops working once deleted.
        let out = user.ok(
            &["account", "generate-token", "--id", "ci", "--expires-in", "7d"],
            "",
        );
        let key = out.trim().to_owned();
        assert_eq!(key.split('.').count(), 3, "only the token is printed: {out}");
        let out = user.ok(
            &["account", "get-user-info", "-o", "yaml", "--auth-token", &key],
            "",
        );
        assert!(out.contains("username: admin"), "{out}");
        let out = user.ok(&["account", "get", "-o", "json"], "");
        let account: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(account["tokens"][0]["id"], "ci", "{out}");
        assert!(account["tokens"][0]["expiresAt"].as_i64().unwrap() > 0);
        let out = user.ok(&["account", "get", "--account", "admin"], "");
        assert!(
            out.contains("Tokens:") && out.contains("ci") && out.contains("EXPIRING AT"),
            "{out}"
        );
        user.ok(&["account", "delete-token", "ci"], "");
        let err = user.fails(&["account", "list", "--auth-token", &key], "");
        assert!(
            err.contains("Unauthenticated") && err.contains("no API key"),
            "{err}"
        );
        let err = user.fails(&["account", "delete-token", "ci"], "");
        assert!(err.contains("not found"), "{err}");

        // A password change: the old token dies, the context gets a new one.
        let new_password = "n3w-Passw0rd!";
        let out = user.ok(
            &["account", "update-password"],
            &format!("{password}\n{new_password}\n{new_password}\n"),
        );
        assert!(out.contains("Password updated"), "{out}");
        let err = user.fails(&["account", "list", "--auth-token", &session], "");
        assert!(
            err.contains("Unauthenticated") && err.contains("password has changed"),
            "{err}"
        );
        let renewed = user.saved_token(&addr).unwrap();
        assert_ne!(renewed, session);
        user.ok(&["account", "list"], "");
        let err = user.fails(
            &["admin", "initial-password", "--data-dir", &data_dir(&server)],
            "",
        );
        assert!(
            err.contains("no initial admin password in") && err.contains("argocd-secret"),
            "{err}"
        );
        // The old password no longer logs in; the new one does.
        let login = with(
            &[
                "login",
                &addr,
                "--plaintext",
                "--username",
                "admin",
                "--name",
                "second",
            ],
            mode,
        );
        let err = user.fails(&strs(&login), &format!("{password}\n"));
        assert!(err.contains("Invalid username or password"), "{err}");
        let out = user.ok(&strs(&login), &format!("{new_password}\n"));
        assert!(out.contains("Context 'second' updated"), "{out}");

        // Mismatched confirmation changes nothing.
        let err = user.fails(
            &["account", "update-password"],
            &format!("{new_password}\nx-123456789\ny-123456789\n"),
        );
        assert!(err.contains("do not match"), "{err}");

        // Logout revokes the token on the server and forgets it locally.
        let token = user.saved_token("second").unwrap();
        let out = user.ok(&["logout"], "");
        assert_eq!(out, "Logged out from 'second'\n");
        assert!(user.saved_token("second").is_none());
        let err = user.fails(&["account", "list", "--auth-token", &token], "");
        assert!(
            err.contains("Unauthenticated") && err.contains("revoked"),
            "{err}"
        );
        let err = user.fails(&["account", "get"], "");
        assert!(err.contains("not logged in"), "{err}");
        // The other context's session is untouched.
        user.ok(&["context", &addr], "");
        user.ok(&["account", "get-user-info"], "");
    }
}

#[test]
fn contexts_list_switch_relogin_and_delete() {
    let (server, _config_dir) = start_server("", &[]);
    let addr = format!("127.0.0.1:{}", server.port);
    let password = initial_password(&server);
    let user = User::new();
    let out = user.ok(&["context"], "");
    assert_eq!(out, "CURRENT  NAME  SERVER\n", "an empty config lists nothing");
    let err = user.fails(&["account", "list"], "");
    assert!(err.contains("--server") && err.contains("tiphys login"), "{err}");

    user.ok(
        &[
            "login",
            &addr,
            "--plaintext",
            "--name",
            "native",
            "--username",
            "admin",
        ],
        &format!("{password}\n"),
    );
    // The username may come from stdin too, before the password.
    user.ok(
        &["login", &addr, "--plaintext", "--grpc-web", "--name", "web"],
        &format!("admin\n{password}\n"),
    );
    let out = user.ok(&["context"], "");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["CURRENT", "NAME", "SERVER"]
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["native", addr.as_str()]
    );
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        ["*", "web", addr.as_str()]
    );

    let out = user.ok(&["context", "native"], "");
    assert_eq!(out, "Switched to context 'native'\n");
    assert!(user.ok(&["context"], "").contains("*        native"));
    let err = user.fails(&["context", "nope"], "");
    assert!(err.contains("'nope' does not exist"), "{err}");

    // relogin: same user (from the token), a new token.
    let before = user.saved_token("native").unwrap();
    let out = user.ok(&["relogin"], &format!("{password}\n"));
    assert!(
        out.contains("Relogging in as 'admin'") && out.contains("Context 'native' updated"),
        "{out}"
    );
    assert_ne!(user.saved_token("native").unwrap(), before);
    user.ok(&["account", "get-user-info", "-o", "json"], "");

    // An explicit --server picks up that server's context (token and flags).
    let out = user.ok(&["account", "get-user-info", "--server", &addr, "-o", "json"], "");
    assert!(out.contains("\"admin\""), "{out}");

    let out = user.ok(&["context", "web", "--delete"], "");
    assert!(out.contains("Context 'web' deleted"), "{out}");
    let out = user.ok(&["context"], "");
    assert!(!out.contains("web") && out.contains("native"), "{out}");
    let err = user.fails(&["context", "web", "--delete"], "");
    assert!(err.contains("does not exist"), "{err}");
    user.ok(&["account", "list"], "");
}

#[test]
fn malformed_config_is_reported_and_left_alone() {
    let (server, _config_dir) = start_server("", &[]);
    let addr = format!("127.0.0.1:{}", server.port);
    let user = User::new();
    std::fs::create_dir_all(user.config().parent().unwrap()).unwrap();
    let broken = "contexts:\n- name: a\n  server: [unterminated\n";
    std::fs::write(user.config(), broken).unwrap();
    let config = user.config().display().to_string();
    for args in [
        &["context"][..],
        &["account", "list"][..],
        &[
            "login",
            &addr,
            "--plaintext",
            "--username",
            "admin",
            "--password",
            "whatever1",
        ][..],
        &["logout"][..],
    ] {
        let err = user.fails(args, "");
        assert!(err.contains(&config) && err.contains("line"), "{args:?}: {err}");
    }
    assert_eq!(user.config_text(), broken, "never overwritten");
}

#[test]
fn tls_server_with_saved_certificate_over_both_transports() {
    let server = TestServer::start(&[]);
    let addr = format!("localhost:{}", server.port);
    let ca = server.ca();
    let password = initial_password(&server);
    for mode in MODES {
        let user = User::new();
        let login = with(
            &[
                "login",
                &addr,
                "--server-crt",
                ca.to_str().unwrap(),
                "--username",
                "admin",
            ],
            mode,
        );
        user.ok(&strs(&login), &format!("{password}\n"));
        assert!(
            user.config_text().contains("server-crt"),
            "{}",
            user.config_text()
        );
        // No flags now: the saved certificate is used.
        let out = user.ok(&["account", "get-user-info", "-o", "json"], "");
        assert!(out.contains("\"admin\""), "{mode:?}: {out}");
        let out = user.ok(&["version", "-o", "short"], "");
        assert!(out.contains("tiphys-server:"), "{out}");
        user.ok(&["logout"], "");
    }
}

#[test]
fn renewed_session_token_is_saved() {
    // Tokens of 10 s are renewed in their last 5 s.
    let (server, _config_dir) = start_server("  users.session.duration: 10s\n", &[]);
    let addr = format!("127.0.0.1:{}", server.port);
    let password = initial_password(&server);
    let user = User::new();
    user.ok(
        &["login", &addr, "--plaintext", "--username", "admin"],
        &format!("{password}\n"),
    );
    let first = user.saved_token(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(6500));
    user.ok(&["account", "list"], "");
    let renewed = user.saved_token(&addr).unwrap();
    assert_ne!(
        renewed, first,
        "native gRPC hands back a renewed token, and the CLI keeps it"
    );
    std::thread::sleep(Duration::from_millis(4000));
    // The first token has expired by now; the renewed one works.
    user.fails(&["account", "list", "--auth-token", &first], "");
    user.ok(&["account", "list"], "");
}

#[test]
fn login_errors_are_clear() {
    let (server, _config_dir) = start_server("", &["--login-max-failures", "1"]);
    let addr = format!("127.0.0.1:{}", server.port);
    let user = User::new();
    let login = [
        "login",
        &addr,
        "--plaintext",
        "--username",
        "admin",
        "--password",
        "wrong-password",
    ];
    let err = user.fails(&login, "");
    assert!(err.contains("Invalid username or password"), "{err}");
    let err = user.fails(&login, "");
    assert!(err.contains("too many login attempts; retry in"), "{err}");
    assert!(!user.config().exists(), "nothing saved");
    // No password on a closed stdin is an error, not a hang.
    let err = user.fails(&["login", &addr, "--plaintext", "--username", "someone"], "");
    assert!(err.contains("no password given"), "{err}");
}
