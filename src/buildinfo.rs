//! What this binary is: version and build facts, fixed at compile time.

/// The server and CLI version (`v` + the crate version, as Argo CD prints it).
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));

/// The User-Agent the CLI sends, so gateways can route on it.
pub const USER_AGENT: &str = concat!("tiphys-cli/v", env!("CARGO_PKG_VERSION"));

/// `os/arch`, as Argo CD's `Platform` field shows it.
pub fn platform() -> String {
    format!("{}/{}", std::env::consts::OS, go_arch())
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The compiler, in the place Argo CD reports Go's.
pub const COMPILER: &str = "rustc";
