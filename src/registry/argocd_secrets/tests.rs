use serde_json::json;

use super::*;

fn labelled(kind: &str, string_data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "labels": {SECRET_TYPE_LABEL: kind, "team": "a"},
                     "annotations": {"managed-by": "argocd.argoproj.io", "note": "x"}},
        "stringData": string_data,
    })
}

#[test]
fn cluster_secrets_read_upstream_keys() {
    let secret = json!({
        "metadata": {"labels": {SECRET_TYPE_LABEL: "cluster"}},
        "data": {"server": base64::engine::general_purpose::STANDARD.encode("https://k8s:6443")},
        "stringData": {
            "name": "prod",
            "config": "{\"bearerToken\":\"t\",\"tlsClientConfig\":{\"insecure\":false,\"caData\":\"Q0E=\"}}",
            "namespaces": "a, b,",
            "clusterResources": "true",
            "shard": "2",
            "surprise": "x"
        }
    });
    assert_eq!(SecretType::of(&secret), Ok(SecretType::Cluster));
    let read = cluster_from_secret(&secret).unwrap();
    assert_eq!(
        read.object,
        json!({
            "server": "https://k8s:6443", "name": "prod", "namespaces": ["a", "b"],
            "clusterResources": true, "shard": 2,
            "config": {"bearerToken": "t", "tlsClientConfig": {"insecure": false, "caData": "Q0E="}}
        })
    );
    assert!(read.has_credentials);
    assert_eq!(read.warnings.len(), 1, "{:?}", read.warnings);
}

#[test]
fn malformed_cluster_secrets_say_why() {
    let no_server = labelled("cluster", json!({"name": "x"}));
    assert!(cluster_from_secret(&no_server).unwrap_err().contains("server"));
    let bad_config = labelled("cluster", json!({"server": "https://a", "config": "{"}));
    assert!(cluster_from_secret(&bad_config).unwrap_err().contains("config"));
    let bad_bool = labelled(
        "cluster",
        json!({"server": "https://a", "clusterResources": "yes"}),
    );
    assert!(cluster_from_secret(&bad_bool).unwrap_err().contains("boolean"));
    let bad_b64 = json!({"metadata": {"labels": {SECRET_TYPE_LABEL: "cluster"}}, "data": {"server": "%%"}});
    assert!(cluster_from_secret(&bad_b64).unwrap_err().contains("base64"));
    assert!(SecretType::of(&json!({"metadata": {}})).is_err());
    assert!(SecretType::of(&labelled("other", json!({}))).is_err());
}

#[test]
fn clusters_round_trip_through_secrets() {
    let cluster = json!({
        "server": "https://k8s.example:6443", "name": "prod", "project": "p",
        "namespaces": ["a", "b"], "clusterResources": true, "labels": {"team": "a"},
        "config": {"password": "pw", "username": "u", "tlsClientConfig": {"insecure": true, "keyData": "S0VZ"}}
    });
    let full = cluster_to_secret(&cluster, true);
    assert!(full.dropped.is_empty());
    assert_eq!(
        full.secret.pointer("/metadata/name").and_then(Value::as_str),
        Some(secret_name(SecretType::Cluster, "https://k8s.example:6443", "").as_str())
    );
    assert!(
        secret_name(SecretType::Cluster, "https://k8s.example:6443", "").starts_with("cluster-k8s.example-")
    );
    let name = |url: &str| secret_name(SecretType::Cluster, url, "");
    assert!(name("https://admin@K8S.example:6443/x").starts_with("cluster-k8s.example-"));
    assert!(name("https://[2001:db8::1]:6443").starts_with("cluster-2001-db8--1-"));
    assert!(name("https://10.0.0.1:6443").starts_with("cluster-10.0.0.1-"));
    assert_eq!(name("not a url"), format!("cluster--{}", fnv32a("not a url")));
    // Upstream's own expectations (util/db/cluster_test.go, util/db/repository_test.go).
    assert_eq!(name("http://foo"), "cluster-foo-752281925");
    assert_eq!(
        name("http://thelongestdomainnameintheworld.argocd-project.com:3000"),
        "cluster-thelongestdomainnameintheworld.argocd-project.com-2721640553"
    );
    assert_eq!(
        name("http://[fe80::1ff:fe23:4567:890a]:8000"),
        "cluster-fe80--1ff-fe23-4567-890a-664858999"
    );
    assert_eq!(
        name("http://[FE80::1FF:FE23:4567:890A]:8000"),
        "cluster-fe80--1ff-fe23-4567-890a-682802007"
    );
    for (url, project, expected) in [
        ("git://git@github.com:argoproj/ARGO-cd.git", "", "repo-83273445"),
        (
            "git://git@github.com:argoproj/ARGO-cd.git",
            "foobar",
            "repo-2733415816",
        ),
        ("https://github.com/argoproj/ARGO-cd", "foobar", "repo-4161185408"),
        ("https://github.com/argoproj/argo-cd", "", "repo-42374749"),
    ] {
        assert_eq!(
            secret_name(SecretType::Repository, url, project),
            expected,
            "{url} {project}"
        );
    }
    let back = cluster_from_secret(&full.secret).unwrap();
    assert_eq!(back.object, cluster);
    assert!(back.warnings.is_empty());

    let redacted = cluster_to_secret(&cluster, false);
    assert_eq!(
        redacted.dropped,
        ["config.password", "config.tlsClientConfig.keyData"]
    );
    let back = cluster_from_secret(&redacted.secret).unwrap();
    assert_eq!(
        back.object["config"],
        json!({"username": "u", "tlsClientConfig": {"insecure": true}})
    );
}

#[test]
fn repositories_round_trip_with_typed_fields() {
    let repo = json!({
        "repo": "https://git.example/r.git", "type": "git", "name": "r", "project": "p",
        "username": "u", "password": "pw", "insecure": true, "depth": 5,
        "connectionState": {"status": "Successful"}
    });
    let full = repo_to_secret(&repo, Kind::Repository, true);
    assert_eq!(full.secret["stringData"]["url"], "https://git.example/r.git");
    assert_eq!(full.secret["stringData"]["insecure"], "true");
    assert_eq!(full.secret["stringData"]["depth"], "5");
    let back = repo_from_secret(&full.secret, Kind::Repository).unwrap();
    let mut expected = repo.clone();
    expected.as_object_mut().unwrap().remove("connectionState");
    assert_eq!(back.object, expected);
    assert!(back.has_credentials);

    let redacted = repo_to_secret(&repo, Kind::Repository, false);
    assert_eq!(redacted.dropped, ["password"]);
    assert!(redacted.secret["stringData"].get("password").is_none());
}

#[test]
fn repo_creds_use_url_and_refuse_bad_values() {
    let secret = labelled(
        "repo-creds",
        json!({"url": "https://git.example/", "sshPrivateKey": "k"}),
    );
    let read = repo_from_secret(&secret, Kind::RepoCreds).unwrap();
    assert_eq!(
        read.object,
        json!({"url": "https://git.example/", "sshPrivateKey": "k"})
    );
    let bad = labelled("repository", json!({"url": "https://a", "depth": "deep"}));
    assert!(
        repo_from_secret(&bad, Kind::Repository)
            .unwrap_err()
            .contains("depth")
    );
    let missing = labelled("repository", json!({"name": "x"}));
    assert!(
        repo_from_secret(&missing, Kind::Repository)
            .unwrap_err()
            .contains("url")
    );
    let unknown = labelled("repository", json!({"url": "https://a", "color": "red"}));
    assert_eq!(
        repo_from_secret(&unknown, Kind::Repository)
            .unwrap()
            .warnings
            .len(),
        1
    );
}
