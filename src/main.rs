use std::process::ExitCode;

use tiphys::cli::{self, Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse_from_env();
    if matches!(cli.command, Command::Server(_)) {
        limit_malloc_arenas();
    }
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

/// The environment variable glibc's allocator reads its arena limit from, at start only.
const ARENA_LIMIT: &str = "MALLOC_ARENA_MAX";

/// Restarts the server in place (same process id, same arguments) with glibc's allocator limited
/// to two arenas, unless the environment already says how many.
///
/// By default glibc gives threads their own arenas (up to 8 per core) and seldom returns their
/// free memory. The registry's objects are loaded on several threads and the store's reads run on
/// blocking threads, so with 10,000 applications about 30 MB of the server's 150 MB was freed
/// memory held in arenas. Two arenas keep that near zero at no measurable cost on a 2-core
/// machine; mimalloc and jemalloc were measured too and both held more. The limit can only be
/// set before the allocator starts, hence the `exec`; when it fails the server simply runs with
/// glibc's defaults.
fn limit_malloc_arenas() {
    use std::os::unix::process::CommandExt as _;
    if std::env::var_os(ARENA_LIMIT).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    // `exec` returns only when it failed.
    let err = command.args(args).env(ARENA_LIMIT, "2").exec();
    eprintln!("note: could not restart with {ARENA_LIMIT}=2 ({err}); continuing with glibc's default arenas");
}
