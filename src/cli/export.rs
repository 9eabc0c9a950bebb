//! `tiphys admin export`: everything the store holds, as manifests `tiphys apply` (or
//! kubectl, for Argo CD) restores: AppProjects, cluster, repo-creds and repository Secrets,
//! then Applications.
//!
//! Two sources: the API, with the caller's token (RBAC applies, and the API never returns
//! credentials, as upstream's); or, with `--data-dir`, the server's store read directly, which
//! is the only way to export credentials and works only while the server is stopped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use serde_json::{Value, json};

use super::call;
use super::client::Client;
use super::conn::ClientOpts;
use super::exit;
use super::manifest;
use super::secrets::{self, CREDENTIALS_OMITTED, ToSecret};
use crate::registry::Kind;
use crate::store::{Backend, FileStore, Store, StoreError, file::FILE_NAME};

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("store_source").args(["data_dir", "etcd_endpoints"]).multiple(true)))]
pub struct ExportArgs {
    /// Write to this file (mode 0600) [default: stdout].
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Include credentials (passwords, tokens, private keys). Needs --data-dir or
    /// --etcd-endpoints: the API never returns them.
    #[arg(long, requires = "store_source")]
    pub include_secrets: bool,
    /// Read the server's data directory directly instead of asking the API. Only while the
    /// server is stopped: a running server holds an exclusive lock on its data directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// With --data-dir or --etcd-endpoints: the servers' --config-dir, for argocd-secret's
    /// server.secretkey when it sealed the stored credentials.
    #[arg(long, env = "TIPHYS_CONFIG_DIR", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// With --etcd-endpoints the store in etcd is read directly (servers may keep running).
    #[command(flatten)]
    pub store: crate::server::store_args::StoreArgs,
    #[command(flatten)]
    pub conn: ClientOpts,
}

/// What was read, per kind, as the API (or the store) gives it.
#[derive(Default)]
struct Contents {
    projects: Vec<Value>,
    clusters: Vec<Value>,
    creds: Vec<Value>,
    repos: Vec<Value>,
    write_creds: Vec<Value>,
    write_repos: Vec<Value>,
    apps: Vec<Value>,
    appsets: Vec<Value>,
}

pub async fn run(config: &Path, args: ExportArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let etcd = !args.store.etcd_endpoints.is_empty();
    let offline = etcd || args.data_dir.is_some();
    let (contents, source) = match &args.data_dir {
        _ if etcd => {
            let backend = args
                .store
                .backend(args.data_dir.as_deref().unwrap_or(Path::new(".")))
                .map_err(|e| exit::invalid(format!("{e:#}")))?;
            let prefix = match &backend {
                Backend::Etcd(options) => options.prefix.clone(),
                Backend::File(_) => String::new(),
            };
            let store = backend.open().await.context("cannot open the store")?;
            let endpoints = args.store.etcd_endpoints.join(",");
            (
                from(store, &args).await?,
                format!("etcd {endpoints} prefix {prefix}"),
            )
        }
        Some(dir) => (
            from_store(dir, &args).await?,
            format!("data dir {}", dir.display()),
        ),
        None => {
            let client = Client::connect(config, &args.conn, None).await?;
            let server = client.target.opts.server.clone().unwrap_or_default();
            (from_api(&client).await?, format!("server {server}"))
        }
    };
    let with_credentials = args.include_secrets && offline;
    let text = render(&contents, &source, with_credentials, offline)?;
    match &args.out {
        Some(path) => {
            crate::fsutil::write_private(path, text.as_bytes())
                .with_context(|| format!("cannot write {}", path.display()))?;
            eprintln!("exported to {}", path.display());
        }
        None => out.write_all(text.as_bytes())?,
    }
    Ok(())
}

async fn from_api(client: &Client) -> anyhow::Result<Contents> {
    let list = |path: &'static str| async move {
        let reply = call::unary(client, "admin export failed", path, &json!({})).await?;
        Ok::<_, anyhow::Error>(call::items(&reply))
    };
    Ok(Contents {
        projects: list("/project.ProjectService/List").await?,
        clusters: list("/cluster.ClusterService/List").await?,
        creds: list("/repocreds.RepoCredsService/ListRepositoryCredentials").await?,
        repos: list("/repository.RepositoryService/ListRepositories").await?,
        write_creds: list("/repocreds.RepoCredsService/ListWriteRepositoryCredentials").await?,
        write_repos: list("/repository.RepositoryService/ListWriteRepositories").await?,
        apps: list("/application.ApplicationService/List").await?,
        appsets: list("/applicationset.ApplicationSetService/List").await?,
    })
}

async fn from_store(dir: &Path, args: &ExportArgs) -> anyhow::Result<Contents> {
    let file = dir.join(FILE_NAME);
    if !file.is_file() {
        return Err(exit::invalid(format!(
            "no tiphys store in {} ({FILE_NAME} is missing): pass the server's --data-dir",
            dir.display()
        )));
    }
    let owned = dir.to_path_buf();
    let store = tokio::task::spawn_blocking(move || FileStore::open(&owned))
        .await
        .map_err(|e| anyhow!("cannot open the store: {e}"))?
        .map_err(|e| match e {
            StoreError::Unavailable(why) => anyhow!(
                "{why}. A running server holds an exclusive lock on its data dir: stop it before \
                 `admin export --data-dir`, or export through the API instead (without --data-dir; \
                 credentials are then left out)"
            ),
            other => anyhow::Error::new(other).context("cannot open the store"),
        })?;
    from(Arc::new(store), args).await
}

async fn from(store: Arc<dyn Store>, args: &ExportArgs) -> anyhow::Result<Contents> {
    let key_file = args.store.secrets_key_file.as_deref();
    let registry = super::rotate::open_registry(store, key_file, args.config_dir.as_deref()).await?;
    let all = |kind: Kind| -> Vec<Value> { registry.list(kind).1.iter().map(|d| d.value()).collect() };
    Ok(Contents {
        projects: all(Kind::AppProject),
        clusters: all(Kind::Cluster),
        creds: all(Kind::RepoCreds),
        repos: all(Kind::Repository),
        write_creds: all(Kind::WriteRepoCreds),
        write_repos: all(Kind::WriteRepository),
        apps: all(Kind::Application),
        appsets: all(Kind::ApplicationSet),
    })
}

/// One YAML document, with comment lines before it.
fn document(text: &mut String, comments: &[String], value: &Value) -> anyhow::Result<()> {
    text.push_str("---\n");
    for comment in comments {
        text.push_str(&format!("# {comment}\n"));
    }
    text.push_str(&serde_yaml_ng::to_string(value)?);
    Ok(())
}

/// A Secret as exported: marked when its credentials are not in it.
fn secret_doc(
    text: &mut String,
    made: ToSecret,
    with_credentials: bool,
    offline: bool,
) -> anyhow::Result<()> {
    let ToSecret { mut secret, dropped } = made;
    let mut comments = Vec::new();
    let omitted = if with_credentials {
        None
    } else if offline {
        (!dropped.is_empty()).then(|| dropped.join(","))
    } else {
        Some("all".to_owned())
    };
    if let Some(omitted) = omitted {
        comments.push(if offline {
            format!("credentials left out: {omitted}")
        } else {
            "credentials left out: the API never returns them".to_owned()
        });
        if let Some(annotations) = secret
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.insert(CREDENTIALS_OMITTED.to_owned(), Value::from(omitted));
        }
    }
    document(text, &comments, &secret)
}

fn render(c: &Contents, source: &str, with_credentials: bool, offline: bool) -> anyhow::Result<String> {
    let mut text = format!(
        "# tiphys admin export from {source} at {}: {} projects, {} clusters, {} repository credential \
         templates, {} repositories, {} applications.\n",
        crate::schema::time::now_string(),
        c.projects.len(),
        c.clusters.len(),
        c.creds.len(),
        c.repos.len(),
        c.apps.len(),
    );
    text.push_str(if with_credentials {
        "# This file holds credentials: keep it private. Restore with `tiphys apply -f FILE`.\n"
    } else {
        "# Credentials (passwords, tokens, private keys) are left out; `tiphys apply` keeps the stored ones\n\
         # of objects that exist. Export with --data-dir DIR --include-secrets (server stopped) to include them.\n\
         # Restore with `tiphys apply -f FILE`.\n"
    });
    for project in &c.projects {
        document(&mut text, &[], &manifest::as_manifest("AppProject", project))?;
    }
    for cluster in &c.clusters {
        secret_doc(
            &mut text,
            secrets::cluster_to_secret(cluster, with_credentials),
            with_credentials,
            offline,
        )?;
    }
    for (list, kind) in [
        (&c.creds, Kind::RepoCreds),
        (&c.repos, Kind::Repository),
        (&c.write_creds, Kind::WriteRepoCreds),
        (&c.write_repos, Kind::WriteRepository),
    ] {
        for object in list {
            let made = secrets::repo_to_secret(object, kind, with_credentials);
            secret_doc(&mut text, made, with_credentials, offline)?;
        }
    }
    for app in &c.apps {
        document(&mut text, &[], &manifest::as_manifest("Application", app))?;
    }
    for set in &c.appsets {
        document(&mut text, &[], &manifest::as_manifest("ApplicationSet", set))?;
    }
    Ok(text)
}
