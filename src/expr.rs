//! The part of expr-lang/expr (v1.17.7, what Argo CD v3.2.11 pins) that deep-link conditions
//! (argocd-cm `*.links`, key `if`) use, with expr's semantics over JSON values.
//!
//! Why our own: no Rust crate implements expr's language. What is implemented:
//!
//! - literals: `nil`, `true`, `false`, decimal integers and floats, strings in `"…"` or `'…'`
//!   (with Go's escapes) or `` `…` ``, lists `[a, b]`;
//! - names (looked up in the environment; a missing one is `nil`), member access `a.b` and
//!   `a["b"]`, list indexes `a[0]` (negative from the end);
//! - `==` `!=` `<` `<=` `>` `>=`, `in`, `contains`, `startsWith`, `endsWith`, `matches` (each but
//!   the comparisons also as `not in`, `not contains`, …), `&&` `and`, `||` `or`, `!` `not`,
//!   unary `-` and `+`, parentheses.
//!
//! Anything else of expr's language (arithmetic, calls, maps, `?.`, `??`, ranges, comments,
//! pipes…) is a parse error that says the construct is not supported. As in expr (which
//! compiles these conditions without an environment type), every type question is answered at
//! run time: `&&` with a left side that is not a boolean is an error, its right side is the
//! result whatever it is, and so on. Regular expressions are Go's: the caller passes a matcher.

use std::cmp::Ordering;

use serde_json::{Number, Value};

/// How deeply an expression may nest (parentheses, lists, unary operators, indexes).
const MAX_DEPTH: usize = 64;
/// The longest condition accepted: a condition is a line of configuration.
const MAX_LEN: usize = 4096;
/// What a parse error of a construct outside the subset starts with, so that it can be told
/// from a plain syntax error.
pub const UNSUPPORTED: &str = "not supported in deep-link conditions";

/// Matches a Go regular expression `pattern` against a string.
pub type Matcher<'a> = &'a dyn Fn(&str, &str) -> Result<bool, String>;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Lit(Value),
    Name(String),
    List(Vec<Node>),
    /// `a.b` or `a[b]`.
    Member(Box<Node>, Box<Node>),
    Not(Box<Node>),
    /// Unary `-` (true) or `+` (false).
    Neg(Box<Node>, bool),
    Binary(Op, Box<Node>, Box<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Contains,
    StartsWith,
    EndsWith,
    Matches,
}

impl Op {
    fn precedence(self) -> u8 {
        match self {
            Op::Or => 10,
            Op::And => 15,
            _ => 20,
        }
    }

    /// `<`, `<=`, `>`, `>=`: these chain.
    fn ordering(self) -> bool {
        matches!(self, Op::Lt | Op::Le | Op::Gt | Op::Ge)
    }

    /// May follow `not` (`a not in b`).
    fn negatable(self) -> bool {
        matches!(
            self,
            Op::In | Op::Contains | Op::StartsWith | Op::EndsWith | Op::Matches
        )
    }
}

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    root: Node,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(Value),
    Str(String),
    Word(String),
    Punct(&'static str),
}

fn unsupported(what: &str) -> String {
    format!("{what} is {UNSUPPORTED}")
}

/// The punctuation of expr, longest first; the ones outside the subset are refused by the parser.
const PUNCTS: &[&str] = &[
    "===", "!==", "...", "==", "!=", "<=", ">=", "&&", "||", "??", "?.", "**", "..", "(", ")", "[", "]", "{",
    "}", ",", ".", "<", ">", "!", "-", "+", "*", "/", "%", "^", "?", ":", ";", "|", "=", "&", "#",
];

fn lex(src: &str) -> Result<Vec<(usize, Tok)>, String> {
    let mut out = Vec::new();
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            let (text, next) = string(&chars, i)?;
            out.push((at, Tok::Str(text)));
            i = next;
        } else if c.is_ascii_digit() {
            // expr's scanner: digits, a fraction unless `..` (a range) follows, an exponent;
            // then no letter or digit may follow.
            let digits = |i: &mut usize| {
                while *i < chars.len()
                    && (chars[*i].1.is_ascii_alphanumeric() && !matches!(chars[*i].1, 'e' | 'E')
                        || chars[*i].1 == '_')
                {
                    *i += 1;
                }
            };
            digits(&mut i);
            if i < chars.len() && chars[i].1 == '.' && chars.get(i + 1).is_none_or(|(_, c)| *c != '.') {
                i += 1;
                digits(&mut i);
            }
            if i < chars.len() && matches!(chars[i].1, 'e' | 'E') {
                i += 1;
                if i < chars.len() && matches!(chars[i].1, '+' | '-') {
                    i += 1;
                }
                digits(&mut i);
            }
            let end = chars.get(i).map_or(src.len(), |(p, _)| *p);
            if chars
                .get(i)
                .is_some_and(|(_, c)| c.is_alphanumeric() || *c == '_')
            {
                return Err(format!("bad number syntax: {:?}", &src[at..=end]));
            }
            out.push((at, Tok::Num(number(&src[at..end])?)));
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = at;
            while i < chars.len() && (chars[i].1.is_alphanumeric() || chars[i].1 == '_' || chars[i].1 == '$')
            {
                i += 1;
            }
            let end = chars.get(i).map_or(src.len(), |(p, _)| *p);
            out.push((at, Tok::Word(src[start..end].to_owned())));
        } else {
            let rest = &src[at..];
            let Some(p) = PUNCTS.iter().find(|p| rest.starts_with(**p)) else {
                return Err(format!("unexpected character {c:?} at {at}"));
            };
            i += p.chars().count();
            out.push((at, Tok::Punct(p)));
        }
    }
    Ok(out)
}

/// A decimal integer (an `int` in expr) or float (`1.5`, `1.`); other notations (hex, octal,
/// binary, exponents, `_` separators) are outside the subset.
fn number(text: &str) -> Result<Value, String> {
    let plain = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let (int, frac) = match text.split_once('.') {
        Some((int, frac)) => (int, Some(frac)),
        None => (text, None),
    };
    if int.is_empty() || !plain(int) || !frac.is_none_or(plain) {
        return Err(unsupported(&format!("the number notation {text:?}")));
    }
    if frac.is_none() {
        return text
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("integer literal {text} is out of range"));
    }
    let f: f64 = text
        .parse()
        .map_err(|_| format!("invalid float literal {text}"))?;
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| format!("float literal {text} is too large"))
}

/// The string that starts at `chars[i]`, and where the text goes on.
fn string(chars: &[(usize, char)], i: usize) -> Result<(String, usize), String> {
    let quote = chars[i].1;
    let mut out = String::new();
    let mut j = i + 1;
    while j < chars.len() {
        let c = chars[j].1;
        if c == quote {
            return Ok((out, j + 1));
        }
        if c == '\\' && quote != '`' {
            j += 1;
            let Some(&(_, e)) = chars.get(j) else { break };
            let simple = match e {
                'n' => Some('\n'),
                't' => Some('\t'),
                'r' => Some('\r'),
                'a' => Some('\u{7}'),
                'b' => Some('\u{8}'),
                'f' => Some('\u{c}'),
                'v' => Some('\u{b}'),
                '\\' => Some('\\'),
                '"' | '\'' if e == quote => Some(e),
                _ => None,
            };
            if let Some(s) = simple {
                out.push(s);
                j += 1;
                continue;
            }
            let width = match e {
                'x' => 2,
                'u' => 4,
                'U' => 8,
                _ => return Err(unsupported(&format!("the escape \\{e}"))),
            };
            let hex: String = chars.iter().skip(j + 1).take(width).map(|(_, c)| *c).collect();
            let code = (hex.len() == width)
                .then(|| u32::from_str_radix(&hex, 16).ok())
                .flatten()
                .ok_or_else(|| format!("invalid escape \\{e}{hex}"))?;
            // Go's \x is a byte; only ASCII makes a whole character.
            let ch = char::from_u32(code)
                .filter(|_| e != 'x' || code < 0x80)
                .ok_or_else(|| unsupported(&format!("the escape \\{e}{hex}")))?;
            out.push(ch);
            j += 1 + width;
            continue;
        }
        if c == '\n' && quote != '`' {
            return Err("literal not terminated".to_owned());
        }
        out.push(c);
        j += 1;
    }
    Err("literal not terminated".to_owned())
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(_, t)| t)
    }

    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.at + n).map(|(_, t)| t)
    }

    fn where_(&self) -> String {
        match self.toks.get(self.at) {
            Some((p, t)) => format!("{} at {p}", describe(t)),
            None => "end of input".to_owned(),
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        if self.peek() == Some(&Tok::Punct(leak(p))) {
            self.at += 1;
            return Ok(());
        }
        Err(format!("expected {p:?}, found {}", self.where_()))
    }

    fn deeper(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("the condition nests deeper than {MAX_DEPTH} levels"));
        }
        Ok(())
    }

    /// The binary operator at the cursor (with a leading `not` when negated), and its length.
    fn binary(&self) -> Result<Option<(Op, bool, usize)>, String> {
        let word = |t: Option<&Tok>| match t {
            Some(Tok::Word(w)) => word_op(w),
            _ => None,
        };
        match self.peek() {
            Some(Tok::Punct(p)) => Ok(match *p {
                "||" => Some((Op::Or, false, 1)),
                "&&" => Some((Op::And, false, 1)),
                "==" => Some((Op::Eq, false, 1)),
                "!=" => Some((Op::Ne, false, 1)),
                "<" => Some((Op::Lt, false, 1)),
                "<=" => Some((Op::Le, false, 1)),
                ">" => Some((Op::Gt, false, 1)),
                ">=" => Some((Op::Ge, false, 1)),
                other @ ("+" | "-" | "*" | "/" | "%" | "**" | "^" | "??" | ".." | "|" | "?") => {
                    return Err(unsupported(&format!("the operator {other:?}")));
                }
                _ => None,
            }),
            Some(Tok::Word(w)) if w == "not" => match word(self.peek_at(1)) {
                Some(op) if op.negatable() => Ok(Some((op, true, 2))),
                _ => Err(format!("unexpected {}", self.where_())),
            },
            t => Ok(word(t).map(|op| (op, false, 1))),
        }
    }

    fn expression(&mut self, min: u8) -> Result<Node, String> {
        let mut left = self.unary()?;
        while let Some((op, negated, len)) = self.binary()? {
            if op.precedence() < min {
                break;
            }
            self.at += len;
            self.deeper()?;
            let right = self.expression(op.precedence() + 1)?;
            let node = if op.ordering() {
                self.chain(left, op, right)?
            } else {
                Node::Binary(op, Box::new(left), Box::new(right))
            };
            self.depth -= 1;
            left = if negated { Node::Not(Box::new(node)) } else { node };
        }
        Ok(left)
    }

    /// expr reads `a < b <= c` as `a < b && b <= c`: the comparison `left op right`, and
    /// each one that follows it.
    fn chain(&mut self, left: Node, op: Op, right: Node) -> Result<Node, String> {
        let mut root = Node::Binary(op, Box::new(left), Box::new(right.clone()));
        let mut previous = right;
        while let Some((next, false, 1)) = self.binary()? {
            if !next.ordering() {
                break;
            }
            self.at += 1;
            let operand = self.expression(next.precedence() + 1)?;
            let step = Node::Binary(next, Box::new(previous), Box::new(operand.clone()));
            root = Node::Binary(Op::And, Box::new(root), Box::new(step));
            previous = operand;
        }
        Ok(root)
    }

    fn unary(&mut self) -> Result<Node, String> {
        let op = match self.peek() {
            Some(Tok::Word(w)) if w == "not" => Some("not"),
            Some(Tok::Punct("!")) => Some("!"),
            Some(Tok::Punct("-")) => Some("-"),
            Some(Tok::Punct("+")) => Some("+"),
            _ => None,
        };
        let Some(op) = op else { return self.postfix() };
        self.at += 1;
        self.deeper()?;
        // expr gives `not`/`!` precedence 50 and `-`/`+` 90: above every binary operator of
        // the subset, so the operand is one postfix expression.
        let operand = self.unary()?;
        self.depth -= 1;
        Ok(match op {
            "not" | "!" => Node::Not(Box::new(operand)),
            sign => Node::Neg(Box::new(operand), sign == "-"),
        })
    }

    fn postfix(&mut self) -> Result<Node, String> {
        let keyword_literal =
            matches!(self.peek(), Some(Tok::Word(w)) if matches!(w.as_str(), "nil" | "true" | "false"));
        let mut node = self.primary()?;
        // expr gives `nil`, `true` and `false` no member access or index: what follows is
        // left to the caller (and is an error there).
        if keyword_literal {
            return Ok(node);
        }
        loop {
            match self.peek() {
                Some(Tok::Punct(".")) => {
                    self.at += 1;
                    let name = match self.peek() {
                        Some(Tok::Word(w)) if !is_keyword(w) => w.clone(),
                        _ => return Err(format!("expected a name after '.', found {}", self.where_())),
                    };
                    self.at += 1;
                    if self.peek() == Some(&Tok::Punct("(")) {
                        return Err(unsupported("a method call"));
                    }
                    node = Node::Member(Box::new(node), Box::new(Node::Lit(Value::String(name))));
                }
                Some(Tok::Punct("[")) => {
                    self.at += 1;
                    if self.peek() == Some(&Tok::Punct(":")) {
                        return Err(unsupported("a slice"));
                    }
                    self.deeper()?;
                    let index = self.expression(0)?;
                    self.depth -= 1;
                    if self.peek() == Some(&Tok::Punct(":")) {
                        return Err(unsupported("a slice"));
                    }
                    self.expect("]")?;
                    node = Node::Member(Box::new(node), Box::new(index));
                }
                Some(Tok::Punct("?.")) => return Err(unsupported("optional chaining '?.'")),
                Some(Tok::Punct("(")) => return Err(unsupported("a function call")),
                _ => return Ok(node),
            }
        }
    }

    fn primary(&mut self) -> Result<Node, String> {
        let Some((_, tok)) = self.toks.get(self.at).cloned() else {
            return Err("unexpected end of input".to_owned());
        };
        self.at += 1;
        match tok {
            Tok::Num(n) => Ok(Node::Lit(n)),
            Tok::Str(s) => Ok(Node::Lit(Value::String(s))),
            Tok::Word(w) => match w.as_str() {
                "nil" => Ok(Node::Lit(Value::Null)),
                "true" => Ok(Node::Lit(Value::Bool(true))),
                "false" => Ok(Node::Lit(Value::Bool(false))),
                "let" | "if" | "else" => Err(unsupported(&format!("{w:?}"))),
                _ if w.starts_with('$') || w == "_" => Err(unsupported(&format!("the name {w:?}"))),
                _ if is_keyword(&w) => {
                    self.at -= 1;
                    Err(format!("unexpected {}", self.where_()))
                }
                _ => Ok(Node::Name(w)),
            },
            Tok::Punct("(") => {
                self.deeper()?;
                let inner = self.expression(0)?;
                self.depth -= 1;
                self.expect(")")?;
                Ok(inner)
            }
            Tok::Punct("[") => {
                self.deeper()?;
                let mut items = Vec::new();
                while self.peek() != Some(&Tok::Punct("]")) {
                    items.push(self.expression(0)?);
                    if self.peek() == Some(&Tok::Punct(",")) {
                        self.at += 1;
                    } else {
                        break;
                    }
                }
                self.depth -= 1;
                self.expect("]")?;
                Ok(Node::List(items))
            }
            Tok::Punct(p @ ("{" | "#" | "." | "..." | "?")) => Err(unsupported(&format!("{p:?}"))),
            _ => {
                self.at -= 1;
                Err(format!("unexpected {}", self.where_()))
            }
        }
    }
}

/// The `&'static` spelling of a punctuation the parser asks for.
fn leak(p: &str) -> &'static str {
    PUNCTS.iter().copied().find(|q| *q == p).unwrap_or("")
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Num(n) => format!("number {n}"),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Word(w) => format!("{w:?}"),
        Tok::Punct(p) => format!("{p:?}"),
    }
}

fn word_op(w: &str) -> Option<Op> {
    Some(match w {
        "or" => Op::Or,
        "and" => Op::And,
        "in" => Op::In,
        "contains" => Op::Contains,
        "startsWith" => Op::StartsWith,
        "endsWith" => Op::EndsWith,
        "matches" => Op::Matches,
        _ => return None,
    })
}

fn is_keyword(w: &str) -> bool {
    word_op(w).is_some() || matches!(w, "not" | "let" | "if" | "else")
}

impl Program {
    /// Parses a condition; the error says where and what is wrong.
    pub fn parse(src: &str) -> Result<Self, String> {
        if src.len() > MAX_LEN {
            return Err(format!("the condition is longer than {MAX_LEN} bytes"));
        }
        let mut parser = Parser {
            toks: lex(src)?,
            at: 0,
            depth: 0,
        };
        if parser.toks.is_empty() {
            return Err("the condition is empty".to_owned());
        }
        let root = parser.expression(0)?;
        if parser.at < parser.toks.len() {
            if let Some(Tok::Punct(p @ (";" | "|" | "?" | ":" | "??"))) = parser.peek() {
                return Err(unsupported(&format!("{p:?}")));
            }
            return Err(format!("unexpected {}", parser.where_()));
        }
        Ok(Self { root })
    }

    /// The condition's value in `env` (an object: its keys are the names).
    pub fn eval(&self, env: &Value, matches: Matcher<'_>) -> Result<Value, String> {
        eval(&self.root, env, matches)
    }
}

fn eval(node: &Node, env: &Value, matches: Matcher<'_>) -> Result<Value, String> {
    let go = |n: &Node| eval(n, env, matches);
    Ok(match node {
        Node::Lit(v) => v.clone(),
        Node::Name(n) => env.get(n).cloned().unwrap_or(Value::Null),
        Node::List(items) => Value::Array(items.iter().map(&go).collect::<Result<_, _>>()?),
        Node::Member(base, key) => fetch(&go(base)?, &go(key)?)?,
        Node::Not(inner) => match go(inner)? {
            Value::Bool(b) => Value::Bool(!b),
            other => return Err(format!("invalid operation: not {}", type_name(&other))),
        },
        // Unary `+` is no operation at all in expr, whatever its operand.
        Node::Neg(inner, false) => go(inner)?,
        Node::Neg(inner, true) => match go(inner)? {
            Value::Number(n) => negate(&n)?,
            other => return Err(format!("invalid operation: - {}", type_name(&other))),
        },
        Node::Binary(op @ (Op::And | Op::Or), l, r) => {
            let Value::Bool(left) = go(l)? else {
                return Err(format!("invalid operation: {op:?} needs a boolean on its left"));
            };
            // The left side decides when it can; otherwise the right side is the value,
            // whatever its type (as expr's jumps leave it).
            match (op, left) {
                (Op::And, false) => Value::Bool(false),
                (Op::Or, true) => Value::Bool(true),
                _ => go(r)?,
            }
        }
        Node::Binary(op, l, r) => binary(*op, &go(l)?, &go(r)?, matches)?,
    })
}

fn negate(n: &Number) -> Result<Value, String> {
    if let Some(i) = n.as_i64() {
        return i
            .checked_neg()
            .map(Value::from)
            .ok_or_else(|| "integer overflow".to_owned());
    }
    n.as_f64()
        .and_then(|f| Number::from_f64(-f))
        .map(Value::Number)
        .ok_or_else(|| "invalid number".to_owned())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// `from[key]`: a map's value (`nil` when missing), a list's or string's item by index.
fn fetch(from: &Value, key: &Value) -> Result<Value, String> {
    match from {
        Value::Object(map) => match key {
            Value::String(k) => Ok(map.get(k).cloned().unwrap_or(Value::Null)),
            // A nil key reads the zero key, "".
            Value::Null => Ok(map.get("").cloned().unwrap_or(Value::Null)),
            other => Err(format!("cannot use {} as a map key", type_name(other))),
        },
        Value::Array(items) => {
            let index = position(key, items.len())?;
            Ok(items[index].clone())
        }
        Value::String(s) => {
            // Go indexes a string by byte: only ASCII gives the same answer for sure.
            let index = position(key, s.len())?;
            if !s.is_ascii() {
                return Err(unsupported("indexing a non-ASCII string"));
            }
            Ok(Value::from(u64::from(s.as_bytes()[index])))
        }
        other => Err(format!("cannot fetch {key} from {}", type_name(other))),
    }
}

/// An index of a sequence of `len` (negative from the end), as expr's `ToInt` reads it.
fn position(key: &Value, len: usize) -> Result<usize, String> {
    let index = match key {
        Value::Number(n) => match n.as_i64() {
            Some(i) => i,
            // A float index is truncated.
            None => n.as_f64().map_or(0, |f| f as i64),
        },
        other => return Err(format!("invalid operation: int({})", type_name(other))),
    };
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let at = if index < 0 { len + index } else { index };
    if at < 0 || at >= len {
        return Err(format!("index out of range: {at} (array length is {len})"));
    }
    usize::try_from(at).map_err(|_| "index out of range".to_owned())
}

fn binary(op: Op, a: &Value, b: &Value, matches: Matcher<'_>) -> Result<Value, String> {
    let strings = |name: &str, f: &dyn Fn(&str, &str) -> bool| -> Result<Value, String> {
        match (a, b) {
            (Value::Null, _) | (_, Value::Null) => Ok(Value::Bool(false)),
            (Value::String(x), Value::String(y)) => Ok(Value::Bool(f(x, y))),
            _ => Err(format!(
                "invalid operation: {} {name} {}",
                type_name(a),
                type_name(b)
            )),
        }
    };
    Ok(match op {
        Op::Eq => Value::Bool(equal(a, b)),
        Op::Ne => Value::Bool(!equal(a, b)),
        Op::Lt | Op::Le | Op::Gt | Op::Ge => {
            let ord = order(a, b)
                .ok_or_else(|| format!("invalid operation: {} {op:?} {}", type_name(a), type_name(b)))?;
            Value::Bool(match op {
                Op::Lt => ord == Ordering::Less,
                Op::Le => ord != Ordering::Greater,
                Op::Gt => ord == Ordering::Greater,
                _ => ord != Ordering::Less,
            })
        }
        Op::In => Value::Bool(contained(a, b)?),
        Op::Contains => strings("contains", &|x, y| x.contains(y))?,
        Op::StartsWith => strings("startsWith", &|x, y| x.starts_with(y))?,
        Op::EndsWith => strings("endsWith", &|x, y| x.ends_with(y))?,
        Op::Matches => match (a, b) {
            (Value::Null, _) | (_, Value::Null) => Value::Bool(false),
            (Value::String(s), Value::String(pattern)) => Value::Bool(matches(pattern, s)?),
            _ => {
                return Err(format!(
                    "invalid operation: {} matches {}",
                    type_name(a),
                    type_name(b)
                ));
            }
        },
        Op::And | Op::Or => unreachable_logic()?,
    })
}

fn unreachable_logic() -> Result<Value, String> {
    Err("internal: logical operators are evaluated lazily".to_owned())
}

/// expr's `==`: numbers by value whatever their type, lists item by item, anything else by
/// type and value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numeric(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q)),
        _ => a == b,
    }
}

fn numeric(x: &Number, y: &Number) -> Option<Ordering> {
    match (x.as_i64(), y.as_i64()) {
        (Some(p), Some(q)) => Some(p.cmp(&q)),
        _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
    }
}

/// The order of two numbers or two strings; none for anything else.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numeric(x, y),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

/// expr's `in`: an item of a list, a key of a map; `nil` holds nothing.
fn contained(needle: &Value, haystack: &Value) -> Result<bool, String> {
    match haystack {
        Value::Null => Ok(false),
        Value::Array(items) => Ok(items.iter().any(|i| equal(i, needle))),
        Value::Object(map) => match needle {
            Value::String(k) => Ok(map.contains_key(k)),
            Value::Null => Ok(map.contains_key("")),
            other => Err(format!("cannot use {} as a map key", type_name(other))),
        },
        other => Err(format!("operator \"in\" not defined on {}", type_name(other))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(src: &str, env: &Value) -> Result<Value, String> {
        let plain = |p: &str, s: &str| {
            regex::Regex::new(p)
                .map(|r| r.is_match(s))
                .map_err(|e| e.to_string())
        };
        Program::parse(src)?.eval(env, &plain)
    }

    #[test]
    fn deep_link_conditions_evaluate_as_expr_does() {
        let env = json!({"app": {"metadata": {"name": "web", "labels": {"team": "a"}}, "n": 3},
                         "resource": {"kind": "Deployment", "items": [1, 2.5, "x"]}});
        let t = |s: &str| run(s, &env).unwrap();
        assert_eq!(t(r#"app.metadata.name == "web""#), json!(true));
        assert_eq!(t(r#"app["metadata"]["labels"].team != 'b'"#), json!(true));
        assert_eq!(t("app.n >= 3 && app.n < 3.5"), json!(true));
        assert_eq!(
            t(r#""team" in app.metadata.labels and not ("x" in app.metadata.labels)"#),
            json!(true)
        );
        assert_eq!(t(r#"resource.kind startsWith "Dep" || false"#), json!(true));
        assert_eq!(t(r#"resource.kind not endsWith "ment""#), json!(false));
        assert_eq!(t(r#"resource.kind matches "^D.*t$""#), json!(true));
        assert_eq!(
            t("resource.items[-1] == 'x' && 2.5 in resource.items"),
            json!(true)
        );
        assert_eq!(t("app.missing == nil"), json!(true));
        assert_eq!(t("true && 5"), json!(5));
        assert_eq!(t("false && app.missing.a"), json!(false));
        assert_eq!(t("1 == 1.0"), json!(true));
        assert_eq!(t("nil contains 'a'"), json!(false));
    }

    #[test]
    fn failures_and_the_unsupported_say_what() {
        let env = json!({"a": {"b": 1}});
        let err = |s: &str| run(s, &env).unwrap_err();
        assert!(err("a.c.d == 1").contains("cannot fetch"));
        assert!(err("nil.a").contains("unexpected"));
        assert!(err("a.b && true").contains("boolean"));
        assert!(err("1 < 'a'").contains("invalid operation"));
        assert!(err("a.b + 1").contains(UNSUPPORTED));
        assert!(err("len(a)").contains(UNSUPPORTED));
        assert!(err("a?.b").contains(UNSUPPORTED));
        assert!(err("a ==").contains("end of input"));
        assert!(err("(a").contains("expected \")\""));
        assert!(err("'abc").contains("not terminated"));
        assert!(err("").contains("empty"));
        assert!(err(&"(".repeat(100)).contains("nests deeper"));
    }
}
