//! Credentials at rest on etcd (issue 19): no stored value holds a cluster's or repository's
//! credential in clear; replicas holding a key of the ring open them; `tiphys admin
//! rotate-secrets-key` moves them to a new key while a server keeps serving; a replica without
//! the key, or with a bad key file, refuses to start and says why.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::etcd_cluster::EtcdCluster;
use crate::replicas::{call, call_ok, etcd_flags, login, token_of, wait_initial_password};
use crate::support::{TestServer, cli};

const SECRET: &str = "sealed-credential-5c1e9a";
const K1: &str = "k1-0123456789abcdef0123456789abcdef";
const K2: &str = "k2-0123456789abcdef0123456789abcdef";

fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn args<'a>(flags: &'a [String], keys: &'a Path) -> Vec<&'a str> {
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--secrets-key-file", keys.to_str().unwrap()]);
    args
}

fn start(flags: &[String], keys: &Path) -> Result<TestServer, String> {
    let mut all = vec!["--insecure"];
    all.extend(args(flags, keys));
    TestServer::spawn(tempfile::tempdir().unwrap(), &all)
}

fn admin_args<'a>(command: &[&'a str], flags: &'a [String], keys: &'a Path) -> Vec<&'a str> {
    let mut all = command.to_vec();
    all.extend(args(flags, keys));
    all
}

fn admin(command: &[&str], flags: &[String], keys: &Path) -> (bool, String, String) {
    cli(&admin_args(command, flags, keys))
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_in_etcd_are_sealed_and_the_key_rotates_while_serving() {
    let cluster = EtcdCluster::start(1);
    let keys = tempfile::tempdir().unwrap();
    let old = key_file(keys.path(), "old", &format!("{K1}\n"));
    let rotating = key_file(
        keys.path(),
        "rotating",
        &format!("# new first, old until re-sealed\n{K2}\n{K1}\n"),
    );
    let new = key_file(keys.path(), "new", &format!("{K2}\n"));
    let flags = etcd_flags(&cluster, "/it-sealed/");

    let a = start(&flags, &old).unwrap();
    // The generated admin password is sealed too: the command needs the key.
    let password = wait_initial_password(&admin_args(&["admin", "initial-password"], &flags, &old));
    let (ok, _, err) = admin(
        &["admin", "initial-password"],
        &flags,
        &keys.path().join("absent"),
    );
    assert!(!ok && err.contains("cannot read --secrets-key-file"), "{err}");
    let wrong = key_file(keys.path(), "wrong", "wrong-0123456789abcdef0123456789abcdef\n");
    let (ok, _, err) = admin(&["admin", "initial-password"], &flags, &wrong);
    assert!(!ok && err.contains("which this process does not hold"), "{err}");
    let token = token_of(&login(a.addr(), "admin", &password, &[]).await);
    let prod = json!({"server": "https://10.0.0.1:6443", "name": "prod", "config": {"bearerToken": SECRET}});
    call_ok(a.addr(), "POST", "/api/v1/clusters", &token, Some(&prod)).await;
    let repo = json!({"repo": "https://git.example/app.git", "username": "bot", "password": SECRET});
    call_ok(a.addr(), "POST", "/api/v1/repositories", &token, Some(&repo)).await;

    // What etcd's readers see: the objects' keys, no credential.
    let raw = cluster.etcdctl(&["get", "--prefix", "/it-sealed/"]);
    let raw = String::from_utf8_lossy(&raw.stdout).into_owned();
    assert!(raw.contains("/it-sealed/") && raw.contains("clusters"), "{raw}");
    for hidden in [SECRET, "bearerToken", "\"password\"", password.as_str()] {
        assert!(!raw.contains(hidden), "{hidden} readable in etcd");
    }
    // The key that sealed them opens them (the export's Secrets hold the credentials).
    let (ok, out, err) = admin(&["admin", "export", "--include-secrets"], &flags, &old);
    assert!(ok, "{err}");
    assert!(out.contains(SECRET), "{out}");

    // Rotation, step 1: a replica with the new key first serves what the old one sealed.
    let b = start(&flags, &rotating).unwrap();
    let r = call(b.addr(), "GET", "/api/v1/clusters", Some(&token), &[], None).await;
    assert!(r.body.to_string().contains("https://10.0.0.1:6443"), "{r:?}");
    let (ok, out, err) = admin(&["admin", "rotate-secrets-key", "--dry-run"], &flags, &rotating);
    assert!(ok, "{err}");
    assert!(
        out.contains("2 records hold credentials: 0 in clear, 2 under an older key"),
        "{out}"
    );
    // The servers holding only the old key go before the re-sealing (they could not read it).
    drop(a);
    let (ok, out, err) = admin(&["admin", "rotate-secrets-key"], &flags, &rotating);
    assert!(ok, "{err}");
    assert!(out.contains("re-sealed 2 records"), "{out}");
    // B follows the re-sealed records and still serves them.
    let r = call(b.addr(), "GET", "/api/v1/repositories", Some(&token), &[], None).await;
    assert!(
        r.body.to_string().contains("https://git.example/app.git"),
        "{r:?}"
    );
    let (ok, out, _) = admin(&["admin", "rotate-secrets-key", "--dry-run"], &flags, &rotating);
    assert!(ok && out.contains("0 in clear, 0 under an older key"), "{out}");

    // Step 3: the new key alone opens everything; the old key alone no longer does.
    let c = start(&flags, &new).unwrap();
    let r = call(c.addr(), "GET", "/api/v1/clusters", Some(&token), &[], None).await;
    assert!(r.body.to_string().contains("https://10.0.0.1:6443"), "{r:?}");
    let err = start(&flags, &old).err().unwrap();
    assert!(err.contains("which this process does not hold"), "{err}");
    assert!(err.contains("--secrets-key-file"), "{err}");
    let (ok, _, err) = admin(&["admin", "export", "--include-secrets"], &flags, &old);
    assert!(!ok && err.contains("which this process does not hold"), "{err}");
    drop((b, c));
}

#[test]
fn bad_key_files_stop_the_server_at_start_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = |keys: &Path| {
        let mut cmd_args = vec!["--insecure", "--data-dir", data.to_str().unwrap()];
        cmd_args.extend(["--secrets-key-file", keys.to_str().unwrap()]);
        TestServer::spawn(tempfile::tempdir().unwrap(), &cmd_args)
            .err()
            .unwrap()
    };
    let short = key_file(dir.path(), "short", "# a key\ntoo-short\n");
    let err = run(&short);
    assert!(
        err.contains("line 2: a key must be at least 32 characters (it has 9)"),
        "{err}"
    );
    let twice = key_file(dir.path(), "twice", &format!("{K1}\n{K1}\n"));
    assert!(run(&twice).contains("line 2: this key is already listed above"));
    let empty = key_file(dir.path(), "empty", "\n# nothing\n");
    assert!(run(&empty).contains("holds no key"));
    let err = run(&dir.path().join("absent"));
    assert!(
        err.contains("cannot read --secrets-key-file") && err.contains("absent"),
        "{err}"
    );
}
