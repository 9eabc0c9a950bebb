//! `tiphys repo …` and `tiphys repocreds …`: repositories and credential templates through
//! `repository.RepositoryService` and `repocreds.RepoCredsService`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::{Map, Value, json};

use super::call::{self, str_at};
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::prompt;
use super::view::{self, Shape, Table, field};

const REPOS: &str = "/repository.RepositoryService";
const CREDS: &str = "/repocreds.RepoCredsService";

#[derive(clap::Subcommand, Debug)]
pub enum RepoCommand {
    /// Register a repository (with its credentials).
    Add(RepoAddArgs),
    /// List repositories.
    List(ListArgs),
    /// Print a repository.
    Get(GetArgs),
    /// Remove a repository.
    #[command(visible_alias = "remove")]
    Rm(UrlArgs),
}

#[derive(clap::Subcommand, Debug)]
pub enum RepoCredsCommand {
    /// Add a credential template for every repository whose URL starts with URL-PREFIX.
    Add(CredsAddArgs),
    /// List credential templates.
    List(ListArgs),
    /// Remove a credential template.
    #[command(visible_alias = "remove")]
    Rm(UrlArgs),
}

/// Credentials and the repository type, shared by `repo add` and `repocreds add`.
#[derive(clap::Args, Debug)]
pub struct CredFlags {
    /// The username (the password is prompted for when --password is missing).
    #[arg(long)]
    pub username: Option<String>,
    /// The password or access token.
    #[arg(long, requires = "username")]
    pub password: Option<String>,
    /// A file holding an SSH private key.
    #[arg(long, conflicts_with_all = ["username", "password"])]
    pub ssh_private_key_path: Option<PathBuf>,
    /// The repository type.
    #[arg(long = "type", default_value = "git", value_parser = ["git", "helm", "oci"])]
    pub kind: String,
    /// Replace an existing entry with other settings.
    #[arg(long)]
    pub upsert: bool,
}

#[derive(clap::Args, Debug)]
pub struct RepoAddArgs {
    /// The repository URL.
    pub url: String,
    #[command(flatten)]
    pub creds: CredFlags,
    /// A name (needed for Helm repositories).
    #[arg(long)]
    pub name: Option<String>,
    /// The project the repository belongs to.
    #[arg(long)]
    pub project: Option<String>,
    /// Do not verify the server's TLS certificate or SSH host key.
    #[arg(long)]
    pub insecure_skip_server_verification: bool,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct CredsAddArgs {
    /// The URL prefix the credentials apply to.
    pub url: String,
    #[command(flatten)]
    pub creds: CredFlags,
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
    /// The repository URL.
    pub url: String,
    /// Output: json, yaml, wide or name [default: a description].
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Shape>,
    #[command(flatten)]
    pub conn: ClientOpts,
}

#[derive(clap::Args, Debug)]
pub struct UrlArgs {
    /// The URL.
    pub url: String,
    #[command(flatten)]
    pub conn: ClientOpts,
}

/// The credential fields the flags give.
fn credentials(flags: &CredFlags, url: &str) -> anyhow::Result<Map<String, Value>> {
    let mut out = Map::new();
    out.insert("type".to_owned(), Value::from(flags.kind.as_str()));
    if flags.kind == "oci" {
        out.insert("enableOCI".to_owned(), Value::Bool(true));
    }
    if let Some(username) = &flags.username {
        let password = match &flags.password {
            Some(password) => password.clone(),
            None => prompt::secret(&format!("Password for {username} at {url}: "), "password")?,
        };
        out.insert("username".to_owned(), Value::from(username.as_str()));
        out.insert("password".to_owned(), Value::from(password));
    }
    if let Some(path) = &flags.ssh_private_key_path {
        let key = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --ssh-private-key-path {}", path.display()))?;
        if !key.contains("PRIVATE KEY") {
            return Err(exit::invalid(format!(
                "{}: not a PEM private key",
                path.display()
            )));
        }
        out.insert("sshPrivateKey".to_owned(), Value::from(key));
    }
    Ok(out)
}

pub async fn run_repo(config: &Path, command: RepoCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        RepoCommand::Add(args) => {
            let mut repo = credentials(&args.creds, &args.url)?;
            repo.insert("repo".to_owned(), Value::from(args.url.as_str()));
            for (key, value) in [("name", &args.name), ("project", &args.project)] {
                if let Some(value) = value {
                    repo.insert(key.to_owned(), Value::from(value.as_str()));
                }
            }
            if args.insecure_skip_server_verification {
                repo.insert("insecure".to_owned(), Value::Bool(true));
            }
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"repo": repo, "upsert": args.creds.upsert});
            let path = format!("{REPOS}/CreateRepository");
            let added = call::unary(&client, "repo add failed", &path, &request).await?;
            writeln!(out, "Repository '{}' added", str_at(&added, "/repo"))?;
            match (
                str_at(&added, "/connectionState/status"),
                str_at(&added, "/connectionState/message"),
            ) {
                ("", _) => {}
                (status, "") => writeln!(out, "Connection state: {status}")?,
                (status, message) => writeln!(out, "Connection state: {status} ({message})")?,
            }
        }
        RepoCommand::List(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let path = format!("{REPOS}/ListRepositories");
            let reply = call::unary(&client, "repo list failed", &path, &json!({})).await?;
            let table = Table {
                header: &[
                    "TYPE", "NAME", "REPO", "INSECURE", "OCI", "LFS", "CREDS", "STATUS", "MESSAGE", "PROJECT",
                ],
                wide: &["USERNAME", "PROXY"],
                row: &repo_row,
                name: &|r: &Value| str_at(r, "/repo").to_owned(),
            };
            view::list(out, args.output, &call::items(&reply), &table)?;
        }
        RepoCommand::Get(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"repo": args.url});
            let repo = call::unary(&client, "repo get failed", &format!("{REPOS}/Get"), &request).await?;
            let name = |r: &Value| str_at(r, "/repo").to_owned();
            view::one(out, args.output, &repo, &name, &describe_repo)?;
        }
        RepoCommand::Rm(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"repo": args.url});
            let path = format!("{REPOS}/DeleteRepository");
            call::unary(&client, "repo rm failed", &path, &request).await?;
            writeln!(out, "Repository '{}' removed", args.url)?;
        }
    }
    Ok(())
}

pub async fn run_creds(config: &Path, command: RepoCredsCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        RepoCredsCommand::Add(args) => {
            let mut creds = credentials(&args.creds, &args.url)?;
            creds.insert("url".to_owned(), Value::from(args.url.as_str()));
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"creds": creds, "upsert": args.creds.upsert});
            let path = format!("{CREDS}/CreateRepositoryCredentials");
            let added = call::unary(&client, "repocreds add failed", &path, &request).await?;
            writeln!(
                out,
                "Repository credentials for '{}' added",
                str_at(&added, "/url")
            )?;
        }
        RepoCredsCommand::List(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let path = format!("{CREDS}/ListRepositoryCredentials");
            let reply = call::unary(&client, "repocreds list failed", &path, &json!({})).await?;
            let row = |c: &Value, wide: bool| {
                let mut row = vec![str_at(c, "/url").to_owned(), str_at(c, "/username").to_owned()];
                if wide {
                    row.push(str_at(c, "/type").to_owned());
                }
                row
            };
            let table = Table {
                header: &["URL PATTERN", "USERNAME"],
                wide: &["TYPE"],
                row: &row,
                name: &|c: &Value| str_at(c, "/url").to_owned(),
            };
            view::list(out, args.output, &call::items(&reply), &table)?;
        }
        RepoCredsCommand::Rm(args) => {
            let client = Client::connect(config, &args.conn, None).await?;
            let request = json!({"url": args.url});
            let path = format!("{CREDS}/DeleteRepositoryCredentials");
            call::unary(&client, "repocreds rm failed", &path, &request).await?;
            writeln!(out, "Repository credentials for '{}' removed", args.url)?;
        }
    }
    Ok(())
}

fn flag(repo: &Value, key: &str) -> String {
    (repo.get(key) == Some(&Value::Bool(true))).to_string()
}

fn repo_type(repo: &Value) -> &str {
    match str_at(repo, "/type") {
        "" => "git",
        kind => kind,
    }
}

fn repo_row(repo: &Value, wide: bool) -> Vec<String> {
    let has_creds =
        !str_at(repo, "/username").is_empty() || repo.get("inheritedCreds") == Some(&Value::Bool(true));
    let mut row = vec![
        repo_type(repo).to_owned(),
        str_at(repo, "/name").to_owned(),
        str_at(repo, "/repo").to_owned(),
        flag(repo, "insecure"),
        flag(repo, "enableOCI"),
        flag(repo, "enableLfs"),
        has_creds.to_string(),
        str_at(repo, "/connectionState/status").to_owned(),
        str_at(repo, "/connectionState/message").to_owned(),
        str_at(repo, "/project").to_owned(),
    ];
    if wide {
        row.push(str_at(repo, "/username").to_owned());
        row.push(str_at(repo, "/proxy").to_owned());
    }
    row
}

fn describe_repo(out: &mut dyn Write, repo: &Value) -> std::io::Result<()> {
    field(out, "Repo", str_at(repo, "/repo"))?;
    field(out, "Type", repo_type(repo))?;
    field(out, "Name", str_at(repo, "/name"))?;
    field(out, "Project", str_at(repo, "/project"))?;
    field(out, "Username", str_at(repo, "/username"))?;
    field(out, "Status", str_at(repo, "/connectionState/status"))?;
    Ok(())
}
