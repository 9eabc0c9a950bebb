//! One compiled resource, action or object pattern, in either match mode.

use std::sync::OnceLock;

use regex::Regex;

use super::gore;
use crate::glob;

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
    /// `head*tail`
    PrefixSuffix(String, String),
    /// Regex mode: a pattern without special characters matches anywhere.
    Contains(String),
    /// Any other glob, as an anchored regex.
    Glob(LazyRegex),
    /// A regex-mode pattern, checked valid at load.
    Regex(LazyRegex),
    /// A glob that does not parse: never matches (upstream: no error).
    Never,
    /// A regex that does not compile: reaching it fails the whole check.
    Invalid(String),
}

/// A regex built on first use (most patterns of a big policy are never used
/// by a given server, and building is the dominant cost of loading).
#[derive(Debug)]
pub struct LazyRegex {
    source: String,
    built: OnceLock<Option<Regex>>,
}

impl LazyRegex {
    fn new(source: String) -> Self {
        Self {
            source,
            built: OnceLock::new(),
        }
    }

    fn get(&self) -> Option<&Regex> {
        self.built.get_or_init(|| Regex::new(&self.source).ok()).as_ref()
    }
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

    /// Argo CD's `util/glob.Match(pattern, value)`: gobwas/glob without separators.
    fn glob(pattern: &str) -> Self {
        match glob::parse(pattern, &[]) {
            Ok(glob::Program::Literal(text)) => Self::Equals(text),
            Ok(glob::Program::Anything) => Self::Anything,
            Ok(glob::Program::Prefix(text)) => Self::Prefix(text),
            Ok(glob::Program::Suffix(text)) => Self::Suffix(text),
            Ok(glob::Program::Contains(text)) => Self::Contains(text),
            Ok(glob::Program::PrefixSuffix(head, tail)) => Self::PrefixSuffix(head, tail),
            Ok(glob::Program::Regex(program)) => Self::Glob(LazyRegex::new(program)),
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
            gore::translate_checked(pattern)
                .map_or_else(Self::Invalid, |program| Self::Regex(LazyRegex::new(program)))
        }
    }

    pub fn matches(&self, value: &str) -> Result<bool, Unmatchable> {
        Ok(match self {
            Self::Anything => true,
            Self::Equals(text) => value == text,
            Self::Prefix(text) => value.starts_with(text.as_str()),
            Self::Suffix(text) => value.ends_with(text.as_str()),
            Self::PrefixSuffix(head, tail) => {
                value.len() >= head.len() + tail.len()
                    && value.starts_with(head.as_str())
                    && value.ends_with(tail.as_str())
            }
            Self::Contains(text) => value.contains(text.as_str()),
            // A glob program too big to build never matches, as a bad glob;
            // a regex that cannot be built fails the check, as an invalid one.
            Self::Glob(program) => program.get().is_some_and(|re| re.is_match(value)),
            Self::Regex(program) => program.get().ok_or(Unmatchable)?.is_match(value),
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
