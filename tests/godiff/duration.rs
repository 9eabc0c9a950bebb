//! `tiphys::config::duration` against Go's `time.ParseDuration`, and its days variant against
//! github.com/argoproj/pkg/v2's `time.ParseDuration` (what Argo CD reads
//! `users.session.duration` and its CLI's expiry flags with).

use serde_json::{Value, json};
use tiphys::config::duration::{go_nanos, parse_go_duration_or_days};

use crate::cases::{Rng, all_strings};
use crate::oracle::{Answer, compare};

/// The unit tests' inputs (src/config/duration.rs), and Go's own edge cases.
const SEEDS: &[&str] = &[
    "300ms",
    "1.5h",
    "2h45m",
    "1h30m",
    "+5s",
    "0",
    "+0",
    "-0",
    "0s",
    ".5s",
    "1.s",
    "10ns",
    "1us",
    "1µs",
    "1μs",
    "1.0000000000000000000001s",
    "1h1m1s1ms1us1ns",
    "52763797000ns",
    "-1.5h",
    "-2m3.4s",
    "-9223372036854775808ns",
    "-9223372036854775809ns",
    "2562047h47m16.854775807s",
    "9223372036854775807ns",
    "2562047h47m16.854775808s",
    "9223372036854775808ns",
    "106752d",
    "99999999999999999999999h",
    "3000000h",
    "",
    "+",
    "-",
    "1",
    "5",
    "1x",
    "5 s",
    " 5s",
    ".s",
    "-.s",
    "h",
    "1h-5m",
    "3.4.5s",
    "7d",
    "1d12h",
    "0.5d",
    "1d",
    "0.3000000000000000444s",
    "1.000000001h",
    "0.100000000000000000000h",
    "0.830103483285477580700h",
    "9007199254.740993ms",
    "9223372036s854ms775us807ns",
    "-9223372036s854ms775us808ns",
    "0.9223372036854775807h",
    "1.00000000000000000000000000000000001s",
    "1e3s",
    "1_000s",
    "1.5µs",
    "0x10s",
    "00001s",
    "1ms1",
    "1..5s",
    "1h.",
    "µs",
    "1hh",
    "1H",
    "1Ms",
    "1sec",
    "-9223372036.854775808s",
    "9223372036.854775808s",
    "0.0000000001s",
    "000000000000000000000000001ns",
];

/// The pieces of generated durations: digits (many, to reach the limits), dots, units, signs.
const PIECES: &[&str] = &[
    "0",
    "1",
    "5",
    "9",
    "12",
    "999999999",
    "9223372036854775807",
    ".",
    "ns",
    "us",
    "µs",
    "μs",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "x",
    "-",
    "+",
    " ",
];

fn cases() -> Vec<Value> {
    let mut inputs: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    inputs.extend(all_strings(&["1", ".", "5", "s", "m", "h", "-", "µ"], 4));
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    for _ in 0..20_000 {
        inputs.push(rng.string(PIECES, 6));
    }
    // Fractions of every unit, where float64 rounding shows.
    for unit in ["ns", "us", "ms", "s", "m", "h"] {
        for _ in 0..500 {
            let digits: String = (0..1 + rng.below(20))
                .map(|_| *rng.pick(&["0", "1", "3", "5", "7", "9"]))
                .collect();
            inputs.push(format!("{}.{digits}{unit}", rng.below(1000)));
        }
    }
    let mut out: Vec<Value> = inputs
        .iter()
        .map(|i| json!({"op": "duration", "input": i}))
        .collect();
    // The days variant: Go's argoproj/pkg exits the program on a number beyond int64, so none
    // is sent (tiphys refuses such a number: see `days_allowed`).
    out.extend(
        inputs
            .iter()
            .filter(|i| i.len() < 19)
            .map(|i| json!({"op": "days", "input": i})),
    );
    out
}

fn ours(case: &Value) -> Answer {
    let input = case["input"].as_str().unwrap();
    let answer = if case["op"] == "days" {
        parse_go_duration_or_days(input).map(|d| i64::try_from(d.as_nanos()).unwrap())
    } else {
        go_nanos(input)
    };
    answer.map_or_else(Answer::refused, Answer::nanos)
}

/// `time.ParseDuration` itself: no difference. The days variant differs from argoproj/pkg's
/// on purpose in two ways (`src/config/duration.rs`):
/// - tiphys reads all of Go's syntax plus `d` (`1h30m`, `1.5d`), where argoproj/pkg takes only
///   `^\d+[smhd]$`;
/// - argoproj/pkg multiplies without a check, so `106752d` wraps around to a negative value;
///   tiphys refuses a value beyond Go's range.
fn allowed(case: &Value, go: &Answer, us: &Answer) -> Option<&'static str> {
    if case["op"] != "days" {
        return None;
    }
    let input = case["input"].as_str().unwrap();
    let (digits, unit) = input.split_at(input.len().saturating_sub(1));
    let plain = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && matches!(unit, "s" | "m" | "h" | "d");
    if !plain && !go.ok && us.ok {
        return Some("tiphys reads Go's syntax beside `d`");
    }
    let factor: i128 = match unit {
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => 86_400_000_000_000,
    };
    let exact = digits.parse::<i128>().ok().map(|n| n * factor);
    if plain && go.ok && !us.ok && exact.is_some_and(|n| n > i128::from(i64::MAX)) {
        return Some("argoproj/pkg wraps around past int64");
    }
    None
}

#[test]
fn durations_match_go() {
    compare("duration", &cases(), ours, allowed);
}
