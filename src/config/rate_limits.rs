//! `tiphys.ratelimit.*` in `argocd-cm`: how many requests each kind of caller may make. The
//! keys live in a namespace of tiphys's own, so no key of upstream's can ever mean something
//! else here, and upstream ignores them. Each class has a sustained rate and a burst; a bad
//! value (not a number, zero, negative, out of range) or an unknown key under the prefix is an
//! error at its key, so a reload keeps the last good limits (as for every argocd-cm key).

use std::collections::BTreeMap;

/// The prefix of every key read here.
pub const PREFIX: &str = "tiphys.ratelimit.";
/// The on/off switch: `tiphys.ratelimit.enabled` (Go's boolean syntax; default on).
pub const ENABLED: &str = "tiphys.ratelimit.enabled";

/// What a request is counted against. The first four are counted per client address (their
/// callers need no session); `Read` and `Write` per authenticated subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Password logins (`SessionService.Create`, REST and gRPC) and the single sign-on
    /// redirects (`/auth/login`, `/auth/callback`).
    Login,
    /// `POST /api/webhook`.
    Webhook,
    /// `GET /api/badge`.
    Badge,
    /// `/download/…`: the CLI binary.
    Download,
    /// Calls that change nothing (REST `GET`, gRPC methods without a mutating REST mapping),
    /// watches included.
    Read,
    /// Calls that change something.
    Write,
}

impl Class {
    pub const ALL: [Class; 6] = [
        Class::Login,
        Class::Webhook,
        Class::Badge,
        Class::Download,
        Class::Read,
        Class::Write,
    ];

    /// The name in keys, metrics and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Login => "login",
            Self::Webhook => "webhook",
            Self::Badge => "badge",
            Self::Download => "download",
            Self::Read => "read",
            Self::Write => "write",
        }
    }

    /// Whether the class is counted per client address (else per subject).
    pub fn per_address(self) -> bool {
        !matches!(self, Self::Read | Self::Write)
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Defaults far above what a person at the dashboard or a CLI session sends: a page of the
    /// dashboard makes tens of calls, a login one. The login burst also leaves room for the
    /// brute-force rules (`auth::throttle`) to answer first: they count failures, this counts
    /// attempts.
    fn default_limit(self) -> Limit {
        let (per_second, burst) = match self {
            Self::Login => (2.0, 100),
            Self::Webhook => (10.0, 100),
            Self::Badge => (50.0, 300),
            Self::Download => (0.2, 10),
            Self::Read => (1000.0, 3000),
            Self::Write => (200.0, 1000),
        };
        Limit { per_second, burst }
    }
}

/// A token bucket's size: `burst` requests at once, refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    pub per_second: f64,
    pub burst: u32,
}

/// The largest rate and burst accepted: beyond them a limit means nothing, and a typo (an
/// extra digit) is more likely than intent.
const MAX_RATE: f64 = 1_000_000.0;
const MAX_BURST: u32 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimits {
    pub enabled: bool,
    limits: [Limit; 6],
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            enabled: true,
            limits: Class::ALL.map(Class::default_limit),
        }
    }
}

impl RateLimits {
    pub fn limit(&self, class: Class) -> Limit {
        self.limits[class.index()]
    }

    /// The limits set in `cm` (argocd-cm's data); an error names the key and what is wrong.
    pub fn parse(cm: &BTreeMap<String, String>) -> Result<Self, (String, String)> {
        let mut out = Self::default();
        for (key, value) in cm.range(PREFIX.to_owned()..) {
            let Some(rest) = key.strip_prefix(PREFIX) else {
                break;
            };
            let value = value.trim();
            let fail = |why: String| (key.clone(), why);
            if key == ENABLED {
                out.enabled = super::settings::go_bool(value)
                    .ok_or_else(|| fail(format!("{value:?} is not a boolean: use true or false")))?;
                continue;
            }
            let Some((name, field)) = rest.split_once('.') else {
                return Err(fail(unknown_key()));
            };
            let Some(class) = Class::ALL.into_iter().find(|c| c.as_str() == name) else {
                return Err(fail(unknown_key()));
            };
            let limit = &mut out.limits[class.index()];
            match field {
                "rate" => limit.per_second = parse_rate(value).map_err(fail)?,
                "burst" => limit.burst = parse_burst(value).map_err(fail)?,
                _ => return Err(fail(unknown_key())),
            }
        }
        Ok(out)
    }
}

fn unknown_key() -> String {
    let classes: Vec<&str> = Class::ALL.iter().map(|c| c.as_str()).collect();
    format!(
        "unknown key: the keys are {ENABLED} and {PREFIX}<class>.rate|burst, where <class> is one of {}",
        classes.join(", ")
    )
}

const TO_TURN_OFF: &str = "to turn rate limits off, set tiphys.ratelimit.enabled to \"false\"";

/// Requests per second: a positive decimal number (`0.5`, `20`).
fn parse_rate(value: &str) -> Result<f64, String> {
    let rate: f64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of requests per second (such as 0.5 or 20)"))?;
    if !rate.is_finite() {
        return Err(format!("{value:?} is not a finite number of requests per second"));
    }
    if rate < 0.0 {
        return Err(format!(
            "{value} is negative: a rate is a number of requests per second above zero"
        ));
    }
    if rate == 0.0 {
        return Err(format!("must be greater than zero ({TO_TURN_OFF})"));
    }
    if rate > MAX_RATE {
        return Err(format!("{value} is more than {MAX_RATE} requests per second"));
    }
    Ok(rate)
}

/// Requests at once: a whole number from 1.
fn parse_burst(value: &str) -> Result<u32, String> {
    if value.starts_with('-') {
        return Err(format!(
            "{value} is negative: a burst is a whole number of requests from 1"
        ));
    }
    let burst: u32 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a whole number of requests (such as 10)"))?;
    if burst == 0 {
        return Err(format!("must be at least 1 ({TO_TURN_OFF})"));
    }
    if burst > MAX_BURST {
        return Err(format!("{value} is more than {MAX_BURST} requests"));
    }
    Ok(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<RateLimits, (String, String)> {
        let cm = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        RateLimits::parse(&cm)
    }

    fn error(pairs: &[(&str, &str)]) -> String {
        let (key, why) = parse(pairs).unwrap_err();
        format!("{key}: {why}")
    }

    #[test]
    fn defaults_and_overrides() {
        let limits = parse(&[("url", "https://x"), ("users.anonymous.enabled", "true")]).unwrap();
        assert_eq!(limits, RateLimits::default());
        assert!(limits.enabled);
        let limits = parse(&[
            ("tiphys.ratelimit.login.rate", " 0.5\n"),
            ("tiphys.ratelimit.login.burst", "3"),
            ("tiphys.ratelimit.enabled", "false"),
        ])
        .unwrap();
        assert_eq!(
            limits.limit(Class::Login),
            Limit {
                per_second: 0.5,
                burst: 3
            }
        );
        assert_eq!(limits.limit(Class::Read), Class::Read.default_limit());
        assert!(!limits.enabled);
    }

    #[test]
    fn each_bad_value_is_named() {
        let cases = [
            ("tiphys.ratelimit.read.rate", "-1", "-1 is negative"),
            ("tiphys.ratelimit.read.rate", "0", "must be greater than zero"),
            (
                "tiphys.ratelimit.read.rate",
                "fast",
                "\"fast\" is not a number of requests per second",
            ),
            ("tiphys.ratelimit.read.rate", "NaN", "not a finite number"),
            ("tiphys.ratelimit.read.rate", "1e9", "is more than"),
            ("tiphys.ratelimit.write.burst", "-5", "-5 is negative"),
            ("tiphys.ratelimit.write.burst", "0", "must be at least 1"),
            (
                "tiphys.ratelimit.write.burst",
                "ten",
                "\"ten\" is not a whole number",
            ),
            (
                "tiphys.ratelimit.write.burst",
                "1.5",
                "\"1.5\" is not a whole number",
            ),
            ("tiphys.ratelimit.enabled", "yes", "\"yes\" is not a boolean"),
            ("tiphys.ratelimit.logins.rate", "1", "unknown key"),
            ("tiphys.ratelimit.login.size", "1", "unknown key"),
            ("tiphys.ratelimit.login", "1", "unknown key"),
        ];
        for (key, value, want) in cases {
            let got = error(&[(key, value)]);
            assert!(got.starts_with(&format!("{key}: ")), "{got}");
            assert!(got.contains(want), "{key}={value}: {got}");
        }
        assert!(error(&[("tiphys.ratelimit.read.rate", "0")]).contains("tiphys.ratelimit.enabled"));
    }
}
