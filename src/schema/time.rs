//! Kubernetes time strings: `metav1.Time` is RFC 3339 in UTC with whole seconds
//! (`2026-01-01T00:00:00Z`), `metav1.MicroTime` has six fractional digits. Input accepts any
//! RFC 3339 offset and fraction, as Go's parser does.

use jiff::Timestamp;
use jiff::fmt::temporal::{DateTimeParser, DateTimePrinter};

/// Whole seconds, `Z`: how Go writes a `metav1.Time`.
const SECONDS: DateTimePrinter = DateTimePrinter::new().precision(Some(0));
/// Six fraction digits, `Z`: how Go writes a `metav1.MicroTime`.
const MICROS: DateTimePrinter = DateTimePrinter::new().precision(Some(6));
const PARSER: DateTimeParser = DateTimeParser::new();

/// `seconds` since the epoch as a `Time` string, or with `nanos` as a `MicroTime` string.
pub fn format(seconds: i64, nanos: i32, micro: bool) -> Option<String> {
    if micro {
        let at = Timestamp::new(seconds, nanos).ok()?;
        Some(MICROS.timestamp_to_string(&at))
    } else {
        let at = Timestamp::from_second(seconds).ok()?;
        Some(SECONDS.timestamp_to_string(&at))
    }
}

/// Seconds and nanoseconds of an RFC 3339 string.
pub fn parse(text: &str) -> Result<(i64, i32), String> {
    let bad = |why: String| format!("{text:?} is not an RFC 3339 time: {why}");
    // jiff reads ISO 8601 / RFC 9557, a superset: insist on RFC 3339's shape first (seconds
    // present, `Z` or a `±hh:mm` offset, no time zone annotation), as Go's parser does.
    if !rfc3339_shaped(text) {
        return Err(bad("expected the form 2026-01-01T00:00:00Z".to_owned()));
    }
    let at = PARSER.parse_timestamp(text).map_err(|e| bad(e.to_string()))?;
    Ok(seconds_and_nanos(at))
}

/// Whole seconds rounded down and the nanoseconds after them (never negative), as a protobuf
/// `Timestamp` has them; jiff rounds the seconds toward zero instead.
fn seconds_and_nanos(at: Timestamp) -> (i64, i32) {
    let (seconds, nanos) = (at.as_second(), at.subsec_nanosecond());
    if nanos < 0 {
        (seconds - 1, nanos + 1_000_000_000)
    } else {
        (seconds, nanos)
    }
}

/// `YYYY-MM-DD[Tt]hh:mm:ss[.fraction](Z|z|±hh:mm)`, digits unchecked (jiff checks them).
fn rfc3339_shaped(text: &str) -> bool {
    let b = text.as_bytes();
    let offset = match b.last() {
        Some(b'Z' | b'z') => 1,
        _ => 6,
    };
    if b.len() < 19 + offset {
        return false;
    }
    let (clock, zone) = b.split_at(b.len() - offset);
    let fraction = &clock[19..];
    b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't')
        && b[13] == b':'
        && b[16] == b':'
        && (fraction.is_empty()
            || (fraction.len() > 1 && fraction[0] == b'.' && fraction[1..].iter().all(u8::is_ascii_digit)))
        && (offset == 1 || (matches!(zone[0], b'+' | b'-') && zone[3] == b':'))
}

/// The current time as whole seconds and nanoseconds since the epoch.
pub fn now() -> (i64, i32) {
    seconds_and_nanos(Timestamp::now())
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
        assert_eq!(
            parse("2025-12-31T23:00:00.5-01:00"),
            Ok((1_767_225_600, 500_000_000))
        );
        assert_eq!(parse("2026-01-01t00:00:00.000000001z"), Ok((1_767_225_600, 1)));
        assert_eq!(parse("1969-12-31T23:59:59.5Z"), Ok((-1, 500_000_000)));
        for bad in [
            "yesterday",
            "",
            "2026-01-01",
            "2026-01-01T00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00+0100",
            "2026-01-01T00:00:00+01",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00,5Z",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00Z[UTC]",
            "20260101T000000Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_the_edges_as_go_does() {
        assert_eq!(format(0, 0, false).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            format(-1, 0, true).as_deref(),
            Some("1969-12-31T23:59:59.000000Z")
        );
        assert_eq!(
            format(1_767_225_600, 999_999_999, true).as_deref(),
            Some("2026-01-01T00:00:00.999999Z")
        );
        // jiff's range ends 26 hours before year 10000 (Go's goes on): a later time is null.
        assert_eq!(
            format(253_402_207_200, 0, false).as_deref(),
            Some("9999-12-30T22:00:00Z")
        );
        assert_eq!(format(253_402_300_799, 0, false), None);
        let (seconds, _) = now();
        assert!(now_string().starts_with(&format(seconds, 0, false).unwrap()[..4]));
    }
}
