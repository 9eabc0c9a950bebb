//! The command line: `tiphys server …` and the client commands.

mod account;
mod admin;
mod app;
mod app_view;
mod apply;
mod args;
pub mod call;
pub mod client;
mod cluster;
pub mod config;
pub mod conn;
mod context;
pub mod exit;
mod export;
mod kubeconfig;
mod login;
mod manifest;
mod output;
mod proj;
mod proj_role;
mod prompt;
mod rbac;
mod repo;
mod secrets;
pub mod sso;
mod version;
mod view;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::server::config::ServerArgs;
use crate::telemetry::LogFormat;

#[derive(Parser, Debug)]
#[command(name = "tiphys", version = crate::buildinfo::VERSION, about = "GitOps API server and CLI, compatible with Argo CD")]
pub struct Cli {
    /// Log format (logs go to stderr).
    #[arg(
        long,
        global = true,
        env = "TIPHYS_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log level when RUST_LOG is unset (error, warn, info, debug, trace).
    #[arg(long, global = true, env = "TIPHYS_LOG_LEVEL")]
    pub log_level: Option<String>,
    /// The CLI's config file: contexts, servers and tokens (client commands only) [default: <config dir>/tiphys/config].
    #[arg(long, global = true, env = "TIPHYS_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the API server.
    Server(Box<ServerArgs>),
    /// Print the client and server versions.
    Version(version::VersionArgs),
    /// Log in to a server and save the session as a context.
    Login(login::LoginArgs),
    /// Log out: revoke the context's session token and forget it.
    Logout(login::LogoutArgs),
    /// Log in again to the current context, as the same user.
    Relogin(login::ReloginArgs),
    /// List contexts, or switch to (or delete) one.
    Context(context::ContextArgs),
    /// Manage accounts, passwords and API keys.
    #[command(subcommand)]
    Account(account::AccountCommand),
    /// Administration commands run beside the server.
    #[command(subcommand)]
    Admin(admin::AdminCommand),
    /// Manage applications.
    #[command(subcommand, visible_alias = "application")]
    App(app::AppCommand),
    /// Manage projects.
    #[command(subcommand, visible_alias = "project")]
    Proj(proj::ProjCommand),
    /// Manage clusters.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Manage repositories.
    #[command(subcommand)]
    Repo(repo::RepoCommand),
    /// Manage repository credential templates.
    #[command(subcommand)]
    Repocreds(repo::RepoCredsCommand),
    /// Create or update the objects of manifest files: Applications, AppProjects and Argo CD's
    /// cluster, repository and repo-creds Secrets.
    Apply(apply::ApplyArgs),
}

impl Cli {
    /// The default log level: servers log their lifecycle, the CLI only problems.
    pub fn default_log_level(&self) -> &str {
        match (&self.log_level, &self.command) {
            (Some(level), _) => level,
            (None, Command::Server(_)) => "info",
            (None, _) => "warn",
        }
    }
}

/// Runs a command; the message of a failure goes to stderr, output to `out`.
pub async fn run(cli: Cli, out: &mut dyn Write) -> ExitCode {
    let config_path = || config::path(cli.config.as_deref());
    let result = match cli.command {
        Command::Server(args) => {
            if args.tlsciphers.as_deref() == Some("list") {
                for name in crate::server::tls::supported_cipher_names() {
                    let _ = writeln!(out, "{name}");
                }
                return ExitCode::SUCCESS;
            }
            crate::server::run(*args).await
        }
        Command::Version(args) => version::run(args, cli.config.as_deref(), out).await,
        Command::Login(args) => match config_path() {
            Ok(path) => login::login(&path, args, out).await,
            Err(err) => Err(err),
        },
        Command::Logout(args) => match config_path() {
            Ok(path) => login::logout(&path, args, out).await,
            Err(err) => Err(err),
        },
        Command::Relogin(args) => match config_path() {
            Ok(path) => login::relogin(&path, args, out).await,
            Err(err) => Err(err),
        },
        Command::Context(args) => config_path().and_then(|path| context::run(&path, args, out)),
        Command::Account(command) => match config_path() {
            Ok(path) => account::run(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Admin(command) => match admin::run(command, cli.config.as_deref(), out).await {
            Ok(code) => return code,
            Err(err) => Err(err),
        },
        Command::App(command) => match config_path() {
            Ok(path) => app::run(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Proj(command) => match config_path() {
            Ok(path) => proj::run(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Cluster(command) => match config_path() {
            Ok(path) => cluster::run(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Repo(command) => match config_path() {
            Ok(path) => repo::run_repo(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Repocreds(command) => match config_path() {
            Ok(path) => repo::run_creds(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Apply(args) => match config_path() {
            Ok(path) => apply::run(&path, args, out).await,
            Err(err) => Err(err),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit::code(&err)
        }
    }
}
