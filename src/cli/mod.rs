//! The command line: `tiphys server …` and the client commands.

mod account;
mod admin;
mod app;
mod app_view;
pub(crate) mod apply;
mod appset;
mod args;
pub mod call;
mod cert;
pub mod client;
mod cluster;
pub mod config;
pub mod conn;
mod context;
mod deadline;
pub mod exit;
mod export;
mod gpg;
mod key_lines;
mod kubeconfig;
mod login;
pub(crate) mod manifest;
mod migrate;
mod output;
mod proj;
mod proj_role;
mod prompt;
mod rbac;
mod repo;
mod rotate;
use crate::registry::argocd_secrets as secrets;
pub mod sso;
pub(crate) mod validate;
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
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes, before or after its name.
#[derive(clap::Args, Debug)]
pub struct GlobalArgs {
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
}

/// The command line with `server` as its only subcommand: see [`Cli::parse_from_env`].
#[derive(Parser, Debug)]
#[command(name = "tiphys", version = crate::buildinfo::VERSION)]
struct ServerOnly {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: ServerCommand,
}

#[derive(Subcommand, Debug)]
enum ServerCommand {
    Server(Box<ServerArgs>),
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
    /// Manage ApplicationSets and see the Applications they generate.
    #[command(subcommand, visible_alias = "applicationset")]
    Appset(appset::AppSetCommand),
    /// Manage clusters.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Manage repositories.
    #[command(subcommand)]
    Repo(repo::RepoCommand),
    /// Manage repository credential templates.
    #[command(subcommand)]
    Repocreds(repo::RepoCredsCommand),
    /// Manage repository TLS certificates and SSH known hosts.
    #[command(subcommand)]
    Cert(cert::CertCommand),
    /// Manage the GnuPG public keys commits may be signed with.
    #[command(subcommand)]
    Gpg(gpg::GpgCommand),
    /// Create or update the objects of manifest files: Applications, AppProjects and Argo CD's
    /// cluster, repository and repo-creds Secrets.
    Apply(apply::ApplyArgs),
}

impl Cli {
    /// Parses the process's arguments; a usage error or `--help` exits, as clap does.
    pub fn parse_from_env() -> Self {
        Self::parse_args(std::env::args_os()).unwrap_or_else(|err| err.exit())
    }

    /// Parses `args` (the program name first).
    ///
    /// A server is parsed against a tree that holds only `server`. Clap builds its whole tree,
    /// every client command and option, before parsing, and that work left about 1 MB of code
    /// and heap pages in a server that never needs them again. Anything the small tree rejects,
    /// including help and usage errors, is parsed again against the whole tree, so what clap
    /// prints is the same.
    pub fn parse_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Self, clap::Error> {
        let args: Vec<_> = args.into_iter().collect();
        match ServerOnly::try_parse_from(&args) {
            Ok(ServerOnly {
                global,
                command: ServerCommand::Server(server),
            }) => Ok(Self {
                global,
                command: Command::Server(server),
            }),
            Err(_) => Self::try_parse_from(args),
        }
    }

    /// The default log level: servers log their lifecycle, the CLI only problems.
    pub fn default_log_level(&self) -> &str {
        match (&self.global.log_level, &self.command) {
            (Some(level), _) => level,
            (None, Command::Server(_)) => "info",
            (None, _) => "warn",
        }
    }
}

/// Runs a command; the message of a failure goes to stderr, output to `out`.
pub async fn run(cli: Cli, out: &mut dyn Write) -> ExitCode {
    let config_path = || config::path(cli.global.config.as_deref());
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
        Command::Version(args) => version::run(args, cli.global.config.as_deref(), out).await,
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
        Command::Admin(command) => match admin::run(command, cli.global.config.as_deref(), out).await {
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
        Command::Appset(command) => match config_path() {
            Ok(path) => appset::run(&path, command, out).await,
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
        Command::Cert(command) => match config_path() {
            Ok(path) => cert::run(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Gpg(command) => match config_path() {
            Ok(path) => gpg::run(&path, command, out).await,
            Err(err) => Err(err),
        },
        Command::Apply(args) => match config_path() {
            Ok(path) => apply::run(&path, args, out).await,
            Err(err) => Err(err),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`tiphys app list | head -1`): nothing left to say, as other
        // command-line tools do.
        Err(err) if exit::closed_output(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit::code(&err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_args(args.iter().map(Into::into))
    }

    /// clap checks a command's definition only when that command is parsed: check them all
    /// (two flattened argument structs with one group name panic at run time).
    #[test]
    fn every_command_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn server_parses_with_global_options_on_either_side() {
        let cli = parse(&[
            "tiphys",
            "--log-level",
            "debug",
            "server",
            "--port",
            "9000",
            "--insecure",
        ])
        .expect("a valid server command line");
        let Command::Server(args) = &cli.command else {
            panic!("parsed as {:?}", cli.command);
        };
        assert_eq!(args.port, 9000);
        assert!(args.insecure);
        assert_eq!(cli.default_log_level(), "debug");

        let cli =
            parse(&["tiphys", "server", "--log-format", "json"]).expect("a global option after the name");
        assert!(matches!(cli.global.log_format, LogFormat::Json));
        assert_eq!(cli.default_log_level(), "info");
    }

    #[test]
    fn client_commands_and_errors_go_through_the_whole_tree() {
        let cli = parse(&["tiphys", "version", "--client"]).expect("a client command");
        assert!(matches!(cli.command, Command::Version(_)));

        let err = parse(&["tiphys", "server", "--no-such-flag"]).expect_err("an unknown server flag");
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(err.to_string().contains("--no-such-flag"), "{err}");

        let err = parse(&["tiphys", "nonsense"]).expect_err("an unknown command");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidSubcommand);
        // The whole tree's suggestions and help: the client commands are named.
        let help = parse(&["tiphys", "--help"])
            .expect_err("help is an early exit")
            .to_string();
        assert!(help.contains("login") && help.contains("server"), "{help}");
    }
}
