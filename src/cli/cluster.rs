//! `tiphys cluster …`: clusters through `cluster.ClusterService`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::args::confirm;
use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::kubeconfig;
use super::view::{self, Shape, Table, field};
use crate::kubernetes::cluster_auth;

mod add;

const SVC: &str = "/cluster.ClusterService";

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Register the cluster of a kubeconfig context, as `argocd cluster add` does.
    ///
    /// With the context's own credentials, the ServiceAccount argocd-manager is created (or
    /// reused) in --system-namespace, with the ClusterRole argocd-manager-role and its binding
    /// (or, with --namespace, a Role and RoleBinding in each namespace), and a long-lived token
    /// Secret. The cluster is registered with that token, the context's server, CA and TLS
    /// options (and its client certificate, which Argo CD then prefers to the token).
    /// --service-account uses an existing ServiceAccount instead (nothing else is created);
    /// --bearer-token, --exec-command or --aws-cluster-name register those credentials and
    /// create nothing in the cluster. If the registration fails, what this run created in the
    /// cluster is removed again.
    Add(Box<AddArgs>),
    /// List clusters.
    List(ListArgs),
    /// Print a cluster, named by server URL or by name.
    Get(GetArgs),
    /// Change a cluster's name, namespaces or project.
    Set(SetArgs),
    /// Remove a cluster, named by server URL or by name.
    #[command(visible_alias = "remove")]
    Rm(RmArgs),
    /// Give a cluster a new ServiceAccount token and revoke the old one (the server does it,
    /// inside the cluster, with the cluster's current token), as `argocd cluster rotate-auth`.
    RotateAuth(RotateAuthArgs),
}

#[derive(clap::Args, Debug)]
pub struct RotateAuthArgs {
    /// The cluster's server URL, or its name.
    #[arg(value_name = "SERVER")]
    pub cluster: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The kubeconfig context whose cluster to register.
    pub context: String,
    /// The kubeconfig file [default: $KUBECONFIG, else ~/.kube/config].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The cluster's name in Argo CD [default: the context's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Only these namespaces may be managed (repeatable); the manager gets Roles in them only.
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Cluster-scoped resources may be managed too (when --namespace limits the namespaces).
    #[arg(long)]
    pub cluster_resources: bool,
    /// The project the cluster belongs to.
    #[arg(long)]
    pub project: Option<String>,
    /// A label of the cluster, KEY=VALUE (repeatable).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// An annotation of the cluster, KEY=VALUE (repeatable).
    #[arg(long = "annotation")]
    pub annotations: Vec<String>,
    /// Replace the cluster if it is registered with another config.
    #[arg(long)]
    pub upsert: bool,
    /// Argo CD runs in this cluster: register it as https://kubernetes.default.svc.
    #[arg(long)]
    pub in_cluster: bool,
    /// The server URL to register: `kubeconfig` (the context's), `kube-public` (from the
    /// cluster's kube-public/cluster-info, with its CA), `internal` (as --in-cluster), or a URL.
    #[arg(long, value_name = "ENDPOINT")]
    pub cluster_endpoint: Option<String>,
    /// The namespace of the manager's ServiceAccount and token Secret.
    #[arg(long, default_value = cluster_auth::DEFAULT_SYSTEM_NAMESPACE)]
    pub system_namespace: String,
    /// Use this existing ServiceAccount of --system-namespace (no roles or bindings are made).
    #[arg(long)]
    pub service_account: Option<String>,
    /// Register this bearer token; nothing is created in the cluster.
    #[arg(long, env = "TIPHYS_CLUSTER_BEARER_TOKEN", hide_env_values = true)]
    pub bearer_token: Option<String>,
    /// The command that gives Argo CD credentials for the cluster (an exec plugin); nothing is
    /// created in the cluster.
    #[arg(long)]
    pub exec_command: Option<String>,
    /// An argument of --exec-command (repeatable; it may start with '-', as upstream's does).
    #[arg(long = "exec-command-args", allow_hyphen_values = true)]
    pub exec_command_args: Vec<String>,
    /// An environment variable of --exec-command, KEY=VALUE (repeatable, or comma-separated).
    #[arg(long = "exec-command-env", value_delimiter = ',')]
    pub exec_command_env: Vec<String>,
    /// The ExecCredential apiVersion --exec-command speaks.
    #[arg(long)]
    pub exec_command_api_version: Option<String>,
    /// What to tell the user when --exec-command is missing.
    #[arg(long)]
    pub exec_command_install_hint: Option<String>,
    /// The EKS cluster name: Argo CD gets tokens with `argocd-k8s-auth aws`; nothing is created.
    #[arg(long)]
    pub aws_cluster_name: Option<String>,
    /// The AWS role to assume for --aws-cluster-name.
    #[arg(long)]
    pub aws_role_arn: Option<String>,
    /// The AWS profile for --aws-cluster-name.
    #[arg(long)]
    pub aws_profile: Option<String>,
    /// The controller shard of the cluster [default: inferred by the controller].
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub shard: i64,
    /// A proxy to reach the cluster through [default: the kubeconfig's proxy-url].
    #[arg(long)]
    pub proxy_url: Option<String>,
    /// Ask the cluster for uncompressed answers.
    #[arg(long)]
    pub disable_compression: bool,
    /// Do not ask before creating the argocd-manager ServiceAccount.
    #[arg(short = 'y', long)]
    pub yes: bool,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Output: json, yaml, wide or name [default: a table].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    /// The cluster's server URL, or its name.
    #[arg(value_name = "SERVER")]
    pub cluster: String,
    /// Output: json, yaml, wide or name [default: a description].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct SetArgs {
    /// The cluster's server URL, or its name.
    pub cluster: String,
    /// The new name.
    #[arg(long)]
    pub name: Option<String>,
    /// The namespaces that may be managed (repeatable; an empty value means all).
    #[arg(long = "namespace")]
    pub namespaces: Option<Vec<String>>,
    /// The project the cluster belongs to (empty for none).
    #[arg(long)]
    pub project: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// The cluster's server URL, or its name.
    #[arg(value_name = "SERVER")]
    pub cluster: String,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Also remove from the cluster what `cluster add` created there: argocd-manager's
    /// bindings, roles (in the cluster's namespaces too), token Secret and ServiceAccount.
    #[arg(long)]
    pub remove_rbac: bool,
    /// The kubeconfig context to remove them through [default: the cluster's name].
    #[arg(long, requires = "remove_rbac")]
    pub context: Option<String>,
    /// The kubeconfig file [default: $KUBECONFIG, else ~/.kube/config].
    #[arg(long, requires = "remove_rbac")]
    pub kubeconfig: Option<PathBuf>,
    /// The namespace of the manager's ServiceAccount.
    #[arg(long, default_value = cluster_auth::DEFAULT_SYSTEM_NAMESPACE)]
    pub system_namespace: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

pub async fn run(config: &Path, command: ClusterCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Add(args) => add::add(config, *args, out).await,
        ClusterCommand::List(args) => list(config, args, out).await,
        ClusterCommand::Get(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let cluster = get_cluster(&client, &args.cluster).await?;
            view::one(out, args.output, &cluster, &server, &describe)
        }
        ClusterCommand::Set(args) => set(config, args, out).await,
        ClusterCommand::Rm(args) => remove(config, args, out).await,
        ClusterCommand::RotateAuth(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            call::unary(
                &client,
                "cluster rotate-auth failed",
                &format!("{SVC}/RotateAuth"),
                &query(&args.cluster),
            )
            .await?;
            writeln!(out, "Cluster '{}' rotated auth", args.cluster)?;
            Ok(())
        }
    }
}

/// A ClusterQuery for a server URL or a name (as upstream tells them apart).
fn query(cluster: &str) -> Value {
    if cluster.contains("://") {
        json!({"server": cluster})
    } else {
        json!({"name": cluster})
    }
}

fn server(cluster: &Value) -> String {
    str_at(cluster, "/server").to_owned()
}

fn status(cluster: &Value) -> (&str, &str) {
    let state = match cluster.pointer("/info/connectionState") {
        Some(state) if !state.is_null() => state,
        _ => cluster.get("connectionState").unwrap_or(&Value::Null),
    };
    (str_at(state, "/status"), str_at(state, "/message"))
}

fn row(cluster: &Value, wide: bool) -> Vec<String> {
    let (status, message) = status(cluster);
    let mut version = str_at(cluster, "/info/serverVersion");
    if version.is_empty() {
        version = str_at(cluster, "/serverVersion");
    }
    let mut row = vec![
        server(cluster),
        str_at(cluster, "/name").to_owned(),
        version.to_owned(),
        status.to_owned(),
        message.to_owned(),
        str_at(cluster, "/project").to_owned(),
    ];
    if wide {
        row.push(view::joined(&view::strings(cluster, "/namespaces")));
        let labels: Vec<String> = cluster
            .get("labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", view::cell(Some(v))))
            .collect();
        row.push(view::joined(&labels));
    }
    row
}

fn describe(out: &mut dyn Write, cluster: &Value) -> std::io::Result<()> {
    field(out, "Server", &server(cluster))?;
    field(out, "Name", str_at(cluster, "/name"))?;
    field(out, "Project", str_at(cluster, "/project"))?;
    field(
        out,
        "Namespaces",
        &view::joined(&view::strings(cluster, "/namespaces")),
    )?;
    let (status, message) = status(cluster);
    field(out, "Status", status)?;
    if !message.is_empty() {
        field(out, "Message", message)?;
    }
    Ok(())
}

async fn get_cluster(client: &Client, cluster: &str) -> anyhow::Result<Value> {
    call::unary(
        client,
        "cluster get failed",
        &format!("{SVC}/Get"),
        &query(cluster),
    )
    .await
}

async fn remove(config: &Path, args: RmArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    confirm(
        &format!(
            "Are you sure you want to remove '{}'? Applications deploying to it will no longer find it.",
            args.cluster
        ),
        args.yes,
    )?;
    let client = Client::connect(config, &args.conn, None).await?;
    // The cluster side is reached before anything is deleted, so that a missing context stops
    // the command with the cluster still registered (upstream deletes first, then fails).
    let cleanup = if args.remove_rbac {
        let cluster = get_cluster(&client, &args.cluster).await?;
        let context = args
            .context
            .clone()
            .unwrap_or_else(|| str_at(&cluster, "/name").to_owned());
        let files = kubeconfig::files(args.kubeconfig.as_deref())?;
        let found = kubeconfig::read_context(&files, &context)?;
        let kube = kubeconfig::client(&files, &context, add::KUBE_REQUEST_TIMEOUT).await?;
        Some((kube, found.server, view::strings(&cluster, "/namespaces")))
    } else {
        None
    };
    call::unary(
        &client,
        "cluster rm failed",
        &format!("{SVC}/Delete"),
        &query(&args.cluster),
    )
    .await?;
    writeln!(out, "Cluster '{}' removed", args.cluster)?;
    if let Some((kube, url, namespaces)) = cleanup {
        let target = cluster_auth::Target {
            client: &kube,
            url: &url,
        };
        let removed = cluster_auth::uninstall_manager(&target, &args.system_namespace, &namespaces)
            .await
            .map_err(|e| anyhow::anyhow!("the cluster is unregistered, but its RBAC was not removed: {e}"))?;
        for object in removed {
            writeln!(out, "{object} removed")?;
        }
    }
    Ok(())
}

async fn list(config: &Path, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let reply = call::unary(&client, "cluster list failed", &format!("{SVC}/List"), &json!({})).await?;
    let table = Table {
        header: &["SERVER", "NAME", "VERSION", "STATUS", "MESSAGE", "PROJECT"],
        wide: &["NAMESPACES", "LABELS"],
        row: &row,
        name: &server,
    };
    view::list(out, args.output, &call::items(&reply), &table)
}

async fn set(config: &Path, args: SetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let mut cluster = get_cluster(&client, &args.cluster).await?;
    let map = cluster
        .as_object_mut()
        .ok_or_else(|| anyhow::anyhow!("the server's cluster is not an object"))?;
    let mut updated = Vec::new();
    if let Some(name) = &args.name {
        map.insert("name".to_owned(), Value::from(name.as_str()));
        updated.push("name");
    }
    if let Some(namespaces) = &args.namespaces {
        let list: Vec<&String> = namespaces.iter().filter(|n| !n.is_empty()).collect();
        map.insert("namespaces".to_owned(), json!(list));
        updated.push("namespaces");
    }
    if let Some(project) = &args.project {
        map.insert("project".to_owned(), Value::from(project.as_str()));
        updated.push("project");
    }
    if updated.is_empty() {
        return Err(exit::invalid(
            "nothing to set: give --name, --namespace or --project",
        ));
    }
    let request = json!({
        "cluster": cluster,
        "updatedFields": updated,
        "id": {"type": "url", "value": server(&cluster)},
    });
    call::unary(&client, "cluster set failed", &format!("{SVC}/Update"), &request).await?;
    writeln!(out, "Cluster '{}' updated", args.cluster)?;
    Ok(())
}
