//! `tiphys admin …`: commands run beside the server, on its files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};

use crate::auth::logins::INITIAL_PASSWORD_FILE;
use crate::server::store_args::StoreArgs;

#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// Print the generated initial password of the admin account.
    InitialPassword(InitialPasswordArgs),
    /// Check settings offline, without a server.
    #[command(subcommand)]
    Settings(SettingsCommand),
    /// Write every project, cluster, repository, credential template and application as
    /// manifests that `tiphys apply` restores.
    ///
    /// Through the API (the default: the server and token of the current context, or the
    /// connection flags), RBAC applies and credentials are always left out, as the API never
    /// returns them. With --data-dir the server's store is read directly, which is the only way
    /// to include credentials (--include-secrets) and needs the server to be stopped: a running
    /// server holds an exclusive lock on its data directory.
    Export(super::export::ExportArgs),
    /// Copy a stopped server's data dir store into etcd, for several replicas (--data-dir and
    /// --etcd-endpoints; a non-empty prefix is refused unless --replace).
    Migrate(super::migrate::MigrateArgs),
    /// Seal the stored credentials of clusters, repositories and credential templates again
    /// under the first key of --secrets-key-file (after a new key was put first), and seal
    /// those an older version stored in clear.
    RotateSecretsKey(super::rotate::RotateArgs),
}

#[derive(clap::Subcommand, Debug)]
pub enum SettingsCommand {
    /// Ask an RBAC policy what a subject may do, or validate it.
    #[command(subcommand)]
    Rbac(super::rbac::RbacCommand),
}

#[derive(clap::Args, Debug)]
pub struct InitialPasswordArgs {
    /// The server's data directory [default: the per-user data directory, as the server's].
    #[arg(long, env = "TIPHYS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// With --etcd-endpoints: the servers' --config-dir, for argocd-secret's server.secretkey
    /// when it sealed the password.
    #[arg(long, env = "TIPHYS_CONFIG_DIR", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// With --etcd-endpoints the password is read from etcd, where the servers keep it (sealed).
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs an admin command; some answer with their exit code (`rbac can`: 1 is No).
pub async fn run(
    command: AdminCommand,
    config: Option<&Path>,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    match command {
        AdminCommand::InitialPassword(args) => initial_password(args, out).await.map(|()| ExitCode::SUCCESS),
        AdminCommand::Settings(SettingsCommand::Rbac(command)) => super::rbac::run(command, out),
        AdminCommand::Migrate(args) => super::migrate::run(args, out).await.map(|()| ExitCode::SUCCESS),
        AdminCommand::RotateSecretsKey(args) => {
            super::rotate::run(args, out).await.map(|()| ExitCode::SUCCESS)
        }
        AdminCommand::Export(args) => {
            let config = super::config::path(config)?;
            super::export::run(&config, args, out)
                .await
                .map(|()| ExitCode::SUCCESS)
        }
    }
}

async fn initial_password(args: InitialPasswordArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if !args.store.etcd_endpoints.is_empty() {
        let backend = args
            .store
            .backend(Path::new("."))
            .map_err(|e| super::exit::invalid(format!("{e:#}")))?;
        let store = backend.open().await.context("cannot open the store")?;
        let keys = super::rotate::store_keys(
            &*store,
            args.store.secrets_key_file.as_deref(),
            args.config_dir.as_deref(),
        )
        .await?;
        let Some(password) = crate::auth::logins::initial_password(store.as_ref(), &keys).await? else {
            return Err(anyhow!(
                "no initial admin password in etcd: it has been changed, or was set in argocd-secret"
            ));
        };
        return print_initial(&password, out);
    }
    let dir = match args.data_dir {
        Some(dir) => dir,
        None => dirs::data_dir()
            .map(|d| d.join("tiphys"))
            .ok_or_else(|| anyhow!("no per-user data directory on this system: pass --data-dir"))?,
    };
    let path = dir.join(INITIAL_PASSWORD_FILE);
    let password = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(anyhow!(
                "no initial admin password in {}: it has been changed, or was set in argocd-secret",
                dir.display()
            ));
        }
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    print_initial(password.trim_end_matches(['\r', '\n']), out)
}

fn print_initial(password: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    writeln!(out, "{password}")?;
    eprintln!(
        "This password must be changed: log in as admin, then run `tiphys account update-password` \
         (it is deleted once it is)."
    );
    Ok(())
}
