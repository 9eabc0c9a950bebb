//! Reading a kubeconfig context as a cluster's connection config (Argo CD's ClusterConfig):
//! server, CA, TLS options, and the user's credentials (token, client certificate, basic
//! auth or an exec plugin). Files named in the kubeconfig are read and embedded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::{Map, Value, json};

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
    token: String,
    #[serde(rename = "tokenFile")]
    token_file: String,
    client_certificate: String,
    client_certificate_data: String,
    client_key: String,
    client_key_data: String,
    username: String,
    password: String,
    exec: Option<ExecEntry>,
    auth_provider: Option<Value>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default, rename_all = "camelCase")]
struct ExecEntry {
    command: String,
    args: Vec<String>,
    env: Vec<EnvVar>,
    api_version: String,
    install_hint: String,
    provide_cluster_info: bool,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
struct EnvVar {
    name: String,
    value: String,
}

/// A context's cluster: its server URL and the ClusterConfig JSON to register.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextCluster {
    pub server: String,
    pub config: Value,
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
    let mut config = Map::new();
    if let Some(user) = user {
        user_config(user, base, &mut config, &mut tls)?;
    } else if !context.user.is_empty() {
        return Err(anyhow!("its user {:?} is not defined", context.user));
    }
    if !cluster.proxy_url.is_empty() {
        config.insert("proxyUrl".to_owned(), Value::from(cluster.proxy_url.as_str()));
    }
    config.insert("tlsClientConfig".to_owned(), Value::Object(tls));
    Ok(ContextCluster {
        server: cluster.server.trim().to_owned(),
        config: Value::Object(config),
    })
}

fn user_config(
    user: &UserEntry,
    base: &Path,
    config: &mut Map<String, Value>,
    tls: &mut Map<String, Value>,
) -> anyhow::Result<()> {
    if user.auth_provider.is_some() {
        return Err(anyhow!(
            "its user authenticates with an auth-provider plugin, which Argo CD cannot use: use a token or exec"
        ));
    }
    let token = if !user.token.is_empty() {
        user.token.clone()
    } else if !user.token_file.is_empty() {
        String::from_utf8(read_file(base, &user.token_file)?)
            .map_err(|_| anyhow!("tokenFile is not text"))?
            .trim()
            .to_owned()
    } else {
        String::new()
    };
    if !token.is_empty() {
        config.insert("bearerToken".to_owned(), Value::from(token));
    }
    if !user.username.is_empty() {
        config.insert("username".to_owned(), Value::from(user.username.as_str()));
        config.insert("password".to_owned(), Value::from(user.password.as_str()));
    }
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
    if let Some(exec) = &user.exec {
        if exec.command.is_empty() {
            return Err(anyhow!("its user's exec plugin has no command"));
        }
        let env: BTreeMap<&str, &str> = exec
            .env
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()))
            .collect();
        let mut plugin = json!({"command": exec.command, "apiVersion": exec.api_version});
        if let Some(map) = plugin.as_object_mut() {
            if !exec.args.is_empty() {
                map.insert("args".to_owned(), json!(exec.args));
            }
            if !env.is_empty() {
                map.insert("env".to_owned(), json!(env));
            }
            if !exec.install_hint.is_empty() {
                map.insert("installHint".to_owned(), Value::from(exec.install_hint.as_str()));
            }
            if exec.provide_cluster_info {
                map.insert("provideClusterInfo".to_owned(), Value::Bool(true));
            }
        }
        config.insert("execProviderConfig".to_owned(), plugin);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
- name: lab
  cluster:
    server: https://lab.example
    certificate-authority: ca.pem
    insecure-skip-tls-verify: true
contexts:
- {name: token, context: {cluster: prod, user: bot}}
- {name: certs, context: {cluster: lab, user: tls}}
- {name: exec, context: {cluster: prod, user: aws}}
- {name: broken, context: {cluster: nowhere, user: bot}}
users:
- name: bot
  user: {token: secret-token}
- name: tls
  user: {client-certificate: crt.pem, client-key-data: S0VZCg==, username: u, password: p}
- name: aws
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: aws
      args: [eks, get-token]
      env: [{name: AWS_PROFILE, value: prod}]
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
    fn token_context() {
        let (_dir, files) = setup();
        let c = read_context(&files, "token").unwrap();
        assert_eq!(c.server, "https://prod.example:6443");
        assert_eq!(
            c.config,
            json!({"bearerToken": "secret-token",
                   "tlsClientConfig": {"insecure": false, "serverName": "api.prod", "caData": "Q0EK"}})
        );
    }

    #[test]
    fn certificate_files_are_embedded() {
        let (_dir, files) = setup();
        let c = read_context(&files, "certs").unwrap();
        assert_eq!(
            c.config,
            json!({"username": "u", "password": "p",
                   "tlsClientConfig": {"insecure": true, "caData": B64.encode("CA\n"),
                                       "certData": B64.encode("CRT\n"), "keyData": "S0VZCg=="}})
        );
    }

    #[test]
    fn exec_plugins_and_errors() {
        let (_dir, files) = setup();
        let c = read_context(&files, "exec").unwrap();
        assert_eq!(
            c.config["execProviderConfig"],
            json!({"command": "aws", "args": ["eks", "get-token"], "env": {"AWS_PROFILE": "prod"},
                   "apiVersion": "client.authentication.k8s.io/v1beta1"})
        );
        let err = read_context(&files, "broken").unwrap_err().to_string();
        assert!(err.contains("nowhere"), "{err}");
        let err = read_context(&files, "missing").unwrap_err().to_string();
        assert!(err.contains("token, certs, exec, broken"), "{err}");
    }
}
