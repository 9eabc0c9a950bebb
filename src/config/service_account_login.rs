//! `tiphys.serviceaccountlogin.*` in `argocd-cm`: whether a Kubernetes ServiceAccount token may
//! be presented as a bearer token (checked with a TokenReview on the `--kube` API server), for
//! which audiences, and which ServiceAccounts. Off unless turned on; upstream has no such keys
//! and ignores them. A bad value or an unknown key under the prefix is an error at its key, so
//! a reload keeps the last good settings.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::glob::Glob;

pub const PREFIX: &str = "tiphys.serviceaccountlogin.";
pub const ENABLED: &str = "tiphys.serviceaccountlogin.enabled";
pub const AUDIENCES: &str = "tiphys.serviceaccountlogin.audiences";
pub const ALLOWED: &str = "tiphys.serviceaccountlogin.allowed";
pub const CACHE_DURATION: &str = "tiphys.serviceaccountlogin.cacheduration";

/// How long a successful review is trusted at most: a deleted ServiceAccount (or one
/// removed from the allowed list: that is checked on every request) loses access within it.
pub const MAX_CACHE_DURATION: Duration = Duration::from_secs(60);

/// One `namespace/name` pattern of `allowed`.
#[derive(Clone, Debug)]
pub struct AllowedPattern {
    pub text: String,
    glob: Glob,
}

#[derive(Clone, Debug)]
pub struct ServiceAccountLogin {
    pub enabled: bool,
    /// The TokenReview's `spec.audiences`; never empty when enabled.
    pub audiences: Vec<String>,
    pub allowed: Arc<Vec<AllowedPattern>>,
    /// How long a successful review is reused (zero: every request is reviewed).
    pub cache_duration: Duration,
}

impl Default for ServiceAccountLogin {
    fn default() -> Self {
        Self {
            enabled: false,
            audiences: Vec::new(),
            allowed: Arc::new(Vec::new()),
            cache_duration: MAX_CACHE_DURATION,
        }
    }
}

impl ServiceAccountLogin {
    /// Whether the ServiceAccount `namespace`/`name` may sign in.
    pub fn allows(&self, namespace: &str, name: &str) -> bool {
        let account = format!("{namespace}/{name}");
        self.allowed.iter().any(|p| p.glob.matches(&account))
    }

    /// The settings in `cm` (argocd-cm's data); an error names the key and what is wrong.
    pub fn parse(cm: &BTreeMap<String, String>) -> Result<Self, (String, String)> {
        let mut out = Self::default();
        for (key, value) in cm.range(PREFIX.to_owned()..) {
            if !key.starts_with(PREFIX) {
                break;
            }
            let value = value.trim();
            let fail = |why: String| (key.clone(), why);
            match key.as_str() {
                ENABLED => out.enabled = parse_bool(value).map_err(fail)?,
                AUDIENCES => out.audiences = list(value).map(str::to_owned).collect(),
                ALLOWED => {
                    let patterns: Vec<AllowedPattern> =
                        list(value).map(pattern).collect::<Result<_, _>>().map_err(fail)?;
                    out.allowed = Arc::new(patterns);
                }
                CACHE_DURATION => out.cache_duration = parse_cache_duration(value).map_err(fail)?,
                _ => {
                    return Err(fail(format!(
                        "unknown key: the keys are {ENABLED}, {AUDIENCES}, {ALLOWED} and {CACHE_DURATION}"
                    )));
                }
            }
        }
        if out.enabled && out.audiences.is_empty() {
            return Err((
                AUDIENCES.to_owned(),
                format!(
                    "required when {ENABLED} is true: the audiences a ServiceAccount token must be minted for \
                     (such as \"tiphys\", as in `kubectl create token SA --audience tiphys`)"
                ),
            ));
        }
        Ok(out)
    }
}

/// The non-empty items of a comma-separated list.
fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn parse_bool(value: &str) -> Result<bool, String> {
    super::settings::go_bool(value).ok_or_else(|| format!("{value:?} is not a boolean: use true or false"))
}

/// `namespace/name`, each part a glob (`ci/*`, `*/deployer`).
fn pattern(text: &str) -> Result<AllowedPattern, String> {
    let parts: Vec<&str> = text.split('/').collect();
    if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "{text:?} is not a namespace/name pattern (such as ci/deployer or ci/*)"
        ));
    }
    // `/` is a separator, so `*` never matches across the namespace and the name.
    let glob = Glob::new(text, &['/']).map_err(|e| format!("{text:?} is not a valid pattern: {e}"))?;
    Ok(AllowedPattern {
        text: text.to_owned(),
        glob,
    })
}

fn parse_cache_duration(value: &str) -> Result<Duration, String> {
    let duration = super::duration::parse_go_duration(value)
        .map_err(|e| format!("{value:?} is not a duration (such as 30s): {e}"))?;
    if duration > MAX_CACHE_DURATION {
        return Err(format!(
            "{value} is more than {}s: a reviewed token is trusted for a minute at most",
            MAX_CACHE_DURATION.as_secs()
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<ServiceAccountLogin, (String, String)> {
        let cm = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ServiceAccountLogin::parse(&cm)
    }

    #[test]
    fn off_by_default_and_patterns_match_namespace_and_name() {
        let off = parse(&[("url", "https://x")]).unwrap();
        assert!(!off.enabled);
        let on = parse(&[
            (ENABLED, "true"),
            (AUDIENCES, " tiphys, other ,"),
            (ALLOWED, "ci/deployer, build/*"),
            (CACHE_DURATION, "5s"),
        ])
        .unwrap();
        assert_eq!(on.audiences, ["tiphys", "other"]);
        assert_eq!(on.cache_duration, Duration::from_secs(5));
        assert!(on.allows("ci", "deployer"));
        assert!(!on.allows("ci", "other"));
        assert!(on.allows("build", "anything"));
        assert!(!on.allows("buildx", "a"));
        // The name cannot leak into the namespace.
        assert!(!parse(&[(ALLOWED, "ci*/x")]).unwrap().allows("ci/a", "x"));
        assert!(
            !parse(&[(ENABLED, "false"), (ALLOWED, "")])
                .unwrap()
                .allows("ci", "deployer")
        );
    }

    #[test]
    fn each_bad_value_is_named() {
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let cases: [Case<'_>; 7] = [
            (&[(ENABLED, "yes")], ENABLED, "\"yes\" is not a boolean"),
            (&[(ENABLED, "true")], AUDIENCES, "required when"),
            (
                &[(ENABLED, "true"), (AUDIENCES, " , ")],
                AUDIENCES,
                "required when",
            ),
            (&[(ALLOWED, "deployer")], ALLOWED, "not a namespace/name pattern"),
            (&[(ALLOWED, "a/b/c")], ALLOWED, "not a namespace/name pattern"),
            (&[(CACHE_DURATION, "5m")], CACHE_DURATION, "more than 60s"),
            (&[("tiphys.serviceaccountlogin.audience", "x")], "", "unknown key"),
        ];
        for (pairs, key, want) in cases {
            let (got_key, why) = parse(pairs).unwrap_err();
            if !key.is_empty() {
                assert_eq!(got_key, key, "{pairs:?}");
            }
            assert!(why.contains(want), "{pairs:?}: {why}");
        }
    }
}
