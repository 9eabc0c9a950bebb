//! `tiphys::labels` against k8s.io/apimachinery v0.34.0's `labels.Parse` and `Matches`.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tiphys::labels::Selector;

use crate::cases::{Rng, all_strings};
use crate::oracle::{Answer, compare};

/// The unit tests' selectors (src/labels), and more of the grammar's corners.
const SEEDS: &[&str] = &[
    "app=web",
    "app==web,env=prod",
    "app!=web",
    "env in (dev, prod)",
    "env notin (prod)",
    "app",
    "!app",
    "!team",
    "",
    "  ",
    "n>5",
    "n<5",
    "app>5",
    "team=",
    "team!=",
    "env in (,prod)",
    "env in ()",
    "in=x",
    "app in (in)",
    "example.com/team notin (a)",
    "a b=c",
    "env in prod",
    "!a=b",
    "a=b c",
    "a,",
    ",a",
    "a=(b)",
    "a>b",
    "a<",
    "a=b=c",
    "-a",
    "a=-b",
    "Example.com/a",
    "a/b/c",
    "/a",
    "a in (b",
    "a in b)",
    "a notin",
    "a=é",
    "a===b",
    "a=>1",
    "a\0,a",
    "a\0,zzz",
    "\0 garbage ((",
    "a\0b",
    "x in (foo,,baz),y,z notin ()",
    "a in (b,)",
    "a in (,)",
    "a in (,,)",
    "a notin (,b,,c,)",
    "a\tin\n(b)",
    "a\rin (b)",
    "n>-1",
    "n<+8",
    "n>08",
    "n>1e3",
    "n > 9223372036854775807",
    "n<9223372036854775808",
    "notin",
    "in",
    "in in (in)",
    "notin notin (notin)",
    "!in",
    "!!a",
    "!",
    "!=",
    "a!",
    "a!b",
    "a!=!b",
    "a==",
    "a==,b",
    "a in (b c)",
    "a in ((b))",
    "a,,b",
    "a, b",
    " a ,b ",
    "a=b,",
    "a.b-c_d=e.f-g_h",
    "a-=b",
    "a=b-",
    "_a",
    "a_",
    "k8s.io/app=x",
    "k8s.io./app",
    "k8s..io/app",
    "K8s.io/app",
    "a/=b",
    "/=b",
    "a/b=c",
    "0=1",
    "a=0",
    "😀",
    "a=😀",
    "a=😀b",
    "(a)",
    ")",
    "a)",
    "a=)",
];

/// Pieces of generated selectors: keys, values, every operator, blanks, punctuation.
const PIECES: &[&str] = &[
    "a", "b", "app", "in", "notin", "k8s.io/", "x.y/", "-", "_", ".", "1", "7", "-3", "=", "==", "!=", "!",
    ">", "<", "(", ")", ",", " ", "\t", "é", "/", "A",
];

fn label_sets() -> Vec<BTreeMap<String, String>> {
    let sets: &[&[(&str, &str)]] = &[
        &[],
        &[("a", "b")],
        &[("a", ""), ("b", "7")],
        &[("app", "web"), ("in", "in"), ("notin", "a")],
        &[("a", "1"), ("b", "-3"), ("k8s.io/app", "x"), ("x.y/a", "b")],
        &[("a", "7"), ("app", "1"), ("b", "a"), ("n", "08")],
    ];
    sets.iter()
        .map(|s| {
            s.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        })
        .collect()
}

fn cases() -> Vec<Value> {
    let mut texts: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    texts.extend(all_strings(
        &["a", "=", "!", " ", ",", "(", ")", "in", ">", "1"],
        4,
    ));
    let mut rng = Rng::new(0xd1b5_4a32_d192_ed03);
    for _ in 0..15_000 {
        texts.push(rng.string(PIECES, 9));
    }
    // Long keys and values, around the 63 and 253 byte limits.
    for n in [62, 63, 64, 252, 253, 254] {
        let long = "a".repeat(n);
        texts.push(format!("{long}=b"));
        texts.push(format!("a={long}"));
        texts.push(format!("{}/a", "b".repeat(n)));
        texts.push(format!("{}.c/a", "b".repeat(n.min(63))));
    }
    let sets = label_sets();
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"op": "selector", "selector": text, "labels": sets[i % sets.len()]}))
        .chain(SEEDS.iter().flat_map(|text| {
            sets.iter()
                .map(move |l| json!({"op": "selector", "selector": text, "labels": l}))
        }))
        .collect()
}

fn ours(case: &Value) -> Answer {
    let labels: BTreeMap<String, String> = serde_json::from_value(case["labels"].clone()).unwrap();
    match Selector::parse(case["selector"].as_str().unwrap()) {
        Ok(selector) => Answer::matched(selector.matches(&labels)),
        Err(e) => Answer::refused(e),
    }
}

/// No known difference.
fn allowed(_case: &Value, _go: &Answer, _us: &Answer) -> Option<&'static str> {
    None
}

#[test]
fn selectors_match_apimachinery() {
    compare("selector", &cases(), ours, allowed);
}
