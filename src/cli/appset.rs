//! `tiphys appset …`: ApplicationSets through `applicationset.ApplicationSetService`, with
//! upstream's verbs (`list`, `get`, `create -f`, `delete`, `generate -f`).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::args::read_object;
use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::view::{self, Shape, Table, field};

const SVC: &str = "/applicationset.ApplicationSetService";

#[derive(clap::Subcommand, Debug)]
pub enum AppSetCommand {
    /// List ApplicationSets.
    List(ListArgs),
    /// Print an ApplicationSet.
    Get(GetArgs),
    /// Create (or with --upsert replace) the ApplicationSet of a manifest.
    Create(CreateArgs),
    /// Delete an ApplicationSet.
    Delete(NameArgs),
    /// Print the Applications the ApplicationSet of a manifest generates, creating nothing.
    Generate(GenerateArgs),
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Only the sets of these projects (repeatable).
    #[arg(short = 'p', long = "project")]
    pub projects: Vec<String>,
    /// A label selector, such as env=prod.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Output: json, yaml, wide or name [default: a table].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct NameArgs {
    /// The ApplicationSet.
    pub name: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub set: NameArgs,
    /// Output: json, yaml, wide or name [default: a description].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// An ApplicationSet manifest (YAML or JSON).
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Replace the set if it exists with another spec.
    #[arg(long)]
    pub upsert: bool,
    /// Print what would be stored, with the Applications it generates, and store nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Output: json, yaml, wide or name [default: a message].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// An ApplicationSet manifest (YAML or JSON).
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Output: json, yaml, wide or name [default: a table].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

pub async fn run(config: &Path, command: AppSetCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        AppSetCommand::List(args) => list(config, args, out).await,
        AppSetCommand::Get(args) => get(config, args, out).await,
        AppSetCommand::Create(args) => create(config, args, out).await,
        AppSetCommand::Delete(args) => delete(config, args, out).await,
        AppSetCommand::Generate(args) => generate(config, args, out).await,
    }
}

fn name(object: &Value) -> String {
    str_at(object, "/metadata/name").to_owned()
}

fn project(set: &Value) -> String {
    let project = str_at(set, "/spec/template/spec/project");
    if project.is_empty() { "default" } else { project }.to_owned()
}

/// The kinds of generator of a set, such as `list, matrix`.
fn generators(set: &Value) -> String {
    let kinds: Vec<String> = set
        .pointer("/spec/generators")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_object()?.keys().find(|k| *k != "selector").cloned())
        .collect();
    view::joined(&kinds)
}

fn row(set: &Value, wide: bool) -> Vec<String> {
    let mut row = vec![name(set), project(set), generators(set)];
    if wide {
        row.push(
            if set.pointer("/spec/goTemplate") == Some(&json!(true)) {
                "go"
            } else {
                "fasttemplate"
            }
            .to_owned(),
        );
    }
    row
}

fn describe(out: &mut dyn Write, set: &Value) -> std::io::Result<()> {
    field(out, "Name", &name(set))?;
    field(out, "Project", &project(set))?;
    field(out, "Generators", &generators(set))?;
    field(
        out,
        "Application name",
        str_at(set, "/spec/template/metadata/name"),
    )?;
    for resource in set
        .pointer("/status/resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        field(out, "Application", str_at(resource, "/name"))?;
    }
    Ok(())
}

async fn list(config: &Path, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({"projects": args.projects, "selector": args.selector.unwrap_or_default()});
    let reply = call::unary(&client, "appset list failed", &format!("{SVC}/List"), &request).await?;
    let table = Table {
        header: &["NAME", "PROJECT", "GENERATORS"],
        wide: &["TEMPLATES"],
        row: &row,
        name: &name,
    };
    view::list(out, args.output, &call::items(&reply), &table)
}

async fn get(config: &Path, args: GetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.set.conn, None).await?;
    let request = json!({"name": args.set.name});
    let set = call::unary(&client, "appset get failed", &format!("{SVC}/Get"), &request).await?;
    view::one(out, args.output, &set, &name, &describe)
}

async fn create(config: &Path, args: CreateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let set = read_object(&args.file)?;
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({"applicationset": set, "upsert": args.upsert, "dryRun": args.dry_run});
    let stored = call::unary(
        &client,
        "appset create failed",
        &format!("{SVC}/Create"),
        &request,
    )
    .await?;
    if args.output.is_some() {
        return view::one(out, args.output, &stored, &name, &describe);
    }
    if args.dry_run {
        writeln!(out, "ApplicationSet '{}' would generate:", name(&stored))?;
        for resource in stored
            .pointer("/status/resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            writeln!(out, "{}", str_at(resource, "/name"))?;
        }
    } else {
        writeln!(out, "ApplicationSet '{}' created", name(&stored))?;
    }
    Ok(())
}

async fn delete(config: &Path, args: NameArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({"name": args.name});
    call::unary(
        &client,
        "appset delete failed",
        &format!("{SVC}/Delete"),
        &request,
    )
    .await?;
    writeln!(out, "applicationset '{}' deleted", args.name)?;
    Ok(())
}

fn app_row(app: &Value, wide: bool) -> Vec<String> {
    let mut row = vec![
        name(app),
        str_at(app, "/spec/project").to_owned(),
        str_at(app, "/spec/destination/server").to_owned(),
        str_at(app, "/spec/destination/namespace").to_owned(),
    ];
    if wide {
        row.push(str_at(app, "/spec/source/repoURL").to_owned());
        row.push(str_at(app, "/spec/source/path").to_owned());
    }
    row
}

async fn generate(config: &Path, args: GenerateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let set = read_object(&args.file)?;
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({"applicationSet": set});
    let reply = call::unary(
        &client,
        "appset generate failed",
        &format!("{SVC}/Generate"),
        &request,
    )
    .await?;
    let apps: Vec<Value> = reply
        .get("applications")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let table = Table {
        header: &["NAME", "PROJECT", "SERVER", "NAMESPACE"],
        wide: &["REPO", "PATH"],
        row: &app_row,
        name: &name,
    };
    view::list(out, args.output, &apps, &table)
}
