//! `tiphys proj …`: AppProjects through `project.ProjectService`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::args::{parse_seconds, read_object};
use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::view::{self, Shape, Table, field};

const SVC: &str = "/project.ProjectService";

#[derive(clap::Subcommand, Debug)]
pub enum ProjCommand {
    /// List projects.
    List(ListArgs),
    /// Print a project.
    Get(GetArgs),
    /// Create a project from flags, or from a manifest with -f.
    Create(CreateArgs),
    /// Delete a project.
    Delete(NameArgs),
    /// Allow applications of the project to deploy to SERVER and NAMESPACE.
    AddDestination(AddDestinationArgs),
    /// Allow applications of the project to use the source repository URL.
    AddSource(AddSourceArgs),
    /// Manage project roles and their tokens.
    #[command(subcommand)]
    Role(RoleCommand),
}

#[derive(clap::Subcommand, Debug)]
pub enum RoleCommand {
    /// Add a role to a project.
    Create(RoleCreateArgs),
    /// Add a policy line to a project role.
    AddPolicy(AddPolicyArgs),
    /// Create a token for a project role and print it.
    CreateToken(CreateTokenArgs),
    /// Delete a project role's token, named by its issued-at time.
    DeleteToken(DeleteTokenArgs),
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
pub struct NameArgs {
    /// The project.
    pub name: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub project: NameArgs,
    /// Output: json, yaml, wide or name [default: a description].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The project's name (else the file's).
    pub name: Option<String>,
    /// A permitted destination as SERVER,NAMESPACE (repeatable).
    #[arg(short = 'd', long = "dest")]
    pub destinations: Vec<String>,
    /// A permitted source repository URL or pattern (repeatable).
    #[arg(short = 's', long = "src")]
    pub sources: Vec<String>,
    /// A description.
    #[arg(long)]
    pub description: Option<String>,
    /// Replace the project if it exists with another spec.
    #[arg(long)]
    pub upsert: bool,
    /// An AppProject manifest (YAML or JSON); flags add to it.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct AddDestinationArgs {
    pub project: String,
    /// The cluster's server URL (its name with --name).
    #[arg(value_name = "SERVER")]
    pub dest: String,
    pub namespace: String,
    /// SERVER is a cluster name, not a server URL.
    #[arg(long)]
    pub name: bool,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct AddSourceArgs {
    pub project: String,
    /// A repository URL or pattern.
    pub url: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct RoleCreateArgs {
    pub project: String,
    pub role: String,
    /// A description of the role.
    #[arg(long)]
    pub description: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct AddPolicyArgs {
    pub project: String,
    pub role: String,
    /// The action, such as get, sync, update, delete or '*'.
    #[arg(short = 'a', long)]
    pub action: String,
    /// The object within the project, such as an application name or '*'.
    #[arg(short = 'o', long)]
    pub object: String,
    /// allow or deny.
    #[arg(short = 'p', long, default_value = "allow", value_parser = ["allow", "deny"])]
    pub permission: String,
    /// The resource the policy is about.
    #[arg(short = 'r', long, default_value = "applications")]
    pub resource: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct CreateTokenArgs {
    pub project: String,
    pub role: String,
    /// Lifetime of the token, such as 30m, 24h or 7d; 0 never expires.
    #[arg(short = 'e', long, default_value = "0", value_parser = parse_seconds)]
    pub expires_in: i64,
    /// Id of the token [default: a random UUID].
    #[arg(short = 'i', long)]
    pub id: Option<String>,
    /// A description of the token.
    #[arg(long)]
    pub description: Option<String>,
    /// Print only the token.
    #[arg(short = 't', long)]
    pub token_only: bool,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct DeleteTokenArgs {
    pub project: String,
    pub role: String,
    /// The token's issued-at time (Unix seconds), as `proj get` shows it.
    pub iat: i64,
    #[command(flatten)]
    pub conn: ClientOpts,
}

pub async fn run(config: &Path, command: ProjCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        ProjCommand::List(args) => list(config, args, out).await,
        ProjCommand::Get(args) => get(config, args, out).await,
        ProjCommand::Create(args) => create(config, args, out).await,
        ProjCommand::Delete(args) => delete(config, args, out).await,
        ProjCommand::AddDestination(args) => add_destination(config, args, out).await,
        ProjCommand::AddSource(args) => add_source(config, args, out).await,
        ProjCommand::Role(command) => super::proj_role::run(config, command, out).await,
    }
}

fn name(project: &Value) -> String {
    str_at(project, "/metadata/name").to_owned()
}

fn destinations(project: &Value) -> Vec<String> {
    project
        .pointer("/spec/destinations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|d| {
            let server = str_at(d, "/server");
            let target = if server.is_empty() {
                str_at(d, "/name")
            } else {
                server
            };
            format!("{target},{}", str_at(d, "/namespace"))
        })
        .collect()
}

/// Destinations are `SERVER,NAMESPACE` each, so they are joined with `; `.
fn joined_destinations(project: &Value) -> String {
    let list = destinations(project);
    if list.is_empty() {
        "<none>".to_owned()
    } else {
        list.join("; ")
    }
}

fn row(project: &Value, wide: bool) -> Vec<String> {
    let mut row = vec![
        name(project),
        str_at(project, "/spec/description").to_owned(),
        joined_destinations(project),
        view::joined(&view::strings(project, "/spec/sourceRepos")),
    ];
    if wide {
        let roles: Vec<String> = project
            .pointer("/spec/roles")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| str_at(r, "/name").to_owned())
            .collect();
        row.push(view::joined(&roles));
        let kinds: Vec<String> = project
            .pointer("/spec/clusterResourceWhitelist")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|k| format!("{}/{}", str_at(k, "/group"), str_at(k, "/kind")))
            .collect();
        row.push(view::joined(&kinds));
    }
    row
}

fn describe(out: &mut dyn Write, project: &Value) -> std::io::Result<()> {
    field(out, "Name", &name(project))?;
    field(out, "Description", str_at(project, "/spec/description"))?;
    field(out, "Destinations", &joined_destinations(project))?;
    field(
        out,
        "Repositories",
        &view::joined(&view::strings(project, "/spec/sourceRepos")),
    )?;
    for role in project
        .pointer("/spec/roles")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        field(out, "Role", str_at(role, "/name"))?;
        for policy in view::strings(role, "/policies") {
            writeln!(out, "{:<20}{policy}", "")?;
        }
        for token in role
            .get("jwtTokens")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let iat = token.get("iat").and_then(Value::as_i64).unwrap_or_default();
            let id = str_at(token, "/id");
            writeln!(out, "{:<20}token {id} issued at {iat}", "")?;
        }
    }
    Ok(())
}

pub async fn get_project(client: &Client, name: &str) -> anyhow::Result<Value> {
    let request = json!({"name": name});
    call::unary(client, "proj get failed", &format!("{SVC}/Get"), &request).await
}

/// Writes the project back (optimistically: a concurrent change makes this fail).
pub async fn update_project(client: &Client, what: &str, project: Value) -> anyhow::Result<Value> {
    let request = json!({"project": project});
    call::unary(client, what, &format!("{SVC}/Update"), &request).await
}

async fn list(config: &Path, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let reply = call::unary(&client, "proj list failed", &format!("{SVC}/List"), &json!({})).await?;
    let table = Table {
        header: &["NAME", "DESCRIPTION", "DESTINATIONS", "SOURCES"],
        wide: &["ROLES", "CLUSTER-RESOURCE-WHITELIST"],
        row: &row,
        name: &name,
    };
    view::list(out, args.output, &call::items(&reply), &table)
}

async fn get(config: &Path, args: GetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.project.conn, None).await?;
    let project = get_project(&client, &args.project.name).await?;
    view::one(out, args.output, &project, &name, &describe)
}

/// `SERVER,NAMESPACE` as a destination.
fn parse_destination(text: &str) -> anyhow::Result<Value> {
    match text.split_once(',') {
        Some((server, namespace)) if !server.trim().is_empty() => {
            Ok(json!({"server": server.trim(), "namespace": namespace.trim()}))
        }
        _ => Err(exit::invalid(format!(
            "--dest {text:?}: expected SERVER,NAMESPACE"
        ))),
    }
}

fn push_all(spec: &mut Map<String, Value>, key: &str, values: Vec<Value>) {
    if values.is_empty() {
        return;
    }
    let mut list = match spec.remove(key) {
        Some(Value::Array(list)) => list,
        _ => Vec::new(),
    };
    for value in values {
        if !list.contains(&value) {
            list.push(value);
        }
    }
    spec.insert(key.to_owned(), Value::Array(list));
}

async fn create(config: &Path, args: CreateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut project = match &args.file {
        Some(path) => super::manifest::client_part(&read_object(path)?),
        None => json!({"metadata": {}, "spec": {}}),
    };
    let destinations = args
        .destinations
        .iter()
        .map(|d| parse_destination(d))
        .collect::<anyhow::Result<Vec<Value>>>()?;
    let root = project
        .as_object_mut()
        .ok_or_else(|| exit::invalid("the project is not an object"))?;
    let mut meta = match root.remove("metadata") {
        Some(Value::Object(meta)) => meta,
        _ => Map::new(),
    };
    if let Some(name) = &args.name {
        meta.insert("name".to_owned(), Value::from(name.as_str()));
    }
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if name.is_empty() {
        return Err(exit::invalid(
            "no project name: give NAME, or a manifest with metadata.name (-f)",
        ));
    }
    root.insert("metadata".to_owned(), Value::Object(meta));
    let mut spec = match root.remove("spec") {
        Some(Value::Object(spec)) => spec,
        _ => Map::new(),
    };
    push_all(&mut spec, "destinations", destinations);
    push_all(
        &mut spec,
        "sourceRepos",
        args.sources.iter().map(|s| Value::from(s.as_str())).collect(),
    );
    if let Some(description) = &args.description {
        spec.insert("description".to_owned(), Value::from(description.as_str()));
    }
    root.insert("spec".to_owned(), Value::Object(spec));
    let client = Client::connect(config, &args.conn, None).await?;
    let existing = get_project(&client, &name).await.ok();
    let request = json!({"project": project, "upsert": args.upsert});
    let created = call::unary(&client, "proj create failed", &format!("{SVC}/Create"), &request).await?;
    let action = match existing {
        None => "created",
        Some(old)
            if old.pointer("/metadata/resourceVersion") == created.pointer("/metadata/resourceVersion") =>
        {
            "unchanged"
        }
        Some(_) => "updated",
    };
    writeln!(out, "project '{name}' {action}")?;
    Ok(())
}

async fn delete(config: &Path, args: NameArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({"name": args.name});
    call::unary(&client, "proj delete failed", &format!("{SVC}/Delete"), &request).await?;
    writeln!(out, "project '{}' deleted", args.name)?;
    Ok(())
}

/// Reads the project, changes its spec with `f` and writes it back; `f` answers `false`
/// when there is nothing to change (the project is then not written).
pub async fn edit_spec(
    client: &Client,
    what: &str,
    name: &str,
    f: impl FnOnce(&mut Map<String, Value>) -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    let mut project = get_project(client, name).await?;
    let root = project
        .as_object_mut()
        .ok_or_else(|| anyhow::anyhow!("the server's project is not an object"))?;
    let mut spec = match root.remove("spec") {
        Some(Value::Object(spec)) => spec,
        _ => Map::new(),
    };
    let changed = f(&mut spec)?;
    root.insert("spec".to_owned(), Value::Object(spec));
    if changed {
        update_project(client, what, project).await?;
    }
    Ok(changed)
}

async fn add_destination(config: &Path, args: AddDestinationArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let key = if args.name { "name" } else { "server" };
    let dest = json!({key: args.dest, "namespace": args.namespace});
    edit_spec(&client, "proj add-destination failed", &args.project, |spec| {
        let exists = spec
            .get("destinations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|d| str_at(d, &format!("/{key}")) == args.dest && str_at(d, "/namespace") == args.namespace);
        if exists {
            return Err(exit::invalid("the destination is already defined in the project"));
        }
        push_all(spec, "destinations", vec![dest]);
        Ok(true)
    })
    .await?;
    writeln!(
        out,
        "destination {},{} added to project '{}'",
        args.dest, args.namespace, args.project
    )?;
    Ok(())
}

async fn add_source(config: &Path, args: AddSourceArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let url = Value::from(args.url.as_str());
    let added = edit_spec(&client, "proj add-source failed", &args.project, |spec| {
        let known = spec
            .get("sourceRepos")
            .and_then(Value::as_array)
            .is_some_and(|l| l.contains(&url));
        push_all(spec, "sourceRepos", vec![url]);
        Ok(!known)
    })
    .await?;
    if added {
        writeln!(
            out,
            "source repository '{}' added to project '{}'",
            args.url, args.project
        )?;
    } else {
        writeln!(
            out,
            "source repository '{}' already allowed in project '{}'",
            args.url, args.project
        )?;
    }
    Ok(())
}
