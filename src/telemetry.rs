//! Logging setup: one subscriber, to stderr (stdout belongs to CLI output).

use tracing_subscriber::EnvFilter;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `level` is used when `RUST_LOG` is unset, e.g. `info` or `tiphys=debug`. The audit trail
/// (target `audit`, module `crate::audit`) is logged whatever the level, unless the filter names it
/// (`audit=off`).
pub fn init(format: LogFormat, level: &str) {
    let directives = std::env::var("RUST_LOG")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| level.to_owned());
    let filter = if directives.contains("audit") {
        EnvFilter::new(directives)
    } else {
        EnvFilter::new(format!("{directives},audit=info"))
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
