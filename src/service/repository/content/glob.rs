//! The glob syntax of a directory source's `include` and `exclude`, as upstream compiles them
//! with `gobwas/glob` and no separators: `*` and `**` match any run of characters, `/`
//! included; `?` one character; `[abc]`, `[a-z]`, `[!…]` a class; `{a,b}` alternatives (which
//! may nest and hold wildcards); `\` escapes. The whole text must match. A pattern that does
//! not compile matches nothing, as upstream logs it and answers no.
//!
//! Alternatives are expanded into plain patterns, at most [`MAX_EXPANSIONS`] of them.

/// At most this many plain patterns come out of a pattern's `{…}` alternatives.
const MAX_EXPANSIONS: usize = 256;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Char(char),
    Any,
    Star,
    Class {
        negated: bool,
        chars: Vec<char>,
        range: Option<(char, char)>,
    },
}

/// A compiled pattern: one of several plain patterns must match.
#[derive(Debug)]
pub(super) struct Glob {
    alternatives: Vec<Vec<Token>>,
}

impl Glob {
    /// `None` when the pattern does not compile (upstream then matches nothing).
    pub(super) fn new(pattern: &str) -> Option<Self> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut pos = 0;
        let alternatives = sequence(&chars, &mut pos, false)?;
        if pos != chars.len() {
            return None;
        }
        Some(Self { alternatives })
    }

    pub(super) fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        self.alternatives.iter().any(|tokens| plain_match(tokens, &text))
    }
}

/// Parses until the end, or (inside braces) until an unmatched `,` or `}`, returning every
/// expansion of what was read.
fn sequence(chars: &[char], pos: &mut usize, in_braces: bool) -> Option<Vec<Vec<Token>>> {
    let mut out: Vec<Vec<Token>> = vec![Vec::new()];
    while let Some(&c) = chars.get(*pos) {
        match c {
            ',' | '}' if in_braces => return Some(out),
            '\\' => {
                let escaped = *chars.get(*pos + 1)?;
                *pos += 2;
                push(&mut out, Token::Char(escaped));
            }
            '*' => {
                *pos += 1;
                while chars.get(*pos) == Some(&'*') {
                    *pos += 1;
                }
                push(&mut out, Token::Star);
            }
            '?' => {
                *pos += 1;
                push(&mut out, Token::Any);
            }
            '[' => {
                *pos += 1;
                let token = class(chars, pos)?;
                push(&mut out, token);
            }
            '{' => {
                *pos += 1;
                let mut choices: Vec<Vec<Token>> = Vec::new();
                loop {
                    choices.extend(sequence(chars, pos, true)?);
                    match chars.get(*pos) {
                        Some(',') => *pos += 1,
                        Some('}') => {
                            *pos += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
                if out.len() * choices.len() > MAX_EXPANSIONS {
                    return None;
                }
                out = out
                    .iter()
                    .flat_map(|head| {
                        choices.iter().map(move |tail| {
                            let mut joined = head.clone();
                            joined.extend(tail.iter().cloned());
                            joined
                        })
                    })
                    .collect();
            }
            other => {
                *pos += 1;
                push(&mut out, Token::Char(other));
            }
        }
    }
    if in_braces { None } else { Some(out) }
}

fn push(out: &mut [Vec<Token>], token: Token) {
    for tokens in out {
        tokens.push(token.clone());
    }
}

/// A class after its `[`: `!` negates; `x-y` alone is a range, anything else a list of
/// characters. An empty or unclosed class does not compile.
fn class(chars: &[char], pos: &mut usize) -> Option<Token> {
    let negated = chars.get(*pos) == Some(&'!');
    if negated {
        *pos += 1;
    }
    let mut members = Vec::new();
    loop {
        match *chars.get(*pos)? {
            ']' => {
                *pos += 1;
                break;
            }
            '\\' => {
                members.push(*chars.get(*pos + 1)?);
                *pos += 2;
            }
            c => {
                members.push(c);
                *pos += 1;
            }
        }
    }
    match members.as_slice() {
        [] => None,
        [lo, '-', hi] => Some(Token::Class {
            negated,
            chars: Vec::new(),
            range: Some((*lo, *hi)),
        }),
        _ => Some(Token::Class {
            negated,
            chars: members,
            range: None,
        }),
    }
}

fn one(token: &Token, c: char) -> bool {
    match token {
        Token::Char(want) => *want == c,
        Token::Any => true,
        Token::Star => false,
        Token::Class {
            negated,
            chars,
            range,
        } => {
            let inside = match range {
                Some((lo, hi)) => (*lo..=*hi).contains(&c),
                None => chars.contains(&c),
            };
            inside != *negated
        }
    }
}

/// Wildcard matching with backtracking to the last star only: linear in practice, quadratic
/// at worst, never exponential.
fn plain_match(tokens: &[Token], text: &[char]) -> bool {
    let (mut t, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < text.len() {
        match tokens.get(t) {
            Some(Token::Star) => {
                star = Some((t, s));
                t += 1;
            }
            Some(token) if one(token, text[s]) => {
                t += 1;
                s += 1;
            }
            _ => match star {
                Some((st, ss)) => {
                    t = st + 1;
                    s = ss + 1;
                    star = Some((st, ss + 1));
                }
                None => return false,
            },
        }
    }
    tokens[t..].iter().all(|token| *token == Token::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, text: &str) -> bool {
        Glob::new(pattern).is_some_and(|g| g.matches(text))
    }

    #[test]
    fn upstream_cases() {
        assert!(m("hello", "hello"));
        assert!(!m("hell", "hello"));
        assert!(m("hell*", "hello"));
        assert!(m("h*", "hello"));
        assert!(!m("e*", "hello"));
        assert!(!m("e[[a*", "e[[a*"));
    }

    #[test]
    fn stars_cross_slashes_without_separators() {
        assert!(m("*.yaml", "sub/dir/a.yaml"));
        assert!(m("**/*.yaml", "sub/a.yaml"));
        assert!(m("config/*", "config/a/b.json"));
        assert!(!m("*.yaml", "a.yml"));
        assert!(m("a?c", "a/c"));
        assert!(m("*", ""));
        assert!(!m("?", ""));
    }

    #[test]
    fn alternatives_classes_and_escapes() {
        assert!(m("{config.json,env-usw2/*}", "config.json"));
        assert!(m("{config.json,env-usw2/*}", "env-usw2/deploy.yaml"));
        assert!(!m("{config.json,env-usw2/*}", "other.yaml"));
        assert!(m("{a,b{c,d}}.yaml", "bd.yaml"));
        assert!(m("{,x}a", "a"));
        assert!(m("[abc].yaml", "b.yaml"));
        assert!(m("[a-c].yaml", "c.yaml"));
        assert!(!m("[!a-c].yaml", "c.yaml"));
        assert!(m("[!a-c].yaml", "d.yaml"));
        assert!(m("\\*.yaml", "*.yaml"));
        assert!(!m("\\*.yaml", "a.yaml"));
    }

    #[test]
    fn broken_patterns_match_nothing() {
        for bad in ["{a,b", "[ab", "[]", "a\\"] {
            assert!(Glob::new(bad).is_none() || !m(bad, bad), "{bad}");
        }
        assert!(Glob::new("{a,b").is_none());
        assert!(Glob::new("[ab").is_none());
    }

    #[test]
    fn expansion_is_bounded() {
        let pattern = "{a,b}".repeat(9);
        assert!(Glob::new(&pattern).is_none());
        assert!(Glob::new(&"{a,b}".repeat(8)).is_some());
    }

    #[test]
    fn backtracking_is_not_exponential() {
        let text = "a".repeat(2000);
        let pattern = format!("{}b", "*a".repeat(50));
        assert!(!m(&pattern, &text));
    }
}
