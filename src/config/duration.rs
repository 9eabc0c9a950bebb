//! Durations as Argo CD writes them: Go's `time.ParseDuration` syntax
//! (`300ms`, `1.5h`, `2h45m`), and, where Argo CD accepts it
//! (`users.session.duration`, the CLI's expiry flags), the legacy `d` (24 h) unit.
//! The one duration parser of tiphys: configuration, server flags, sync windows and the CLI.
//!
//! No maintained crate implements Go's syntax exactly (`humantime` and `duration-str` read
//! other grammars; `go-parse-duration` has seen no release in years), so this is ours.

use std::time::Duration;

const NS: u64 = 1;
const US: u64 = 1_000 * NS;
const MS: u64 = 1_000 * US;
const SEC: u64 = 1_000 * MS;
const MIN: u64 = 60 * SEC;
const HOUR: u64 = 60 * MIN;
const DAY: u64 = 24 * HOUR;

/// Go's `time.ParseDuration`: `[+-]?(number unit)+` or a bare `0`. Negative values are
/// rejected: every duration tiphys reads is a length of time.
pub fn parse_go_duration(input: &str) -> Result<Duration, String> {
    length(input, parse_nanos(input, false)?)
}

/// [`parse_go_duration`], plus the `d` (24 h) unit Argo CD accepts for
/// `users.session.duration` and its CLI's expiry flags. Upstream reads those with
/// github.com/argoproj/pkg/v2's `time.ParseDuration`, which takes only `^\d+[smhd]$` and wraps
/// around past int64; tiphys takes the whole Go syntax there too, and refuses what would wrap
/// (`tests/godiff` checks that every value upstream reads means the same here).
pub fn parse_go_duration_or_days(input: &str) -> Result<Duration, String> {
    length(input, parse_nanos(input, true)?)
}

fn length(input: &str, nanos: i128) -> Result<Duration, String> {
    let nanos =
        u128::try_from(nanos).map_err(|_| format!("invalid duration {input:?}: must not be negative"))?;
    // nanos <= i64::MAX, so both parts fit.
    let secs = u64::try_from(nanos / u128::from(SEC)).unwrap_or(u64::MAX);
    let sub = u32::try_from(nanos % u128::from(SEC)).unwrap_or(0);
    Ok(Duration::new(secs, sub))
}

/// Go's `time.ParseDuration` as a signed count of nanoseconds (a `time.Duration`), negative
/// values included: what `tests/godiff` compares with Go itself.
pub fn go_nanos(input: &str) -> Result<i64, String> {
    let nanos = parse_nanos(input, false)?;
    // parse_nanos keeps to Go's range, -2^63 ..= 2^63 - 1.
    i64::try_from(nanos).map_err(|_| format!("invalid duration {input:?}: out of range"))
}

/// The signed value in nanoseconds, computed step by step as Go's `time.ParseDuration` does:
/// the same overflow checks, and a fraction scaled through a float64 as Go scales it (rather
/// than exactly, which would need a proof that the two never differ by a nanosecond).
fn parse_nanos(input: &str, days: bool) -> Result<i128, String> {
    let invalid = |why: &str| format!("invalid duration {input:?}: {why}");
    let units = if days {
        "ns, us, ms, s, m, h or d"
    } else {
        "ns, us, ms, s, m or h"
    };
    let (negative, mut s) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid("no value"));
    }
    let overflow = || invalid("too large (the maximum is about 292 years)");
    let mut total: u64 = 0;
    while !s.is_empty() {
        let (int_digits, rest) = split_digits(s);
        let (frac_digits, rest) = match rest.strip_prefix('.') {
            Some(after_dot) => split_digits(after_dot),
            None => ("", rest),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid("expected a number"));
        }
        // Go's unit is the run of characters up to the next digit or dot.
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit_name, rest) = rest.split_at(unit_len);
        let unit = match unit_name {
            "" => return Err(invalid(&format!("missing unit ({units})"))),
            "ns" => NS,
            "us" | "µs" | "μs" => US,
            "ms" => MS,
            "s" => SEC,
            "m" => MIN,
            "h" => HOUR,
            "d" if days => DAY,
            "d" => {
                return Err(invalid(
                    "unknown unit \"d\": Go durations have no days; write them as hours (24h)",
                ));
            }
            other => return Err(invalid(&format!("unknown unit {other:?} ({units})"))),
        };
        let whole = leading_int(int_digits).ok_or_else(overflow)?;
        if whole > LIMIT / unit {
            return Err(overflow());
        }
        let mut value = whole * unit;
        let (fraction, scale) = leading_fraction(frac_digits);
        if fraction > 0 {
            // Go: v += uint64(float64(f) * (float64(unit) / scale)), the cast saturating.
            let scaled = (fraction as f64 * (unit as f64 / scale)) as u64;
            value = value.saturating_add(scaled);
            if value > LIMIT {
                return Err(overflow());
            }
        }
        total = total.saturating_add(value);
        if total > LIMIT {
            return Err(overflow());
        }
        s = rest;
    }
    if negative {
        return Ok(-i128::from(total));
    }
    if total > LIMIT - 1 {
        return Err(overflow());
    }
    Ok(i128::from(total))
}

/// 2^63: Go's bound on the magnitude while it adds up (a negative value may reach it).
const LIMIT: u64 = 1 << 63;

fn split_digits(s: &str) -> (&str, &str) {
    s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()))
}

/// Go's `leadingInt` over ASCII digits: None once the value passes 2^63. Empty is zero (`.5s`
/// has no integer part).
fn leading_int(digits: &str) -> Option<u64> {
    let mut value: u64 = 0;
    for b in digits.bytes() {
        if value > LIMIT / 10 {
            return None;
        }
        value = value * 10 + u64::from(b - b'0');
        if value > LIMIT {
            return None;
        }
    }
    Some(value)
}

/// Go's `leadingFraction`: the digits' value and 10^(digits kept), keeping digits only while the
/// value stays within 2^63 (later digits are read and dropped).
fn leading_fraction(digits: &str) -> (u64, f64) {
    let (mut value, mut scale) = (0u64, 1f64);
    for b in digits.bytes() {
        if value > (LIMIT - 1) / 10 {
            break;
        }
        let next = value * 10 + u64::from(b - b'0');
        if next > LIMIT {
            break;
        }
        value = next;
        scale *= 10.0;
    }
    (value, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Duration {
        match parse_go_duration(s) {
            Ok(d) => d,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    fn err(s: &str) -> String {
        match parse_go_duration(s) {
            Ok(d) => panic!("{s:?} should fail, got {d:?}"),
            Err(e) => e,
        }
    }

    fn days(s: &str) -> Duration {
        match parse_go_duration_or_days(s) {
            Ok(d) => d,
            Err(e) => panic!("{s:?} should parse: {e}"),
        }
    }

    #[test]
    fn go_syntax() {
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("2h45m"), Duration::from_secs(2 * 3600 + 45 * 60));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("10ns"), Duration::from_nanos(10));
        assert_eq!(ok("1us"), Duration::from_micros(1));
        assert_eq!(ok("1µs"), Duration::from_micros(1));
        assert_eq!(ok("1μs"), Duration::from_micros(1));
        assert_eq!(ok("1.0000000000000000000001s"), Duration::from_secs(1));
        assert_eq!(ok("1h1m1s1ms1us1ns"), Duration::new(3661, 1_001_001));
        assert_eq!(ok("52763797000ns"), Duration::new(52, 763_797_000));
        // Go scales fractions through a float64, and so do we.
        assert_eq!(go_nanos("0.3000000000000000444s"), Ok(300_000_000));
        assert_eq!(go_nanos("1.000000001h"), Ok(3_600_000_003_600));
    }

    #[test]
    fn negative_values_parse_as_go_does_but_are_no_length() {
        assert_eq!(parse_nanos("-1.5h", false), Ok(-5_400_000_000_000));
        assert_eq!(parse_nanos("-2m3.4s", false), Ok(-123_400_000_000));
        assert_eq!(
            parse_nanos("-9223372036854775808ns", false),
            Ok(i128::from(i64::MIN))
        );
        assert!(parse_nanos("-9223372036854775809ns", false).is_err_and(|e| e.contains("too large")));
        assert!(err("-1.5h").contains("must not be negative"));
        assert!(err("-5s").contains("negative"));
    }

    #[test]
    fn days_only_where_argo_cd_takes_them() {
        assert_eq!(days("7d"), Duration::from_secs(7 * 86400));
        assert_eq!(days("1d12h"), Duration::from_secs(36 * 3600));
        assert_eq!(days("0.5d"), Duration::from_secs(12 * 3600));
        assert_eq!(days("1.5h"), Duration::from_secs(5400));
        assert!(err("1d").contains("no days; write them as hours (24h)"));
        assert!(err("1").contains("(ns, us, ms, s, m or h)"));
        assert!(parse_go_duration_or_days("1").is_err_and(|e| e.contains("(ns, us, ms, s, m, h or d)")));
    }

    #[test]
    fn limits() {
        assert_eq!(
            ok("2562047h47m16.854775807s"),
            Duration::new(9_223_372_036, 854_775_807)
        );
        assert_eq!(
            ok("9223372036854775807ns"),
            Duration::new(9_223_372_036, 854_775_807)
        );
        assert!(err("2562047h47m16.854775808s").contains("too large"));
        assert!(err("9223372036854775808ns").contains("too large"));
        assert!(parse_go_duration_or_days("106752d").is_err_and(|e| e.contains("too large")));
        assert!(err("99999999999999999999999h").contains("too large"));
        assert!(err("3000000h").contains("too large"));
    }

    #[test]
    fn garbage() {
        assert!(err("").contains("no value"));
        assert!(err("+").contains("no value"));
        assert!(err("-").contains("no value"));
        assert!(err("1").contains("missing unit"));
        assert!(err("5").contains("missing unit"));
        assert!(err("1x").contains("unknown unit \"x\""));
        assert!(err("5 s").contains("unknown unit \" s\""));
        assert!(err(" 5s").contains("expected a number"));
        assert!(err(".s").contains("expected a number"));
        assert!(err("-.s").contains("expected a number"));
        assert!(err("h").contains("expected a number"));
        assert!(err("1h-5m").contains("unknown unit \"h-\""));
        assert!(err("3.4.5s").contains("missing unit"));
    }
}
