//! The wall clock, read in one place (Unix time; tokens and records store it).

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// Seconds since the Unix epoch.
pub fn now_s() -> i64 {
    now_ms() / 1000
}
