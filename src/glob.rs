//! Glob patterns with the meaning github.com/gobwas/glob v0.2.3 gives them, the library behind
//! Argo CD's `util/glob.Match`: RBAC policies (`util/rbac`'s glob match mode), a directory
//! source's `include` and `exclude` (`reposerver/repository`), both without separators; upstream
//! also matches an AppProject's source repositories with `'/'` as one. The one glob engine of
//! tiphys; it depends on nothing else in the crate.
//!
//! The syntax, as gobwas's lexer reads it (`tests/godiff` checks every rule here against it):
//!
//! - `*` matches any run of characters but the separators, `**` any run at all; `?` one
//!   character that is not a separator;
//! - `[abc]`, `[!abc]` one character of (not of) a list, `[a-z]`, `[!a-z]` of a single range; a
//!   class holds either one range or a list, never both (`[a-z0-9]` does not compile), and a
//!   `-` right after the first character makes a range whatever that character is (`[\-x]` is
//!   the range `\`..`x`);
//! - `{a,b}` alternatives, which nest and hold any pattern; one left open closes at the end
//!   (`{a,b` is `{a,b}`); `,` and `}` outside braces, and `]` outside a class, are text;
//! - `\` makes the next character literal; a trailing `\` is dropped;
//! - two quirks of Go's reader kept so that a pattern means the same in both: a NUL character
//!   ends the pattern where a term would start and is skipped inside text (`a\0b` is `ab`), and
//!   U+FFFD (what Go's decoder returns for bad UTF-8) anywhere it reads is an error.
//!
//! A parsed pattern becomes the cheapest test that decides it ([`Program`]): most patterns are a
//! word, or a prefix and `*`; anything else is an anchored `regex` program, so matching is linear
//! whatever the pattern.
//!
//! Known differences from Go. gobwas's compiled matchers contradict the parse tree of its own
//! parser in corners: `?` or `[!…]` alone matches the empty string, `head*tail` matches a value
//! shorter than both (`a*a` matches `a`), fixed-length patterns count bytes as characters (`a?c`
//! misses `aéc`), an empty alternative after a wildcard is lost (`*{` matches nothing), and `a{`
//! panics. tiphys follows the tree, as gobwas documents its grammar, and in linear time where
//! gobwas's nested matchers are not; `tests/godiff` excuses exactly the cases where Go's matcher
//! disagrees with Go's own tree. Beyond that: nesting deeper than [`MAX_DEPTH`] braces is
//! refused rather than risking the stack, and a pattern whose program exceeds the regex crate's
//! size limit never matches.

use std::fmt::Write as _;

use regex::Regex;

/// Nesting deeper than this is refused (Go has no limit; no real pattern comes near).
pub const MAX_DEPTH: usize = 64;

/// A pattern compiled to the cheapest test that decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// No special characters: plain equality.
    Literal(String),
    /// `**`, or `*` without separators: anything at all.
    Anything,
    /// `text**`
    Prefix(String),
    /// `**text`
    Suffix(String),
    /// `**text**`
    Contains(String),
    /// `head**tail`
    PrefixSuffix(String, String),
    /// Anything else, as an anchored regular expression.
    Regex(String),
}

/// Parses `pattern`, whose `*` and `?` never match a character of `separators`; Err says why Go
/// refuses it (its callers then match nothing).
pub fn parse(pattern: &str, separators: &[char]) -> Result<Program, String> {
    let mut nodes = Parser::new(pattern).pattern()?;
    if separators.is_empty() {
        // Without separators `*` is `**` (gobwas optimises it so too).
        any_to_super(&mut nodes);
    }
    match nodes.as_slice() {
        [] => return Ok(Program::Literal(String::new())),
        [Node::Text(text)] => return Ok(Program::Literal(text.clone())),
        [Node::Super] => return Ok(Program::Anything),
        [Node::Text(text), Node::Super] => return Ok(Program::Prefix(text.clone())),
        [Node::Super, Node::Text(text)] => return Ok(Program::Suffix(text.clone())),
        [Node::Super, Node::Text(text), Node::Super] => return Ok(Program::Contains(text.clone())),
        [Node::Text(head), Node::Super, Node::Text(tail)] => {
            return Ok(Program::PrefixSuffix(head.clone(), tail.clone()));
        }
        _ => {}
    }
    let mut re = String::from("(?s)\\A(?:");
    render(&nodes, &not_separator(separators), &mut re);
    re.push_str(")\\z");
    Ok(Program::Regex(re))
}

/// A compiled pattern, ready to match.
#[derive(Clone, Debug)]
pub struct Glob {
    program: Program,
    regex: Option<Regex>,
}

impl Glob {
    /// [`parse`], with its regex (if any) built.
    pub fn new(pattern: &str, separators: &[char]) -> Result<Self, String> {
        let program = parse(pattern, separators)?;
        let regex = match &program {
            Program::Regex(source) => Some(Regex::new(source).map_err(|e| e.to_string())?),
            _ => None,
        };
        Ok(Self { program, regex })
    }

    pub fn matches(&self, value: &str) -> bool {
        match &self.program {
            Program::Regex(_) => self.regex.as_ref().is_some_and(|re| re.is_match(value)),
            other => other.matches_plain(value).unwrap_or(false),
        }
    }
}

impl Program {
    /// The answer of every program but [`Program::Regex`] (None), which needs its regex built.
    pub fn matches_plain(&self, value: &str) -> Option<bool> {
        Some(match self {
            Self::Literal(text) => value == text,
            Self::Anything => true,
            Self::Prefix(text) => value.starts_with(text.as_str()),
            Self::Suffix(text) => value.ends_with(text.as_str()),
            Self::Contains(text) => value.contains(text.as_str()),
            // The head and the tail may not overlap.
            Self::PrefixSuffix(head, tail) => {
                value.len() >= head.len() + tail.len()
                    && value.starts_with(head.as_str())
                    && value.ends_with(tail.as_str())
            }
            Self::Regex(_) => return None,
        })
    }
}

#[derive(Debug)]
enum Node {
    Text(String),
    /// `*`
    Any,
    /// `**`
    Super,
    /// `?`
    Single,
    List {
        not: bool,
        chars: Vec<char>,
    },
    Range {
        not: bool,
        lo: char,
        hi: char,
    },
    /// `{…}`: one sequence per alternative.
    AnyOf(Vec<Vec<Node>>),
}

/// Go's lexer reads "end of input" for a NUL as for the real end (its `eof` is rune 0).
const EOF: char = '\0';

/// gobwas's lexer and parser in one: it reads terms as the lexer does (text runs end at the
/// characters that start a term, and inside braces at `,` and `}` too) and builds the tree as
/// the parser does, including where the two are lax (an unclosed brace).
struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn new(pattern: &str) -> Self {
        Self {
            chars: pattern.chars().collect(),
            pos: 0,
        }
    }

    /// The next character, consumed; None at the real end. Go's `read` consumes a NUL too.
    fn read(&mut self) -> Result<Option<char>, String> {
        let c = self.peek()?;
        if c.is_some() {
            self.pos += 1;
        }
        Ok(c)
    }

    fn peek(&self) -> Result<Option<char>, String> {
        match self.chars.get(self.pos).copied() {
            Some('\u{FFFD}') => Err("could not read rune".to_owned()),
            c => Ok(c),
        }
    }

    /// The whole pattern: a stack of open alternatives, as Go's parser keeps a current node.
    fn pattern(&mut self) -> Result<Vec<Node>, String> {
        // Each level: the alternatives finished so far, and the sequence being read.
        let mut open: Vec<(Vec<Vec<Node>>, Vec<Node>)> = Vec::new();
        let mut current: Vec<Node> = Vec::new();
        while let Some(c) = self.read()? {
            let in_terms = !open.is_empty();
            match c {
                EOF => break,
                '{' => {
                    if open.len() == MAX_DEPTH {
                        return Err(format!("more than {MAX_DEPTH} nested '{{'"));
                    }
                    open.push((Vec::new(), std::mem::take(&mut current)));
                }
                ',' if in_terms => {
                    if let Some((done, _)) = open.last_mut() {
                        done.push(std::mem::take(&mut current));
                    }
                }
                '}' if in_terms => {
                    if let Some((mut done, outer)) = open.pop() {
                        done.push(std::mem::replace(&mut current, outer));
                        current.push(Node::AnyOf(done));
                    }
                }
                '[' => current.push(self.class()?),
                '?' => current.push(Node::Single),
                '*' => {
                    if self.peek()? == Some('*') {
                        self.pos += 1;
                        current.push(Node::Super);
                    } else {
                        current.push(Node::Any);
                    }
                }
                _ => {
                    self.pos -= 1;
                    let text = self.text(if in_terms { "?*[{}," } else { "?*[{" })?;
                    push_text(&mut current, text);
                }
            }
        }
        // Braces left open close at the end.
        while let Some((mut done, outer)) = open.pop() {
            done.push(std::mem::replace(&mut current, outer));
            current.push(Node::AnyOf(done));
        }
        Ok(current)
    }

    /// A run of text up to one of `breakers` (left unread) or the end; `\` escapes one
    /// character. A NUL ends the run and is consumed.
    fn text(&mut self, breakers: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut escaped = false;
        while let Some(c) = self.read()? {
            if c == EOF {
                break;
            }
            if !escaped {
                if c == '\\' {
                    escaped = true;
                    continue;
                }
                if breakers.contains(c) {
                    self.pos -= 1;
                    break;
                }
            }
            escaped = false;
            out.push(c);
        }
        Ok(out)
    }

    /// After `[`: `!`?, then `lo-hi` or a list, then `]`.
    fn class(&mut self) -> Result<Node, String> {
        let unexpected_end = || "unexpected end of input".to_owned();
        let mut not = false;
        let mut range: Option<(char, char)> = None;
        let mut chars = String::new();
        loop {
            let c = match self.read()? {
                None | Some(EOF) => return Err(unexpected_end()),
                Some(c) => c,
            };
            if !not && c == '!' {
                not = true;
                continue;
            }
            if self.peek()? == Some('-') {
                self.pos += 1;
                let hi = match self.read()? {
                    None | Some(EOF) => return Err(unexpected_end()),
                    Some(hi) => hi,
                };
                if hi < c {
                    return Err(format!("hi character '{hi}' should be greater than lo '{c}'"));
                }
                range = Some((c, hi));
            } else {
                self.pos -= 1;
                chars = self.text("]")?;
            }
            break;
        }
        match self.read()? {
            None | Some(EOF) => return Err(unexpected_end()),
            Some(']') => {}
            Some(_) => return Err("expected close range character".to_owned()),
        }
        match (range, chars.is_empty()) {
            (Some((lo, hi)), true) => Ok(Node::Range { not, lo, hi }),
            (None, false) => Ok(Node::List {
                not,
                chars: chars.chars().collect(),
            }),
            _ => Err("could not parse range".to_owned()),
        }
    }
}

/// Adjacent texts are one (`a\0b`), so that the plain programs see them as one word.
fn push_text(nodes: &mut Vec<Node>, text: String) {
    if text.is_empty() {
        return;
    }
    match nodes.last_mut() {
        Some(Node::Text(last)) => last.push_str(&text),
        _ => nodes.push(Node::Text(text)),
    }
}

fn any_to_super(nodes: &mut [Node]) {
    for node in nodes {
        match node {
            Node::Any => *node = Node::Super,
            Node::AnyOf(options) => options.iter_mut().for_each(|o| any_to_super(o)),
            _ => {}
        }
    }
}

/// The regex class of one character that is not a separator.
fn not_separator(separators: &[char]) -> String {
    if separators.is_empty() {
        return ".".to_owned();
    }
    let mut class = String::from("[^");
    for &c in separators {
        push_class_char(&mut class, c);
    }
    class.push(']');
    class
}

fn render(nodes: &[Node], single: &str, re: &mut String) {
    for node in nodes {
        match node {
            Node::Text(text) => re.push_str(&regex::escape(text)),
            Node::Any => {
                re.push_str(single);
                re.push('*');
            }
            Node::Super => re.push_str(".*"),
            Node::Single => re.push_str(single),
            Node::List { not, chars } => {
                re.push_str(if *not { "[^" } else { "[" });
                chars.iter().for_each(|&c| push_class_char(re, c));
                re.push(']');
            }
            Node::Range { not, lo, hi } => {
                re.push_str(if *not { "[^" } else { "[" });
                push_class_char(re, *lo);
                re.push('-');
                push_class_char(re, *hi);
                re.push(']');
            }
            Node::AnyOf(options) => {
                re.push_str("(?:");
                for (i, option) in options.iter().enumerate() {
                    if i > 0 {
                        re.push('|');
                    }
                    render(option, single, re);
                }
                re.push(')');
            }
        }
    }
}

/// Every class member as `\x{..}`: no character can mean anything else inside `[...]`.
fn push_class_char(re: &mut String, c: char) {
    let _ = write!(re, "\\x{{{:x}}}", u32::from(c));
}

#[cfg(test)]
mod tests;
