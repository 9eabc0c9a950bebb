//! Credentials never leave the server (SEC-17): what every answer that carries a Repository,
//! a credential template or a Cluster removes first. The fields are those of our protos
//! (`proto/v1alpha1/{repository,cluster}.proto`); stored documents are canonical, so no other
//! spelling of a field can be present.
//!
//! Kept: what identifies the object and what a client needs to show it (`username`, which is
//! not secret upstream either, certificates and CA data, which are public, ids of GitHub apps
//! and Azure principals).

use serde_json::{Map, Value};

/// Secret fields of a Repository and of a RepoCreds (the same names in both messages).
pub use crate::registry::argocd_secrets::REPO_SECRET_KEYS as REPOSITORY_SECRETS;

/// The annotation `kubectl apply` leaves on an object: a full copy of it, credentials
/// included (SEC-16, GHSA-fwr2-64vr-xv9m).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Fields holding a URL, in any of these objects: a password in their user-info is masked.
const URL_FIELDS: &[&str] = &[
    "server",
    "repo",
    "url",
    "proxy",
    "proxyUrl",
    "githubAppEnterpriseBaseUrl",
];

/// Removes every credential from a Repository (JSON, as stored or about to be answered).
pub fn repository(value: &mut Value) {
    if let Some(object) = value.as_object_mut() {
        remove_all(object, REPOSITORY_SECRETS);
        mask_urls(object);
    }
}

/// Removes every credential from a repository credential template (RepoCreds).
pub fn repo_creds(value: &mut Value) {
    repository(value);
}

/// What an answer shows of a Cluster's `config`, as upstream's `Cluster.Sanitized`
/// (pkg/apis/application/v1alpha1/types.go) leaves it: the AWS settings, the proxy, compression
/// and whether TLS is verified. Everything else goes, credentials and the material around them
/// alike (username, CA and client certificates, the exec provider whole).
const CLUSTER_CONFIG_SHOWN: &[&str] = &["awsAuthConfig", "proxyUrl", "disableCompression"];

/// Removes every credential from a Cluster, as upstream sanitizes one: its `config` keeps only
/// [`CLUSTER_CONFIG_SHOWN`] and `tlsClientConfig.insecure`; the `last-applied-configuration`
/// annotation and the password of any URL go too.
pub fn cluster(value: &mut Value) {
    let Some(object) = value.as_object_mut() else {
        return;
    };
    mask_urls(object);
    if let Some(annotations) = object.get_mut("annotations").and_then(Value::as_object_mut) {
        annotations.remove(LAST_APPLIED);
    }
    let Some(config) = object.get_mut("config").and_then(Value::as_object_mut) else {
        return;
    };
    let insecure = config
        .get("tlsClientConfig")
        .and_then(|t| t.get("insecure"))
        .cloned()
        .unwrap_or(Value::Bool(false));
    config.retain(|k, _| CLUSTER_CONFIG_SHOWN.contains(&k.as_str()));
    mask_urls(config);
    config.insert(
        "tlsClientConfig".to_owned(),
        serde_json::json!({ "insecure": insecure }),
    );
}

fn remove_all(object: &mut Map<String, Value>, fields: &[&str]) {
    for field in fields {
        object.remove(*field);
    }
}

fn mask_urls(object: &mut Map<String, Value>) {
    for field in URL_FIELDS {
        if let Some(Value::String(text)) = object.get_mut(*field)
            && has_password(text)
        {
            *text = url(text);
        }
    }
}

pub use crate::urlmask::{has_password, mask as url};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every string leaf of `value`.
    fn strings(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(s) => out.push(s.clone()),
            Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
            Value::Object(map) => map.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }

    #[test]
    fn repository_keeps_identity_and_drops_every_secret() {
        let mut repo = json!({
            "repo": "https://git.example/r.git", "username": "bot", "password": "SECRET-1",
            "sshPrivateKey": "SECRET-2", "tlsClientCertData": "CERT", "tlsClientCertKey": "SECRET-3",
            "githubAppPrivateKey": "SECRET-4", "githubAppID": 7, "gcpServiceAccountKey": "SECRET-5",
            "bearerToken": "SECRET-6", "azureServicePrincipalClientId": "client",
            "azureServicePrincipalClientSecret": "SECRET-7", "project": "p1",
            "connectionState": {"status": "", "message": "", "attemptedAt": null}
        });
        repository(&mut repo);
        let mut leaves = Vec::new();
        strings(&repo, &mut leaves);
        assert!(leaves.iter().all(|s| !s.starts_with("SECRET")), "{repo}");
        for kept in ["repo", "username", "tlsClientCertData", "githubAppID", "project"] {
            assert!(repo.get(kept).is_some(), "{kept} was removed");
        }
    }

    #[test]
    fn cluster_drops_config_secrets_and_exec_env() {
        let mut cluster_json = json!({
            "server": "https://k8s.example", "name": "prod", "project": "p1",
            "config": {
                "username": "admin", "password": "SECRET-1", "bearerToken": "SECRET-2",
                "tlsClientConfig": {"insecure": false, "caData": "CA", "certData": "CERT", "keyData": "SECRET-3"},
                "execProviderConfig": {"command": "aws", "args": ["eks"], "env": {"AWS_SECRET": "SECRET-4"}},
                "awsAuthConfig": {"clusterName": "c", "roleARN": "arn:x"}
            }
        });
        cluster(&mut cluster_json);
        let mut leaves = Vec::new();
        strings(&cluster_json, &mut leaves);
        assert!(leaves.iter().all(|s| !s.starts_with("SECRET")), "{cluster_json}");
        // Upstream's Cluster.Sanitized: only the AWS settings and `insecure` are left.
        assert_eq!(
            cluster_json["config"],
            json!({"tlsClientConfig": {"insecure": false}, "awsAuthConfig": {"clusterName": "c", "roleARN": "arn:x"}})
        );
    }

    #[test]
    fn cluster_loses_last_applied_exec_args_and_url_passwords() {
        let mut value = json!({
            "server": "https://u:SECRET-1@k8s.example",
            "annotations": {
                "note": "kept",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"password\":\"SECRET-2\"}"
            },
            "config": {
                "execProviderConfig": {"command": "get-token", "args": ["--token", "SECRET-3"]},
                "proxyUrl": "http://proxy:SECRET-4@proxy.example:3128"
            }
        });
        cluster(&mut value);
        let mut leaves = Vec::new();
        strings(&value, &mut leaves);
        assert!(leaves.iter().all(|s| !s.contains("SECRET")), "{value}");
        assert_eq!(value["annotations"], json!({"note": "kept"}));
        assert_eq!(value["server"], "https://u:***@k8s.example");
        assert_eq!(value["config"]["proxyUrl"], "http://proxy:***@proxy.example:3128");
    }

    #[test]
    fn repository_urls_lose_their_password() {
        let mut repo =
            json!({"repo": "https://bot:SECRET-1@git.example/r.git", "proxy": "http://p:SECRET-2@proxy"});
        repository(&mut repo);
        assert_eq!(
            repo,
            json!({"repo": "https://bot:***@git.example/r.git", "proxy": "http://p:***@proxy"})
        );
        let mut creds = json!({"url": "https://bot:SECRET-1@git.example/", "password": "SECRET-2"});
        repo_creds(&mut creds);
        assert_eq!(creds, json!({"url": "https://bot:***@git.example/"}));
    }

    #[test]
    fn url_passwords_are_found_and_masked() {
        assert!(has_password("https://u:p@h/x"));
        assert!(has_password("http://:p@h"));
        assert!(!has_password("https://u@h/x"));
        assert!(!has_password("ssh://git@h:22/x"));
        assert!(!has_password("git@github.com:a/b.git"));
        assert!(!has_password("https://h/x@y:z"));
        assert!(!has_password("https://h/x?u=a:b@c"));
        assert_eq!(url("https://u:p@h/x"), "https://u:***@h/x");
        assert_eq!(url("https://u:p:q@h@i/x"), "https://u:***@i/x");
        assert_eq!(url("https://u@h/x"), "https://u@h/x");
        assert_eq!(url("not a url"), "not a url");
        // IPv6 hosts, percent-encoding, and `@` or `:` after the authority.
        assert_eq!(url("https://u:p%40ss@[::1]:8443/x"), "https://u:***@[::1]:8443/x");
        assert_eq!(url("https://u@[::1]:8443/x:y@z"), "https://u@[::1]:8443/x:y@z");
        // Text the `url` crate refuses still has its password found.
        assert!(has_password("https://u:p@host:99999/x"));
        assert_eq!(url("https://u:p@host:99999/x"), "https://u:***@host:99999/x");
        assert!(has_password("ssh://git:p@github.com:org/repo.git"));
        // What only a WHATWG reader takes as user-info is found and masked too.
        assert!(has_password("https:u:p@h/x"));
        assert_eq!(url("https:u:p@h/x"), "https://u:***@h/x");
        assert!(has_password("https:\\\\u:p@h/x"));
        assert!(!url("https:\\\\u:p@h/x").contains(":p@"));
        assert!(!has_password("mailto:u:p@h"));
    }

    #[test]
    fn objects_without_config_are_left_alone() {
        let mut v = json!({"server": "https://x"});
        cluster(&mut v);
        assert_eq!(v, json!({"server": "https://x"}));
        let mut v = json!("not an object");
        repository(&mut v);
        assert_eq!(v, json!("not an object"));
    }
}
