use std::process::ExitCode;

use clap::Parser;
use tiphys::cli::{self, Cli};

fn main() -> ExitCode {
    // One crypto provider for the whole process (rustls panics if two are
    // linked and none is chosen).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    tiphys::telemetry::init(cli.log_format, cli.default_log_level());
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    runtime.block_on(cli::run(cli, &mut stdout))
}
