//! `tiphys::rbac::gore` (RBAC's `policy.matchMode: regex`) against Go's `regexp.MatchString`,
//! which Casbin's `regexMatch` calls.

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{Value, json};
use tiphys::rbac::MatchMode;
use tiphys::rbac::gore;
use tiphys::rbac::matcher::Matcher;

use crate::cases::{Rng, all_strings};
use crate::oracle::{Answer, compare};

/// From the unit tests of `src/rbac/gore.rs` and the RBAC tests, and RE2's corners.
const SEEDS: &[&str] = &[
    "proj/app",
    "^proj/.*$",
    "applications",
    "^\\d$",
    "^\\w$",
    "^\\s$",
    "\\bx\\b",
    "\\Bx",
    "*",
    "*/*",
    "a**",
    "a+*",
    "a*??",
    "a{2}*",
    "a*{2}",
    "(",
    ")",
    "[z-a]",
    "(?x)a",
    "a{1001}",
    "a{1000}",
    "a\\",
    "a{,5}",
    "x{2}",
    "a{2,1}",
    "a{1,}",
    "\\Qa.b\\E",
    "\\Qa.b",
    "\\<",
    "\\u0041",
    "\\1",
    "(a)\\1",
    "\\x41",
    "\\x{263a}",
    "\\101",
    "\\0",
    "\\8",
    "\\a\\f\\t\\n\\r\\v",
    "\\z",
    "\\Z",
    "\\A",
    "[[:alpha:]]",
    "[[:^digit:]]",
    "[[:word:]]",
    "[[:foo:]]",
    "[a&&b]",
    "[a--b]",
    "[a~~b]",
    "[[a]]",
    "[]a]",
    "[^]a]",
    "[a-]",
    "[-a]",
    "[\\d-z]",
    "\\pL",
    "\\p{Greek}",
    "\\PL",
    "\\p{Foo}",
    "\\pN",
    "(?i)k",
    "(?i)ß",
    "(?s).",
    "(?m)^a$",
    "(?U)a+",
    "(?P<n>a)(?P<n>b)",
    "(?<n>a)",
    "(?P<1>a)",
    "(?P<>a)",
    "(?i:a)b",
    "(?i-s:a.)",
    "(?-i)a",
    "(?)",
    "(?:)",
    "()",
    "a|",
    "|",
    "^",
    "$",
    "^$",
    "a{0}",
    "a{,}",
    "a{",
    "a{1",
    "a{1,2",
    "{",
    "}",
    "{1}",
    "\\{1}",
    "x*y*z*",
    ".*",
    "\\.",
    "é+",
    "[é-ü]",
    "[^\\n]",
    "\\C",
    "\\X",
    "\\e",
    "\\cA",
    "\\N{DIGIT ONE}",
    "\\k<n>",
    "(?=a)",
    "(?!a)",
    "(?<=a)",
    "(?#c)",
    "a++",
    "a?+",
    "\\p{L}",
    "\\p{^L}",
    "[\\p{L}]",
    "[\\P{L}]",
    "[^\\D]",
    "a*(?s)*",
    "a+(?i)?",
    "(?i)*",
    "a(?i)(?s)+",
    "a(?i){2}",
    "a(?i){x}",
    "a(?i){1001}",
    "(?i)(?s)*",
    "a(?i)(b)*",
    "a(?i-s)*?",
    ".(?s)*",
    "a|(?i)*",
    "((?i)*)",
    "a(?i-)*",
    "\\W",
    "\\S",
    "\\D",
    "[\\b]",
    "(?i)[k]",
    "(?i)\\x{212a}",
];

/// Pieces of generated patterns: every operator, class, flag and escape family.
const PIECES: &[&str] = &[
    "a",
    "b",
    "é",
    ".",
    "*",
    "+",
    "?",
    "*?",
    "{2}",
    "{1,3}",
    "{2,}",
    "{,2}",
    "|",
    "(",
    ")",
    "(?:",
    "(?i)",
    "(?s)",
    "(?m)",
    "(?U)",
    "^",
    "$",
    "\\A",
    "\\z",
    "\\b",
    "\\B",
    "\\d",
    "\\w",
    "\\s",
    "\\D",
    "\\W",
    "\\S",
    "[",
    "]",
    "[^",
    "-",
    "[:alpha:]",
    "[:digit:]",
    "\\pL",
    "\\p{Greek}",
    "\\",
    "\\.",
    "\\x41",
    "\\x{e9}",
    "\\101",
    "\\Q",
    "\\E",
    "\\<",
    "\\u",
    "\\1",
    "\\n",
    "{",
    "}",
    "/",
    "&&",
    "~~",
    "--",
];

const INPUTS: &[&str] = &[
    "",
    "a",
    "b",
    "ab",
    "aab",
    "A",
    "B",
    "é",
    "É",
    "\n",
    "a\nb",
    "1",
    "٣",
    "a1_",
    " ",
    "\t",
    "Ω",
    "K",
    "\u{212a}",
    "ǅ",
    "proj/app",
    "xproj/app-2",
    "applications",
    "a.b",
    "{1}",
    "x",
    "xx",
    "<",
    "]",
    "-",
    "&",
    "ß",
    "ẞ",
    "ab\nc",
    "é1",
    "\u{263a}",
];

fn cases() -> Vec<Value> {
    let mut patterns: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    patterns.extend(all_strings(
        &[
            "a", "*", "+", "?", "(", ")", "[", "]", "\\", "{", "}", "|", "^", "-",
        ],
        3,
    ));
    let mut rng = Rng::new(0x853c_49e6_748f_ea9b);
    for _ in 0..6000 {
        patterns.push(rng.string(PIECES, 6));
    }
    let mut out = Vec::new();
    for (i, pattern) in patterns.iter().enumerate() {
        for k in 0..4 {
            let input = INPUTS[(i * 7 + k * 11) % INPUTS.len()];
            out.push(json!({"op": "regex", "pattern": pattern, "input": input}));
        }
    }
    out
}

/// The RBAC matcher over the same pattern: no special characters means "contains", as in Go.
type Compiled = (Result<regex::Regex, String>, Matcher);

#[test]
fn regexes_match_go() {
    let compiled: RefCell<HashMap<String, Compiled>> = RefCell::default();
    let ours = |case: &Value| {
        let pattern = case["pattern"].as_str().unwrap();
        let input = case["input"].as_str().unwrap();
        let mut compiled = compiled.borrow_mut();
        let (re, matcher) = compiled.entry(pattern.to_owned()).or_insert_with(|| {
            (
                gore::compile(pattern),
                Matcher::compile(pattern, MatchMode::Regex),
            )
        });
        let answer = match re {
            Ok(re) => Answer::matched(re.is_match(input)),
            Err(e) => Answer::refused(e.clone()),
        };
        let by_matcher = matcher
            .matches(input)
            .map_or_else(|_| Answer::refused("unmatchable"), Answer::matched);
        assert!(
            by_matcher.agrees(&answer),
            "the RBAC matcher on {case}: {by_matcher:?}, gore: {answer:?}"
        );
        answer
    };
    compare("regex", &cases(), ours, |_, _, _| None);
}
