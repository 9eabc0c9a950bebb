//! `tiphys apply -f FILE|DIR`: creates or updates Applications, AppProjects and Argo CD's
//! cluster, repository and repo-creds Secrets through the API, one report line per object.
//! A document that fails (malformed, or refused by the server) is reported with its file and
//! document number, and the others are still applied.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use serde_json::{Value, json};

use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::manifest::{self, API_VERSION};
use super::secrets::{self, FromSecret, SecretType};
use super::validate::Validate;
use crate::service::cluster::lookup::normalize_server;

#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// A manifest file (YAML or JSON, several documents allowed), a directory of them
    /// (*.yaml, *.yml, *.json), or `-` for stdin; repeatable. Documents are numbered from 1
    /// in reports.
    #[arg(short = 'f', long = "filename", required = true, value_name = "FILE|DIR")]
    pub files: Vec<PathBuf>,
    /// Also read the subdirectories of a directory.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Fields the server's schema does not know (a typo such as `spec.syncPolcy`), as kubectl's
    /// field validation: `strict` (or `true`) refuses the document, naming each such field and
    /// its line (`FILE:N: line L: unknown field "spec.syncPolcy"`), and applies the others;
    /// `warn` applies it with a warning per field; `ignore` (or `false`) checks nothing.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value_t = Validate::Strict,
        num_args = 0..=1,
        default_missing_value = "strict"
    )]
    pub validate: Validate,
    #[command(flatten)]
    pub conn: ClientOpts,
}

/// One object to apply, and where it came from.
pub(crate) struct Item {
    source: String,
    object: Target,
}

enum Target {
    Application(Value),
    Project(Value),
    AppSet(Value),
    Secret {
        kind: SecretType,
        name: String,
        read: FromSecret,
        omitted: bool,
    },
}

impl Target {
    /// Apply order: projects first (applications name them), then clusters and
    /// repositories, then applications.
    fn rank(&self) -> u8 {
        match self {
            Target::Project(_) => 0,
            Target::Secret { .. } => 1,
            Target::Application(_) | Target::AppSet(_) => 2,
        }
    }

    fn display(&self) -> String {
        match self {
            Target::Application(app) => format!("application.argoproj.io/{}", manifest::name_of(app)),
            Target::Project(project) => format!("appproject.argoproj.io/{}", manifest::name_of(project)),
            Target::AppSet(set) => format!("applicationset.argoproj.io/{}", manifest::name_of(set)),
            Target::Secret { name, .. } => format!("secret/{name}"),
        }
    }
}

/// The files to read: each file given, and the manifests in each directory given (sorted).
fn collect(paths: &[PathBuf], recursive: bool) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        if path.as_os_str() == "-" {
            files.push(path.clone());
            continue;
        }
        let meta = std::fs::metadata(path).map_err(|e| exit::invalid(format!("{}: {e}", path.display())))?;
        if meta.is_dir() {
            walk(path, recursive, 0, &mut files)?;
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn walk(dir: &Path, recursive: bool, depth: usize, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if depth > 32 {
        return Err(exit::invalid(format!(
            "{}: directories nested too deep",
            dir.display()
        )));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if recursive {
                walk(&path, recursive, depth + 1, files)?;
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            files.push(path);
        }
    }
    Ok(())
}

/// What a document is, or why it cannot be applied; warnings go to stderr.
fn classify(object: &Value) -> Result<Target, String> {
    let api_version = str_at(object, "/apiVersion");
    let kind = str_at(object, "/kind");
    if kind.is_empty() || api_version.is_empty() {
        return Err("the object has no apiVersion or kind".to_owned());
    }
    let needs_name = |what: &str| {
        if manifest::name_of(object).is_empty() {
            Err(format!("the {what} has no metadata.name"))
        } else {
            Ok(())
        }
    };
    match (api_version, kind) {
        (API_VERSION, "Application") => {
            needs_name("application")?;
            Ok(Target::Application(manifest::client_part(object)))
        }
        (API_VERSION, "AppProject") => {
            needs_name("project")?;
            Ok(Target::Project(manifest::client_part(object)))
        }
        (API_VERSION, "ApplicationSet") => {
            needs_name("applicationset")?;
            Ok(Target::AppSet(manifest::client_part(object)))
        }
        ("v1", "Secret") => {
            let kind = SecretType::of(object)?;
            let mut read = match kind.repo_kind() {
                None => secrets::cluster_from_secret(object)?,
                Some(repo_kind) => secrets::repo_from_secret(object, repo_kind)?,
            };
            let url = match kind {
                SecretType::Cluster => str_at(&read.object, "/server"),
                SecretType::Repository | SecretType::RepositoryWrite => str_at(&read.object, "/repo"),
                SecretType::RepoCreds | SecretType::RepoCredsWrite => str_at(&read.object, "/url"),
            };
            // The server keeps the name, so that the object round-trips as this Secret and a
            // changed URL moves it instead of adding another.
            let name = match manifest::name_of(object) {
                "" => secrets::secret_name(kind, url, str_at(&read.object, "/project")),
                name => {
                    if let Some(map) = read.object.as_object_mut() {
                        map.insert(secrets::SECRET_NAME.to_owned(), Value::from(name));
                    }
                    name.to_owned()
                }
            };
            let omitted = object
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(secrets::CREDENTIALS_OMITTED))
                .is_some();
            Ok(Target::Secret {
                kind,
                name,
                read,
                omitted,
            })
        }
        _ => Err(format!(
            "unsupported kind {kind} ({api_version}): tiphys applies {API_VERSION} Application, AppProject and ApplicationSet, \
             and v1 Secrets labelled {}",
            secrets::SECRET_TYPE_LABEL
        )),
    }
}

/// Reads every document; the malformed ones come back as report lines.
fn read_all(files: &[PathBuf], validate: Validate) -> (Vec<Item>, Vec<String>) {
    let mut items = Vec::new();
    let mut errors = Vec::new();
    for file in files {
        let stdin = file.as_os_str() == "-";
        let name = if stdin {
            "<stdin>".to_owned()
        } else {
            file.display().to_string()
        };
        let read = if stdin {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(file)
        };
        match read {
            Ok(text) => read_text(&name, &text, validate, &mut items, &mut errors),
            Err(err) => errors.push(format!("{name}: {err}")),
        }
    }
    for item in &items {
        if let Target::Secret { read, .. } = &item.object {
            for warning in &read.warnings {
                eprintln!("warning: {}: {warning}", item.source);
            }
        }
    }
    (items, errors)
}

/// The documents of one file's `text`: objects to apply, and report lines for the others.
/// Kept apart from the reading so that it can be fuzzed (`crate::fuzzing`).
pub(crate) fn read_text(
    name: &str,
    text: &str,
    validate: Validate,
    items: &mut Vec<Item>,
    errors: &mut Vec<String>,
) {
    for doc in manifest::split_documents(text) {
        let source = format!("{name}:{}", doc.index);
        let read = manifest::parse_document(&doc.text).and_then(|o| {
            validate.check(&o, &doc, &source)?;
            classify(&o)
        });
        match read {
            Ok(object) => items.push(Item { source, object }),
            Err(reason) => errors.push(format!("{source}: {reason}")),
        }
    }
}

pub async fn run(config: &Path, args: ApplyArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let files = collect(&args.files, args.recursive)?;
    let (mut items, errors) = read_all(&files, args.validate);
    for error in &errors {
        eprintln!("error: {error}");
    }
    let total = items.len() + errors.len();
    if total == 0 {
        return Err(exit::invalid("no objects found in the files given"));
    }
    let mut failed = errors.len();
    if !items.is_empty() {
        items.sort_by_key(|item| item.object.rank());
        let client = Client::connect(config, &args.conn, None).await?;
        for item in &items {
            let display = item.object.display();
            match apply_one(&client, &item.object, &display).await {
                Ok(action) => writeln!(out, "{display} {action}")?,
                Err(err) => {
                    failed += 1;
                    eprintln!("error: {}: {err:#}", item.source);
                }
            }
        }
    }
    if failed > 0 {
        return Err(anyhow!("{failed} of {total} objects were not applied"));
    }
    Ok(())
}

fn by_version(before: Option<&Value>, after: &Value) -> &'static str {
    match before {
        None => "created",
        Some(b) if b.pointer("/metadata/resourceVersion") == after.pointer("/metadata/resourceVersion") => {
            "unchanged"
        }
        Some(_) => "configured",
    }
}

async fn apply_one(client: &Client, target: &Target, what: &str) -> anyhow::Result<String> {
    match target {
        Target::Application(app) => {
            let query = json!({
                "name": manifest::name_of(app),
                "appNamespace": str_at(app, "/metadata/namespace"),
            });
            let svc = "/application.ApplicationService";
            // Whatever keeps it from being read, the write answers for itself.
            let old = call::unary(client, what, &format!("{svc}/Get"), &query)
                .await
                .ok();
            let request = json!({"application": app, "upsert": true});
            let new = call::unary(client, what, &format!("{svc}/Create"), &request).await?;
            Ok(by_version(old.as_ref(), &new).to_owned())
        }
        Target::Project(project) => upsert(client, what, "/project.ProjectService", "project", project).await,
        Target::AppSet(set) => {
            upsert(
                client,
                what,
                "/applicationset.ApplicationSetService",
                "applicationset",
                set,
            )
            .await
        }
        Target::Secret {
            kind, read, omitted, ..
        } => apply_secret(client, *kind, read, *omitted, what).await,
    }
}

/// Creates or replaces an object named by `metadata.name` through `svc`'s Get and Create (with
/// `upsert`), the object in the request's `field`.
async fn upsert(
    client: &Client,
    what: &str,
    svc: &str,
    field: &str,
    object: &Value,
) -> anyhow::Result<String> {
    let query = json!({"name": manifest::name_of(object)});
    // Whatever keeps it from being read, the write answers for itself.
    let old = call::unary(client, what, &format!("{svc}/Get"), &query)
        .await
        .ok();
    let request = json!({field: object, "upsert": true});
    let new = call::unary(client, what, &format!("{svc}/Create"), &request).await?;
    Ok(by_version(old.as_ref(), &new).to_owned())
}

async fn apply_secret(
    client: &Client,
    kind: SecretType,
    read: &FromSecret,
    omitted: bool,
    what: &str,
) -> anyhow::Result<String> {
    let object = &read.object;
    let (list, url_field, create, field) = match kind {
        SecretType::Cluster => (
            "/cluster.ClusterService/List",
            "/server",
            "/cluster.ClusterService/Create",
            "cluster",
        ),
        SecretType::Repository => (
            "/repository.RepositoryService/ListRepositories",
            "/repo",
            "/repository.RepositoryService/CreateRepository",
            "repo",
        ),
        SecretType::RepoCreds => (
            "/repocreds.RepoCredsService/ListRepositoryCredentials",
            "/url",
            "/repocreds.RepoCredsService/CreateRepositoryCredentials",
            "creds",
        ),
        SecretType::RepositoryWrite => (
            "/repository.RepositoryService/ListWriteRepositories",
            "/repo",
            "/repository.RepositoryService/CreateWriteRepository",
            "repo",
        ),
        SecretType::RepoCredsWrite => (
            "/repocreds.RepoCredsService/ListWriteRepositoryCredentials",
            "/url",
            "/repocreds.RepoCredsService/CreateWriteRepositoryCredentials",
            "creds",
        ),
    };
    // The object this Secret declared: at its URL, or under its name at another URL (which the
    // write moves). Whatever keeps it from being read, the write answers for itself.
    let listed = call::unary(client, what, list, &json!({}))
        .await
        .map(|list| call::items(&list))
        .unwrap_or_default();
    let url = str_at(object, url_field);
    let name_at = format!("/{}", secrets::SECRET_NAME);
    let name = str_at(object, &name_at);
    // A cluster's server is stored without a trailing slash: compare it so.
    let same_url = |stored: &str| match kind {
        SecretType::Cluster => normalize_server(stored) == normalize_server(url),
        _ => stored == url,
    };
    let at_url = listed.iter().find(|o| same_url(str_at(o, url_field)));
    let by_name = listed
        .iter()
        .find(|o| !name.is_empty() && str_at(o, &name_at) == name);
    let old = at_url.or(by_name).cloned();
    if omitted && at_url.is_some() {
        return Ok(
            "unchanged (its credentials were left out of the manifest; the stored ones are kept)".to_owned(),
        );
    }
    // Without upsert the server writes only what is new, and answers an identical object as it
    // is: so "unchanged" is known even when the manifest holds credentials the API never shows.
    let write = async |upsert: bool| {
        let request = json!({field: object, "upsert": upsert});
        call::unary(client, what, create, &request).await
    };
    let action = match write(false).await {
        Ok(_) if old.is_some() => "unchanged",
        Ok(_) => "created",
        Err(err) if old.is_some() && exit::kind_of(&err) == Some(exit::Kind::Invalid) => {
            write(true).await?;
            "configured"
        }
        Err(err) => return Err(err),
    };
    if omitted {
        return Ok(format!(
            "{action} (without credentials: they were left out of the manifest)"
        ));
    }
    Ok(action.to_owned())
}
