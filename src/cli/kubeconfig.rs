//! A kubeconfig context, for `tiphys cluster add|rm`: what of it is registered as the cluster's
//! config (server, CA, TLS options, client certificate; files named in the kubeconfig are read
//! and embedded), and a kube-rs client with its credentials to prepare the cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::exit;

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "kebab-case")]
struct KubeConfig {
    clusters: Vec<Named<ClusterEntry>>,
    contexts: Vec<Named<ContextEntry>>,
    users: Vec<Named<UserEntry>>,
    current_context: String,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "context", alias = "user")]
    value: T,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "kebab-case")]
struct ClusterEntry {
    server: String,
    certificate_authority: String,
    certificate_authority_data: String,
    insecure_skip_tls_verify: bool,
    tls_server_name: String,
    proxy_url: String,
    disable_compression: bool,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct ContextEntry {
    cluster: String,
    user: String,
    namespace: String,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "kebab-case")]
struct UserEntry {
    client_certificate: String,
    client_certificate_data: String,
    client_key: String,
    client_key_data: String,
}

/// What a context says about its cluster, as upstream's `argocd cluster add` registers it
/// (cmd/util/cluster.go NewCluster): the server URL, the TLS part of the ClusterConfig
/// (`insecure`, `serverName`, `caData`, and the user's `certData` and `keyData`), the proxy and
/// compression settings. The user's other credentials (a token, an exec plugin) only serve to
/// reach the cluster; they are not registered.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextCluster {
    pub server: String,
    pub tls: Map<String, Value>,
    pub proxy_url: Option<String>,
    pub disable_compression: bool,
}

/// The kubeconfig files to look in: `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`.
pub fn files(given: Option<&Path>) -> anyhow::Result<Vec<PathBuf>> {
    if let Some(path) = given {
        return Ok(vec![path.to_path_buf()]);
    }
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        return Ok(std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect());
    }
    let home = dirs::home_dir().ok_or_else(|| anyhow!("no home directory: pass --kubeconfig"))?;
    Ok(vec![home.join(".kube").join("config")])
}

/// The cluster of `context`, from the first of `files` that defines it.
pub fn read_context(files: &[PathBuf], context: &str) -> anyhow::Result<ContextCluster> {
    let mut seen = Vec::new();
    for path in files {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && files.len() > 1 => continue,
            Err(err) => {
                return Err(err).with_context(|| format!("cannot read the kubeconfig {}", path.display()));
            }
        };
        let cfg: KubeConfig = serde_yaml_ng::from_str(&text)
            .map_err(|e| exit::invalid(format!("{}: not a kubeconfig: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(found) = cfg.contexts.iter().find(|c| c.name == context) {
            return resolve(&cfg, &found.value, base)
                .map_err(|e| exit::invalid(format!("{}: context {context}: {e:#}", path.display())));
        }
        seen.extend(cfg.contexts.iter().map(|c| c.name.clone()));
    }
    Err(exit::invalid(format!(
        "no context {context:?} in the kubeconfig (contexts: {})",
        if seen.is_empty() {
            "none".to_owned()
        } else {
            seen.join(", ")
        }
    )))
}

/// A path in a kubeconfig, relative to the kubeconfig's directory.
fn read_file(base: &Path, path: &str) -> anyhow::Result<Vec<u8>> {
    let full = base.join(path);
    std::fs::read(&full).with_context(|| format!("cannot read {}", full.display()))
}

/// Base64 of the inline `*-data` value (checked) or of the named file.
fn pem(base: &Path, data: &str, file: &str, what: &str) -> anyhow::Result<Option<String>> {
    if !data.is_empty() {
        let bytes = B64
            .decode(data.trim())
            .map_err(|e| anyhow!("{what}-data is not base64: {e}"))?;
        return Ok(Some(B64.encode(bytes)));
    }
    if !file.is_empty() {
        return Ok(Some(B64.encode(read_file(base, file)?)));
    }
    Ok(None)
}

fn resolve(cfg: &KubeConfig, context: &ContextEntry, base: &Path) -> anyhow::Result<ContextCluster> {
    let cluster = cfg
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .map(|c| &c.value)
        .ok_or_else(|| anyhow!("its cluster {:?} is not defined", context.cluster))?;
    if cluster.server.trim().is_empty() {
        return Err(anyhow!("its cluster {:?} has no server", context.cluster));
    }
    let user = cfg
        .users
        .iter()
        .find(|u| u.name == context.user)
        .map(|u| &u.value);
    let mut tls = Map::new();
    tls.insert(
        "insecure".to_owned(),
        Value::Bool(cluster.insecure_skip_tls_verify),
    );
    if !cluster.tls_server_name.is_empty() {
        tls.insert(
            "serverName".to_owned(),
            Value::from(cluster.tls_server_name.as_str()),
        );
    }
    let ca = pem(
        base,
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
        "certificate-authority",
    )?;
    if let Some(ca) = ca {
        tls.insert("caData".to_owned(), Value::from(ca));
    }
    if let Some(user) = user {
        client_certificate(user, base, &mut tls)?;
    } else if !context.user.is_empty() {
        return Err(anyhow!("its user {:?} is not defined", context.user));
    }
    Ok(ContextCluster {
        server: cluster.server.trim().to_owned(),
        tls,
        proxy_url: Some(cluster.proxy_url.clone()).filter(|p| !p.is_empty()),
        disable_compression: cluster.disable_compression,
    })
}

fn client_certificate(user: &UserEntry, base: &Path, tls: &mut Map<String, Value>) -> anyhow::Result<()> {
    let cert = pem(
        base,
        &user.client_certificate_data,
        &user.client_certificate,
        "client-certificate",
    )?;
    let key = pem(base, &user.client_key_data, &user.client_key, "client-key")?;
    match (cert, key) {
        (Some(cert), Some(key)) => {
            tls.insert("certData".to_owned(), Value::from(cert));
            tls.insert("keyData".to_owned(), Value::from(key));
        }
        (None, None) => {}
        _ => {
            return Err(anyhow!(
                "its user has a client certificate without a key, or a key without one"
            ));
        }
    }
    Ok(())
}

/// A kube-rs client of `context`'s API server, with the context's own credentials (token,
/// client certificate, exec plugin ...), each request bounded by `timeout`. `files` are merged
/// as kubectl merges `$KUBECONFIG`.
pub async fn client(files: &[PathBuf], context: &str, timeout: Duration) -> anyhow::Result<kube::Client> {
    let mut merged: Option<Kubeconfig> = None;
    for path in files {
        if files.len() > 1 && !path.exists() {
            continue;
        }
        let file = Kubeconfig::read_from(path)
            .map_err(|e| exit::invalid(format!("cannot read the kubeconfig {}: {e}", path.display())))?;
        merged = Some(match merged {
            None => file,
            Some(first) => first
                .merge(file)
                .map_err(|e| exit::invalid(format!("cannot merge the kubeconfig {}: {e}", path.display())))?,
        });
    }
    let merged = merged.ok_or_else(|| exit::invalid("no kubeconfig file found"))?;
    let options = KubeConfigOptions {
        context: Some(context.to_owned()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(merged, &options)
        .await
        .map_err(|e| exit::invalid(format!("the kubeconfig context {context:?} cannot be used: {e}")))?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    // A refusal or an unreachable server is reported at once, not retried.
    config.default_retry = false;
    kube::Client::try_from(config)
        .map_err(|e| exit::invalid(format!("the kubeconfig context {context:?} cannot be used: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: token
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
    certificate-authority-data: Q0EK
    tls-server-name: api.prod
    proxy-url: http://proxy.example:3128
- name: lab
  cluster:
    server: https://lab.example
    certificate-authority: ca.pem
    insecure-skip-tls-verify: true
    disable-compression: true
contexts:
- {name: token, context: {cluster: prod, user: bot}}
- {name: certs, context: {cluster: lab, user: tls}}
- {name: broken, context: {cluster: nowhere, user: bot}}
- {name: half, context: {cluster: lab, user: half}}
users:
- name: bot
  user: {token: secret-token}
- name: tls
  user: {client-certificate: crt.pem, client-key-data: S0VZCg==}
- name: half
  user: {client-certificate: crt.pem}
"#;

    fn setup() -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config"), KUBECONFIG).unwrap();
        std::fs::write(dir.path().join("ca.pem"), "CA\n").unwrap();
        std::fs::write(dir.path().join("crt.pem"), "CRT\n").unwrap();
        let files = vec![dir.path().join("config")];
        (dir, files)
    }

    #[test]
    fn a_token_user_gives_only_the_clusters_tls() {
        let (_dir, files) = setup();
        let c = read_context(&files, "token").unwrap();
        assert_eq!(c.server, "https://prod.example:6443");
        assert_eq!(
            Value::Object(c.tls),
            json!({"insecure": false, "serverName": "api.prod", "caData": "Q0EK"})
        );
        assert_eq!(c.proxy_url.as_deref(), Some("http://proxy.example:3128"));
        assert!(!c.disable_compression);
    }

    #[test]
    fn certificate_files_are_embedded() {
        let (_dir, files) = setup();
        let c = read_context(&files, "certs").unwrap();
        assert_eq!(
            Value::Object(c.tls),
            json!({"insecure": true, "caData": B64.encode("CA\n"),
                   "certData": B64.encode("CRT\n"), "keyData": "S0VZCg=="})
        );
        assert!(c.disable_compression);
    }

    #[test]
    fn bad_contexts_are_named() {
        let (_dir, files) = setup();
        let err = read_context(&files, "broken").unwrap_err().to_string();
        assert!(err.contains("nowhere"), "{err}");
        let err = read_context(&files, "half").unwrap_err().to_string();
        assert!(err.contains("without a key"), "{err}");
        let err = read_context(&files, "missing").unwrap_err().to_string();
        assert!(err.contains("token, certs, broken, half"), "{err}");
    }
}
