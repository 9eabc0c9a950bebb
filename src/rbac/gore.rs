//! Regular expressions as Argo CD's `policy.matchMode: regex` reads them: Go's
//! RE2 syntax, unanchored (a match anywhere in the value counts).
//!
//! The `regex` crate speaks nearly the same syntax; this module closes the gaps
//! that would change a decision: Go's `\d`, `\w`, `\s` and `\b` are ASCII-only,
//! `\<` and `\>` are plain characters, `\Q...\E` quotes, the `x` flag does not
//! exist, and a repeat count above 1000 is an error. A pattern that Go refuses
//! must be refused here too, because in regex mode an invalid pattern that a
//! check reaches denies the whole check.

use regex::{Regex, RegexBuilder};

/// Go's limit on `{n,m}`.
const MAX_REPEAT: u32 = 1000;

/// Compiles a policy pattern with Go's meaning, or says why Go would refuse it.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    let translated = translate(pattern)?;
    RegexBuilder::new(&translated)
        .octal(true)
        .build()
        .map_err(|e| match e {
            regex::Error::Syntax(text) => text.lines().last().unwrap_or_default().trim().to_owned(),
            other => other.to_string(),
        })
}

fn translate(pattern: &str) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    // Go refuses a repetition of a repetition (`a**`, `a+*`, `a{2}*`).
    let mut after_repeat = false;
    while let Some(c) = chars.next() {
        let was_repeat = std::mem::take(&mut after_repeat);
        match c {
            '*' | '+' | '?' if !in_class => {
                if was_repeat {
                    return Err(format!("invalid nested repetition operator: `{c}`"));
                }
                out.push(c);
                if chars.peek() == Some(&'?') {
                    out.push('?');
                    chars.next();
                }
                after_repeat = true;
            }
            '\\' => {
                let Some(e) = chars.next() else {
                    return Err("trailing backslash at end of expression".to_owned());
                };
                match e {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    's' => out.push_str("[\\t\\n\\x0C\\r ]"),
                    'S' => out.push_str("[^\\t\\n\\x0C\\r ]"),
                    'b' if !in_class => out.push_str("(?-u:\\b)"),
                    'B' if !in_class => out.push_str("(?-u:\\B)"),
                    '<' | '>' => out.push(e),
                    'Q' if !in_class => {
                        let mut quoted = String::new();
                        while let Some(q) = chars.next() {
                            if q == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            quoted.push(q);
                        }
                        out.push_str(&regex::escape(&quoted));
                    }
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A leading `^` and then a leading `]` are part of the class syntax.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            '[' if in_class && chars.peek() == Some(&':') => {
                // `[:alpha:]` inside a class: copy it whole.
                out.push('[');
                for n in chars.by_ref() {
                    out.push(n);
                    if n == ']' {
                        break;
                    }
                }
            }
            // Go takes `[` inside a class literally; the regex crate would nest.
            '[' => out.push_str("\\["),
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '(' if !in_class && chars.peek() == Some(&'?') => {
                check_group_flags(&chars)?;
                out.push('(');
            }
            '{' if !in_class => {
                let text = repeat(&mut chars)?;
                if text != "\\{" {
                    if was_repeat {
                        return Err(format!("invalid nested repetition operator: `{text}`"));
                    }
                    after_repeat = true;
                }
                out.push_str(&text);
                if after_repeat && chars.peek() == Some(&'?') {
                    out.push('?');
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

/// At `(?`: refuses group flags Go does not have (the text is copied as is).
fn check_group_flags(chars: &std::iter::Peekable<std::str::Chars<'_>>) -> Result<(), String> {
    let mut lookahead = chars.clone();
    lookahead.next(); // the '?'
    if let Some('P' | '<') = lookahead.peek() {
        return Ok(()); // a named group
    }
    for c in lookahead {
        match c {
            'i' | 'm' | 's' | 'U' | '-' => {}
            ':' | ')' => return Ok(()),
            other => return Err(format!("invalid or unsupported Perl syntax: `(?{other}`")),
        }
    }
    Ok(())
}

/// After `{`: a repeat `{n}`, `{n,}` or `{n,m}` checked against Go's limit, or
/// (as in Go) a literal `{` when what follows is not a repeat.
fn repeat(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<String, String> {
    let body: String = chars.clone().take_while(|&c| c != '}').collect();
    let closed = chars.clone().any(|c| c == '}');
    let mut parts = body.splitn(2, ',');
    let min = parts.next().unwrap_or_default();
    let max = parts.next();
    let is_count = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !closed || !is_count(min) || max.is_some_and(|m| !m.is_empty() && !is_count(m)) {
        return Ok("\\{".to_owned());
    }
    for _ in 0..=body.chars().count() {
        chars.next();
    }
    let too_big = |s: &str| s.parse::<u32>().map_or(true, |n| n > MAX_REPEAT);
    if too_big(min) || max.is_some_and(|m| !m.is_empty() && too_big(m)) {
        return Err(format!("invalid repeat count: `{{{body}}}`"));
    }
    Ok(format!("{{{body}}}"))
}

#[cfg(test)]
mod tests {
    use super::compile;

    fn find(pattern: &str, value: &str) -> bool {
        compile(pattern).unwrap().is_match(value)
    }

    #[test]
    fn unanchored_as_in_go() {
        assert!(find("proj/app", "xproj/app-2"));
        assert!(find("applications", "applicationsets"));
        assert!(find("update", "update/apps/Deployment/ns/x"));
        assert!(!find("^update$", "update/apps"));
    }

    #[test]
    fn perl_classes_are_ascii() {
        assert!(!find(r"^\d$", "٣"), "Arabic-Indic digit is not \\d in Go");
        assert!(!find(r"^\w$", "é"));
        assert!(find(r"^[\d]+$", "123"));
        assert!(find(r"^[^\d]+$", "abc"));
        assert!(!find(r"^\s$", "\u{b}"), "vertical tab is not \\s in Go");
        assert!(find(r"\bapp\b", "my app"));
    }

    #[test]
    fn go_invalid_patterns_are_refused() {
        for bad in [
            "*", "*/*", "a**", "a+*", "a*??", "a{2}*", "a*{2}", "(", "[z-a]", "(?x)a", "a{1001}", "a\\",
            "\\8",
        ] {
            assert!(compile(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn go_literal_corners() {
        assert!(find(r"a{,5}", "a{,5}"), "not a repeat in Go: literal");
        assert!(find(r"x{2}", "xx"));
        assert!(find(r"^a*?b+?c??d{1,2}?$", "abd"), "lazy repeats are fine");
        assert!(find(r"\<a\>", "<a>"));
        assert!(find(r"\Qa.b\E", "a.b") && !find(r"^\Qa.b\E$", "axb"));
        assert!(find(r"[[a]", "["), "`[` inside a class is literal in Go");
        assert!(find(r"[]a]", "]"));
        assert!(find(r"^[[:alpha:]]+$", "abc"));
        assert!(find(r"(?i)APP", "app") && find(r"(?P<n>a)", "a"));
    }
}
