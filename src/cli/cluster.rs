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

const SVC: &str = "/cluster.ClusterService";

#[derive(clap::Subcommand, Debug)]
pub enum ClusterCommand {
    /// Register the cluster of a kubeconfig context, with that context's credentials.
    ///
    /// The server URL, certificate authority, TLS options and the user's credentials (token or
    /// token file, client certificate and key, username and password, or an exec plugin) are
    /// read from the kubeconfig and stored as the cluster's config. Unlike `argocd cluster
    /// add`, nothing is created in the cluster: no argocd-manager service account, role or
    /// binding. The context's own credentials are used as they are.
    Add(AddArgs),
    /// List clusters.
    List(ListArgs),
    /// Print a cluster, named by server URL or by name.
    Get(GetArgs),
    /// Change a cluster's name, namespaces or project.
    Set(SetArgs),
    /// Remove a cluster, named by server URL or by name.
    #[command(visible_alias = "remove")]
    Rm(RmArgs),
}

#[derive(clap::Args, Debug)]
pub struct AddArgs {
    /// The kubeconfig context whose cluster and user to register.
    pub context: String,
    /// The kubeconfig file [default: $KUBECONFIG, else ~/.kube/config].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The cluster's name in Argo CD [default: the context's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Only these namespaces may be managed (repeatable) [default: all].
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// The project the cluster belongs to.
    #[arg(long)]
    pub project: Option<String>,
    /// Replace the cluster if it is registered with another config.
    #[arg(long)]
    pub upsert: bool,
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
    #[command(flatten)]
    pub conn: ClientOpts,
}

pub async fn run(config: &Path, command: ClusterCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Add(args) => add(config, args, out).await,
        ClusterCommand::List(args) => list(config, args, out).await,
        ClusterCommand::Get(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let cluster = get_cluster(&client, &args.cluster).await?;
            view::one(out, args.output, &cluster, &server, &describe)
        }
        ClusterCommand::Set(args) => set(config, args, out).await,
        ClusterCommand::Rm(args) => {
            confirm(
                &format!(
                    "Are you sure you want to remove '{}'? Applications deploying to it will no longer find it.",
                    args.cluster
                ),
                args.yes,
            )?;
            let client = Client::connect(config, &args.conn, None).await?;
            call::unary(
                &client,
                "cluster rm failed",
                &format!("{SVC}/Delete"),
                &query(&args.cluster),
            )
            .await?;
            writeln!(out, "cluster '{}' removed", args.cluster)?;
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

async fn add(config: &Path, args: AddArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let files = kubeconfig::files(args.kubeconfig.as_deref())?;
    let found = kubeconfig::read_context(&files, &args.context)?;
    let mut cluster = json!({
        "server": found.server,
        "name": args.name.clone().unwrap_or_else(|| args.context.clone()),
        "config": found.config,
    });
    if !args.namespaces.is_empty() {
        cluster["namespaces"] = json!(args.namespaces);
    }
    if let Some(project) = &args.project {
        cluster["project"] = Value::from(project.as_str());
    }
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({"cluster": cluster, "upsert": args.upsert});
    let added = call::unary(&client, "cluster add failed", &format!("{SVC}/Create"), &request).await?;
    writeln!(out, "Cluster '{}' added", server(&added))?;
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
