//! `tiphys app …`: Applications through `application.ApplicationService`.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::app_view::{describe, qualified, row};
use super::args::{confirm, read_object, split_qualified};
use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::view::{self, Shape, Table};

const SVC: &str = "/application.ApplicationService";

#[derive(clap::Subcommand, Debug)]
pub enum AppCommand {
    /// List applications.
    List(ListArgs),
    /// Print an application.
    Get(GetArgs),
    /// Create an application from flags, or from a manifest with -f.
    Create(CreateArgs),
    /// Change an application's source, destination or project.
    Set(SetArgs),
    /// Delete an application.
    Delete(DeleteArgs),
    /// Request a sync: the operation is recorded for a controller to carry out.
    Sync(SyncArgs),
    /// Stop (or withdraw) the application's running operation.
    TerminateOp(NameArgs),
    /// Print changes to applications as they happen, one line each, until interrupted. When
    /// the server shuts down (or the connection drops), reconnect and resume where it left off.
    Watch(WatchArgs),
}

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// Only this application, as NAME or NAMESPACE/NAME (its current state first).
    pub name: Option<String>,
    /// Only applications of these projects (repeatable).
    #[arg(short = 'p', long = "project")]
    pub projects: Vec<String>,
    /// Start after this resourceVersion (from a list) instead of with every application's
    /// current state.
    #[arg(long)]
    pub resource_version: Option<String>,
    /// Output: json (one event per line) or name [default: TYPE NAME SYNC HEALTH].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Only applications of these projects (repeatable).
    #[arg(short = 'p', long = "project")]
    pub projects: Vec<String>,
    /// Only applications whose labels match this selector (`key=value,key2!=v`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Only applications with this source repository.
    #[arg(short = 'r', long)]
    pub repo: Option<String>,
    /// Only applications in this namespace.
    #[arg(short = 'N', long)]
    pub app_namespace: Option<String>,
    /// Output: json, yaml, wide or name [default: a table].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

/// An application named `NAME` or `NAMESPACE/NAME`.
#[derive(clap::Args, Debug)]
pub struct NameArgs {
    /// The application, as NAME or NAMESPACE/NAME.
    pub name: String,
    /// The application's namespace [default: the server's].
    #[arg(short = 'N', long)]
    pub app_namespace: Option<String>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct GetArgs {
    #[command(flatten)]
    pub app: NameArgs,
    /// Output: json, yaml, wide or name [default: a description].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
}

/// What `create` and `set` may change.
#[derive(clap::Args, Debug, Default)]
pub struct SpecFlags {
    /// The source repository URL.
    #[arg(long)]
    pub repo: Option<String>,
    /// The path within the repository.
    #[arg(long)]
    pub path: Option<String>,
    /// The revision (branch, tag or commit) to deploy.
    #[arg(long)]
    pub revision: Option<String>,
    /// The destination cluster's server URL.
    #[arg(long, conflicts_with = "dest_name")]
    pub dest_server: Option<String>,
    /// The destination cluster's name.
    #[arg(long)]
    pub dest_name: Option<String>,
    /// The destination namespace.
    #[arg(long)]
    pub dest_namespace: Option<String>,
    /// The project.
    #[arg(long)]
    pub project: Option<String>,
}

#[derive(clap::Args, Debug)]
pub struct CreateArgs {
    /// The application's name, as NAME or NAMESPACE/NAME (else the file's).
    pub name: Option<String>,
    #[command(flatten)]
    pub spec: SpecFlags,
    /// Replace the application if it exists with another spec.
    #[arg(long)]
    pub upsert: bool,
    /// Check that each Git source's revision and path exist (`--validate=false` skips it).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub validate: bool,
    /// An Application manifest (YAML or JSON); flags override its fields.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
    /// The application's namespace [default: the server's].
    #[arg(short = 'N', long)]
    pub app_namespace: Option<String>,
    /// Output: json, yaml, wide or name [default: a message].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct SetArgs {
    #[command(flatten)]
    pub app: NameArgs,
    #[command(flatten)]
    pub spec: SpecFlags,
    /// Output: json, yaml, wide or name [default: a message].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
}

#[derive(clap::Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub app: NameArgs,
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    /// Also delete the application's resources (recorded for the controller).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub cascade: bool,
}

#[derive(clap::Args, Debug)]
pub struct SyncArgs {
    #[command(flatten)]
    pub app: NameArgs,
    /// Delete resources that are no longer in the source.
    #[arg(long)]
    pub prune: bool,
    /// Only preview the sync.
    #[arg(long)]
    pub dry_run: bool,
    /// The revision to sync to [default: the application's].
    #[arg(long)]
    pub revision: Option<String>,
    /// Output: json, yaml, wide or name [default: a message].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
}

pub async fn run(config: &Path, command: AppCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        AppCommand::List(args) => list(config, args, out).await,
        AppCommand::Get(args) => get(config, args, out).await,
        AppCommand::Create(args) => create(config, args, out).await,
        AppCommand::Set(args) => set(config, args, out).await,
        AppCommand::Delete(args) => delete(config, args, out).await,
        AppCommand::Sync(args) => sync(config, args, out).await,
        AppCommand::TerminateOp(args) => terminate(config, args, out).await,
        AppCommand::Watch(args) => watch(config, args, out).await,
    }
}

async fn watch(config: &Path, args: WatchArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let (namespace, name) = match &args.name {
        Some(name) => split_qualified(name, None),
        None => (String::new(), String::new()),
    };
    let request = json!({
        "name": name,
        "appNamespace": namespace,
        "projects": args.projects,
        "resourceVersion": args.resource_version.unwrap_or_default(),
    });
    let mut events = call::watch(&client, "app watch failed", &format!("{SVC}/Watch"), &request).await?;
    while let Some(event) = events.next().await? {
        let app = &event["application"];
        match args.output {
            Some(Shape::Json) => writeln!(out, "{}", serde_json::to_string(&event)?)?,
            Some(Shape::Name) => writeln!(out, "{}", qualified(app))?,
            _ => writeln!(
                out,
                "{:<8} {} {} {}",
                str_at(&event, "/type"),
                qualified(app),
                str_at(app, "/status/sync/status"),
                str_at(app, "/status/health/status")
            )?,
        }
        out.flush()?;
    }
    Ok(())
}

fn print_app(out: &mut dyn Write, shape: Option<Shape>, app: &Value, message: &str) -> anyhow::Result<()> {
    match shape {
        None | Some(Shape::Wide) => {
            writeln!(out, "{message}")?;
            Ok(())
        }
        Some(_) => view::one(out, shape, app, &qualified, &describe),
    }
}

fn query(name: &str, namespace: Option<&str>) -> Value {
    let (ns, name) = split_qualified(name, namespace);
    json!({"name": name, "appNamespace": ns})
}

pub async fn get_app(client: &Client, name: &str, namespace: Option<&str>) -> anyhow::Result<Value> {
    let request = query(name, namespace);
    call::unary(client, "app get failed", &format!("{SVC}/Get"), &request).await
}

async fn list(config: &Path, args: ListArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let request = json!({
        "projects": args.projects,
        "selector": args.selector.unwrap_or_default(),
        "repo": args.repo.unwrap_or_default(),
        "appNamespace": args.app_namespace.unwrap_or_default(),
    });
    let reply = call::unary(&client, "app list failed", &format!("{SVC}/List"), &request).await?;
    let table = Table {
        header: &[
            "NAME",
            "CLUSTER",
            "NAMESPACE",
            "PROJECT",
            "STATUS",
            "HEALTH",
            "SYNCPOLICY",
            "CONDITIONS",
            "REPO",
            "PATH",
            "TARGET",
        ],
        wide: &["REVISION", "OPERATION", "CREATED"],
        row: &row,
        name: &qualified,
    };
    view::list(out, args.output, &call::items(&reply), &table)
}

async fn get(config: &Path, args: GetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.app.conn, None).await?;
    let app = get_app(&client, &args.app.name, args.app.app_namespace.as_deref()).await?;
    view::one(out, args.output, &app, &qualified, &describe)
}

/// Writes the flags into `spec`; false when no flag was given.
fn apply_flags(flags: &SpecFlags, spec: &mut Map<String, Value>) -> anyhow::Result<bool> {
    let mut changed = false;
    let source_flags = [
        ("repoURL", &flags.repo),
        ("path", &flags.path),
        ("targetRevision", &flags.revision),
    ];
    if source_flags.iter().any(|(_, v)| v.is_some()) {
        let multi = spec
            .get("sources")
            .and_then(Value::as_array)
            .is_some_and(|s| !s.is_empty());
        if multi {
            return Err(exit::invalid(
                "the application has several sources (spec.sources): change them with a manifest (-f)",
            ));
        }
        edit(spec, "source", |source| {
            for (key, value) in source_flags {
                if let Some(value) = value {
                    source.insert(key.to_owned(), Value::from(value.as_str()));
                }
            }
        });
        changed = true;
    }
    let dest_changed = edit(spec, "destination", |dest| {
        if let Some(server) = &flags.dest_server {
            dest.insert("server".to_owned(), Value::from(server.as_str()));
            dest.remove("name");
        }
        if let Some(name) = &flags.dest_name {
            dest.insert("name".to_owned(), Value::from(name.as_str()));
            dest.remove("server");
        }
        if let Some(ns) = &flags.dest_namespace {
            dest.insert("namespace".to_owned(), Value::from(ns.as_str()));
        }
        flags.dest_server.is_some() || flags.dest_name.is_some() || flags.dest_namespace.is_some()
    });
    changed |= dest_changed;
    if let Some(project) = &flags.project {
        spec.insert("project".to_owned(), Value::from(project.as_str()));
        changed = true;
    }
    Ok(changed)
}

/// Edits the object at `key` (made one if it is absent or not an object).
fn edit<R>(map: &mut Map<String, Value>, key: &str, f: impl FnOnce(&mut Map<String, Value>) -> R) -> R {
    let mut inner = match map.remove(key) {
        Some(Value::Object(inner)) => inner,
        _ => Map::new(),
    };
    let result = f(&mut inner);
    map.insert(key.to_owned(), Value::Object(inner));
    result
}

async fn create(config: &Path, args: CreateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let mut app = match &args.file {
        Some(path) => super::manifest::client_part(&read_object(path)?),
        None => json!({}),
    };
    let root = app
        .as_object_mut()
        .ok_or_else(|| exit::invalid("the application is not an object"))?;
    let named = edit(root, "metadata", |meta| {
        if let Some(name) = &args.name {
            let (ns, name) = split_qualified(name, args.app_namespace.as_deref());
            meta.insert("name".to_owned(), Value::from(name));
            if !ns.is_empty() {
                meta.insert("namespace".to_owned(), Value::from(ns));
            }
        } else if let Some(ns) = &args.app_namespace {
            meta.insert("namespace".to_owned(), Value::from(ns.as_str()));
        }
        meta.get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
    });
    if !named {
        return Err(exit::invalid(
            "no application name: give NAME, or a manifest with metadata.name (-f)",
        ));
    }
    edit(root, "spec", |spec| apply_flags(&args.spec, spec))?;
    let client = Client::connect(config, &args.conn, None).await?;
    let name = qualified(&app);
    // Whatever keeps the application from being read, the create answers for itself.
    let existing = get_app(&client, &name, None).await.ok();
    let request = json!({"application": app, "upsert": args.upsert, "validate": args.validate});
    let created = call::unary(&client, "app create failed", &format!("{SVC}/Create"), &request).await?;
    let action = match existing {
        None => "created",
        Some(old)
            if old.pointer("/metadata/resourceVersion") == created.pointer("/metadata/resourceVersion") =>
        {
            "unchanged"
        }
        Some(_) => "updated",
    };
    let message = format!("application '{}' {action}", str_at(&created, "/metadata/name"));
    print_app(out, args.output, &created, &message)
}

async fn set(config: &Path, args: SetArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.app.conn, None).await?;
    let app = get_app(&client, &args.app.name, args.app.app_namespace.as_deref()).await?;
    let mut spec = match app.get("spec") {
        Some(Value::Object(spec)) => spec.clone(),
        _ => Map::new(),
    };
    if !apply_flags(&args.spec, &mut spec)? {
        return Err(exit::invalid(
            "nothing to set: give --repo, --path, --revision, --dest-server, --dest-name, --dest-namespace or --project",
        ));
    }
    let request = json!({
        "name": str_at(&app, "/metadata/name"),
        "appNamespace": str_at(&app, "/metadata/namespace"),
        "spec": spec,
    });
    call::unary(&client, "app set failed", &format!("{SVC}/UpdateSpec"), &request).await?;
    let updated = get_app(&client, &qualified(&app), None).await?;
    print_app(
        out,
        args.output,
        &updated,
        &format!("application '{}' updated", qualified(&app)),
    )
}

async fn delete(config: &Path, args: DeleteArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let (ns, name) = split_qualified(&args.app.name, args.app.app_namespace.as_deref());
    let what = if args.cascade {
        " and all its resources"
    } else {
        ""
    };
    confirm(
        &format!("Are you sure you want to delete '{}'{what}?", args.app.name),
        args.yes,
    )?;
    let client = Client::connect(config, &args.app.conn, None).await?;
    let request = json!({"name": name, "appNamespace": ns, "cascade": args.cascade});
    call::unary(&client, "app delete failed", &format!("{SVC}/Delete"), &request).await?;
    writeln!(out, "application '{}' deleted", args.app.name)?;
    Ok(())
}

async fn sync(config: &Path, args: SyncArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.app.conn, None).await?;
    let mut request = query(&args.app.name, args.app.app_namespace.as_deref());
    if let Some(map) = request.as_object_mut() {
        map.insert("prune".to_owned(), Value::Bool(args.prune));
        map.insert("dryRun".to_owned(), Value::Bool(args.dry_run));
        map.insert(
            "revision".to_owned(),
            Value::from(args.revision.unwrap_or_default()),
        );
    }
    let app = call::unary(&client, "app sync failed", &format!("{SVC}/Sync"), &request).await?;
    let mut message = format!("sync of application '{}' requested", qualified(&app));
    let revision = str_at(&app, "/operation/sync/revision");
    if !revision.is_empty() {
        message.push_str(&format!(" (revision {revision})"));
    }
    message.push_str(": the operation is recorded for a controller to carry out");
    print_app(out, args.output, &app, &message)
}

async fn terminate(config: &Path, args: NameArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = Client::connect(config, &args.conn, None).await?;
    let request = query(&args.name, args.app_namespace.as_deref());
    let path = format!("{SVC}/TerminateOperation");
    call::unary(&client, "app terminate-op failed", &path, &request).await?;
    writeln!(out, "Application '{}' operation terminating", args.name)?;
    Ok(())
}
