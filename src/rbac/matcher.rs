//! One compiled resource, action or object pattern, in either match mode.

use regex::Regex;

use super::{glob, gore};

/// `policy.matchMode`: exactly `regex` selects regex; anything else is glob.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatchMode {
    #[default]
    Glob,
    Regex,
}

impl MatchMode {
    pub fn from_setting(value: Option<&str>) -> Self {
        if value == Some("regex") {
            Self::Regex
        } else {
            Self::Glob
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Glob => "glob",
            Self::Regex => "regex",
        }
    }
}

/// The cheapest test that decides a pattern; most policy patterns are plain
/// words or a prefix followed by `*`.
#[derive(Debug)]
pub enum Matcher {
    Anything,
    Equals(String),
    Prefix(String),
    Suffix(String),
    /// Regex mode: a pattern without special characters matches anywhere.
    Contains(String),
    Program(Regex),
    /// A glob that does not parse: never matches (upstream: no error).
    Never,
    /// A regex that does not compile: reaching it fails the whole check.
    Invalid(String),
}

/// Reaching an invalid regex: the check it belongs to denies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmatchable;

impl Matcher {
    pub fn compile(pattern: &str, mode: MatchMode) -> Self {
        match mode {
            MatchMode::Glob => Self::glob(pattern),
            MatchMode::Regex => Self::regex(pattern),
        }
    }

    fn glob(pattern: &str) -> Self {
        match glob::parse(pattern) {
            Ok(glob::Glob::Literal(text)) => Self::Equals(text),
            Ok(glob::Glob::Anything) => Self::Anything,
            Ok(glob::Glob::Prefix(text)) => Self::Prefix(text),
            Ok(glob::Glob::Suffix(text)) => Self::Suffix(text),
            Ok(glob::Glob::Regex(program)) => Regex::new(&program).map_or(Self::Never, Self::Program),
            Err(_) => Self::Never,
        }
    }

    fn regex(pattern: &str) -> Self {
        const SPECIAL: &[char] = &[
            '\\', '.', '+', '*', '?', '(', ')', '|', '[', ']', '{', '}', '^', '$',
        ];
        if pattern.is_empty() {
            Self::Anything
        } else if !pattern.contains(SPECIAL) {
            Self::Contains(pattern.to_owned())
        } else {
            gore::compile(pattern).map_or_else(Self::Invalid, Self::Program)
        }
    }

    pub fn matches(&self, value: &str) -> Result<bool, Unmatchable> {
        Ok(match self {
            Self::Anything => true,
            Self::Equals(text) => value == text,
            Self::Prefix(text) => value.starts_with(text.as_str()),
            Self::Suffix(text) => value.ends_with(text.as_str()),
            Self::Contains(text) => value.contains(text.as_str()),
            Self::Program(re) => re.is_match(value),
            Self::Never => false,
            Self::Invalid(_) => return Err(Unmatchable),
        })
    }

    /// Why the pattern can never be used, for `validate` and warnings.
    pub fn problem(&self) -> Option<&str> {
        match self {
            Self::Invalid(why) => Some(why),
            Self::Never => Some("not a valid glob: it never matches"),
            _ => None,
        }
    }
}
