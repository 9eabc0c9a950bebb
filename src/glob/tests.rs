//! The rules of the module's header, one test each; `tests/godiff` puts these cases and many
//! generated ones to gobwas/glob itself.

use super::*;

fn m(pattern: &str, value: &str) -> bool {
    Glob::new(pattern, &[]).is_ok_and(|g| g.matches(value))
}

fn m_sep(pattern: &str, value: &str) -> bool {
    Glob::new(pattern, &['/']).is_ok_and(|g| g.matches(value))
}

#[test]
fn star_crosses_slashes_without_separators() {
    assert!(m("*", ""));
    assert!(m("*/*", "a/b/c"));
    assert!(m("default/*", "default/ns/app"));
    assert!(!m("*/*", "test"));
    assert!(m("**", "a/b"));
    assert!(m("*.yaml", "sub/dir/a.yaml"));
    assert!(m("**/*.yaml", "sub/a.yaml"));
    assert!(!m("*.yaml", "a.yml"));
    assert!(m("a?c", "a/c"));
    assert!(!m("?", ""));
    assert!(m("a*b*c", "a/x/b/y/c"));
    assert!(!m("ab*ba", "aba"), "head and tail may not overlap");
    assert!(m("ab*ba", "abba"));
}

#[test]
fn separators_stop_star_and_single_but_not_super() {
    assert!(m_sep("https://github.com/*", "https://github.com/org"));
    assert!(!m_sep("https://github.com/*", "https://github.com/org/repo"));
    assert!(m_sep("https://github.com/**", "https://github.com/org/repo"));
    assert!(!m_sep("a?c", "a/c"));
    assert!(m_sep("[!x]", "/"), "a class is not stopped by separators");
    assert!(m_sep("*", ""));
}

#[test]
fn the_cheapest_program() {
    assert_eq!(parse("**", &[]), Ok(Program::Anything));
    assert_eq!(parse("*", &[]), Ok(Program::Anything));
    assert!(matches!(parse("*", &['/']), Ok(Program::Regex(_))));
    assert_eq!(parse("dev-*", &[]), Ok(Program::Prefix("dev-".into())));
    assert_eq!(parse(r"*\*", &[]), Ok(Program::Suffix("*".into())));
    assert_eq!(parse("*-svc*", &[]), Ok(Program::Contains("-svc".into())));
    assert_eq!(
        parse("a*b", &[]),
        Ok(Program::PrefixSuffix("a".into(), "b".into()))
    );
    assert_eq!(
        parse("applications", &[]),
        Ok(Program::Literal("applications".into()))
    );
    assert_eq!(parse("a\0b", &[]), Ok(Program::Literal("ab".into())));
}

#[test]
fn single_classes_and_ranges() {
    assert!(m("a?c", "abc"));
    assert!(!m("a?c", "ac"));
    assert!(m("a?c", "aéc"), "? is one character, not one byte");
    assert!(m("[abc]x", "bx"));
    assert!(!m("[!abc]x", "bx"));
    assert!(m("[a-z]", "q"));
    assert!(!m("[!a-z]", "q"));
    assert!(m("[-a]", "-"));
    assert!(m(r"[\]]", "]"));
    assert!(m("[a-c].yaml", "c.yaml"));
    assert!(!m("[!a-c].yaml", "c.yaml"));
    assert!(m("[!a-c].yaml", "d.yaml"));
    assert!(
        m(r"[\-x]", "a"),
        "a '-' after the first character makes a range from '\\'"
    );
    assert!(m("[!!]", "a") && !m("[!!]", "!"));
}

#[test]
fn classes_that_do_not_parse() {
    for bad in [
        "e[[a*", "[]", "[!]", "[a-z0-9]", "[z-a]", "[abc", "[a-", "[a-]", "[", "[!",
    ] {
        assert!(parse(bad, &[]).is_err(), "{bad}");
        assert!(!m(bad, "e[[a"), "{bad}");
    }
}

#[test]
fn alternatives_nest_and_close_at_the_end() {
    assert!(m("proj/{a,b}", "proj/b"));
    assert!(!m("proj/{a,b}", "proj/c"));
    assert!(m("{a,}x", "x"));
    assert!(m("{,x}a", "a"));
    assert!(m("{a,{b,c*}}", "cdef"));
    assert!(m("{a,b{c,d}}.yaml", "bd.yaml"));
    assert!(m("{config.json,env-usw2/*}", "env-usw2/deploy.yaml"));
    assert!(!m("{config.json,env-usw2/*}", "other.yaml"));
    assert!(m("{a,b", "b"), "an unclosed brace closes at the end");
    assert!(m("{a,{b", "b"));
    assert!(m("a,b}", "a,b}"), "outside braces , and }} are text");
    assert!(m("a]", "a]"));
    assert!(m("{}", "") && !m("{}", "x"));
    let deep = format!("{}a{}", "{".repeat(MAX_DEPTH + 1), "}".repeat(MAX_DEPTH + 1));
    assert!(parse(&deep, &[]).is_err());
}

#[test]
fn escapes_literals_and_the_whole_string() {
    assert!(m(r"a\*b", "a*b"));
    assert!(!m(r"a\*b", "axb"));
    assert!(m("\\*.yaml", "*.yaml"));
    assert!(m("abc\\", "abc"), "a trailing backslash is dropped");
    assert!(m("\\", ""));
    assert!(m("a.b", "a.b") && !m("a.b*", "axb"));
    assert!(m("", "") && !m("", "x"));
    assert!(!m("App", "app"));
    assert!(!m("app", "apps"));
    assert!(m("foo/* ", "foo/x "));
    assert!(!m("foo/* ", "foo/x"));
    assert!(!m("hell", "hello") && m("h*", "hello") && !m("e*", "hello"));
}

#[test]
fn go_reader_quirks() {
    assert!(m("a\0b", "ab"), "a NUL inside text is skipped");
    assert!(m("a*\0b", "axyz"), "a NUL where a term starts ends the pattern");
    assert!(parse("a\u{FFFD}", &[]).is_err());
    assert!(parse("\0\u{FFFD}", &[]).is_ok(), "nothing after the end is read");
    assert!(m("*\n*", "a\nb") && m("?", "\n"));
}

#[test]
fn matching_is_linear() {
    let text = "a".repeat(2000);
    let pattern = format!("{}b", "*a".repeat(50));
    assert!(!m(&pattern, &text));
    assert!(m(&"{a,b}".repeat(40), &"ab".repeat(20)));
}
