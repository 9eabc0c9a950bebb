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

/// When the binary was built (`2026-01-31T12:00:00Z`; `SOURCE_DATE_EPOCH` when set), Argo CD's
/// `BuildDate`. `build/facts.rs` stamps this and the git facts below.
pub const BUILD_DATE: &str = env!("TIPHYS_BUILD_DATE");

/// The commit built (`git rev-parse HEAD`); empty when not built from a git checkout of tiphys.
pub const GIT_COMMIT: &str = env!("TIPHYS_GIT_COMMIT");

/// `clean` or `dirty` (uncommitted changes or untracked files when built); empty when unknown.
pub const GIT_TREE_STATE: &str = env!("TIPHYS_GIT_TREE_STATE");

/// The tag of the commit built, when the tree was clean and the commit is tagged.
pub const GIT_TAG: &str = env!("TIPHYS_GIT_TAG");

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

    #[test]
    fn the_build_facts_are_stamped_in_argo_cds_forms() {
        // The date: always there, UTC to the second.
        assert!(BUILD_DATE.parse::<jiff::Timestamp>().is_ok(), "{BUILD_DATE}");
        assert!(
            BUILD_DATE.len() == 20 && BUILD_DATE.ends_with('Z'),
            "{BUILD_DATE}"
        );
        assert!(
            matches!(GIT_TREE_STATE, "" | "clean" | "dirty"),
            "{GIT_TREE_STATE}"
        );
        assert!(
            GIT_COMMIT.is_empty()
                || (matches!(GIT_COMMIT.len(), 40 | 64) && GIT_COMMIT.bytes().all(|b| b.is_ascii_hexdigit())),
            "{GIT_COMMIT}"
        );
        // No commit, no tree state; no clean tree, no tag.
        assert!(!GIT_COMMIT.is_empty() || GIT_TREE_STATE.is_empty());
        assert!(GIT_TAG.is_empty() || GIT_TREE_STATE == "clean");
    }
}
