//! The command line: `tiphys server …` and the client commands.

pub mod conn;
mod version;

use std::io::Write;
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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the API server.
    Server(Box<ServerArgs>),
    /// Print the client and server versions.
    Version(version::VersionArgs),
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
        Command::Version(args) => version::run(args, out).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
