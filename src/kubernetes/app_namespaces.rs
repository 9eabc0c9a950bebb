//! `--application-namespaces`: the namespaces besides the control namespace whose Applications
//! the server serves, with the meaning upstream gives the list (util/security's
//! `IsNamespaceEnabled` over util/glob's `MatchStringInList` in its regexp mode): an entry
//! wrapped in `/` is a regular expression that may match anywhere in the name, any other entry
//! a glob that must match the whole name. There is no negation: upstream has none here.
//!
//! Upstream compiles regular expressions with regexp2 (.NET syntax); tiphys with the `regex`
//! crate, so lookarounds and back-references do not compile. A pattern that does not compile
//! matches nothing, as upstream (which logs it at each use; tiphys once, at start).

use regex::Regex;

use crate::glob::Glob;

/// The most a regular expression of the list may compile to: a namespace name is short, a
/// pattern that needs more is a mistake.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

#[derive(Clone, Debug)]
enum Pattern {
    Glob(Glob),
    Regex(Regex),
    /// Did not compile: matches nothing.
    Never,
}

/// The enabled namespaces; empty (the default) serves the control namespace only.
#[derive(Clone, Debug, Default)]
pub struct AppNamespaces {
    patterns: Vec<Pattern>,
}

impl AppNamespaces {
    /// The list as the flag or `application.namespaces` gives it, one pattern an entry; blank
    /// entries (`a,,b`, a trailing comma) are left out.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Self {
        let patterns = entries
            .iter()
            .map(|e| e.as_ref().trim())
            .filter(|e| !e.is_empty())
            .map(compile)
            .collect();
        Self { patterns }
    }

    /// No namespace besides the control namespace is enabled.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether applications in `namespace` are served by a server whose control namespace is
    /// `control`.
    pub fn enabled(&self, namespace: &str, control: &str) -> bool {
        namespace == control || self.patterns.iter().any(|p| p.matches(namespace))
    }
}

fn compile(entry: &str) -> Pattern {
    // `/` alone is not a regular expression (upstream would slice it out of range).
    if entry.len() >= 2
        && let Some(body) = entry.strip_prefix('/').and_then(|e| e.strip_suffix('/'))
    {
        return match regex::RegexBuilder::new(body)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
        {
            Ok(re) => Pattern::Regex(re),
            Err(e) => {
                tracing::warn!(
                    "application namespace pattern {entry:?} does not compile and matches nothing: {e}"
                );
                Pattern::Never
            }
        };
    }
    match Glob::new(entry, &[]) {
        Ok(glob) => Pattern::Glob(glob),
        Err(e) => {
            tracing::warn!(
                "application namespace pattern {entry:?} does not compile and matches nothing: {e}"
            );
            Pattern::Never
        }
    }
}

impl Pattern {
    fn matches(&self, namespace: &str) -> bool {
        match self {
            Pattern::Glob(glob) => glob.matches(namespace),
            Pattern::Regex(re) => re.is_match(namespace),
            Pattern::Never => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AppNamespaces;

    fn enabled(list: &[&str], ns: &str) -> bool {
        AppNamespaces::parse(list).enabled(ns, "argocd")
    }

    #[test]
    fn the_control_namespace_is_always_enabled_and_nothing_else_by_default() {
        assert!(enabled(&[], "argocd"));
        assert!(!enabled(&[], "apps-a"));
        assert!(AppNamespaces::parse::<&str>(&[]).is_empty());
        assert!(AppNamespaces::parse(&["", " "]).is_empty());
    }

    #[test]
    fn globs_match_the_whole_name() {
        assert!(enabled(&["apps-*"], "apps-a"));
        assert!(!enabled(&["apps-*"], "team-apps-a"));
        assert!(enabled(&["team-?", "exact"], "team-x"));
        assert!(enabled(&["team-?", "exact"], "exact"));
        assert!(!enabled(&["team-?", "exact"], "exactly"));
        assert!(enabled(&["{dev,prod}-*"], "prod-1"));
        assert!(
            enabled(&[" apps-* "], "apps-b"),
            "entries are trimmed, as upstream's env list"
        );
        assert!(enabled(&["*"], "anything"));
    }

    #[test]
    fn slashes_make_an_unanchored_regex() {
        assert!(enabled(&["/^team-[0-9]+$/"], "team-12"));
        assert!(!enabled(&["/^team-[0-9]+$/"], "team-x"));
        // Unanchored: a match anywhere counts.
        assert!(enabled(&["/apps/"], "my-apps-ns"));
        // Not a glob once in slashes: `*` is a repeat here.
        assert!(!enabled(&["/^apps-*$/"], "apps-a"));
    }

    #[test]
    fn no_negation_and_broken_patterns_match_nothing() {
        // `!` has no meaning of its own (upstream has no negation in this list).
        assert!(!enabled(&["!apps-a"], "apps-b"));
        assert!(enabled(&["!apps-a"], "!apps-a"));
        assert!(!enabled(&["/(unclosed/"], "unclosed"));
        assert!(!enabled(&["/"], "x"));
        assert!(enabled(&["/(unclosed/", "x"], "x"));
    }
}
