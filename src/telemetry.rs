//! Logging setup: one subscriber, to stderr (stdout belongs to CLI output).

use tracing_subscriber::EnvFilter;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `level` is used when `RUST_LOG` is unset, e.g. `info` or `tiphys=debug`.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
