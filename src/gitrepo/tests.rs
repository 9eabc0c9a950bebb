use super::error::classify;
use super::snapshot::Lru;
use super::transport::{endpoint, parse_url};
use super::*;

fn refs() -> Refs {
    let r = |name: &str, commit: &str| RemoteRef {
        name: name.to_owned(),
        commit: commit.to_owned(),
    };
    Refs {
        refs: vec![
            r("HEAD", &"a".repeat(40)),
            r("refs/heads/main", &"a".repeat(40)),
            r("refs/heads/dev", &format!("b{}", "1".repeat(39))),
            r("refs/tags/v1", &format!("b{}", "2".repeat(39))),
            r("refs/tags/v2", &"a".repeat(40)),
        ],
        head_target: Some("refs/heads/main".to_owned()),
    }
}

#[test]
fn revisions_resolve_as_git_names_them() {
    let refs = refs();
    assert_eq!(refs.resolve("").as_deref(), Some("a".repeat(40).as_str()));
    assert_eq!(refs.resolve("HEAD"), refs.resolve("main"));
    assert_eq!(refs.resolve("refs/heads/dev"), refs.resolve("dev"));
    assert_eq!(
        refs.resolve("v1").as_deref(),
        Some(format!("b{}", "2".repeat(39)).as_str())
    );
    // A full id is taken as it is (the fetch says whether it exists); a prefix only when one
    // listed commit has it.
    assert_eq!(
        refs.resolve(&"C".repeat(40)).as_deref(),
        Some("c".repeat(40).as_str())
    );
    assert_eq!(refs.resolve("aaaa").as_deref(), Some("a".repeat(40).as_str()));
    assert_eq!(refs.resolve("b1"), None, "too short");
    assert_eq!(
        refs.resolve("b111").as_deref(),
        Some(format!("b{}", "1".repeat(39)).as_str())
    );
    assert_eq!(refs.resolve("bbbb"), None, "no listed commit");
    assert_eq!(refs.resolve("nope"), None);
    assert_eq!(refs.resolve("../main"), None);
}

#[test]
fn branches_and_tags_are_listed_sorted_and_once() {
    let refs = refs();
    assert_eq!(refs.branches(), ["dev", "main"]);
    assert_eq!(refs.tags(), ["v1", "v2"]);
    assert_eq!(refs.tags_of(&"a".repeat(40)), ["v2"]);
}

#[test]
fn failures_are_classified_into_fixed_words_naming_only_the_host() {
    let host = "git.example:8443";
    let cases = [
        (
            "no ed25519 host key is known for [h]:22 and you have requested strict checking.\r\nhost key verification failed.",
            "is not known",
        ),
        (
            "warning: remote host identification has changed! host key for [h]:22 has changed",
            "does not match",
        ),
        (
            "load key \"/tmp/x/key\": invalid format",
            "private key cannot be used",
        ),
        (
            "received http status 401 for https://user@git.example/x",
            "authentication to git.example:8443 failed",
        ),
        ("no credentials were returned at all", "authentication"),
        ("invalid peer certificate: unknownissuer", "is not trusted"),
        // Ports that hold a status code's digits decide nothing.
        (
            "invalid peer certificate: unknownissuer (https://127.0.0.1:40123/repo.git)",
            "is not trusted",
        ),
        (
            "tcp connect error 127.0.0.1:34037: connection refused",
            "cannot be reached",
        ),
        (
            "received http status 403 for https://127.0.0.1:44040/x",
            "authentication",
        ),
        ("http status client error (400 bad request)", "HTTP 400"),
        (
            "tcp connect error: connection refused (os error 111)",
            "cannot be reached",
        ),
        (
            "http status client error (404 not found) for url",
            "no repository",
        ),
        (
            "something nobody expected: password=hunter2",
            "reading the repository on git.example:8443 failed",
        ),
    ];
    for (text, expected) in cases {
        let message = classify(text, host).to_string();
        assert!(message.contains(expected), "{text:?} gave {message:?}");
        assert!(
            !message.contains("hunter2") && !message.contains("/tmp/x"),
            "{message}"
        );
    }
}

#[test]
fn only_network_schemes_are_contacted() {
    let remote = |url: &str| Remote {
        url: url.to_owned(),
        ..Remote::default()
    };
    for url in [
        "https://h/r.git",
        "http://h:8080/r",
        "ssh://git@h:2222/r",
        "git@h:org/r.git",
        "git://h/r",
    ] {
        assert!(parse_url(&remote(url)).is_ok(), "{url}");
    }
    for url in [
        "file:///etc",
        "/etc/passwd",
        "./repo",
        "ext::sh -c id",
        "https://",
    ] {
        assert_eq!(
            parse_url(&remote(url)).err(),
            Some(GitError::UnsupportedUrl),
            "{url}"
        );
    }
    assert_eq!(endpoint("git@h:org/r.git"), Some(("h".to_owned(), 22, true)));
    assert_eq!(endpoint("https://h:8443/r"), Some(("h".to_owned(), 8443, false)));
    assert_eq!(endpoint("git://h/r"), Some(("h".to_owned(), 9418, false)));
}

#[test]
fn a_remote_never_prints_its_secrets() {
    let remote = Remote {
        url: "https://git.example/r.git".to_owned(),
        username: "u".to_owned(),
        password: "hunter2".to_owned(),
        bearer_token: "tok-123".to_owned(),
        ssh_private_key: "-----BEGIN OPENSSH PRIVATE KEY-----".to_owned(),
        ..Remote::default()
    };
    let shown = format!("{remote:?}");
    for secret in ["hunter2", "tok-123", "PRIVATE KEY"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    // Credentials are part of the cache key: another password is another entry.
    let other = Remote {
        password: "other".to_owned(),
        ..remote.clone()
    };
    assert_ne!(remote.fingerprint(), other.fingerprint());
}

#[test]
fn credentials_over_plain_http_are_warned_of() {
    let remote = |url: &str, username: &str, password: &str, bearer_token: &str| Remote {
        url: url.to_owned(),
        username: username.to_owned(),
        password: password.to_owned(),
        bearer_token: bearer_token.to_owned(),
        ..Remote::default()
    };
    for plain in [
        remote("http://h:8080/r.git", "u", "hunter2", ""),
        remote("HTTP://h/r.git", "", "hunter2", ""),
        remote("http://h/r.git", "", "", "tok-123"),
    ] {
        let warning = plain.cleartext_warning().expect("a warning");
        assert!(
            warning.contains("unencrypted") && warning.contains(&plain.host()),
            "{warning}"
        );
        // The warning names the host, never the secret.
        assert!(
            !warning.contains("hunter2") && !warning.contains("tok-123"),
            "{warning}"
        );
    }
    for quiet in [
        remote("https://h/r.git", "u", "hunter2", ""),
        remote("http://h/r.git", "", "", ""),
        remote("ssh://git@h/r.git", "", "", ""),
        remote("git://h/r", "", "", ""),
    ] {
        assert_eq!(quiet.cleartext_warning(), None, "{quiet:?}");
    }
}

#[test]
fn the_commit_cache_keeps_the_most_recently_used() {
    let dir = std::env::temp_dir().join(format!("tiphys-lru-{}", crate::random::token(8)));
    let repo = gix::init_bare(&dir).unwrap();
    let tree = repo.empty_tree().id;
    let sig = gix::actor::SignatureRef {
        name: "T".into(),
        email: "t@example".into(),
        time: "1700000000 +0000",
    };
    let id = repo
        .new_commit_as(sig, sig, "one", tree, gix::commit::NO_PARENT_IDS)
        .unwrap()
        .id;
    let snapshot = |n: u64| Arc::new(Snapshot::read(gix::open(&dir).unwrap(), id, n).unwrap());
    let mut lru = Lru::new(2);
    lru.put("a".to_owned(), snapshot(1));
    lru.put("b".to_owned(), snapshot(1));
    assert!(lru.get("a").is_some());
    lru.put("c".to_owned(), snapshot(1));
    assert!(lru.get("a").is_some() && lru.get("c").is_some());
    assert!(lru.get("b").is_none(), "the least recently used went");
    let read = snapshot(1);
    assert_eq!(read.commit.message, "one");
    assert_eq!(read.commit.author, "T <t@example>");
    assert_eq!(read.commit.date, "2023-11-14T22:13:20Z");
    assert!(read.files().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
