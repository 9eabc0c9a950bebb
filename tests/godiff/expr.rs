//! `tiphys::expr` (deep-link conditions) against github.com/expr-lang/expr v1.17.7's `Eval`,
//! which Argo CD v3.2.11's server/deeplinks calls with the link objects as the environment.

use serde_json::{Value, json};
use tiphys::expr::{Program, UNSUPPORTED};

use crate::cases::{Rng, all_strings};
use crate::oracle::{Answer, compare};

/// The unit tests' conditions (src/expr.rs), the shapes Argo CD's documentation shows, and
/// the corners of each operator and of the grammar, bad input included.
const SEEDS: &[&str] = &[
    r#"app.metadata.name == "web""#,
    r#"app["metadata"]["labels"].team != 'b'"#,
    r#"app.spec.destination.namespace == "prod" && resource.kind == "Deployment""#,
    r#"resource.metadata.labels["app.kubernetes.io/name"] == "web""#,
    r#"cluster.name startsWith "prod-""#,
    r#"project.metadata.name in ["default", "team"]"#,
    r#""team" in app.metadata.labels"#,
    r#""nope" in app.metadata.labels"#,
    r#"resource.kind not in ["Pod", "Service"]"#,
    r#"resource.kind not contains "loy""#,
    r#"resource.kind not startsWith "Dep""#,
    r#"resource.kind not endsWith "ment""#,
    r#"resource.kind not matches "^D""#,
    r#"resource.kind matches "^D.*t$""#,
    r#"resource.kind matches "(""#,
    r#"resource.kind matches "\\d+""#,
    r#"resource.kind matches "[[:alpha:]]+""#,
    r#"resource.kind matches 1"#,
    r#"1 matches "a""#,
    r#"nil matches "a""#,
    r#"resource.kind contains nil"#,
    r#"resource.kind contains 1"#,
    r#"1 startsWith "a""#,
    "app.n >= 3 && app.n < 3.5",
    "app.n == 3.0",
    "app.f == 2.5",
    "app.f > app.n",
    "1 == 1.0",
    "1 < 'a'",
    "'a' < 'b'",
    "'b' <= 'a'",
    "nil < 1",
    "true < false",
    "nil == nil",
    "nil != nil",
    "app.missing == nil",
    "app.missing.deeper",
    "nil.a",
    "nil[0]",
    "app.items[0]",
    "app.items[-1]",
    "app.items[3]",
    "app.items[-4]",
    "app.items[1.7]",
    "app.items['a']",
    "app.metadata[0]",
    "app.metadata[nil]",
    "app.metadata[true]",
    "app.n.x",
    "app.flag.x",
    "app.metadata.name[0]",
    "app.metadata.name[9]",
    "app.metadata.name.x",
    "app.items == [1, 2.5, 'x']",
    "app.items == [1, 2.5]",
    "[] == []",
    "[1] == [1.0]",
    "app.metadata == app.metadata",
    "app.metadata.labels == app.metadata.labels",
    "2.5 in app.items",
    "3 in app.items",
    "nil in app.items",
    "1 in nil",
    "nil in app.metadata",
    "1 in app.metadata",
    "'a' in 'abc'",
    "1 in 1",
    "true && 5",
    "false && 5",
    "true || 5",
    "false || 5",
    "5 && true",
    "nil || true",
    "false && nil.a",
    "true || nil.a",
    "false && app.missing.a",
    "true || app.missing.a",
    "app.missing.a",
    "!true",
    "!!true",
    "not false",
    "not 1",
    "!nil",
    "not true == false",
    "!app.flag",
    "-1 == -1.0",
    "-app.n",
    "+app.n",
    "+'a'",
    "+nil",
    "-'a'",
    "--1",
    "- -1",
    "-nil",
    "true and false or true",
    "true or false and false",
    "(true or false) and false",
    "1 == 1 == true",
    "1 < 2 == true",
    "1 < 2 < 3",
    "3 > 2 > 1",
    "1 < 3 <= 2",
    "1 < nil < 2",
    "false && 1 < 2 < 3",
    "\"a\\nb\" == 'a\nb'",
    r#""\x41" == "A""#,
    r#""\u00e9" == "é""#,
    r#""\q""#,
    r#""\'" == "'""#,
    r#"'\"' == '"'"#,
    "`raw\\n` == 'raw\\\\n'",
    "'unterminated",
    "\"also",
    "",
    "   ",
    "(",
    ")",
    "(true",
    "true)",
    "[1, 2",
    "[1, 2,]",
    "[,]",
    "a ==",
    "== a",
    "a = 1",
    "a === 1",
    "a.",
    "a.1",
    "a..b",
    "a[]",
    "a[1:2]",
    "a?.b",
    "a ?? b",
    "a + 1 == 2",
    "a * 2",
    "len(a)",
    "a.b()",
    "{a: 1}",
    "a | b",
    "a; b",
    "let x = 1; x",
    "true ? 1 : 2",
    "1 not == 2",
    "not",
    "a not",
    "a in",
    "in",
    "and",
    "1e3 == 1000",
    "0x10 == 16",
    "1_000 == 1000",
    "01 == 1",
    "1.",
    ".5",
    "99999999999999999999",
    "app. metadata .name == 'web'",
    "app\n.metadata",
    "$env",
    "#",
    "a && b",
    "unknown",
    "unknown == nil",
    "Unknown.x",
];

/// The environment every case sees: the objects deep links pass, in miniature.
fn env() -> Value {
    json!({
        "app": {
            "metadata": {"name": "web", "labels": {"team": "a", "": "empty"}},
            "spec": {"destination": {"namespace": "prod"}},
            "n": 3, "f": 2.5, "flag": true, "items": [1, 2.5, "x"]
        },
        "resource": {"kind": "Deployment", "metadata": {"labels": {"app.kubernetes.io/name": "web"}}},
        "cluster": {"name": "prod-1", "server": "https://k"},
        "project": {"metadata": {"name": "default"}},
        "a": true, "b": false
    })
}

/// Pieces of generated conditions: names, members, literals, every operator of the subset, some
/// outside it, and punctuation.
const PIECES: &[&str] = &[
    "app",
    "a",
    "b",
    ".metadata",
    ".name",
    ".items",
    ".n",
    ".f",
    "[0]",
    "[-1]",
    "['team']",
    "nil",
    "true",
    "false",
    "1",
    "2.5",
    "-",
    "'web'",
    "\"a\"",
    "[",
    "]",
    ",",
    "(",
    ")",
    " == ",
    " != ",
    " < ",
    " <= ",
    " > ",
    " >= ",
    " && ",
    " || ",
    " and ",
    " or ",
    "!",
    "not ",
    " in ",
    " not in ",
    " contains ",
    " startsWith ",
    " endsWith ",
    " matches ",
    "'^w'",
    " ",
    "+",
    ".",
];

fn cases() -> Vec<Value> {
    let mut texts: Vec<String> = SEEDS.iter().map(|s| (*s).to_owned()).collect();
    texts.extend(all_strings(&["a", "!", "(", ")", " == ", "nil", " && ", "."], 4));
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        texts.push(rng.string(PIECES, 8));
    }
    let env = env();
    texts
        .iter()
        .map(|text| json!({"op": "expr", "input": text, "env": env}))
        .collect()
}

fn go_regex(pattern: &str, s: &str) -> Result<bool, String> {
    tiphys::rbac::gore::compile(pattern).map(|r| r.is_match(s))
}

fn ours(case: &Value) -> Answer {
    let outcome =
        Program::parse(case["input"].as_str().unwrap()).and_then(|p| p.eval(&case["env"], &go_regex));
    match outcome {
        Ok(v) => Answer {
            ok: true,
            value: Some(vec![v]),
            ..Answer::default()
        },
        Err(e) => Answer::refused(e),
    }
}

/// The one kind of difference: a construct of expr's language outside the subset, which
/// tiphys refuses saying so.
fn allowed(_case: &Value, go: &Answer, us: &Answer) -> Option<&'static str> {
    (go.ok && !us.ok && us.error.contains(UNSUPPORTED)).then_some("outside the supported subset")
}

#[test]
fn conditions_evaluate_as_expr_does() {
    compare("expr", &cases(), ours, allowed);
}
