//! The part of Go's `text/template` (with a few of the sprig functions) that ApplicationSet
//! templates (`spec.goTemplate: true`) and deep links (argocd-cm `*.links` URLs) use.
//!
//! Why our own: the one Rust crate that implements Go templates (`gtmpl`) has had no release
//! since 2021 and has no `missingkey` option, which upstream exposes as `goTemplateOptions`.
//! What is implemented, with Go's semantics on the `map[string]any` that upstream renders with:
//!
//! - text, `{{ pipeline }}`, `{{- ` / ` -}}` trimming, `{{/* comments */}}`;
//! - `if` / `else if` / `else` / `end`, `with`, and `range` over a list or a map (`.` is the
//!   element), without variables other than `$` (the parameters);
//! - operands: `.`, `.a.b`, `$`, `$.a.b`, `(pipeline)`, `(pipeline).a`, strings (`"…"`, raw
//!   `` `…` ``), numbers, `true`, `false`, `nil`;
//! - `missingkey=default|invalid` (a missing key prints `<no value>`), `zero` (the same, as Go
//!   prints the zero of an interface) and `error` (a missing key is an error);
//! - functions: Go's `and or not eq ne lt le gt ge len index print printf`, sprig's `lower upper
//!   title trim trimPrefix trimSuffix replace default empty quote squote trunc contains hasPrefix
//!   hasSuffix join splitList toJson toString b64enc b64dec sha256sum`, and upstream's
//!   `normalize`. Any other function is a parse error naming it.
//!
//! Templates come from callers, so what they may cost is bounded: nesting (parentheses and
//! blocks) at [`MAX_DEPTH`], every value and every rendered string at [`MAX_VALUE`] bytes (the
//! functions that could multiply a string, `replace` and `join`, work the size out before they
//! build it), a list from `splitList` at [`MAX_ITEMS`], and one [`Budget`] of time and output
//! shared by every string of one `generate`.

use std::cell::Cell;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Map, Value};

/// How deeply parentheses and `if`/`with`/`range` blocks may nest (Go allows more, on a stack
/// that grows; ours is a thread's).
const MAX_DEPTH: usize = 100;
/// The largest string a template may make or handle: an object is at most 1.5 MiB.
pub const MAX_VALUE: usize = crate::registry::MAX_OBJECT_BYTES;
/// The most items `splitList` may make.
const MAX_ITEMS: usize = 100_000;
/// What one `generate` may spend rendering every string of every application.
const RENDER_TIME: Duration = Duration::from_secs(2);
const RENDER_OUTPUT: usize = 64 << 20;

/// The time and output one `generate` may spend on rendering, shared by all its strings, so that
/// a small template over many parameter sets, or a template that loops, ends with an error
/// instead of holding a thread and memory.
pub struct Budget {
    deadline: Instant,
    output: Cell<usize>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            deadline: Instant::now() + RENDER_TIME,
            output: Cell::new(0),
        }
    }
}

impl Budget {
    /// Counts `bytes` of rendered output.
    pub fn spend(&self, bytes: usize) -> Result<(), String> {
        let total = self.output.get().saturating_add(bytes);
        self.output.set(total);
        if total > RENDER_OUTPUT {
            return Err(format!(
                "the templates render more than {} MiB in all",
                RENDER_OUTPUT >> 20
            ));
        }
        self.in_time()
    }

    fn in_time(&self) -> Result<(), String> {
        if Instant::now() > self.deadline {
            return Err(format!("rendering the templates took more than {RENDER_TIME:?}"));
        }
        Ok(())
    }
}

fn too_long(what: &str) -> String {
    format!("{what} would be longer than {MAX_VALUE} bytes")
}

/// What a missing map key gives (`goTemplateOptions: ["missingkey=…"]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// `default`, `invalid` and `zero`: `<no value>`.
    #[default]
    NoValue,
    /// `error`: the execution fails.
    Error,
}

impl MissingKey {
    /// Reads `goTemplateOptions`.
    pub fn from_options(options: &[String]) -> Result<Self, String> {
        let mut out = MissingKey::default();
        for option in options {
            out = match option.as_str() {
                "missingkey=default" | "missingkey=invalid" | "missingkey=zero" => MissingKey::NoValue,
                "missingkey=error" => MissingKey::Error,
                other => {
                    return Err(format!(
                        "unknown option {other:?}: only missingkey=default, invalid, zero or error"
                    ));
                }
            };
        }
        Ok(out)
    }
}

/// A value while a template runs: JSON, or Go's "no value" (a missing key).
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Missing,
    Json(Value),
}

impl Val {
    fn truth(&self) -> bool {
        match self {
            Val::Missing | Val::Json(Value::Null) => false,
            Val::Json(Value::Bool(b)) => *b,
            Val::Json(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
            Val::Json(Value::String(s)) => !s.is_empty(),
            Val::Json(Value::Array(a)) => !a.is_empty(),
            Val::Json(Value::Object(o)) => !o.is_empty(),
        }
    }

    fn text(&self) -> String {
        match self {
            Val::Missing | Val::Json(Value::Null) => "<no value>".to_owned(),
            Val::Json(v) => go_print(v),
        }
    }

    fn json(&self) -> Value {
        match self {
            Val::Missing => Value::Null,
            Val::Json(v) => v.clone(),
        }
    }
}

/// How Go's `fmt` prints a value decoded from JSON (`%v`).
fn go_print(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            // JSON numbers are float64 in Go: integral ones print without a fraction.
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            (None, Some(f)) => f.to_string(),
            (None, None) => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(go_print).collect();
            format!("[{}]", inner.join(" "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map.iter().map(|(k, v)| format!("{k}:{}", go_print(v))).collect();
            format!("map[{}]", inner.join(" "))
        }
    }
}

fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "interface {}",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

// ---- parsing ----

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    /// `.a.b` (empty path: `.`).
    Dot(Vec<String>),
    /// `$.a.b`.
    Root(Vec<String>),
    Lit(Value),
    Func(String),
    /// `(pipeline).a.b`.
    Sub(Pipeline, Vec<String>),
}

type Command = Vec<Operand>;
type Pipeline = Vec<Command>;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Action(Pipeline),
    If(Pipeline, Vec<Node>, Vec<Node>),
    With(Pipeline, Vec<Node>, Vec<Node>),
    Range(Pipeline, Vec<Node>, Vec<Node>),
}

/// A parsed template.
#[derive(Debug)]
pub struct Template {
    nodes: Vec<Node>,
}

/// Go's functions and the sprig ones listed in the module comment.
const FUNCTIONS: &[&str] = &[
    "and",
    "or",
    "not",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "len",
    "index",
    "print",
    "printf",
    "lower",
    "upper",
    "title",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "replace",
    "default",
    "empty",
    "quote",
    "squote",
    "trunc",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "join",
    "splitList",
    "toJson",
    "toString",
    "b64enc",
    "b64dec",
    "sha256sum",
    "normalize",
];

/// One `{{ … }}` or the text between them.
enum Piece<'a> {
    Text(String),
    Action(&'a str),
}

fn split(src: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(open) = rest.find("{{") {
        let mut text = &rest[..open];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[open + 2..];
        let trim_left = after.starts_with("- ") || after.starts_with("-\t") || after.starts_with("-\n");
        if trim_left {
            text = text.trim_end();
        }
        pieces.push(Piece::Text(text.to_owned()));
        let close = after.find("}}").ok_or("unclosed action")?;
        let mut inner = &after[..close];
        if trim_left {
            inner = &inner[1..];
        }
        trim_next = inner.ends_with(" -") || inner.ends_with("\t-") || inner.ends_with("\n-");
        if trim_next {
            inner = &inner[..inner.len() - 1];
        }
        pieces.push(Piece::Action(inner.trim()));
        rest = &after[close + 2..];
    }
    pieces.push(Piece::Text(
        if trim_next { rest.trim_start() } else { rest }.to_owned(),
    ));
    Ok(pieces)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Lit(Value),
    Open,
    Close,
    Bar,
}

fn tokens(action: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let chars: Vec<char> = action.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '(' => {
                out.push(Token::Open);
                i += 1;
            }
            ')' => {
                out.push(Token::Close);
                i += 1;
            }
            '|' => {
                out.push(Token::Bar);
                i += 1;
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated quoted string".to_owned()),
                        Some('"') => break,
                        Some('\\') => {
                            i += 1;
                            match chars.get(i) {
                                Some('n') => s.push('\n'),
                                Some('t') => s.push('\t'),
                                Some('\\') => s.push('\\'),
                                Some('"') => s.push('"'),
                                Some(other) => return Err(format!("unknown escape sequence \\{other}")),
                                None => return Err("unterminated quoted string".to_owned()),
                            }
                        }
                        Some(other) => s.push(*other),
                    }
                    i += 1;
                }
                i += 1;
                out.push(Token::Lit(Value::String(s)));
            }
            '`' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '`')
                    .ok_or("unterminated raw quoted string")?;
                out.push(Token::Lit(Value::String(
                    chars[i + 1..i + 1 + end].iter().collect(),
                )));
                i += end + 2;
            }
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '(' | ')' | '|') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "true" => Token::Lit(Value::Bool(true)),
                    "false" => Token::Lit(Value::Bool(false)),
                    "nil" => Token::Lit(Value::Null),
                    w if w.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '+') => {
                        let n: serde_json::Number =
                            w.parse().map_err(|_| format!("bad number syntax: {w:?}"))?;
                        Token::Lit(Value::Number(n))
                    }
                    _ => Token::Word(word),
                });
            }
        }
    }
    Ok(out)
}

/// `.a.b` → `["a", "b"]` (`.` → `[]`).
fn field_path(chain: &str) -> Result<Vec<String>, String> {
    if chain == "." {
        return Ok(Vec::new());
    }
    let names: Vec<String> = chain
        .strip_prefix('.')
        .unwrap_or(chain)
        .split('.')
        .map(str::to_owned)
        .collect();
    if names
        .iter()
        .any(|n| n.is_empty() || !n.chars().all(|c| c.is_alphanumeric() || c == '_'))
    {
        return Err(format!("bad field name in {chain:?}"));
    }
    Ok(names)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    /// How many parentheses are open.
    depth: usize,
}

impl Parser {
    fn pipeline(&mut self) -> Result<Pipeline, String> {
        let mut pipe = vec![self.command()?];
        while self.tokens.get(self.at) == Some(&Token::Bar) {
            self.at += 1;
            pipe.push(self.command()?);
        }
        Ok(pipe)
    }

    fn command(&mut self) -> Result<Command, String> {
        let mut cmd = Vec::new();
        while let Some(token) = self.tokens.get(self.at).cloned() {
            match token {
                Token::Bar | Token::Close => break,
                Token::Open => {
                    self.at += 1;
                    if self.depth >= MAX_DEPTH {
                        return Err(format!("parentheses nested more than {MAX_DEPTH} deep"));
                    }
                    self.depth += 1;
                    let inner = self.pipeline()?;
                    self.depth -= 1;
                    if self.tokens.get(self.at) != Some(&Token::Close) {
                        return Err("unclosed left paren".to_owned());
                    }
                    self.at += 1;
                    // `(pipeline).a.b`
                    let path = match self.tokens.get(self.at) {
                        Some(Token::Word(w)) if w.starts_with('.') && w.len() > 1 => {
                            self.at += 1;
                            field_path(w)?
                        }
                        _ => Vec::new(),
                    };
                    cmd.push(Operand::Sub(inner, path));
                }
                Token::Lit(v) => {
                    self.at += 1;
                    cmd.push(Operand::Lit(v));
                }
                Token::Word(w) => {
                    self.at += 1;
                    cmd.push(operand(&w)?);
                }
            }
        }
        if cmd.is_empty() {
            return Err("missing value for command".to_owned());
        }
        if cmd.len() > 1 && !matches!(cmd[0], Operand::Func(_)) {
            return Err("can't give argument to non-function".to_owned());
        }
        Ok(cmd)
    }
}

fn operand(word: &str) -> Result<Operand, String> {
    if word.starts_with('.') {
        return Ok(Operand::Dot(field_path(word)?));
    }
    if let Some(rest) = word.strip_prefix('$') {
        if rest.is_empty() {
            return Ok(Operand::Root(Vec::new()));
        }
        if rest.starts_with('.') {
            return Ok(Operand::Root(field_path(rest)?));
        }
        return Err(format!(
            "undefined variable \"{word}\" (only $ is supported by this server)"
        ));
    }
    if word == ":=" || word == "=" {
        return Err("variable declarations are not supported by this server".to_owned());
    }
    if FUNCTIONS.contains(&word) {
        Ok(Operand::Func(word.to_owned()))
    } else {
        Err(format!("function {word:?} not defined"))
    }
}

fn parse_pipeline(action: &str) -> Result<Pipeline, String> {
    let mut parser = Parser {
        tokens: tokens(action)?,
        at: 0,
        depth: 0,
    };
    let pipe = parser.pipeline()?;
    if parser.at != parser.tokens.len() {
        return Err(format!("unexpected {:?} in operand", action));
    }
    Ok(pipe)
}

/// What ended a list of nodes.
enum Stop {
    Eof,
    End,
    Else(Option<Pipeline>),
}

/// The nodes up to the end of the block at `depth` (0: the template itself).
fn parse_nodes(
    pieces: &mut std::vec::IntoIter<Piece<'_>>,
    depth: usize,
) -> Result<(Vec<Node>, Stop), String> {
    let mut nodes = Vec::new();
    while let Some(piece) = pieces.next() {
        let action = match piece {
            Piece::Text(t) => {
                if !t.is_empty() {
                    nodes.push(Node::Text(t));
                }
                continue;
            }
            Piece::Action(a) => a,
        };
        if action.starts_with("/*") {
            if !action.ends_with("*/") {
                return Err("unclosed comment".to_owned());
            }
            continue;
        }
        let (keyword, rest) = action.split_once(char::is_whitespace).unwrap_or((action, ""));
        match keyword {
            "end" => return Ok((nodes, Stop::End)),
            "else" => {
                let rest = rest.trim();
                let chained = match rest.strip_prefix("if") {
                    Some(cond) if cond.starts_with(char::is_whitespace) => Some(parse_pipeline(cond)?),
                    _ if rest.is_empty() => None,
                    _ => return Err(format!("unexpected {rest:?} after else")),
                };
                return Ok((nodes, Stop::Else(chained)));
            }
            "if" | "with" | "range" => {
                let pipe = parse_pipeline(rest)?;
                nodes.push(parse_block(keyword, pipe, pieces, depth + 1)?);
            }
            "define" | "template" | "block" | "break" | "continue" => {
                return Err(format!("{keyword:?} is not supported by this server"));
            }
            _ => nodes.push(Node::Action(parse_pipeline(action)?)),
        }
    }
    Ok((nodes, Stop::Eof))
}

fn parse_block(
    keyword: &str,
    pipe: Pipeline,
    pieces: &mut std::vec::IntoIter<Piece<'_>>,
    depth: usize,
) -> Result<Node, String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "blocks (if, else if, with, range) nested more than {MAX_DEPTH} deep"
        ));
    }
    let (body, end) = parse_nodes(pieces, depth)?;
    let otherwise = match end {
        Stop::Eof => return Err(format!("unexpected EOF: {keyword} has no end")),
        Stop::End => Vec::new(),
        Stop::Else(None) => match parse_nodes(pieces, depth)? {
            (nodes, Stop::End) => nodes,
            _ => return Err(format!("expected end after else of {keyword}")),
        },
        // `else if` is an `if` inside the else branch, ended by the same `end`.
        Stop::Else(Some(cond)) if keyword == "if" => vec![parse_block("if", cond, pieces, depth + 1)?],
        Stop::Else(Some(_)) => return Err(format!("else if inside {keyword}")),
    };
    Ok(match keyword {
        "if" => Node::If(pipe, body, otherwise),
        "with" => Node::With(pipe, body, otherwise),
        _ => Node::Range(pipe, body, otherwise),
    })
}

impl Template {
    pub fn parse(src: &str) -> Result<Self, String> {
        let mut pieces = split(src)?.into_iter();
        match parse_nodes(&mut pieces, 0)? {
            (nodes, Stop::Eof) => Ok(Self { nodes }),
            (_, Stop::End) => Err("unexpected {{end}}".to_owned()),
            (_, Stop::Else(_)) => Err("unexpected {{else}}".to_owned()),
        }
    }

    /// The text the template makes from `params`, within `budget`.
    pub fn execute(&self, params: &Value, missing: MissingKey, budget: &Budget) -> Result<String, String> {
        let run = Run {
            root: params,
            missing,
            budget,
            steps: Cell::new(0),
        };
        let mut out = String::new();
        run.nodes(&self.nodes, &Val::Json(params.clone()), &mut out)?;
        budget.spend(out.len())?;
        Ok(out)
    }
}

// ---- execution ----

struct Run<'a> {
    root: &'a Value,
    missing: MissingKey,
    budget: &'a Budget,
    /// Nodes run so far: the clock is read every [`CLOCK_EVERY`] of them.
    steps: Cell<u64>,
}

/// Upper bound of the items one `range` goes over.
const MAX_RANGE: usize = 10_000;
const CLOCK_EVERY: u64 = 256;

impl Run<'_> {
    /// One more node run; the time budget is checked now and then.
    fn step(&self) -> Result<(), String> {
        let steps = self.steps.get() + 1;
        self.steps.set(steps);
        if steps.is_multiple_of(CLOCK_EVERY) {
            self.budget.in_time()?;
        }
        Ok(())
    }

    fn nodes(&self, nodes: &[Node], dot: &Val, out: &mut String) -> Result<(), String> {
        for node in nodes {
            self.step()?;
            match node {
                Node::Text(t) => out.push_str(t),
                Node::Action(pipe) => out.push_str(&self.pipeline(pipe, dot)?.text()),
                Node::If(pipe, then, otherwise) => {
                    let branch = if self.pipeline(pipe, dot)?.truth() {
                        then
                    } else {
                        otherwise
                    };
                    self.nodes(branch, dot, out)?;
                }
                Node::With(pipe, then, otherwise) => {
                    let value = self.pipeline(pipe, dot)?;
                    if value.truth() {
                        self.nodes(then, &value, out)?;
                    } else {
                        self.nodes(otherwise, dot, out)?;
                    }
                }
                Node::Range(pipe, body, otherwise) => {
                    let items: Vec<Value> = match self.pipeline(pipe, dot)? {
                        Val::Json(Value::Array(a)) => a,
                        // Go ranges over a map in key order.
                        Val::Json(Value::Object(m)) => {
                            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
                            entries.sort_by(|a, b| a.0.cmp(&b.0));
                            entries.into_iter().map(|(_, v)| v).collect()
                        }
                        Val::Missing | Val::Json(Value::Null) => Vec::new(),
                        Val::Json(other) => {
                            return Err(format!("range can't iterate over {}", go_print(&other)));
                        }
                    };
                    if items.len() > MAX_RANGE {
                        return Err(format!("range over more than {MAX_RANGE} items"));
                    }
                    if items.is_empty() {
                        self.nodes(otherwise, dot, out)?;
                    }
                    for item in items {
                        self.nodes(body, &Val::Json(item), out)?;
                    }
                }
            }
            if out.len() > MAX_VALUE {
                return Err(too_long("the rendered text"));
            }
        }
        Ok(())
    }

    fn pipeline(&self, pipe: &Pipeline, dot: &Val) -> Result<Val, String> {
        let mut last: Option<Val> = None;
        for cmd in pipe {
            last = Some(self.command(cmd, dot, last)?);
        }
        Ok(last.unwrap_or(Val::Missing))
    }

    fn command(&self, cmd: &Command, dot: &Val, piped: Option<Val>) -> Result<Val, String> {
        if let Some(Operand::Func(name)) = cmd.first() {
            let mut args = cmd[1..]
                .iter()
                .map(|o| self.operand(o, dot))
                .collect::<Result<Vec<_>, _>>()?;
            args.extend(piped);
            let value = call(name, args)?;
            if matches!(&value, Val::Json(Value::String(s)) if s.len() > MAX_VALUE) {
                return Err(too_long(&format!("the result of {name}")));
            }
            return Ok(value);
        }
        if piped.is_some() {
            return Err("can't give argument to non-function".to_owned());
        }
        self.operand(&cmd[0], dot)
    }

    fn operand(&self, operand: &Operand, dot: &Val) -> Result<Val, String> {
        match operand {
            Operand::Dot(path) => self.fields(dot.clone(), path),
            Operand::Root(path) => self.fields(Val::Json(self.root.clone()), path),
            Operand::Lit(v) => Ok(Val::Json(v.clone())),
            Operand::Sub(pipe, path) => {
                let value = self.pipeline(pipe, dot)?;
                self.fields(value, path)
            }
            Operand::Func(name) => call(name, Vec::new()),
        }
    }

    fn fields(&self, mut value: Val, path: &[String]) -> Result<Val, String> {
        for name in path {
            value = match value {
                Val::Json(Value::Object(mut map)) => match map.remove(name) {
                    Some(v) => Val::Json(v),
                    None if self.missing == MissingKey::Error => {
                        return Err(format!("map has no entry for key {name:?}"));
                    }
                    None => Val::Missing,
                },
                Val::Missing | Val::Json(Value::Null) => {
                    return Err(format!("nil pointer evaluating interface {{}}.{name}"));
                }
                Val::Json(other) => {
                    return Err(format!("can't evaluate field {name} in type {}", go_type(&other)));
                }
            };
        }
        Ok(value)
    }
}

fn want(name: &str, args: &[Val], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!(
            "wrong number of args for {name}: want {n} got {}",
            args.len()
        ))
    }
}

fn string(v: &Val) -> String {
    match v {
        Val::Missing => String::new(),
        Val::Json(Value::Null) => String::new(),
        Val::Json(v) => go_print(v),
    }
}

fn compare(name: &str, a: &Val, b: &Val) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Val::Json(Value::Number(x)), Val::Json(Value::Number(y))) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y)
                .ok_or_else(|| format!("{name}: incomparable numbers"))
        }
        (Val::Json(Value::String(x)), Val::Json(Value::String(y))) => Ok(x.cmp(y)),
        _ => Err(format!("{name}: incompatible types for comparison")),
    }
}

fn call(name: &str, args: Vec<Val>) -> Result<Val, String> {
    let text = |s: String| Ok(Val::Json(Value::String(s)));
    match name {
        "and" | "or" => {
            if args.is_empty() {
                return Err(format!("wrong number of args for {name}: want at least 1 got 0"));
            }
            let stop = |v: &Val| if name == "and" { !v.truth() } else { v.truth() };
            let last = args.len() - 1;
            let at = args.iter().position(stop).unwrap_or(last);
            Ok(args.into_iter().nth(at).unwrap_or(Val::Missing))
        }
        "not" => {
            want(name, &args, 1)?;
            Ok(Val::Json(Value::Bool(!args[0].truth())))
        }
        "eq" | "ne" => {
            if args.len() < 2 {
                return Err(format!(
                    "wrong number of args for {name}: want at least 2 got {}",
                    args.len()
                ));
            }
            let first = args[0].json();
            let equal = args[1..].iter().any(|a| a.json() == first);
            Ok(Val::Json(Value::Bool(if name == "eq" { equal } else { !equal })))
        }
        "lt" | "le" | "gt" | "ge" => {
            want(name, &args, 2)?;
            let ord = compare(name, &args[0], &args[1])?;
            let result = match name {
                "lt" => ord.is_lt(),
                "le" => ord.is_le(),
                "gt" => ord.is_gt(),
                _ => ord.is_ge(),
            };
            Ok(Val::Json(Value::Bool(result)))
        }
        "len" => {
            want(name, &args, 1)?;
            let n = match &args[0] {
                Val::Json(Value::String(s)) => s.len(),
                Val::Json(Value::Array(a)) => a.len(),
                Val::Json(Value::Object(o)) => o.len(),
                other => return Err(format!("len of {}", other.text())),
            };
            Ok(Val::Json(Value::from(n)))
        }
        "index" => {
            let Some((first, keys)) = args.split_first() else {
                return Err("wrong number of args for index: want at least 1 got 0".to_owned());
            };
            let mut value = first.json();
            for key in keys {
                value = match (&value, key) {
                    (Value::Object(m), Val::Json(Value::String(k))) => {
                        m.get(k).cloned().unwrap_or(Value::Null)
                    }
                    (Value::Array(a), Val::Json(Value::Number(i))) => {
                        let i = i.as_u64().and_then(|i| usize::try_from(i).ok());
                        match i.and_then(|i| a.get(i)) {
                            Some(v) => v.clone(),
                            None => return Err("index out of range".to_owned()),
                        }
                    }
                    _ => return Err(format!("can't index item of type {}", go_type(&value))),
                };
            }
            Ok(Val::Json(value))
        }
        "print" | "toString" => {
            let mut out = String::new();
            for (i, a) in args.iter().enumerate() {
                let is_str = |v: &Val| matches!(v, Val::Json(Value::String(_)));
                // fmt.Sprint puts a space between operands when neither is a string.
                if i > 0 && !is_str(a) && !is_str(&args[i - 1]) {
                    out.push(' ');
                }
                out.push_str(&a.text());
            }
            text(out)
        }
        "printf" => {
            let Some((format, rest)) = args.split_first() else {
                return Err("wrong number of args for printf: want at least 1 got 0".to_owned());
            };
            text(printf(&string(format), rest))
        }
        "lower" => one(name, &args).and_then(|s| text(s.to_lowercase())),
        "upper" => one(name, &args).and_then(|s| text(s.to_uppercase())),
        "title" => one(name, &args).and_then(|s| text(title(&s))),
        "trim" => one(name, &args).and_then(|s| text(s.trim().to_owned())),
        "normalize" => one(name, &args).and_then(|s| text(sanitize_name(&s))),
        "b64enc" => one(name, &args).and_then(|s| text(base64::engine::general_purpose::STANDARD.encode(s))),
        "b64dec" => one(name, &args).and_then(|s| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("b64dec: {e}"))?;
            text(String::from_utf8_lossy(&bytes).into_owned())
        }),
        "sha256sum" => one(name, &args).and_then(|s| {
            use sha2::Digest as _;
            let digest = sha2::Sha256::digest(s.as_bytes());
            text(digest.iter().fold(String::new(), |mut out, b| {
                let _ = write!(out, "{b:02x}");
                out
            }))
        }),
        "trimPrefix" | "trimSuffix" | "contains" | "hasPrefix" | "hasSuffix" | "splitList" | "join" => {
            want(name, &args, 2)?;
            let (a, s) = (string(&args[0]), &args[1]);
            match name {
                "trimPrefix" => text(
                    string(s)
                        .strip_prefix(a.as_str())
                        .map(str::to_owned)
                        .unwrap_or_else(|| string(s)),
                ),
                "trimSuffix" => text(
                    string(s)
                        .strip_suffix(a.as_str())
                        .map(str::to_owned)
                        .unwrap_or_else(|| string(s)),
                ),
                "contains" => Ok(Val::Json(Value::Bool(string(s).contains(&a)))),
                "hasPrefix" => Ok(Val::Json(Value::Bool(string(s).starts_with(&a)))),
                "hasSuffix" => Ok(Val::Json(Value::Bool(string(s).ends_with(&a)))),
                "splitList" => {
                    let s = string(s);
                    let parts = if a.is_empty() {
                        s.chars().count()
                    } else {
                        s.matches(a.as_str()).count() + 1
                    };
                    if parts > MAX_ITEMS {
                        return Err(format!("splitList would make more than {MAX_ITEMS} items"));
                    }
                    Ok(Val::Json(Value::Array(
                        s.split(a.as_str()).map(|p| Value::String(p.to_owned())).collect(),
                    )))
                }
                _ => match s {
                    Val::Json(Value::Array(items)) => {
                        let parts: Vec<String> = items.iter().map(go_print).collect();
                        let joined = parts.iter().map(String::len).sum::<usize>()
                            + a.len().saturating_mul(parts.len().saturating_sub(1));
                        if joined > MAX_VALUE {
                            return Err(too_long("the result of join"));
                        }
                        text(parts.join(&a))
                    }
                    other => text(string(other)),
                },
            }
        }
        "replace" => {
            want(name, &args, 3)?;
            let (old, new, s) = (string(&args[0]), string(&args[1]), string(&args[2]));
            // Worked out first: a chain of replaces could otherwise grow a string exponentially.
            let count = if old.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(old.as_str()).count()
            };
            let len = (s.len() - count * old.len()).saturating_add(count.saturating_mul(new.len()));
            if len > MAX_VALUE {
                return Err(too_long("the result of replace"));
            }
            text(s.replace(&old, &new))
        }
        "trunc" => {
            want(name, &args, 2)?;
            let Val::Json(Value::Number(n)) = &args[0] else {
                return Err("trunc: the length must be a number".to_owned());
            };
            let n = n.as_i64().unwrap_or(0);
            let chars: Vec<char> = string(&args[1]).chars().collect();
            let len = i64::try_from(chars.len()).unwrap_or(i64::MAX);
            let kept: String = if n >= 0 {
                chars
                    .iter()
                    .take(usize::try_from(n.min(len)).unwrap_or(0))
                    .collect()
            } else {
                chars
                    .iter()
                    .skip(usize::try_from((len + n).max(0)).unwrap_or(0))
                    .collect()
            };
            text(kept)
        }
        "default" => {
            want(name, &args, 2)?;
            let mut args = args;
            let given = args.pop().unwrap_or(Val::Missing);
            Ok(if given.truth() {
                given
            } else {
                args.pop().unwrap_or(Val::Missing)
            })
        }
        "empty" => {
            want(name, &args, 1)?;
            Ok(Val::Json(Value::Bool(!args[0].truth())))
        }
        "quote" | "squote" => {
            let q = if name == "quote" { '"' } else { '\'' };
            let parts: Vec<String> = args
                .iter()
                .filter(|a| !matches!(a, Val::Missing | Val::Json(Value::Null)))
                .map(|a| {
                    let s = a.text();
                    if q == '"' {
                        Value::String(s).to_string()
                    } else {
                        format!("'{s}'")
                    }
                })
                .collect();
            text(parts.join(" "))
        }
        "toJson" => {
            want(name, &args, 1)?;
            text(args[0].json().to_string())
        }
        other => Err(format!("function {other:?} not defined")),
    }
}

fn one(name: &str, args: &[Val]) -> Result<String, String> {
    want(name, args, 1)?;
    Ok(string(&args[0]))
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for c in s.chars() {
        if start && c.is_alphanumeric() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = !c.is_alphanumeric();
    }
    out
}

/// Go's `fmt.Sprintf` for the verbs templates use: `%s %v %d %q %%`.
fn printf(format: &str, args: &[Val]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(verb @ ('s' | 'v' | 'd' | 'q')) => match args.next() {
                Some(a) if verb == 'q' => out.push_str(&Value::String(a.text()).to_string()),
                Some(a) => out.push_str(&a.text()),
                None => {
                    let _ = write!(out, "%!{verb}(MISSING)");
                }
            },
            Some(other) => {
                let _ = write!(out, "%!{other}(unsupported)");
            }
            None => out.push_str("%!(NOVERB)"),
        }
    }
    out
}

/// Renders `src` as a Go template with `params`, within `budget`.
pub fn render(
    src: &str,
    params: &Map<String, Value>,
    missing: MissingKey,
    budget: &Budget,
) -> Result<String, String> {
    Template::parse(src)?.execute(&Value::Object(params.clone()), missing, budget)
}

/// A name made fit for Kubernetes (upstream's `SanitizeName`, the `nameNormalized` parameter):
/// lower case, every character but `a-z 0-9 - .` replaced by `-`, at most 253 characters, no
/// leading or trailing `-` or `.`.
pub fn sanitize_name(name: &str) -> String {
    let lowered: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    lowered.trim_matches(|c| c == '-' || c == '.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(src: &str, params: Value, missing: MissingKey) -> Result<String, String> {
        let Value::Object(map) = params else { panic!() };
        render(src, &map, missing, &Budget::default())
    }

    #[test]
    fn what_a_template_may_cost_is_bounded() {
        let params = json!({"l": (0..10_000).collect::<Vec<_>>(), "s": "aaaaaaaaaa"});
        let deep_parens = format!("{{{{ {}1{} }}}}", "(".repeat(200_000), ")".repeat(200_000));
        let err = run(&deep_parens, params.clone(), MissingKey::NoValue).unwrap_err();
        assert!(err.contains("nested more than"), "{err}");
        let deep_blocks = format!("{}x{}", "{{if 1}}".repeat(100_000), "{{end}}".repeat(100_000));
        let err = run(&deep_blocks, params.clone(), MissingKey::NoValue).unwrap_err();
        assert!(err.contains("nested more than"), "{err}");
        let else_ifs = format!("{{{{if 0}}}}{}x{{{{end}}}}", "{{else if 0}}".repeat(100_000));
        let err = run(&else_ifs, params.clone(), MissingKey::NoValue).unwrap_err();
        assert!(err.contains("nested more than"), "{err}");
        let replaces = format!("{{{{ .s{} }}}}", r#" | replace "a" "aaaaaaaaaa""#.repeat(10));
        let err = run(&replaces, params.clone(), MissingKey::NoValue).unwrap_err();
        assert!(err.contains("result of replace"), "{err}");
        let join = r#"{{ splitList "" (.s | replace "a" "aaaaaaaaaa" | replace "a" "aaaaaaaaaa") | join (.s | replace "a" "aaaaaaaaaa" | replace "a" "aaaaaaaaaa" | replace "a" "aaaaaaaaaa") }}"#;
        let err = run(join, params.clone(), MissingKey::NoValue).unwrap_err();
        assert!(err.contains("result of join"), "{err}");
        let nested = "{{range .l}}{{range $.l}}{{range $.l}}x{{end}}{{end}}{{end}}";
        let started = Instant::now();
        let err = run(nested, params, MissingKey::NoValue).unwrap_err();
        assert!(
            err.contains("longer than") || err.contains("took more than"),
            "{err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn fields_pipelines_and_functions() {
        let p = json!({"name": "Web", "n": 3, "meta": {"labels": {"env": "prod"}}, "list": ["a", "b"]});
        for (src, want) in [
            ("{{.name}}-x", "Web-x"),
            ("{{ .name | lower }}", "web"),
            ("{{ .meta.labels.env }}", "prod"),
            ("{{ index .meta.labels \"env\" }}", "prod"),
            ("{{ $.name }}", "Web"),
            ("{{ .n }}", "3"),
            ("{{ printf \"%s-%d\" .name .n }}", "Web-3"),
            ("{{ .missing | default \"d\" }}", "d"),
            ("{{ if eq .name \"Web\" }}yes{{ else }}no{{ end }}", "yes"),
            ("{{ if .missing }}a{{ else if .n }}b{{ else }}c{{ end }}", "b"),
            ("{{ range .list }}[{{ . }}]{{ end }}", "[a][b]"),
            ("{{ with .meta.labels }}{{ .env }}{{ end }}", "prod"),
            ("a {{- \" b \" -}} c", "a b c"),
            ("{{/* note */}}x", "x"),
            ("{{ .name | upper | quote }}", "\"WEB\""),
            ("{{ trunc 2 .name }}", "We"),
            ("{{ replace \"e\" \"E\" .name }}", "WEb"),
            ("{{ normalize \"My_Cluster.1\" }}", "my-cluster.1"),
            ("{{ (index .list 1) | upper }}", "B"),
            ("{{ .missing }}", "<no value>"),
        ] {
            assert_eq!(
                run(src, p.clone(), MissingKey::NoValue).as_deref(),
                Ok(want),
                "{src}"
            );
        }
    }

    #[test]
    fn missing_keys_and_errors() {
        let p = json!({"a": "x"});
        assert_eq!(
            run("{{ .b }}", p.clone(), MissingKey::Error),
            Err("map has no entry for key \"b\"".to_owned())
        );
        assert!(
            run("{{ .a.b }}", p.clone(), MissingKey::NoValue)
                .unwrap_err()
                .contains("can't evaluate field b")
        );
        assert!(
            run("{{ .a", p.clone(), MissingKey::NoValue)
                .unwrap_err()
                .contains("unclosed action")
        );
        assert!(
            run("{{ nope .a }}", p.clone(), MissingKey::NoValue)
                .unwrap_err()
                .contains("\"nope\" not defined")
        );
        assert!(
            run("{{ if .a }}x", p.clone(), MissingKey::NoValue)
                .unwrap_err()
                .contains("has no end")
        );
        assert!(
            run("{{ end }}", p, MissingKey::NoValue)
                .unwrap_err()
                .contains("unexpected {{end}}")
        );
        assert_eq!(
            MissingKey::from_options(&["missingkey=error".to_owned()]),
            Ok(MissingKey::Error)
        );
        assert!(MissingKey::from_options(&["nope".to_owned()]).is_err());
    }
}
