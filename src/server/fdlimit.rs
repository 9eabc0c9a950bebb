//! The file-descriptor limit, which bounds how many connections the server can hold: raised to
//! the hard limit at start (Go's runtime does the same since Go 1.19, so upstream's server runs
//! with it), and the default connection cap derived from it, so that the server refuses a
//! connection cleanly before `accept` starts failing for lack of descriptors.

use rustix::process::{Resource, getrlimit, setrlimit};

/// Descriptors kept for everything but client connections: the store, etcd and OIDC clients,
/// the metrics listener and its scrapers, configuration watches, logs.
const RESERVED_MIN: u64 = 64;

/// Raises the soft limit on open files to the hard limit; returns the soft limit in force.
pub fn raise() -> Option<u64> {
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(soft), Some(hard)) = (limit.current, limit.maximum)
        && soft < hard
    {
        limit.current = Some(hard);
        if let Err(err) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!(error = %err, soft, hard, "could not raise the open-files limit");
            limit.current = Some(soft);
        }
    }
    limit.current
}

/// The connection cap when `--max-connections` is not given: the open-files limit less a
/// reserve of a sixteenth of it (at least 64).
pub fn default_max_connections() -> usize {
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    cap_for(soft)
}

fn cap_for(soft: u64) -> usize {
    let reserved = (soft / 16).max(RESERVED_MIN);
    usize::try_from(soft.saturating_sub(reserved).max(1)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_the_servers_own_descriptors() {
        assert_eq!(cap_for(1024), 960);
        assert_eq!(cap_for(65_536), 61_440);
        assert_eq!(cap_for(10), 1);
    }

    #[test]
    fn raising_never_lowers_the_limit() {
        let before = getrlimit(Resource::Nofile).current;
        let after = raise();
        assert!(after >= before, "{after:?} < {before:?}");
    }
}
