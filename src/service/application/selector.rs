//! Kubernetes label selectors (`app=web,tier!=db,env in (a,b),!legacy,team`), as `List` and
//! `Watch` take them in `selector`.

use std::collections::BTreeMap;

use crate::error::AppError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(Vec<Requirement>);

impl Selector {
    pub fn parse(text: &str) -> Result<Self, AppError> {
        let bad = |why: &str| AppError::InvalidArgument(format!("invalid selector {text:?}: {why}"));
        let mut out = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let req = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(label_key(key.trim()).ok_or_else(|| bad("invalid label key"))?)
            } else if let Some((key, rest)) = split_word(term, " notin ") {
                Requirement::NotIn(
                    label_key(key).ok_or_else(|| bad("invalid label key"))?,
                    set(rest).ok_or_else(|| bad("expected (a,b) after notin"))?,
                )
            } else if let Some((key, rest)) = split_word(term, " in ") {
                Requirement::In(
                    label_key(key).ok_or_else(|| bad("invalid label key"))?,
                    set(rest).ok_or_else(|| bad("expected (a,b) after in"))?,
                )
            } else if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(
                    label_key(key).ok_or_else(|| bad("invalid label key"))?,
                    value.trim().to_owned(),
                )
            } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(
                    label_key(key).ok_or_else(|| bad("invalid label key"))?,
                    value.trim().to_owned(),
                )
            } else {
                Requirement::Exists(label_key(term).ok_or_else(|| bad("invalid label key"))?)
            };
            out.push(req);
        }
        Ok(Self(out))
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|req| match req {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0_i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn split_word<'a>(term: &'a str, word: &str) -> Option<(&'a str, &'a str)> {
    let at = term.find(word)?;
    Some((&term[..at], &term[at + word.len()..]))
}

fn set(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_owned()).collect())
}

fn label_key(key: &str) -> Option<String> {
    let key = key.trim();
    let valid = !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    valid.then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selector_forms() {
        let l = labels(&[("app", "web"), ("env", "prod")]);
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
        ] {
            assert_eq!(Selector::parse(text).unwrap().matches(&l), want, "{text}");
        }
        assert!(Selector::parse("a b=c").is_err());
        assert!(Selector::parse("env in prod").is_err());
    }
}
