//! Typed settings from the three objects, with Argo CD's key names and
//! defaults. Stricter than upstream where upstream silently falls back (a bad
//! boolean, duration or token list is an error here, located at its key).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use super::duration::parse_go_duration_or_days;
use crate::rbac::{LoadError, LoadOptions, Policy};

use super::source::{ARGOCD_CM, ARGOCD_RBAC_CM, ARGOCD_SECRET, ConfigError, RawObject};

pub const ADMIN: &str = "admin";
const DEFAULT_PASSWORD_PATTERN: &str = "^.{8,32}$";
const DEFAULT_SESSION_DURATION: Duration = Duration::from_secs(24 * 3600);
const REDACTED: &str = "<redacted>";

#[derive(Clone)]
pub struct Settings {
    /// `url`: the external URL (absolute http/https).
    pub url: Option<String>,
    /// Whether the admin account may be used: `admin.enabled`, overridden by
    /// `accounts.admin.enabled` when that is set (as upstream). Same as `accounts["admin"].enabled`.
    pub admin_enabled: bool,
    /// Always holds `admin`.
    pub accounts: BTreeMap<String, AccountConfig>,
    /// `users.session.duration` (default 24h, never zero).
    pub session_duration: Duration,
    /// `users.anonymous.enabled` (default false).
    pub anonymous_enabled: bool,
    /// `passwordPattern` (default `^.{8,32}$`).
    pub password_pattern: Regex,
    /// `server.secretkey` from argocd-secret; None when absent or empty.
    pub server_secret_key: Option<String>,
    /// The raw maps, for settings not typed here yet (OIDC, RBAC policies...).
    pub cm: BTreeMap<String, String>,
    pub rbac: BTreeMap<String, String>,
    pub secret: BTreeMap<String, String>,
    /// The RBAC policy compiled from `rbac` (with the built-in roles).
    pub policy: Arc<Policy>,
    /// `oidc.config`: upstream's one provider.
    pub oidc: Option<Arc<super::oidc::OidcConfig>>,
    /// Every provider users may log in with: `oidc.config`'s first (when set), then those of
    /// `tiphys.oidc.providers`. Single sign-on is on when this is not empty; the first is the
    /// default one (upstream's clients know only it).
    pub oidc_providers: Arc<[Arc<super::oidc::OidcConfig>]>,
    /// Whether `tiphys.oidc.providers` is set (the settings then list every provider).
    pub oidc_listed: bool,
    /// `oidc.tls.insecure.skip.verify`: do not check the provider's certificate.
    pub oidc_tls_insecure_skip_verify: bool,
    /// `tiphys.ratelimit.*`: requests per caller and class.
    pub rate_limits: super::rate_limits::RateLimits,
    /// `tiphys.serviceaccountlogin.*`: Kubernetes ServiceAccount tokens as bearer tokens.
    pub service_account_login: super::service_account_login::ServiceAccountLogin,
    /// `tiphys.personaltokens.enabled` (default false): SSO users' personal access tokens
    /// may be made and used.
    pub personal_tokens: bool,
    /// `application.links`, `resource.links`, `project.links`.
    pub deep_links: super::deep_links::DeepLinks,
}

#[derive(Clone, PartialEq, Eq)]
pub struct AccountConfig {
    pub name: String,
    pub enabled: bool,
    pub login: bool,
    pub api_key: bool,
    /// bcrypt hash from argocd-secret.
    pub password_hash: Option<String>,
    pub password_mtime: Option<jiff::Timestamp>,
    pub tokens: Vec<TokenRecord>,
}

/// One API token issued to an account, as Argo CD stores it in `<account>.tokens`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct TokenRecord {
    pub id: String,
    pub iat: i64,
    /// Expiry (Unix seconds); 0 = never.
    #[serde(default)]
    pub exp: i64,
}

impl AccountConfig {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            enabled: true,
            login: false,
            api_key: false,
            password_hash: None,
            password_mtime: None,
            tokens: Vec::new(),
        }
    }
}

impl Default for Settings {
    /// What runs without `--config-dir`: every default, admin enabled (no password yet).
    fn default() -> Self {
        let (cm, rbac, secret) = (
            RawObject::empty(ARGOCD_CM),
            RawObject::empty(ARGOCD_RBAC_CM),
            RawObject::empty(ARGOCD_SECRET),
        );
        // Empty input can only fail if a built-in default is broken; `defaults_are_valid` tests that.
        #[allow(clippy::expect_used)]
        Self::from_raw(&cm, &rbac, &secret).expect("the built-in defaults are valid")
    }
}

impl Settings {
    pub fn from_raw(cm: &RawObject, rbac: &RawObject, secret: &RawObject) -> Result<Self, ConfigError> {
        Self::from_raw_reusing(cm, rbac, secret, None)
    }

    /// [`Settings::from_raw`], keeping the compiled policy of `previous` when
    /// its `argocd-rbac-cm` data is the same.
    pub fn from_raw_reusing(
        cm: &RawObject,
        rbac: &RawObject,
        secret: &RawObject,
        previous: Option<&Settings>,
    ) -> Result<Self, ConfigError> {
        let admin_enabled = parse_bool(cm, "admin.enabled")?.unwrap_or(true);
        let mut accounts = accounts_from_cm(cm, admin_enabled)?;
        apply_secret(secret, &mut accounts)?;
        let admin_enabled = accounts.get(ADMIN).is_none_or(|a| a.enabled);

        let session_duration = match get_trimmed(cm, "users.session.duration") {
            None => DEFAULT_SESSION_DURATION,
            Some(text) => match parse_go_duration_or_days(text) {
                Ok(d) if d.is_zero() => {
                    return Err(err(
                        cm,
                        "users.session.duration",
                        "must be greater than zero: tokens that never expire are not allowed",
                    ));
                }
                Ok(d) => d,
                Err(why) => return Err(err(cm, "users.session.duration", why)),
            },
        };
        let pattern = cm
            .data
            .get("passwordPattern")
            .map(String::as_str)
            .filter(|p| !p.is_empty());
        let password_pattern = Regex::new(pattern.unwrap_or(DEFAULT_PASSWORD_PATTERN))
            .map_err(|e| err(cm, "passwordPattern", format!("invalid regular expression: {e}")))?;

        let oidc = match get_trimmed(cm, "oidc.config") {
            None => None,
            Some(text) => Some(Arc::new(
                super::oidc::parse(text, &secret.data).map_err(|why| err(cm, "oidc.config", why))?,
            )),
        };
        let key = super::oidc::PROVIDERS_KEY;
        let oidc_providers: Arc<[Arc<super::oidc::OidcConfig>]> = match get_trimmed(cm, key) {
            None => oidc.iter().cloned().collect(),
            Some(text) => super::oidc::parse_providers(text, &secret.data, oidc.as_deref())
                .map_err(|why| err(cm, key, why))?
                .into_iter()
                .map(Arc::new)
                .collect(),
        };
        let rate_limits =
            super::rate_limits::RateLimits::parse(&cm.data).map_err(|(key, why)| err(cm, &key, why))?;
        let service_account_login = super::service_account_login::ServiceAccountLogin::parse(&cm.data)
            .map_err(|(key, why)| err(cm, &key, why))?;
        let deep_links =
            super::deep_links::DeepLinks::parse(&cm.data).map_err(|(key, why)| err(cm, &key, why))?;
        Ok(Self {
            deep_links,
            oidc_listed: get_trimmed(cm, key).is_some(),
            oidc_providers,
            oidc,
            rate_limits,
            service_account_login,
            oidc_tls_insecure_skip_verify: parse_bool(cm, "oidc.tls.insecure.skip.verify")?.unwrap_or(false),
            url: parse_url(cm)?,
            admin_enabled,
            accounts,
            session_duration,
            anonymous_enabled: parse_bool(cm, "users.anonymous.enabled")?.unwrap_or(false),
            personal_tokens: parse_bool(cm, "tiphys.personaltokens.enabled")?.unwrap_or(false),
            password_pattern,
            server_secret_key: secret
                .data
                .get("server.secretkey")
                .filter(|k| !k.is_empty())
                .cloned(),
            cm: cm.data.clone(),
            rbac: rbac.data.clone(),
            secret: secret.data.clone(),
            policy: match previous {
                Some(previous) if previous.rbac == rbac.data => Arc::clone(&previous.policy),
                _ => compile_policy(rbac)?,
            },
        })
    }
}

/// An error at `key` of `obj`: `file:line: key: reason`.
fn err(obj: &RawObject, key: &str, reason: impl fmt::Display) -> ConfigError {
    ConfigError::new(obj.locate(key), format!("{key}: {reason}")).in_object(obj.name)
}

/// The RBAC policy of `argocd-rbac-cm`, compiled; a bad rule is located at its own line (as
/// `tiphys admin settings rbac validate` says it).
fn compile_policy(rbac: &RawObject) -> Result<Arc<Policy>, ConfigError> {
    match Policy::from_config(&rbac.data, LoadOptions::default()) {
        Ok(policy) => Ok(Arc::new(policy)),
        Err(LoadError::Line(e)) => {
            Err(ConfigError::new(rbac.locate_line(&e.source, e.line), e.to_string()).in_object(rbac.name))
        }
        Err(LoadError::Scopes(why)) => Err(err(rbac, "scopes", why)),
    }
}

/// A scalar value with surrounding whitespace removed (a volume file written by
/// hand usually ends with a newline); empty counts as unset.
fn get_trimmed<'a>(obj: &'a RawObject, key: &str) -> Option<&'a str> {
    obj.data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// Go's strconv.ParseBool, which is what Argo CD uses: `None` for anything else.
pub fn go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// [`go_bool`] of `key` in `obj`, an error located at the key.
fn parse_bool(obj: &RawObject, key: &str) -> Result<Option<bool>, ConfigError> {
    let Some(value) = obj.data.get(key) else {
        return Ok(None);
    };
    let value = value.trim();
    match go_bool(value) {
        Some(b) => Ok(Some(b)),
        None => Err(err(
            obj,
            key,
            format!("{value:?} is not a boolean; use true or false (or 1/0, t/f)"),
        )),
    }
}

fn parse_url(cm: &RawObject) -> Result<Option<String>, ConfigError> {
    let Some(url) = get_trimmed(cm, "url") else {
        return Ok(None);
    };
    let bad = |why: &str| {
        Err(err(
            cm,
            "url",
            format!("{url:?} {why}; expected e.g. https://argocd.example.com"),
        ))
    };
    match super::http_url::parse(url) {
        Ok(_) => Ok(Some(url.to_owned())),
        Err(why) => bad(why),
    }
}

/// `accounts.<name>` (capabilities) and `accounts.<name>.enabled` from argocd-cm.
fn accounts_from_cm(
    cm: &RawObject,
    admin_enabled: bool,
) -> Result<BTreeMap<String, AccountConfig>, ConfigError> {
    let mut admin = AccountConfig::new(ADMIN);
    admin.login = true;
    admin.enabled = admin_enabled;
    let mut accounts = BTreeMap::from([(ADMIN.to_owned(), admin)]);
    for (key, value) in &cm.data {
        let Some(rest) = key.strip_prefix("accounts.") else {
            continue;
        };
        let (name, suffix) = match rest.split('.').collect::<Vec<_>>()[..] {
            [name] => (name, None),
            [name, suffix] if !suffix.is_empty() => (name, Some(suffix)),
            _ => {
                tracing::warn!(location = %cm.locate(key), key, "ignoring unexpected account key in argocd-cm");
                continue;
            }
        };
        if name.is_empty() {
            tracing::warn!(location = %cm.locate(key), key, "ignoring account key with an empty account name");
            continue;
        }
        // Upstream creates the account for any accounts.<name>[.<suffix>] key.
        let account = accounts
            .entry(name.to_owned())
            .or_insert_with(|| AccountConfig::new(name));
        match suffix {
            None => {
                for capability in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                    match capability {
                        "login" => account.login = true,
                        "apiKey" => account.api_key = true,
                        other => tracing::warn!(
                            location = %cm.locate(key), key, capability = other,
                            "ignoring unsupported account capability (login and apiKey are supported)"
                        ),
                    }
                }
            }
            Some("enabled") => {
                let enabled = parse_bool(cm, key)?.unwrap_or(true);
                if name == ADMIN && enabled != admin_enabled {
                    tracing::warn!(location = %cm.locate(key), "accounts.admin.enabled overrides admin.enabled");
                }
                account.enabled = enabled;
            }
            Some(other) => tracing::warn!(
                location = %cm.locate(key), key, suffix = other,
                "ignoring unknown account setting (passwords and tokens belong in argocd-secret)"
            ),
        }
    }
    Ok(accounts)
}

/// `<prefix>.password`, `.passwordMtime` and `.tokens` from argocd-secret, where
/// the prefix is `admin` for admin and `accounts.<name>` for the others.
fn apply_secret(
    secret: &RawObject,
    accounts: &mut BTreeMap<String, AccountConfig>,
) -> Result<(), ConfigError> {
    for key in secret.data.keys() {
        let Some(rest) = key.strip_prefix("accounts.") else {
            continue;
        };
        let known = match rest.split_once('.') {
            Some((name, suffix)) => name != ADMIN && accounts.contains_key(name) && !suffix.contains('.'),
            None => false,
        };
        if !known {
            tracing::warn!(
                location = %secret.locate(key), key,
                "ignoring argocd-secret key: no such account in argocd-cm (admin's keys are admin.*)"
            );
        }
    }
    for (name, account) in accounts.iter_mut() {
        let prefix = if name == ADMIN {
            ADMIN.to_owned()
        } else {
            format!("accounts.{name}")
        };
        let key = format!("{prefix}.password");
        if let Some(hash) = get_trimmed(secret, &key) {
            if !["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p)) {
                return Err(err(
                    secret,
                    &key,
                    "is not a bcrypt hash (expected $2a$, $2b$ or $2y$...)",
                ));
            }
            account.password_hash = Some(hash.to_owned());
        }
        let key = format!("{prefix}.passwordMtime");
        if let Some(text) = get_trimmed(secret, &key) {
            let mtime = crate::schema::time::parse(text)
                .and_then(|(s, n)| jiff::Timestamp::new(s, n).map_err(|e| e.to_string()))
                .map_err(|e| {
                    err(
                        secret,
                        &key,
                        format!("{text:?} is not an RFC 3339 time like 2024-05-01T12:00:00Z ({e})"),
                    )
                })?;
            account.password_mtime = Some(mtime);
        }
        let key = format!("{prefix}.tokens");
        if let Some(text) = get_trimmed(secret, &key) {
            account.tokens = serde_json::from_str(text).map_err(|e| {
                err(
                    secret,
                    &key,
                    format!("expected a JSON list of {{\"id\", \"iat\", \"exp\"}} objects: {e}"),
                )
            })?;
        }
    }
    Ok(())
}

impl fmt::Debug for Settings {
    /// Secret values never reach logs: the secret map shows its keys only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("url", &self.url)
            .field("admin_enabled", &self.admin_enabled)
            .field("accounts", &self.accounts)
            .field("session_duration", &self.session_duration)
            .field("anonymous_enabled", &self.anonymous_enabled)
            .field("password_pattern", &self.password_pattern.as_str())
            .field(
                "server_secret_key",
                &self.server_secret_key.as_ref().map(|_| REDACTED),
            )
            // oidc.config and the provider list may hold client secrets written inline.
            .field(
                "cm",
                &self
                    .cm
                    .iter()
                    .map(|(k, v)| {
                        let secret = k == "oidc.config" || k == super::oidc::PROVIDERS_KEY;
                        (k, if secret { REDACTED } else { v.as_str() })
                    })
                    .collect::<BTreeMap<_, _>>(),
            )
            .field("rbac", &self.rbac)
            .field("policy", &self.policy)
            .field("oidc", &self.oidc)
            .field("oidc_providers", &self.oidc_providers)
            .field(
                "secret",
                &self
                    .secret
                    .keys()
                    .map(|k| (k, REDACTED))
                    .collect::<BTreeMap<_, _>>(),
            )
            .finish()
    }
}

impl fmt::Debug for AccountConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountConfig")
            .field("name", &self.name)
            .field("enabled", &self.enabled)
            .field("login", &self.login)
            .field("api_key", &self.api_key)
            .field("password_hash", &self.password_hash.as_ref().map(|_| REDACTED))
            .field("password_mtime", &self.password_mtime)
            .field("tokens", &self.tokens)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const HASH: &str = "$2a$10$abcdefghijklmnopqrstuuJZ0X6Jx9r9pKQp0mX8c0YfXoQ0Q3mbS";

    /// A manifest-form object whose keys sit on lines 10, 11, ... in map order.
    fn obj(name: &'static str, pairs: &[(&str, &str)]) -> RawObject {
        let mut o = RawObject::empty(name);
        o.origin = Some(PathBuf::from(format!("/cfg/{name}.yaml")));
        for (i, (k, v)) in pairs.iter().enumerate() {
            o.data.insert((*k).to_owned(), (*v).to_owned());
            o.lines.insert((*k).to_owned(), 10 + i as u32);
        }
        o
    }

    fn build(cm: &[(&str, &str)], secret: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::from_raw(
            &obj(ARGOCD_CM, cm),
            &obj(ARGOCD_RBAC_CM, &[]),
            &obj(ARGOCD_SECRET, secret),
        )
    }

    fn build_err(cm: &[(&str, &str)], secret: &[(&str, &str)]) -> String {
        build(cm, secret).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_valid() {
        let s = Settings::default();
        assert!(s.admin_enabled && !s.anonymous_enabled);
        assert_eq!(s.session_duration, Duration::from_secs(86400));
        assert_eq!(s.password_pattern.as_str(), "^.{8,32}$");
        assert_eq!(s.url, None);
        let admin = &s.accounts[ADMIN];
        assert!(admin.enabled && admin.login && !admin.api_key);
        assert_eq!(s.accounts.len(), 1);
    }

    #[test]
    fn typed_values() {
        let s = build(
            &[
                ("url", "https://cd.example.com/argocd"),
                ("admin.enabled", "False"),
                ("users.anonymous.enabled", "1"),
                ("users.session.duration", "1h30m"),
                ("passwordPattern", "^.{12,}$"),
            ],
            &[("server.secretkey", "k")],
        )
        .unwrap();
        assert_eq!(s.url.as_deref(), Some("https://cd.example.com/argocd"));
        assert!(!s.admin_enabled && !s.accounts[ADMIN].enabled && s.anonymous_enabled);
        assert_eq!(s.session_duration, Duration::from_secs(5400));
        assert!(s.password_pattern.is_match("twelve chars"));
        assert_eq!(s.server_secret_key.as_deref(), Some("k"));
        assert_eq!(
            build(&[("users.session.duration", "7d")], &[])
                .unwrap()
                .session_duration
                .as_secs(),
            604800
        );
    }

    #[test]
    fn accounts() {
        let s = build(
            &[
                ("accounts.admin", "apiKey"),
                ("accounts.alice", " login , apiKey,bogus"),
                ("accounts.alice.enabled", "false"),
                ("accounts.bob", ""),
                ("accounts.a.b.c", "login"),
            ],
            &[
                ("admin.password", HASH),
                ("admin.passwordMtime", "2024-05-01T12:00:00Z"),
                (
                    "accounts.alice.tokens",
                    r#"[{"id":"t1","iat":1700000000},{"id":"t2","iat":1,"exp":2}]"#,
                ),
                ("accounts.carol.password", HASH),
            ],
        )
        .unwrap();
        assert_eq!(s.accounts.keys().collect::<Vec<_>>(), ["admin", "alice", "bob"]);
        let admin = &s.accounts[ADMIN];
        assert!(admin.login && admin.api_key && admin.enabled);
        assert_eq!(admin.password_hash.as_deref(), Some(HASH));
        assert_eq!(admin.password_mtime.map(|t| t.as_second()), Some(1714564800));
        let alice = &s.accounts["alice"];
        assert!(alice.login && alice.api_key && !alice.enabled);
        assert_eq!(
            alice.tokens[0],
            TokenRecord {
                id: "t1".into(),
                iat: 1700000000,
                exp: 0
            }
        );
        assert_eq!(alice.tokens[1].exp, 2);
        let bob = &s.accounts["bob"];
        assert!(bob.enabled && !bob.login && !bob.api_key && bob.password_hash.is_none());
    }

    /// (argocd-cm pairs, argocd-secret pairs, expected error text)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)], &'a str);

    #[test]
    fn semantic_errors_name_file_and_line() {
        let cases: &[Case<'_>] = &[
            (
                &[("users.session.duration", "0s")],
                &[],
                "argocd-cm.yaml:10: users.session.duration: must be greater than zero",
            ),
            (
                &[("users.session.duration", "soon")],
                &[],
                "argocd-cm.yaml:10: users.session.duration: invalid duration",
            ),
            (
                &[("passwordPattern", "(")],
                &[],
                "argocd-cm.yaml:10: passwordPattern: invalid regular expression",
            ),
            (
                &[("admin.enabled", "yes")],
                &[],
                "argocd-cm.yaml:10: admin.enabled: \"yes\" is not a boolean",
            ),
            (
                &[("accounts.a.enabled", "nah")],
                &[],
                "argocd-cm.yaml:10: accounts.a.enabled: \"nah\" is not a boolean",
            ),
            (
                &[("url", "ftp://x")],
                &[],
                "argocd-cm.yaml:10: url: \"ftp://x\" is not an http or https URL",
            ),
            (&[("url", "/relative")], &[], "argocd-cm.yaml:10: url:"),
            (
                &[],
                &[("admin.password", "hunter2")],
                "argocd-secret.yaml:10: admin.password: is not a bcrypt hash",
            ),
            (
                &[],
                &[("admin.passwordMtime", "yesterday")],
                "argocd-secret.yaml:10: admin.passwordMtime: \"yesterday\" is not an RFC 3339",
            ),
            (
                &[("accounts.a", "apiKey")],
                &[("x", ""), ("accounts.a.tokens", "{")],
                "argocd-secret.yaml:11: accounts.a.tokens: expected a JSON list",
            ),
            (
                &[("url", "https://x"), ("tiphys.ratelimit.read.burst", "-3")],
                &[],
                "argocd-cm.yaml:11: tiphys.ratelimit.read.burst: -3 is negative",
            ),
        ];
        for (cm, secret, want) in cases {
            let got = build_err(cm, secret);
            assert!(
                got.starts_with("/cfg/") && got.contains(want),
                "got {got:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn url_accepts_http_and_https_only() {
        assert!(build(&[("url", "http://localhost:8080")], &[]).is_ok());
        assert!(build_err(&[("url", "https://")], &[]).contains("url:"));
    }

    #[test]
    fn volume_location_is_the_key_file() {
        let mut cm = RawObject::empty(ARGOCD_CM);
        cm.origin = Some(PathBuf::from("/cfg/argocd-cm"));
        cm.data.insert("users.session.duration".into(), "0".into());
        let e = Settings::from_raw(
            &cm,
            &RawObject::empty(ARGOCD_RBAC_CM),
            &RawObject::empty(ARGOCD_SECRET),
        );
        assert_eq!(e.unwrap_err().location, "/cfg/argocd-cm/users.session.duration");
    }

    #[test]
    fn debug_redacts_secrets() {
        let s = build(
            &[("accounts.alice", "login")],
            &[
                ("server.secretkey", "topsecretkey"),
                ("admin.password", HASH),
                ("accounts.alice.password", HASH),
            ],
        )
        .unwrap();
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("topsecretkey") && !shown.contains(HASH) && !shown.contains("$2a$"),
            "{shown}"
        );
        assert!(shown.contains("server.secretkey") && shown.contains(REDACTED));

        // A client secret written inline in oidc.config stays out of logs too.
        let s = build(
            &[(
                "oidc.config",
                "issuer: https://idp.example\nclientID: cd\nclientSecret: inline-oidc-secret\n",
            )],
            &[],
        )
        .unwrap();
        assert_eq!(
            s.oidc.as_ref().unwrap().client_secret.as_deref(),
            Some("inline-oidc-secret")
        );
        let shown = format!("{s:?}");
        assert!(!shown.contains("inline-oidc-secret"), "{shown}");
        assert!(shown.contains("https://idp.example"));
    }
}
