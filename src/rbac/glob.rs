//! Glob patterns as Argo CD matches them (github.com/gobwas/glob compiled
//! without separators), parsed by our own reading of that syntax:
//!
//! - `*` and `**` match any run of characters, `/` and the empty string included;
//! - `?` matches one character; `[abc]`, `[!abc]`, `[a-z]`, `[!a-z]` one
//!   character of (or not of) a list or a single range;
//! - `{a,b}` alternatives, which may nest and hold any pattern; an unclosed `{`
//!   closes at the end; `,` and `}` outside braces, and `]` outside brackets, are text;
//! - `\` makes the next character literal (a trailing `\` is dropped).
//!
//! A pattern that does not parse never matches (upstream logs and moves on).
//! Parsed patterns become an anchored `regex` program: linear-time matching,
//! so no policy can make a check slow however many `*` it has.

/// A parsed glob, ready to turn into a matcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Glob {
    /// No special characters: plain equality.
    Literal(String),
    /// `*`: anything at all.
    Anything,
    /// `text*`
    Prefix(String),
    /// `*text`
    Suffix(String),
    /// `*text*`
    Contains(String),
    /// `head*tail`
    PrefixSuffix(String, String),
    /// Anything else, as an anchored regular expression.
    Regex(String),
}

#[derive(Debug)]
enum Node {
    Text(String),
    Any,
    Single,
    Class { not: bool, items: Vec<(char, char)> },
    Alternatives(Vec<Vec<Node>>),
}

/// Parses `pattern`; Err says why it can never match.
pub fn parse(pattern: &str) -> Result<Glob, String> {
    let mut parser = Parser {
        chars: pattern.chars().collect(),
        pos: 0,
        depth: 0,
    };
    let nodes = parser.sequence()?;
    match nodes.as_slice() {
        [] => return Ok(Glob::Literal(String::new())),
        [Node::Text(text)] => return Ok(Glob::Literal(text.clone())),
        [Node::Any] => return Ok(Glob::Anything),
        [Node::Text(text), Node::Any] => return Ok(Glob::Prefix(text.clone())),
        [Node::Any, Node::Text(text)] => return Ok(Glob::Suffix(text.clone())),
        [Node::Any, Node::Text(text), Node::Any] => return Ok(Glob::Contains(text.clone())),
        [Node::Text(head), Node::Any, Node::Text(tail)] => {
            return Ok(Glob::PrefixSuffix(head.clone(), tail.clone()));
        }
        _ => {}
    }
    let mut re = String::from("(?s)\\A(?:");
    render(&nodes, &mut re);
    re.push_str(")\\z");
    Ok(Glob::Regex(re))
}

/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 64;

struct Parser {
    chars: Vec<char>,
    pos: usize,
    /// How many `{` are open.
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    /// Reads nodes until the end, or (inside braces) a `,` or `}` left for the caller.
    fn sequence(&mut self) -> Result<Vec<Node>, String> {
        let mut nodes = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                ',' | '}' if self.depth > 0 => break,
                '*' => {
                    self.pos += 1;
                    if self.peek() == Some('*') {
                        self.pos += 1;
                    }
                    nodes.push(Node::Any);
                }
                '?' => {
                    self.pos += 1;
                    nodes.push(Node::Single);
                }
                '[' => {
                    self.pos += 1;
                    nodes.push(self.class()?);
                }
                '{' => {
                    self.pos += 1;
                    nodes.push(self.alternatives()?);
                }
                _ => {
                    let text = self.text(self.depth > 0);
                    if !text.is_empty() {
                        nodes.push(Node::Text(text));
                    }
                }
            }
        }
        Ok(nodes)
    }

    /// Literal text up to the next special character; `\` escapes one character.
    fn text(&mut self, in_braces: bool) -> String {
        let mut out = String::new();
        while let Some(c) = self.peek() {
            let stops = matches!(c, '*' | '?' | '[' | '{') || (in_braces && matches!(c, ',' | '}'));
            if stops {
                break;
            }
            self.pos += 1;
            if c == '\\' {
                if let Some(next) = self.peek() {
                    out.push(next);
                    self.pos += 1;
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    /// After `{`: alternatives separated by `,` up to `}` or the end of the pattern.
    fn alternatives(&mut self) -> Result<Node, String> {
        if self.depth == MAX_DEPTH {
            return Err(format!("more than {MAX_DEPTH} nested '{{'"));
        }
        self.depth += 1;
        let mut options = vec![self.sequence()?];
        while self.peek() == Some(',') {
            self.pos += 1;
            options.push(self.sequence()?);
        }
        if self.peek() == Some('}') {
            self.pos += 1;
        }
        self.depth -= 1;
        Ok(Node::Alternatives(options))
    }

    /// After `[`: `!`? then either `lo-hi` or a list of characters, then `]`.
    fn class(&mut self) -> Result<Node, String> {
        let unclosed = || "'[' is not closed by ']'".to_owned();
        let mut not = false;
        let first = self.peek().ok_or_else(unclosed)?;
        if first == '!' {
            not = true;
            self.pos += 1;
        }
        let lo = self.peek().ok_or_else(unclosed)?;
        let items = if self.chars.get(self.pos + 1) == Some(&'-') {
            let hi = *self.chars.get(self.pos + 2).ok_or_else(unclosed)?;
            self.pos += 3;
            if hi < lo {
                return Err(format!("range '{lo}-{hi}' runs backwards"));
            }
            vec![(lo, hi)]
        } else {
            let mut items = Vec::new();
            while let Some(c) = self.peek() {
                if c == ']' {
                    break;
                }
                self.pos += 1;
                let c = if c == '\\' {
                    match self.peek() {
                        Some(next) => {
                            self.pos += 1;
                            next
                        }
                        None => break,
                    }
                } else {
                    c
                };
                items.push((c, c));
            }
            if items.is_empty() {
                return Err("empty '[]'".to_owned());
            }
            items
        };
        match self.peek() {
            Some(']') => {
                self.pos += 1;
                Ok(Node::Class { not, items })
            }
            Some(_) => Err("a '[...]' holds either one range or a list of characters".to_owned()),
            None => Err(unclosed()),
        }
    }
}

fn render(nodes: &[Node], re: &mut String) {
    for node in nodes {
        match node {
            Node::Text(text) => re.push_str(&regex::escape(text)),
            Node::Any => re.push_str(".*"),
            Node::Single => re.push('.'),
            Node::Class { not, items } => {
                re.push_str(if *not { "[^" } else { "[" });
                for &(lo, hi) in items {
                    push_class_char(re, lo);
                    if hi != lo {
                        re.push('-');
                        push_class_char(re, hi);
                    }
                }
                re.push(']');
            }
            Node::Alternatives(options) => {
                re.push_str("(?:");
                for (i, option) in options.iter().enumerate() {
                    if i > 0 {
                        re.push('|');
                    }
                    render(option, re);
                }
                re.push(')');
            }
        }
    }
}

fn push_class_char(re: &mut String, c: char) {
    use std::fmt::Write as _;
    let _ = write!(re, "\\x{{{:x}}}", u32::from(c));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, value: &str) -> bool {
        let program = match parse(pattern) {
            Ok(Glob::Literal(text)) => return text == value,
            Ok(Glob::Anything) => return true,
            Ok(Glob::Prefix(text)) => return value.starts_with(&text),
            Ok(Glob::Suffix(text)) => return value.ends_with(&text),
            Ok(Glob::Contains(text)) => return value.contains(&text),
            Ok(Glob::PrefixSuffix(head, tail)) => {
                return value.len() >= head.len() + tail.len()
                    && value.starts_with(&head)
                    && value.ends_with(&tail);
            }
            Ok(Glob::Regex(re)) => re,
            Err(_) => return false,
        };
        regex::Regex::new(&program).unwrap().is_match(value)
    }

    #[test]
    fn star_crosses_slashes_and_matches_nothing() {
        assert!(matches("*", ""));
        assert!(matches("*/*", "a/b/c"));
        assert!(matches("default/*", "default/ns/app"));
        assert!(!matches("*/*", "test"));
        assert!(matches("**", "a/b"));
        assert_eq!(parse("**").unwrap(), Glob::Anything);
        assert_eq!(parse("dev-*").unwrap(), Glob::Prefix("dev-".into()));
        assert_eq!(parse(r"*\*").unwrap(), Glob::Suffix("*".into()));
        assert_eq!(parse("*-svc*").unwrap(), Glob::Contains("-svc".into()));
        assert_eq!(parse("a*b").unwrap(), Glob::PrefixSuffix("a".into(), "b".into()));
        assert!(!matches("ab*ba", "aba"), "head and tail may not overlap");
        assert!(matches("ab*ba", "abba"));
        assert!(matches("a*b*c", "a/x/b/y/c"));
    }

    #[test]
    fn single_classes_and_ranges() {
        assert!(matches("a?c", "abc"));
        assert!(!matches("a?c", "ac"));
        assert!(matches("a?c", "aéc"), "? is one character, not one byte");
        assert!(matches("[abc]x", "bx"));
        assert!(!matches("[!abc]x", "bx"));
        assert!(matches("[a-z]", "q"));
        assert!(!matches("[!a-z]", "q"));
        assert!(matches("[-a]", "-"));
        assert!(matches(r"[\]]", "]"));
    }

    #[test]
    fn classes_that_do_not_parse_never_match() {
        for bad in ["e[[a*", "[]", "[!]", "[a-z0-9]", "[z-a]", "[abc", "[a-"] {
            assert!(parse(bad).is_err(), "{bad}");
            assert!(!matches(bad, "e[[a"), "{bad}");
        }
    }

    #[test]
    fn alternatives_nest_and_close_at_the_end() {
        assert!(matches("proj/{a,b}", "proj/b"));
        assert!(!matches("proj/{a,b}", "proj/c"));
        assert!(matches("{a,}x", "x"));
        assert!(matches("{a,{b,c*}}", "cdef"));
        assert!(matches("{a,b", "b"), "an unclosed brace closes at the end");
        assert!(matches("a,b}", "a,b}"), "outside braces , and }} are text");
        assert!(matches("a]", "a]"));
    }

    #[test]
    fn escapes_and_literals() {
        assert!(matches(r"a\*b", "a*b"));
        assert!(!matches(r"a\*b", "axb"));
        assert!(matches("abc\\", "abc"), "a trailing backslash is dropped");
        assert_eq!(
            parse("applications").unwrap(),
            Glob::Literal("applications".into())
        );
        assert!(matches("a.b", "a.b") && !matches("a.b*", "axb"));
        assert!(matches("", "") && !matches("", "x"));
    }

    #[test]
    fn case_and_whole_string() {
        assert!(!matches("App", "app"));
        assert!(!matches("app", "apps"));
        assert!(matches("foo/* ", "foo/x "));
        assert!(!matches("foo/* ", "foo/x"));
    }
}
