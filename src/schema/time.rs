//! Kubernetes time strings: `metav1.Time` is RFC 3339 in UTC with whole seconds
//! (`2026-01-01T00:00:00Z`), `metav1.MicroTime` has six fractional digits. Input accepts any
//! RFC 3339 offset and fraction, as Go's parser does.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;

/// `seconds` since the epoch as a `Time` string, or with `nanos` as a `MicroTime` string.
pub fn format(seconds: i64, nanos: i32, micro: bool) -> Option<String> {
    let at = OffsetDateTime::from_unix_timestamp(seconds).ok()?;
    if micro {
        let at = at.replace_nanosecond(u32::try_from(nanos).ok()?).ok()?;
        at.format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z"
        ))
        .ok()
    } else {
        at.format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .ok()
    }
}

/// Seconds and nanoseconds of an RFC 3339 string.
pub fn parse(text: &str) -> Result<(i64, i32), String> {
    let at = OffsetDateTime::parse(text, &Rfc3339)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time: {e}"))?;
    let nanos = i32::try_from(at.nanosecond()).unwrap_or(0);
    Ok((at.unix_timestamp(), nanos))
}

/// The current time as whole seconds and nanoseconds since the epoch.
pub fn now() -> (i64, i32) {
    let at = OffsetDateTime::now_utc();
    (at.unix_timestamp(), i32::try_from(at.nanosecond()).unwrap_or(0))
}

/// The current time as a `Time` string.
pub fn now_string() -> String {
    format(now().0, 0, false).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_kubernetes_does() {
        assert_eq!(
            format(1_767_225_600, 5, false).as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(
            format(1_767_225_600, 123_456_789, true).as_deref(),
            Some("2026-01-01T00:00:00.123456Z")
        );
    }

    #[test]
    fn parses_any_offset() {
        assert_eq!(parse("2026-01-01T01:00:00+01:00"), Ok((1_767_225_600, 0)));
        assert!(parse("yesterday").is_err());
    }
}
