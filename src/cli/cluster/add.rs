//! `tiphys cluster add CONTEXT`, as upstream's cmd/argocd/commands/cluster.go does it: prepare
//! the manager's identity in the cluster (src/kubernetes/cluster_auth.rs), then register the
//! cluster (cmd/util/cluster.go NewCluster) with the server's Create call.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Map, Value, json};

use super::super::args::confirm;
use super::super::call;
use super::super::client::Client;
use super::super::exit;
use super::super::kubeconfig::{self, ContextCluster};
use super::{AddArgs, SVC, server};
use crate::kubernetes::cluster_auth::{self, Made, Target};

/// How long one request to the cluster's API server may take (upstream's
/// ClusterAuthRequestTimeout).
pub const KUBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The URL Argo CD reaches its own cluster by.
const IN_CLUSTER_URL: &str = "https://kubernetes.default.svc";

/// Where the registered server URL comes from.
#[derive(Debug, PartialEq)]
enum Endpoint {
    Kubeconfig,
    KubePublic,
    Internal,
    Url(String),
}

/// The credentials the cluster is registered with, besides the context's TLS.
enum Credentials {
    /// The manager's token (made or found by this run).
    Token(String),
    Aws(Value),
    Exec(Value),
}

pub async fn add(config: &Path, args: AddArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    // Everything that can be checked without the cluster is checked before anything is made.
    let endpoint = endpoint(&args)?;
    let labels = pairs(&args.labels, "label")?;
    let annotations = pairs(&args.annotations, "annotation")?;
    let exec_env = pairs(&args.exec_command_env, "exec-command-env")?;
    let files = kubeconfig::files(args.kubeconfig.as_deref())?;
    let found = kubeconfig::read_context(&files, &args.context)?;
    let client = Client::connect(config, &args.conn, None).await?;

    let makes_token =
        args.aws_cluster_name.is_none() && args.exec_command.is_none() && args.bearer_token.is_none();
    let needs_cluster = makes_token || endpoint == Endpoint::KubePublic;
    let kube = if needs_cluster {
        Some(kubeconfig::client(&files, &args.context, KUBE_REQUEST_TIMEOUT).await?)
    } else {
        None
    };
    let target = kube.as_ref().map(|client| Target {
        client,
        url: &found.server,
    });

    let mut made = Vec::new();
    let credentials = if let Some(cluster_name) = &args.aws_cluster_name {
        let mut aws = json!({"clusterName": cluster_name});
        put(&mut aws, "roleARN", args.aws_role_arn.as_deref());
        put(&mut aws, "profile", args.aws_profile.as_deref());
        Credentials::Aws(aws)
    } else if let Some(command) = &args.exec_command {
        let mut exec = json!({"command": command});
        if !args.exec_command_args.is_empty() {
            exec["args"] = json!(args.exec_command_args);
        }
        if !exec_env.is_empty() {
            exec["env"] = json!(exec_env);
        }
        put(&mut exec, "apiVersion", args.exec_command_api_version.as_deref());
        put(
            &mut exec,
            "installHint",
            args.exec_command_install_hint.as_deref(),
        );
        Credentials::Exec(exec)
    } else if let Some(token) = &args.bearer_token {
        Credentials::Token(token.clone())
    } else {
        let target = target
            .as_ref()
            .ok_or_else(|| anyhow!("no client of the cluster"))?;
        Credentials::Token(manager_token(target, &args, &mut made).await?)
    };

    let (server_url, ca) = match &endpoint {
        Endpoint::Kubeconfig => (found.server.clone(), None),
        Endpoint::Internal => (IN_CLUSTER_URL.to_owned(), None),
        Endpoint::Url(url) => (url.clone(), None),
        Endpoint::KubePublic => match target.as_ref() {
            Some(target) => match kube_public(target).await {
                Ok((url, ca)) => (url, Some(ca)),
                Err(e) => {
                    // As upstream: the kubeconfig's endpoint, with a warning.
                    eprintln!(
                        "warning: no endpoint from kube-public/cluster-info ({e}); registering {}",
                        found.server
                    );
                    (found.server.clone(), None)
                }
            },
            None => (found.server.clone(), None),
        },
    };
    let cluster = new_cluster(&args, &found, server_url, ca, credentials, labels, annotations);
    let request = json!({"cluster": cluster, "upsert": args.upsert});
    match call::unary(&client, "cluster add failed", &format!("{SVC}/Create"), &request).await {
        Ok(added) => {
            writeln!(out, "Cluster '{}' added", server(&added))?;
            Ok(())
        }
        Err(err) => {
            // Not registered: what this run made in the cluster goes too.
            if let Some(target) = target.as_ref() {
                let left = cluster_auth::undo(target, &made).await;
                if !left.is_empty() {
                    return Err(err.context(format!("left in the cluster: {}", left.join(", "))));
                }
            }
            Err(err)
        }
    }
}

/// The manager's token: of `--service-account`, or of argocd-manager, installed after the
/// question upstream asks (only on a terminal, and not with `--yes`).
async fn manager_token(target: &Target<'_>, args: &AddArgs, made: &mut Vec<Made>) -> anyhow::Result<String> {
    if let Some(account) = &args.service_account {
        let (token, secret) = cluster_auth::service_account_token(
            target,
            &args.system_namespace,
            account,
            cluster_auth::TOKEN_WAIT,
        )
        .await
        .map_err(kube_failure)?;
        made.extend(secret);
        return Ok(token);
    }
    if std::io::stdout().is_terminal() && !args.yes {
        let level = if args.namespaces.is_empty() {
            "cluster"
        } else {
            "namespace"
        };
        confirm(
            &format!(
                "WARNING: This will create a service account `{}` on the cluster referenced by context `{}` with \
                 full {level} level privileges. Do you want to continue?",
                cluster_auth::MANAGER_SERVICE_ACCOUNT,
                args.context
            ),
            false,
        )?;
    }
    let installed = cluster_auth::install_manager(
        target,
        &args.system_namespace,
        &args.namespaces,
        cluster_auth::TOKEN_WAIT,
    )
    .await
    .map_err(kube_failure)?;
    made.extend(installed.made);
    Ok(installed.token)
}

/// The cluster side's error with the exit code of its kind.
fn kube_failure(err: cluster_auth::ClusterAuthError) -> anyhow::Error {
    use cluster_auth::ClusterAuthError as E;
    let kind = match &err {
        E::Forbidden(_) => exit::Kind::Denied,
        E::NotFound(_) => exit::Kind::NotFound,
        E::Invalid(_) => exit::Kind::Invalid,
        E::Unreachable(_) | E::Timeout(_) => exit::Kind::Unavailable,
    };
    anyhow::Error::new(exit::Failure {
        kind,
        message: format!("cluster add failed: {err}"),
    })
}

fn endpoint(args: &AddArgs) -> anyhow::Result<Endpoint> {
    match (args.in_cluster, args.cluster_endpoint.as_deref()) {
        (true, Some(_)) => Err(exit::invalid(
            "give only one of --in-cluster and --cluster-endpoint",
        )),
        (true, None) | (false, Some("internal")) => Ok(Endpoint::Internal),
        (false, None | Some("kubeconfig")) => Ok(Endpoint::Kubeconfig),
        (false, Some("kube-public")) => Ok(Endpoint::KubePublic),
        (false, Some(url)) if url.starts_with("https://") || url.starts_with("http://") => {
            Ok(Endpoint::Url(url.trim_end_matches('/').to_owned()))
        }
        (false, Some(other)) => Err(exit::invalid(format!(
            "--cluster-endpoint {other:?}: give kubeconfig, kube-public, internal or an http(s) URL"
        ))),
    }
}

/// KEY=VALUE flags as a map; upstream refuses anything but exactly one `=`.
fn pairs(values: &[String], flag: &str) -> anyhow::Result<BTreeMap<String, String>> {
    values
        .iter()
        .map(|raw| match raw.split('=').collect::<Vec<_>>()[..] {
            [key, value] if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
            _ => Err(exit::invalid(format!("--{flag} {raw:?}: give KEY=VALUE"))),
        })
        .collect()
}

fn put(object: &mut Value, key: &str, value: Option<&str>) {
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        object[key] = Value::from(value);
    }
}

/// The cluster as upstream's NewCluster makes it: the context's TLS (its client certificate
/// too), the manager's token only when there is no client certificate (Argo CD would prefer
/// the token), the exec or AWS provider, proxy and compression settings, and the flags' name,
/// namespaces, labels, annotations, shard and project.
fn new_cluster(
    args: &AddArgs,
    found: &ContextCluster,
    server_url: String,
    ca: Option<String>,
    credentials: Credentials,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> Value {
    let mut tls = found.tls.clone();
    if let Some(ca) = ca {
        tls.insert("caData".to_owned(), Value::from(ca));
    }
    let has_certificate = tls.contains_key("certData") && tls.contains_key("keyData");
    let mut config = Map::new();
    match credentials {
        Credentials::Token(token) if !has_certificate => {
            config.insert("bearerToken".to_owned(), Value::from(token));
        }
        Credentials::Token(_) => {}
        Credentials::Aws(aws) => {
            config.insert("awsAuthConfig".to_owned(), aws);
        }
        Credentials::Exec(exec) => {
            config.insert("execProviderConfig".to_owned(), exec);
        }
    }
    config.insert("tlsClientConfig".to_owned(), Value::Object(tls));
    if let Some(proxy) = args.proxy_url.clone().or_else(|| found.proxy_url.clone()) {
        config.insert("proxyUrl".to_owned(), Value::from(proxy));
    }
    if args.disable_compression || found.disable_compression {
        config.insert("disableCompression".to_owned(), Value::Bool(true));
    }
    let mut cluster = json!({
        "server": server_url,
        "name": args.name.clone().unwrap_or_else(|| args.context.clone()),
        "config": config,
    });
    if !args.namespaces.is_empty() {
        cluster["namespaces"] = json!(args.namespaces);
    }
    if args.cluster_resources {
        cluster["clusterResources"] = Value::Bool(true);
    }
    if !labels.is_empty() {
        cluster["labels"] = json!(labels);
    }
    if !annotations.is_empty() {
        cluster["annotations"] = json!(annotations);
    }
    if args.shard >= 0 {
        cluster["shard"] = Value::from(args.shard);
    }
    put(&mut cluster, "project", args.project.as_deref());
    cluster
}

/// The endpoint and CA (base64) that the cluster publishes in ConfigMap kube-public/cluster-info.
async fn kube_public(target: &Target<'_>) -> anyhow::Result<(String, String)> {
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(target.client.clone(), "kube-public");
    let info = api.get("cluster-info").await.map_err(|e| {
        anyhow!(
            "{}",
            cluster_auth::api_error(e, target.url, "get", "ConfigMap kube-public/cluster-info")
        )
    })?;
    let text = info
        .data
        .as_ref()
        .and_then(|d| d.get("kubeconfig"))
        .ok_or_else(|| anyhow!("cluster-info has no kubeconfig"))?;
    let doc: Value = serde_yaml_ng::from_str(text).map_err(|e| anyhow!("cluster-info's kubeconfig: {e}"))?;
    let cluster = doc
        .pointer("/clusters/0/cluster")
        .ok_or_else(|| anyhow!("cluster-info's kubeconfig has no cluster"))?;
    let url = cluster.get("server").and_then(Value::as_str).unwrap_or_default();
    if url.is_empty() {
        return Err(anyhow!("cluster-info's kubeconfig has no server"));
    }
    let ca = cluster
        .get("certificate-authority-data")
        .and_then(Value::as_str)
        .unwrap_or_default();
    B64.decode(ca.trim())
        .map_err(|e| anyhow!("cluster-info's certificate-authority-data is not base64: {e}"))?;
    Ok((url.to_owned(), ca.trim().to_owned()))
}
