//! What this binary is: version and build facts, fixed at compile time.

/// The server and CLI version (`v` + the crate version, as Argo CD prints it).
pub const VERSION: &str = concat!("v", env!("CARGO_PKG_VERSION"));

/// The Argo CD release whose API tiphys serves. Clients gate features on the server's `Version`
/// being an Argo CD release, so the API reports this level.
pub const ARGOCD_API: &str = "v3.4.0";

/// The `Version` the API reports: the Argo CD API level, with tiphys's own version as semantic
/// version build metadata (`v3.4.0+tiphys.0.1.0`). Kept equal to [`ARGOCD_API`] by a test.
pub const SERVER_VERSION: &str = concat!("v3.4.0+tiphys.", env!("CARGO_PKG_VERSION"));

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_version_is_the_api_level_with_tiphys_as_build_metadata() {
        let (level, build) = SERVER_VERSION.split_once('+').unwrap();
        assert_eq!(level, ARGOCD_API);
        assert_eq!(format!("v{}", build.strip_prefix("tiphys.").unwrap()), VERSION);
        let parts = level[1..].split('.');
        assert_eq!(parts.clone().count(), 3, "a semantic version: {level}");
        assert!(parts.clone().all(|n| n.parse::<u32>().is_ok()), "{level}");
        // Build metadata: dot-separated identifiers of [0-9A-Za-z-].
        assert!(
            build
                .split('.')
                .all(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        );
    }
}
