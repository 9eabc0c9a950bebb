//! Kubernetes label selectors (`app=web,tier!=db,env in (a,b),!legacy,team,replicas>2`), read
//! and matched as k8s.io/apimachinery v0.34.0's `labels.Parse` and `Selector.Matches` do (what
//! Argo CD parses the `selector` of List and Watch requests with). `tests/godiff` checks both
//! against that library.
//!
//! The grammar, as its lexer and parser read it: requirements separated by `,`; each is `KEY`
//! (exists), `!KEY` (does not exist), `KEY = VALUE`, `KEY == VALUE`, `KEY != VALUE`,
//! `KEY in (V, …)`, `KEY notin (V, …)`, `KEY > N` or `KEY < N`. Blanks are space, tab, CR and
//! LF; a word ends at a blank or at one of `=!(),<>`, and `in`/`notin` are operators only where an
//! operator may stand. A value may be empty (`a=`, `a in (,b)`, `a in ()`). Keys must be
//! qualified names (`[prefix/]name`, the prefix a DNS subdomain) and values label values; `>`
//! and `<` take an integer. A NUL byte reads as Go's lexer reads it (see [`tokens`]). Nothing
//! else of the crate is used here.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed selector: every requirement must hold. The empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    /// Err says why the text is not a selector, in words like upstream's.
    pub fn parse(text: &str) -> Result<Self, String> {
        Parser::new(text).selector().map(Self)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            Op::In => value.is_some_and(|v| self.values.contains(v)),
            Op::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt | Op::Lt => {
                let (Some(have), Some(want)) = (
                    value.and_then(|v| go_int(v)),
                    self.values.first().and_then(|v| go_int(v)),
                ) else {
                    return false;
                };
                if self.op == Op::Gt {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`: an optional sign, then ASCII digits only.
fn go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    /// A run of symbols that is no operator.
    Error(String),
    ClosedPar,
    Comma,
    Not,
    DoubleEquals,
    Equals,
    Gt,
    Word(String),
    In,
    Lt,
    NotEquals,
    NotIn,
    OpenPar,
}

impl Token {
    fn text(&self) -> &str {
        match self {
            Self::End => "",
            Self::Error(s) | Self::Word(s) => s,
            Self::ClosedPar => ")",
            Self::Comma => ",",
            Self::Not => "!",
            Self::DoubleEquals => "==",
            Self::Equals => "=",
            Self::Gt => ">",
            Self::In => "in",
            Self::Lt => "<",
            Self::NotEquals => "!=",
            Self::NotIn => "notin",
            Self::OpenPar => "(",
        }
    }

    /// Where a value may stand, `in` and `notin` are words.
    fn in_value_place(self) -> Self {
        match self {
            Self::In | Self::NotIn => Self::Word(self.text().to_owned()),
            other => other,
        }
    }
}

fn symbol(text: &[u8]) -> Option<Token> {
    Some(match text {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::Not,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::Gt,
        b"<" => Token::Lt,
        b"!=" => Token::NotEquals,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The whole text as tokens, ending with [`Token::End`] (Go scans it all before parsing).
/// Go's lexer reads a NUL byte as "no more": at the start of a token it ends the text; inside
/// one it ends the token, and is skipped.
fn tokens(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while bytes.get(pos).is_some_and(|&b| is_blank(b)) {
            pos += 1;
        }
        let first = match bytes.get(pos) {
            None | Some(0) => {
                out.push(Token::End);
                return out;
            }
            Some(&b) => b,
        };
        let mut buf = Vec::new();
        if is_symbol(first) {
            // The longest run of symbols that is an operator.
            let mut best = None;
            while let Some(&b) = bytes.get(pos) {
                if b == 0 {
                    pos += 1;
                    break;
                }
                if !is_symbol(b) {
                    break;
                }
                pos += 1;
                buf.push(b);
                match symbol(&buf) {
                    Some(token) => best = Some(token),
                    None if best.is_some() => {
                        pos -= 1;
                        break;
                    }
                    None => {}
                }
            }
            out.push(best.unwrap_or_else(|| {
                Token::Error(format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buf)
                ))
            }));
        } else {
            while let Some(&b) = bytes.get(pos) {
                if b == 0 {
                    pos += 1;
                    break;
                }
                if is_symbol(b) || is_blank(b) {
                    break;
                }
                pos += 1;
                buf.push(b);
            }
            let word = String::from_utf8_lossy(&buf).into_owned();
            out.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Word(word),
            });
        }
    }
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn new(text: &str) -> Self {
        Self {
            tokens: tokens(text),
            pos: 0,
        }
    }

    /// The next token where a value may stand (`in` is a word there), not consumed.
    fn peek(&self) -> Token {
        self.tokens
            .get(self.pos)
            .cloned()
            .unwrap_or(Token::End)
            .in_value_place()
    }

    fn next(&mut self) -> Token {
        let token = self.tokens.get(self.pos).cloned().unwrap_or(Token::End);
        self.pos += 1;
        token
    }

    fn next_value(&mut self) -> Token {
        self.next().in_value_place()
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, String> {
        let mut out = Vec::new();
        loop {
            match self.peek() {
                Token::Word(_) | Token::Not => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    out.push(r);
                    match self.next_value() {
                        Token::End => break,
                        Token::Comma => match self.peek() {
                            Token::Word(_) | Token::Not => {}
                            other => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    other.text()
                                ));
                            }
                        },
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                other.text()
                            ));
                        }
                    }
                }
                Token::End => break,
                other => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        other.text()
                    ));
                }
            }
        }
        // Go sorts the requirements by key; all of them must hold, so the order means nothing.
        Ok(out)
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let mut token = self.next_value();
        let negated = token == Token::Not;
        if negated {
            token = self.next_value();
        }
        let Token::Word(key) = token else {
            return Err(format!("found '{}', expected: identifier", token.text()));
        };
        qualified_name(&key)?;
        // `!KEY` is whole by itself (what follows must be a comma or the end); `KEY` is when
        // no operator follows.
        if negated || matches!(self.peek(), Token::End | Token::Comma) {
            let op = if negated { Op::DoesNotExist } else { Op::Exists };
            return Ok(Requirement {
                key,
                op,
                values: Vec::new(),
            });
        }
        let op_token = self.next();
        let (op, values) = match op_token {
            Token::In | Token::NotIn => {
                let values = self.values()?;
                if values.is_empty() {
                    return Err("for 'in', 'notin' operators, values set can't be empty".to_owned());
                }
                (if op_token == Token::In { Op::In } else { Op::NotIn }, values)
            }
            Token::Equals | Token::DoubleEquals => (Op::In, self.exact_value()?),
            Token::NotEquals => (Op::NotIn, self.exact_value()?),
            Token::Gt | Token::Lt => {
                let values = self.exact_value()?;
                if values.iter().any(|v| go_int(v).is_none()) {
                    return Err("for 'Gt', 'Lt' operators, the value must be an integer".to_owned());
                }
                (if op_token == Token::Gt { Op::Gt } else { Op::Lt }, values)
            }
            other => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    other.text()
                ));
            }
        };
        for value in &values {
            label_value(value)?;
        }
        Ok(Requirement { key, op, values })
    }

    /// `(` values `)`: empty ones included (`(,a)`, `()`), duplicates dropped.
    fn values(&mut self) -> Result<Vec<String>, String> {
        let token = self.next_value();
        if token != Token::OpenPar {
            return Err(format!("found '{}' expected: '('", token.text()));
        }
        let mut set = std::collections::BTreeSet::new();
        match self.peek() {
            Token::ClosedPar => {
                self.pos += 1;
                set.insert(String::new());
            }
            Token::Word(_) | Token::Comma => {
                self.identifiers(&mut set)?;
                let close = self.next_value();
                if close != Token::ClosedPar {
                    return Err(format!("found '{}', expected: ')'", close.text()));
                }
            }
            other => {
                return Err(format!(
                    "found '{}', expected: ',', ')' or identifier",
                    other.text()
                ));
            }
        }
        Ok(set.into_iter().collect())
    }

    /// Comma-separated, possibly empty, values, up to (not past) the `)`.
    fn identifiers(&mut self, set: &mut std::collections::BTreeSet<String>) -> Result<(), String> {
        loop {
            match self.next_value() {
                Token::Word(value) => {
                    set.insert(value);
                    match self.peek() {
                        Token::Comma => {}
                        Token::ClosedPar => return Ok(()),
                        other => {
                            return Err(format!("found '{}', expected: ',' or ')'", other.text()));
                        }
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.peek() {
                        Token::ClosedPar => {
                            set.insert(String::new());
                            return Ok(());
                        }
                        Token::Comma => {
                            self.pos += 1;
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                other => {
                    return Err(format!("found '{}', expected: ',', or identifier", other.text()));
                }
            }
        }
    }

    /// The one value after `=`, `==`, `!=`, `>` or `<`; empty before a comma or the end.
    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(vec![String::new()]);
        }
        match self.next_value() {
            Token::Word(value) => Ok(vec![value]),
            other => Err(format!("found '{}', expected: identifier", other.text())),
        }
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 bytes.
fn is_qualified_part(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(edge)
        && b.last().is_some_and(edge)
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: dot-separated labels of `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 253.
fn is_dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        let b = l.as_bytes();
        let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        b.first().is_some_and(edge)
            && b.last().is_some_and(edge)
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    };
    s.len() <= 253 && s.split('.').all(label)
}

/// A label key: `name` or `prefix/name`.
fn qualified_name(key: &str) -> Result<(), String> {
    let ok = match key.split('/').collect::<Vec<_>>().as_slice() {
        [name] => is_qualified_part(name),
        [prefix, name] => is_dns_subdomain(prefix) && is_qualified_part(name),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid label key {key:?}: a qualified name is alphanumeric characters, '-', '_' or '.' (at most 63), \
             starting and ending with an alphanumeric character, with an optional DNS subdomain prefix and '/'"
        ))
    }
}

/// A label value: empty, or like the name part of a key.
fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_qualified_part(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {value:?}: at most 63 alphanumeric characters, '-', '_' or '.', \
             starting and ending with an alphanumeric character"
        ))
    }
}

#[cfg(test)]
mod tests;
