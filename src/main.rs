use std::process::ExitCode;

use tiphys::cli::{self, Cli};

/// jemalloc rather than glibc's allocator: with a background thread it returns memory freed
/// after a burst (connections, a large list) within seconds, where glibc kept it for good, and
/// it held less with 10,000 applications and 1,000 watchers (BENCHMARKS.md, "Allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse_from_env();
    // One crypto provider for the whole process (rustls panics if two are
    // linked and none is chosen).
    let _ = rustls::crypto::ring::default_provider().install_default();
    tiphys::telemetry::init(cli.global.log_format, cli.default_log_level());
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
