//! `tiphys::rbac::csv` (one `policy.csv` line into fields) against Go's `encoding/csv` with
//! `TrimLeadingSpace`, one `Read`, as Argo CD's `util/rbac` loadPolicyLine reads a line.

use serde_json::{Value, json};
use tiphys::rbac::csv::split_fields;

use crate::cases::{Rng, all_strings};
use crate::oracle::{Answer, compare};

/// From the unit tests of `src/rbac/csv.rs`, and more quoting corners.
const SEEDS: &[&str] = &[
    "p, a ,  b,c ",
    "p,\tx",
    r#"p, "role,admin", "say ""hi""""#,
    r#"g, "proj/{a,b}",x"#,
    "p,,a,",
    r#"p, "", x"#,
    r#"p, a"b, c"#,
    r#"p, "ab"c, d"#,
    r#"p, "open, d"#,
    "p",
    "p, role:admin, applications, get, */*, allow",
    r#"""#,
    r#""""#,
    r#"""""#,
    r#""a"" "#,
    r#"p, "a" ,b"#,
    r#"p,  "a",b"#,
    "p,\u{a0}a",
    "p,\u{3000}a",
    "p,\u{85}a",
    "p, a\rb",
    "p, \"a\rb\"",
    "p,\"a\"\"\"",
    "p, \u{0}a",
    ",",
    ",,",
    " ,",
    "a\"",
    "\"a\"b\"",
    "p, role:x, repositories, *, *, allow",
    "#p, a",
    "é, \"é\"",
];

const PIECES: &[&str] = &[
    "p", "a", "é", ",", " ", "\t", "\"", "\"\"", "\r", "\u{a0}", "#", "x y",
];

fn cases() -> Vec<Value> {
    let mut lines: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    lines.extend(all_strings(&["a", ",", " ", "\""], 5));
    let mut rng = Rng::new(0xa076_1d64_78bd_642f);
    for _ in 0..10_000 {
        lines.push(rng.string(PIECES, 10));
    }
    // Argo CD trims each line and skips empty ones before reading it.
    lines
        .iter()
        .map(|l| l.trim_matches(|c: char| c.is_whitespace()))
        .filter(|l| !l.is_empty())
        .map(|l| json!({"op": "csv", "input": l}))
        .collect()
}

fn ours(case: &Value) -> Answer {
    split_fields(case["input"].as_str().unwrap()).map_or_else(Answer::refused, Answer::fields)
}

#[test]
fn policy_lines_split_as_go() {
    compare("csv", &cases(), ours, |_, _, _| None);
}
