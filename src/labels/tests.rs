//! The forms of the grammar, one test each; `tests/godiff` puts these and generated selectors to
//! k8s.io/apimachinery itself.

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn sel(text: &str, l: &BTreeMap<String, String>) -> bool {
    match Selector::parse(text) {
        Ok(s) => s.matches(l),
        Err(e) => panic!("{text:?} should parse: {e}"),
    }
}

#[test]
fn selector_forms() {
    let l = labels(&[("app", "web"), ("env", "prod"), ("n", "7")]);
    for (text, want) in [
        ("app=web", true),
        ("app==web,env=prod", true),
        ("app!=web", false),
        ("env in (dev, prod)", true),
        ("env notin (prod)", false),
        ("app", true),
        ("!app", false),
        ("!team", true),
        ("", true),
        ("  ", true),
        ("n>5", true),
        ("n<5", false),
        ("app>5", false),
        ("team=", false),
        ("team!=", true),
        ("env in (,prod)", true),
        ("env in ()", false),
        ("in=x", false),
        ("app in (in)", false),
        ("example.com/team notin (a)", true),
    ] {
        assert_eq!(sel(text, &l), want, "{text}");
    }
}

#[test]
fn refused() {
    for bad in [
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
    ] {
        assert!(Selector::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn nul_bytes_read_as_go_reads_them() {
    let l = labels(&[("a", "b")]);
    assert!(
        sel("a\0,a", &l) && !sel("a\0,zzz", &l),
        "a NUL ends the word, and the text goes on"
    );
    assert!(
        sel("\0 garbage ((", &l),
        "a NUL where a token starts ends the text"
    );
    assert!(Selector::parse("a\0b").is_err());
}
