//! A cluster as Argo CD stores it (`server` and `config`) turned into a kube-rs client
//! configuration, as upstream's `Cluster.RawRestConfig` (pkg/apis/application/v1alpha1/types.go)
//! turns it into client-go's:
//! - the in-cluster address with no credentials of its own is the cluster tiphys runs in;
//! - otherwise the server with the configured TLS settings, and as credentials the exec
//!   provider's (`awsAuthConfig` first, then `execProviderConfig`), else the bearer token or the
//!   basic-auth user, else the TLS client certificate;
//! - `proxyUrl` (http, https or socks5) and `disableCompression` on top.
//!
//! The configuration is handed to kube-rs as an in-memory kubeconfig, so its parsing of
//! certificates and keys is the one `tiphys --kube` uses for its own API server.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ClusterError;
use super::exec::{Credential, ExecConfig};

/// The in-cluster address (upstream's `KubernetesInternalAPIServerAddr`).
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";

/// A cluster's connection settings, from its stored JSON.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(default)]
pub struct Target {
    pub server: String,
    pub config: Settings,
    /// The user every call impersonates (`Impersonate-User`), when the caller chose one: never
    /// read from the stored cluster.
    #[serde(skip)]
    pub impersonate: Option<String>,
}

/// `ClusterConfig`, the parts used to connect.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(default, rename_all = "camelCase")]
pub struct Settings {
    pub username: String,
    pub password: String,
    pub bearer_token: String,
    pub tls_client_config: Tls,
    pub aws_auth_config: Option<Aws>,
    pub exec_provider_config: Option<ExecConfig>,
    pub proxy_url: String,
    pub disable_compression: bool,
}

/// `TLSClientConfig`: certificates as base64 of PEM, as Go's `[]byte` is written in JSON.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(default, rename_all = "camelCase")]
pub struct Tls {
    pub insecure: bool,
    pub server_name: String,
    pub cert_data: String,
    pub key_data: String,
    pub ca_data: String,
}

/// `AWSAuthConfig`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(default, rename_all = "camelCase")]
pub struct Aws {
    pub cluster_name: String,
    #[serde(rename = "roleARN")]
    pub role_arn: String,
    pub profile: String,
}

impl Target {
    /// Reads a stored cluster; fields it does not know are ignored, wrong types refused.
    pub fn read(value: &Value) -> Result<Self, ClusterError> {
        let mut target = Self::deserialize(value).map_err(|e| ClusterError::Config(e.to_string()))?;
        target.server = target.server.trim_end_matches('/').to_owned();
        Ok(target)
    }

    /// The cluster tiphys runs in, reached with its own client (`--kube`) or the pod's
    /// ServiceAccount.
    pub fn is_in_cluster(&self) -> bool {
        let c = &self.config;
        self.server == IN_CLUSTER_SERVER
            && c.username.is_empty()
            && c.password.is_empty()
            && c.bearer_token.is_empty()
    }

    /// The program that gives this cluster's credentials, if one does.
    pub fn exec(&self) -> Option<ExecConfig> {
        match (&self.config.aws_auth_config, &self.config.exec_provider_config) {
            (Some(aws), _) => Some(ExecConfig::aws(&aws.cluster_name, &aws.role_arn, &aws.profile)),
            (None, Some(exec)) => Some(exec.clone()),
            (None, None) => None,
        }
    }

    /// The kube-rs configuration, with `exec`'s credential when the cluster has a provider.
    pub async fn kube_config(&self, exec: Option<&Credential>) -> Result<kube::Config, ClusterError> {
        if !self.config.proxy_url.is_empty() {
            check_proxy(&self.config.proxy_url)?;
        }
        let file: kube::config::Kubeconfig = serde_json::from_value(self.kubeconfig(exec)?)
            .map_err(|e| ClusterError::Config(e.to_string()))?;
        let mut config =
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| ClusterError::Config(e.to_string()))?;
        config.disable_compression = self.config.disable_compression;
        Ok(config)
    }

    fn kubeconfig(&self, exec: Option<&Credential>) -> Result<Value, ClusterError> {
        let tls = &self.config.tls_client_config;
        let mut cluster = BTreeMap::from([("server", json!(self.server))]);
        let pem = |field: &str, data: &str| -> Result<Value, ClusterError> {
            // Given as base64 of PEM; kube-rs wants the same, checked here so that the message
            // names the field.
            BASE64
                .decode(data)
                .map_err(|_| ClusterError::Config(format!("tlsClientConfig.{field} is not base64")))?;
            Ok(json!(data))
        };
        if tls.insecure {
            cluster.insert("insecure-skip-tls-verify", json!(true));
        } else if !tls.ca_data.is_empty() {
            cluster.insert("certificate-authority-data", pem("caData", &tls.ca_data)?);
        }
        if !tls.server_name.is_empty() {
            cluster.insert("tls-server-name", json!(tls.server_name));
        }
        if !self.config.proxy_url.is_empty() {
            cluster.insert("proxy-url", json!(self.config.proxy_url));
        }
        let mut user = BTreeMap::new();
        let b64 = |pem: &str| BASE64.encode(pem.as_bytes());
        match exec {
            Some(credential) => {
                if let Some(token) = &credential.token {
                    user.insert("token", json!(token));
                }
                if let (Some(cert), Some(key)) = (&credential.client_certificate, &credential.client_key) {
                    user.insert("client-certificate-data", json!(b64(cert)));
                    user.insert("client-key-data", json!(b64(key)));
                }
            }
            None if !self.config.bearer_token.is_empty() => {
                user.insert("token", json!(self.config.bearer_token));
            }
            None if !self.config.username.is_empty() => {
                user.insert("username", json!(self.config.username));
                user.insert("password", json!(self.config.password));
            }
            None => {}
        }
        if exec.is_none() && !tls.cert_data.is_empty() {
            user.insert("client-certificate-data", pem("certData", &tls.cert_data)?);
            user.insert("client-key-data", pem("keyData", &tls.key_data)?);
        }
        if let Some(name) = &self.impersonate {
            user.insert("as", json!(name));
        }
        Ok(json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }))
    }
}

/// Upstream's `ParseProxyUrl`: a URL with scheme http, https or socks5.
fn check_proxy(proxy: &str) -> Result<(), ClusterError> {
    let parsed =
        url::Url::parse(proxy).map_err(|e| ClusterError::Config(format!("proxyUrl is not a URL ({e})")))?;
    match parsed.scheme() {
        "http" | "https" | "socks5" => Ok(()),
        other => Err(ClusterError::Config(format!(
            "proxyUrl has the unsupported scheme {other:?}: use http, https or socks5"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(value: Value) -> Target {
        Target::read(&value).unwrap()
    }

    #[test]
    fn credentials_are_chosen_as_upstream_chooses_them() {
        let t = target(json!({"server": "https://k:6443/", "config": {
            "bearerToken": "tok", "username": "u", "tlsClientConfig": {"insecure": true, "serverName": "k"}
        }}));
        assert_eq!(t.server, "https://k:6443");
        let k = t.kubeconfig(None).unwrap();
        assert_eq!(k["users"][0]["user"], json!({"token": "tok"}));
        assert_eq!(k["clusters"][0]["cluster"]["insecure-skip-tls-verify"], true);
        assert_eq!(k["clusters"][0]["cluster"]["tls-server-name"], "k");

        let basic = target(json!({"server": "https://k", "config": {"username": "u", "password": "p"}}));
        assert_eq!(
            basic.kubeconfig(None).unwrap()["users"][0]["user"],
            json!({"username": "u", "password": "p"})
        );

        let aws = target(json!({"server": "https://k", "config": {
            "awsAuthConfig": {"clusterName": "prod"}, "execProviderConfig": {"command": "other"}
        }}));
        assert_eq!(
            aws.exec().unwrap().command,
            "argocd-k8s-auth",
            "awsAuthConfig wins"
        );

        assert!(target(json!({"server": IN_CLUSTER_SERVER})).is_in_cluster());
        assert!(
            !target(json!({"server": IN_CLUSTER_SERVER, "config": {"bearerToken": "t"}})).is_in_cluster()
        );

        let mut acting = target(json!({"server": "https://k", "config": {"bearerToken": "tok"}}));
        acting.impersonate = Some("system:serviceaccount:n:sa".to_owned());
        assert_eq!(
            acting.kubeconfig(None).unwrap()["users"][0]["user"],
            json!({"token": "tok", "as": "system:serviceaccount:n:sa"})
        );
        let stored = target(json!({"server": "https://k", "impersonate": "x"}));
        assert_eq!(stored.impersonate, None, "never read from the stored cluster");
    }

    #[test]
    fn bad_settings_are_named() {
        let bad_ca = target(json!({"server": "https://k", "config": {"tlsClientConfig": {"caData": "%%%"}}}));
        assert!(
            bad_ca
                .kubeconfig(None)
                .unwrap_err()
                .to_string()
                .contains("caData is not base64")
        );
        assert!(
            check_proxy("ftp://p")
                .unwrap_err()
                .to_string()
                .contains("unsupported scheme \"ftp\"")
        );
        assert!(check_proxy("socks5://127.0.0.1:1080").is_ok());
        let err = Target::read(&json!({"server": "https://k", "config": {"bearerToken": 3}})).unwrap_err();
        assert!(matches!(err, ClusterError::Config(_)), "{err}");
    }
}
