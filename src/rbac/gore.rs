//! Regular expressions as Argo CD's `policy.matchMode: regex` reads them: Go's
//! RE2 syntax, unanchored (a match anywhere in the value counts).
//!
//! The `regex` crate speaks nearly the same syntax. This module reads Go's
//! syntax itself where the two differ and hands the crate an unambiguous
//! spelling: Go's `\d`, `\w`, `\s` and `\b` are ASCII-only; escapes are Go's
//! (`\<` is a plain `<`, `\u` and back-references are errors, octal and `\x{..}`
//! are characters); a character class holds only characters, ranges and named
//! classes (`&&`, `--`, `~~` and a nested `[` are plain characters, a backwards
//! range is an error); group names may repeat; the `x` flag does not exist; a
//! repeat of a repeat and a count above 1000 are errors. A pattern Go refuses
//! must be refused here too: in regex mode an invalid pattern that a check
//! reaches denies the whole check.

use regex::Regex;

/// Go's limit on `{n,m}`.
const MAX_REPEAT: u32 = 1000;

/// A policy pattern rewritten for the regex crate with Go's meaning, or why
/// Go would refuse it. Only parsed here: building the matcher is left until
/// a check needs it, so loading a large policy stays fast.
pub fn translate_checked(pattern: &str) -> Result<String, String> {
    let translated = translate(pattern)?;
    regex_syntax::Parser::new().parse(&translated).map_err(|e| {
        let text = e.to_string();
        text.lines().last().unwrap_or_default().trim().to_owned()
    })?;
    Ok(translated)
}

/// [`translate_checked`] and compiled.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    Regex::new(&translate_checked(pattern)?).map_err(|e| e.to_string())
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// POSIX classes Go knows inside `[...]`.
const POSIX_CLASSES: &[&str] = &[
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space",
    "upper", "word", "xdigit",
];

fn translate(pattern: &str) -> Result<String, String> {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars().peekable();
    // Go refuses a repetition of a repetition (`a**`, `a+*`, `a{2}*`).
    let mut after_repeat = false;
    // Where the last item written starts (a repetition belongs to it), and the open groups'.
    let mut item = 0;
    let mut open: Vec<usize> = Vec::new();
    while let Some(c) = chars.next() {
        let was_repeat = std::mem::take(&mut after_repeat);
        let here = out.len();
        match c {
            '*' | '+' | '?' => {
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
            '{' => {
                let text = repeat(&mut chars)?;
                if text == "\\{" {
                    item = here;
                } else {
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
            '\\' => {
                item = here;
                escape_outside_class(&mut chars, &mut out)?;
            }
            '[' => {
                item = here;
                class(&mut chars, &mut out)?;
            }
            '(' if chars.peek() == Some(&'?') => match flags_before_repeat(&chars) {
                // Go's flag group is no item: a repetition right after it repeats the item
                // before it (`a(?i)*` is `a*` then `(?i)`; `a+(?i)?` is `(a+)?`), where the
                // crate finds nothing to repeat. So the item is grouped and repeated first,
                // then the flags follow. With no item before, the bare operator makes the
                // crate refuse the pattern, as Go does.
                Some((flags, rest)) => {
                    chars = rest;
                    if item < here {
                        out.insert_str(item, "(?:");
                        out.push(')');
                    }
                    let op = chars.next().unwrap_or_default();
                    let text = if op == '{' {
                        repeat(&mut chars)?
                    } else {
                        op.to_string()
                    };
                    out.push_str(&text);
                    if chars.peek() == Some(&'?') {
                        out.push('?');
                        chars.next();
                    }
                    out.push_str(&flags);
                    after_repeat = true;
                }
                None => {
                    open.push(here);
                    group(&mut chars, &mut out)?;
                    item = out.len();
                }
            },
            '(' => {
                open.push(here);
                out.push(c);
                item = out.len();
            }
            ')' => {
                out.push(c);
                item = open.pop().unwrap_or(here);
            }
            '|' => {
                out.push(c);
                item = out.len();
            }
            _ => {
                item = here;
                out.push(c);
            }
        }
    }
    Ok(out)
}

/// After `\` outside a class.
fn escape_outside_class(chars: &mut Chars<'_>, out: &mut String) -> Result<(), String> {
    match chars.peek().copied() {
        Some('b') => out.push_str("(?-u:\\b)"),
        Some('B') => out.push_str("(?-u:\\B)"),
        Some(c @ ('A' | 'z')) => {
            out.push('\\');
            out.push(c);
        }
        Some('Q') => {
            chars.next();
            let mut quoted = String::new();
            while let Some(q) = chars.next() {
                if q == '\\' && chars.peek() == Some(&'E') {
                    chars.next();
                    break;
                }
                quoted.push(q);
            }
            out.push_str(&regex::escape(&quoted));
            return Ok(());
        }
        _ => {
            if !class_escape(chars, out)? {
                let c = escaped_char(chars)?;
                push_char(out, c);
            }
            return Ok(());
        }
    }
    chars.next();
    Ok(())
}

/// After `\`: a Perl (`\d`) or Unicode (`\pL`, `\p{Greek}`) class, copied
/// into `out`; false (nothing consumed) when the escape is something else.
fn class_escape(chars: &mut Chars<'_>, out: &mut String) -> Result<bool, String> {
    let ascii = match chars.peek().copied() {
        Some('d') => "[0-9]",
        Some('D') => "[^0-9]",
        Some('w') => "[0-9A-Za-z_]",
        Some('W') => "[^0-9A-Za-z_]",
        Some('s') => "[\\t\\n\\x0C\\r ]",
        Some('S') => "[^\\t\\n\\x0C\\r ]",
        Some(p @ ('p' | 'P')) => {
            chars.next();
            let name: String = match chars.next() {
                Some('{') => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) if c.is_ascii_alphanumeric() || c == '_' || c == '^' => name.push(c),
                            _ => return Err("invalid character class range: unclosed `\\p{`".to_owned()),
                        }
                    }
                    name
                }
                Some(c) if c.is_ascii_alphabetic() => c.to_string(),
                _ => return Err("invalid character class range: `\\p` needs a class name".to_owned()),
            };
            // Go writes a negated class also as `\p{^Name}`; the crate only as `\P{Name}`.
            let (negated, name) = match name.strip_prefix('^') {
                Some(rest) => (p == 'p', rest),
                None => (p == 'P', name.as_str()),
            };
            out.push_str(if negated { "\\P{" } else { "\\p{" });
            out.push_str(name);
            out.push('}');
            return Ok(true);
        }
        _ => return Ok(false),
    };
    chars.next();
    out.push_str(ascii);
    Ok(true)
}

/// After `\` (which is consumed): the one character an escape stands for, by Go's rules.
fn escaped_char(chars: &mut Chars<'_>) -> Result<char, String> {
    let c = chars
        .next()
        .ok_or_else(|| "trailing backslash at end of expression".to_owned())?;
    let code = match c {
        'a' => 0x07,
        'f' => 0x0C,
        't' => 0x09,
        'n' => 0x0A,
        'r' => 0x0D,
        'v' => 0x0B,
        '0'..='7' => {
            // `\1`..`\7` alone would be a back-reference, which Go does not have.
            if c != '0' && !chars.peek().is_some_and(|d| ('0'..='7').contains(d)) {
                return Err(format!("invalid escape sequence: `\\{c}`"));
            }
            let mut value = c.to_digit(8).unwrap_or_default();
            for _ in 0..2 {
                match chars.peek().and_then(|d| d.to_digit(8)) {
                    Some(d) => {
                        value = value * 8 + d;
                        chars.next();
                    }
                    None => break,
                }
            }
            value
        }
        'x' => hex_escape(chars)?,
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => return Ok(c),
        c => return Err(format!("invalid escape sequence: `\\{c}`")),
    };
    char::from_u32(code).ok_or_else(|| format!("invalid escape sequence: code {code:#x}"))
}

/// After `\x`: `HH` or `{H...}`.
fn hex_escape(chars: &mut Chars<'_>) -> Result<u32, String> {
    let bad = || "invalid escape sequence: `\\x`".to_owned();
    let digits: String = if chars.peek() == Some(&'{') {
        chars.next();
        let mut digits = String::new();
        loop {
            match chars.next() {
                Some('}') => break,
                Some(d) if d.is_ascii_hexdigit() && digits.len() < 8 => digits.push(d),
                _ => return Err(bad()),
            }
        }
        digits
    } else {
        let pair: String = chars.by_ref().take(2).collect();
        if pair.len() != 2 {
            return Err(bad());
        }
        pair
    };
    if digits.is_empty() || !digits.chars().all(|d| d.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let value = u32::from_str_radix(&digits, 16).map_err(|_| bad())?;
    if value > 0x10FFFF { Err(bad()) } else { Ok(value) }
}

fn push_char(out: &mut String, c: char) {
    use std::fmt::Write as _;
    let _ = write!(out, "\\x{{{:x}}}", u32::from(c));
}

/// After `[`: Go's class syntax, written out for the regex crate with every
/// character spelled as `\x{..}` so nothing in it can mean a set operation.
fn class(chars: &mut Chars<'_>, out: &mut String) -> Result<(), String> {
    out.push('[');
    if chars.peek() == Some(&'^') {
        chars.next();
        out.push('^');
    }
    let mut first = true;
    loop {
        match chars.peek().copied() {
            None => return Err("missing closing ]".to_owned()),
            Some(']') if !first => {
                chars.next();
                out.push(']');
                return Ok(());
            }
            _ => {}
        }
        first = false;
        if let Some(name) = posix_class(chars)? {
            out.push_str(&format!("[:{name}:]"));
            continue;
        }
        let lo = match chars.next() {
            Some('\\') => {
                if class_escape(chars, out)? {
                    continue;
                }
                escaped_char(chars)?
            }
            Some(c) => c,
            None => return Err("missing closing ]".to_owned()),
        };
        let mut ahead = chars.clone();
        if ahead.next() == Some('-') && ahead.peek().is_some_and(|&c| c != ']') {
            chars.next();
            let hi = match chars.next() {
                Some('\\') => escaped_char(chars)?,
                Some(c) => c,
                None => return Err("missing closing ]".to_owned()),
            };
            if hi < lo {
                return Err(format!("invalid character class range: `{lo}-{hi}`"));
            }
            push_char(out, lo);
            out.push('-');
            push_char(out, hi);
        } else {
            push_char(out, lo);
        }
    }
}

/// `[:name:]` or `[:^name:]` at the cursor: consumed and returned (name with
/// its `^`); None when the text there is not of that shape (then `[` is a character).
fn posix_class(chars: &mut Chars<'_>) -> Result<Option<String>, String> {
    let mut ahead = chars.clone();
    if ahead.next() != Some('[') || ahead.next() != Some(':') {
        return Ok(None);
    }
    let mut name = String::new();
    loop {
        match ahead.next() {
            Some(':') if ahead.peek() == Some(&']') => break,
            Some(c) => name.push(c),
            None => return Ok(None),
        }
    }
    ahead.next();
    if !POSIX_CLASSES.contains(&name.strip_prefix('^').unwrap_or(&name)) {
        return Err(format!("invalid character class range: `[:{name}:]`"));
    }
    *chars = ahead;
    Ok(Some(name))
}

/// At `(?`: flags (Go has `i`, `m`, `s`, `U`), or a named group, whose name
/// is dropped (Go allows a name twice; the crate does not, and names never
/// change whether a value matches).
fn group(chars: &mut Chars<'_>, out: &mut String) -> Result<(), String> {
    let mut ahead = chars.clone();
    ahead.next(); // the '?'
    let named = match ahead.peek() {
        Some('P') => {
            ahead.next();
            ahead.next() == Some('<')
        }
        Some('<') => {
            ahead.next();
            true
        }
        _ => false,
    };
    if named {
        let name: String = ahead.by_ref().take_while(|&c| c != '>').collect();
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return Err(format!("invalid named capture: `{name}`"));
        }
        *chars = ahead;
        out.push('(');
        return Ok(());
    }
    let flags: String = ahead.clone().take_while(|&c| c != ')' && c != ':').collect();
    if let Some(other) = flags.chars().find(|c| !matches!(c, 'i' | 'm' | 's' | 'U' | '-')) {
        return Err(format!("invalid or unsupported Perl syntax: `(?{other}`"));
    }
    if flags.is_empty() && ahead.peek() == Some(&')') {
        // `(?)`: no flags at all, which Go accepts and the crate does not.
        chars.next();
        chars.next();
        return Ok(());
    }
    out.push('(');
    Ok(())
}

/// After a `(` that starts `?`: when one or more flag-only groups (`(?i)`, `(?s-m)`) follow and
/// then a repetition operator, their text (with its `(`) and the characters from the operator
/// on.
fn flags_before_repeat<'a>(chars: &Chars<'a>) -> Option<(String, Chars<'a>)> {
    let mut ahead = chars.clone();
    let mut text = String::from("(");
    loop {
        // At the '?' after a '('.
        ahead.next();
        let flags: String = ahead
            .clone()
            .take_while(|c| matches!(c, 'i' | 'm' | 's' | 'U' | '-'))
            .collect();
        if flags.is_empty() {
            return None;
        }
        for _ in 0..flags.chars().count() {
            ahead.next();
        }
        if ahead.next() != Some(')') {
            return None;
        }
        text.push('?');
        text.push_str(&flags);
        text.push(')');
        match ahead.peek() {
            Some('(') => {
                let mut next = ahead.clone();
                next.next();
                if next.peek() != Some(&'?') {
                    return None;
                }
                ahead = next;
                text.push('(');
            }
            Some('*' | '+' | '?') => return Some((text, ahead)),
            Some('{') => {
                let mut probe = ahead.clone();
                probe.next();
                return match repeat(&mut probe) {
                    Ok(literal) if literal == "\\{" => None,
                    _ => Some((text, ahead)),
                };
            }
            _ => return None,
        }
    }
}

/// After `{`: a repeat `{n}`, `{n,}` or `{n,m}` checked against Go's limit, or
/// (as in Go) a literal `{` when what follows is not a repeat.
fn repeat(chars: &mut Chars<'_>) -> Result<String, String> {
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
        assert!(find(r"(?P<n>a)|(?P<n>b)", "b"), "Go allows a group name twice");
        assert!(find(r"(?)get", "get"));
        assert!(
            find(r"^[a&&b]$", "&") && find(r"^[a~~b]$", "~"),
            "no set operations in Go"
        );
        assert!(find(r"^[+--]$", ","));
        assert!(find(r"^\x{e9}\p{L}\P{L}$", "éé1") && find(r"^\p{Greek}$", "λ") && find(r"^\pL$", "x"));
        assert!(find(r"^\x41\101\0$", "AA\0"));
        assert!(find(r"^\p{^Greek}$", "a") && !find(r"^\P{^Greek}$", "a"));
        assert!(find(r"^[[:^digit:]x]$", "a") && find(r"[\d\-]", "-"));
    }

    #[test]
    fn a_repeat_after_a_flag_group_repeats_the_item_before() {
        assert!(find(r"^a(?i)*$", "aaa") && find(r"^b(?i)*$", ""));
        assert!(find(r"^a+(?i)?x", "x"), "`(a+)?`, not a lazy `a+`");
        assert!(find(r"^(ab)(?s){2}$", "abab") && find(r"^x(?i)(?s){2}$", "xx"));
        assert!(find(r"^a(?i){2}B$", "aab"), "the flags hold after the repeat");
        assert!(compile(r"(?i)*").is_err() && compile(r"a|(?i)+").is_err());
        assert!(find(r"a(?i){x}", "a{X}"), "not a repeat: a literal brace");
    }
}
