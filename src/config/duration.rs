//! Durations as Argo CD writes them: Go's `time.ParseDuration` syntax
//! (`300ms`, `1.5h`, `2h45m`) plus the legacy `d` (24 h) unit Argo CD accepts
//! for `users.session.duration`.

use std::time::Duration;

const NS: u128 = 1;
const US: u128 = 1_000 * NS;
const MS: u128 = 1_000 * US;
const SEC: u128 = 1_000 * MS;
const MIN: u128 = 60 * SEC;
const HOUR: u128 = 60 * MIN;
const DAY: u128 = 24 * HOUR;

/// Go caps a `time.Duration` at i64::MAX nanoseconds (about 292 years); so do
/// we, so a value means the same thing to tiphys and to Argo CD.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Fraction digits beyond this cannot change the result by a nanosecond
/// (the largest unit is 8.64e13 ns), and capping them keeps the arithmetic in u128.
const MAX_FRACTION_DIGITS: u32 = 19;

/// Parses `[+]?(number unit)+` or a bare `0`. Negative values are rejected:
/// every duration in the configuration is a length of time.
pub fn parse_go_duration(input: &str) -> Result<Duration, String> {
    let invalid = |why: &str| format!("invalid duration {input:?}: {why}");
    let mut s = input;
    if let Some(rest) = s.strip_prefix('-') {
        return if rest.is_empty() {
            Err(invalid("no value"))
        } else {
            Err(invalid("must not be negative"))
        };
    }
    s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid("no value"));
    }
    let mut total: u128 = 0;
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
            "" => return Err(invalid("missing unit (ns, us, ms, s, m, h or d)")),
            "ns" => NS,
            "us" | "µs" | "μs" => US,
            "ms" => MS,
            "s" => SEC,
            "m" => MIN,
            "h" => HOUR,
            "d" => DAY,
            other => {
                return Err(invalid(&format!(
                    "unknown unit {other:?} (ns, us, ms, s, m, h or d)"
                )));
            }
        };
        let overflow = || invalid("too large (the maximum is about 292 years)");
        let whole = parse_capped(int_digits).ok_or_else(overflow)?;
        total += whole.checked_mul(unit).ok_or_else(overflow)?;
        if !frac_digits.is_empty() {
            let kept = &frac_digits[..frac_digits.len().min(MAX_FRACTION_DIGITS as usize)];
            let scale = 10u128.pow(kept.len() as u32);
            total += parse_capped(kept).ok_or_else(overflow)? * unit / scale;
        }
        if total > MAX_NANOS {
            return Err(overflow());
        }
        s = rest;
    }
    // total <= i64::MAX, so both parts fit.
    let secs = (total / SEC) as u64;
    let nanos = (total % SEC) as u32;
    Ok(Duration::new(secs, nanos))
}

fn split_digits(s: &str) -> (&str, &str) {
    s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()))
}

/// The value of an ASCII digit string, or None above MAX_NANOS (which would
/// overflow whatever the unit). Empty is zero (`.5s` has no integer part).
fn parse_capped(digits: &str) -> Option<u128> {
    let mut value: u128 = 0;
    for b in digits.bytes() {
        value = value * 10 + u128::from(b - b'0');
        if value > MAX_NANOS {
            return None;
        }
    }
    Some(value)
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

    #[test]
    fn go_syntax() {
        assert_eq!(ok("300ms"), Duration::from_millis(300));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("2h45m"), Duration::from_secs(2 * 3600 + 45 * 60));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("+5s"), Duration::from_secs(5));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("10ns"), Duration::from_nanos(10));
        assert_eq!(ok("7us"), Duration::from_micros(7));
        assert_eq!(ok("7µs"), Duration::from_micros(7));
        assert_eq!(ok("7μs"), Duration::from_micros(7));
        assert_eq!(ok("1.0000000000000000000001s"), Duration::from_secs(1));
        assert_eq!(ok("1h1m1s1ms1us1ns"), Duration::new(3661, 1_001_001));
    }

    #[test]
    fn days() {
        assert_eq!(ok("7d"), Duration::from_secs(7 * 86400));
        assert_eq!(ok("1d12h"), Duration::from_secs(36 * 3600));
        assert_eq!(ok("0.5d"), Duration::from_secs(12 * 3600));
    }

    #[test]
    fn limits() {
        assert_eq!(
            ok("2562047h47m16.854775807s"),
            Duration::new(9_223_372_036, 854_775_807)
        );
        assert!(err("2562047h47m16.854775808s").contains("too large"));
        assert!(err("106752d").contains("too large"));
        assert!(err("99999999999999999999999h").contains("too large"));
    }

    #[test]
    fn garbage() {
        assert!(err("").contains("no value"));
        assert!(err("+").contains("no value"));
        assert!(err("-5s").contains("negative"));
        assert!(err("5").contains("missing unit"));
        assert!(err("5x").contains("unknown unit \"x\""));
        assert!(err("5 s").contains("unknown unit \" s\""));
        assert!(err(".s").contains("expected a number"));
        assert!(err("h").contains("expected a number"));
        assert!(err("1h-5m").contains("unknown unit \"h-\""));
    }
}
