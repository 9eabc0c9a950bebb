//! `oidc.config` in `argocd-cm`: the OpenID Connect provider users log in
//! with; and `tiphys.oidc.providers`, a list of more of them (a tiphys extension: upstream
//! takes one and needs Dex for more). Every entry of the list is parsed by the same parser as
//! `oidc.config`. Values of the form `$key` are read from `argocd-secret`.

use std::collections::BTreeMap;
use std::fmt;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

/// The `argocd-cm` key of the provider list.
pub const PROVIDERS_KEY: &str = "tiphys.oidc.providers";
/// The provider name `oidc.config` goes by beside the list (`/auth/login?provider=default`,
/// `default:` in `policy.csv`).
pub const DEFAULT_PROVIDER: &str = "default";
/// Names no listed provider may take: `default` is `oidc.config`'s; the others begin subjects
/// that mean something else to RBAC (`role:admin`, `proj:<p>:<r>`, `system:serviceaccount:…`,
/// `sso:<session>`), so a provider's user could otherwise pose as one.
const RESERVED_NAMES: &[&str] = &[DEFAULT_PROVIDER, "role", "proj", "system", "sso"];
/// The longest provider name.
const MAX_NAME: usize = 63;
/// The claim a listed provider's groups are read from when `groupsClaim` is not set.
pub const DEFAULT_GROUPS_CLAIM: &str = "groups";

/// Scopes asked for when `requestedScopes` is not set.
pub const DEFAULT_SCOPES: [&str; 4] = ["openid", "profile", "email", "groups"];

/// One requested ID token claim (`requestedIDTokenClaims`), as in the OIDC spec's `claims` parameter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClaimRequest {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub essential: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub value: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The parsed `oidc.config`. `client_secret` never reaches `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// The provider's name among several: the list entry's `name`, or [`DEFAULT_PROVIDER`]
    /// for `oidc.config`.
    pub id: String,
    /// Whether its users and groups are `<id>:`-prefixed for RBAC: every provider's are once
    /// `tiphys.oidc.providers` is set; `oidc.config` alone keeps upstream's bare subjects.
    pub qualified: bool,
    /// `groupsClaim`: the claim a qualified provider's groups are read from (`policy.csv`'s
    /// `scopes` names them for `oidc.config` alone, as upstream).
    pub groups_claim: String,
    pub name: String,
    /// The issuer exactly as configured; the discovered issuer must equal it.
    pub issuer: String,
    pub client_id: String,
    pub client_secret: Option<String>,
    pub cli_client_id: Option<String>,
    /// `requestedScopes` as configured (empty: not set).
    pub requested_scopes: Vec<String>,
    pub id_token_claims: BTreeMap<String, ClaimRequest>,
    /// `allowedAudiences`; empty means `clientID` and `cliClientID`.
    pub allowed_audiences: Vec<String>,
    pub skip_audience_check_when_token_has_no_audience: bool,
    /// Extra CA certificates (DER) trusted for the provider, besides the system's.
    pub root_ca: Vec<CertificateDer<'static>>,
    pub enable_pkce_authentication: bool,
    pub logout_url: Option<String>,
    pub domain_hint: Option<String>,
    pub enable_user_info_groups: bool,
    pub user_info_path: Option<String>,
    pub user_info_base_url: Option<String>,
}

impl OidcConfig {
    /// The scopes to request: `requestedScopes`, else the defaults; `openid` always.
    pub fn scopes(&self) -> Vec<String> {
        let mut scopes: Vec<String> = if self.requested_scopes.is_empty() {
            DEFAULT_SCOPES.iter().map(|s| (*s).to_owned()).collect()
        } else {
            self.requested_scopes.clone()
        };
        if !scopes.iter().any(|s| s == "openid") {
            scopes.insert(0, "openid".to_owned());
        }
        scopes
    }

    /// The audiences a token may carry: `allowedAudiences`, else `clientID` and `cliClientID`.
    pub fn audiences(&self) -> Vec<String> {
        if !self.allowed_audiences.is_empty() {
            return self.allowed_audiences.clone();
        }
        let mut out = vec![self.client_id.clone()];
        if let Some(cli) = &self.cli_client_id
            && cli != &self.client_id
        {
            out.push(cli.clone());
        }
        out
    }

    /// The user-info endpoint to read groups from, when `enableUserInfoGroups` is on.
    pub fn user_info_url(&self) -> Option<String> {
        if !self.enable_user_info_groups {
            return None;
        }
        let path = self.user_info_path.as_deref()?;
        let base = self.user_info_base_url.as_deref().unwrap_or(&self.issuer);
        Some(format!("{}{path}", base.trim_end_matches('/')))
    }
}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OidcConfig")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("cli_client_id", &self.cli_client_id)
            .field("requested_scopes", &self.requested_scopes)
            .field("allowed_audiences", &self.allowed_audiences)
            .field("root_ca", &self.root_ca.len())
            .field("logout_url", &self.logout_url)
            .finish_non_exhaustive()
    }
}

/// The YAML as written; every field optional so that errors can name what is missing.
#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawOidc {
    name: Option<String>,
    issuer: Option<String>,
    #[serde(rename = "clientID")]
    client_id: Option<String>,
    client_secret: Option<String>,
    #[serde(rename = "cliClientID")]
    cli_client_id: Option<String>,
    requested_scopes: Option<Vec<String>>,
    #[serde(rename = "requestedIDTokenClaims")]
    requested_id_token_claims: Option<BTreeMap<String, ClaimRequest>>,
    allowed_audiences: Option<Vec<String>>,
    skip_audience_check_when_token_has_no_audience: Option<bool>,
    #[serde(rename = "rootCA")]
    root_ca: Option<String>,
    #[serde(rename = "enablePKCEAuthentication")]
    enable_pkce_authentication: Option<bool>,
    #[serde(rename = "logoutURL")]
    logout_url: Option<String>,
    domain_hint: Option<String>,
    enable_user_info_groups: Option<bool>,
    user_info_path: Option<String>,
    #[serde(rename = "userInfoBaseURL")]
    user_info_base_url: Option<String>,
    /// The spelling upstream's docs use for `userInfoBaseURL`.
    #[serde(rename = "userInfoURL")]
    user_info_url: Option<String>,
    /// tiphys's: see [`OidcConfig::groups_claim`].
    groups_claim: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, serde_yaml_ng::Value>,
}

/// Keys upstream knows that tiphys reads but does not act on.
const IGNORED_KEYS: &[&str] = &["userInfoCacheExpiration", "refreshTokenThreshold", "azure"];

/// Parses `oidc.config`; `secret` resolves `$key` references. The error says
/// what is wrong without the value of any secret.
pub fn parse(text: &str, secret: &BTreeMap<String, String>) -> Result<OidcConfig, String> {
    let raw: RawOidc = serde_yaml_ng::from_str(text).map_err(|e| format!("invalid YAML: {e}"))?;
    let mut config = parse_raw(raw, secret)?;
    config.id = DEFAULT_PROVIDER.to_owned();
    Ok(config)
}

/// Parses `tiphys.oidc.providers`: a YAML list of entries written as `oidc.config` is, each
/// with a `name` that is unique, URL-safe and not reserved, and an issuer no other provider
/// has (a bearer token finds its provider by its `iss`). `primary` is `oidc.config`, when
/// set: it goes first, as [`DEFAULT_PROVIDER`]. Every provider returned is qualified.
pub fn parse_providers(
    text: &str,
    secret: &BTreeMap<String, String>,
    primary: Option<&OidcConfig>,
) -> Result<Vec<OidcConfig>, String> {
    let entries: Vec<serde_yaml_ng::Value> = serde_yaml_ng::from_str(text)
        .map_err(|e| format!("invalid YAML (a list of providers is expected): {e}"))?;
    if entries.is_empty() {
        return Err("the list is empty: remove the key, or list at least one provider".to_owned());
    }
    let mut out: Vec<OidcConfig> = primary.into_iter().cloned().collect();
    let listed_from = out.len();
    for (i, entry) in entries.into_iter().enumerate() {
        let at = |why: String| format!("providers[{i}]: {why}");
        let raw: RawOidc =
            serde_yaml_ng::from_value(entry).map_err(|e| at(format!("not a provider: {e}")))?;
        let name = raw.name.clone().map(|n| n.trim().to_owned()).unwrap_or_default();
        check_name(&name).map_err(at)?;
        let at = |why: String| format!("providers[{i}] ({name}): {why}");
        if let Some(seen) = out[listed_from..].iter().position(|p| p.id == name) {
            return Err(at(format!("the name is used twice (also providers[{seen}])")));
        }
        let mut config = parse_raw(raw, secret).map_err(at)?;
        if let Some(other) = out.iter().find(|p| p.issuer == config.issuer) {
            return Err(at(format!(
                "issuer {:?} is also provider {:?}'s: a token is matched to its provider by its issuer",
                config.issuer, other.id
            )));
        }
        config.id = name;
        out.push(config);
    }
    for config in &mut out {
        config.qualified = true;
    }
    Ok(out)
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("name is required".to_owned());
    }
    let url_safe = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_';
    if name.len() > MAX_NAME || !name.chars().all(url_safe) || name.starts_with(['-', '_']) {
        return Err(format!(
            "name {name:?} must be 1 to {MAX_NAME} lowercase letters, digits, '-' or '_' (it is used in URLs and in policy.csv)"
        ));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!("name {name:?} is reserved"));
    }
    Ok(())
}

fn parse_raw(raw: RawOidc, secret: &BTreeMap<String, String>) -> Result<OidcConfig, String> {
    for key in raw.other.keys() {
        if !IGNORED_KEYS.contains(&key.as_str()) {
            tracing::warn!(key, "ignoring unknown oidc.config key");
        }
    }
    let resolve = |field: &str, value: Option<String>| -> Result<Option<String>, String> {
        let Some(value) = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let Some(reference) = value.strip_prefix('$') else {
            return Ok(Some(value));
        };
        if reference.contains(':') {
            return Err(format!(
                "{field} refers to {value:?}: only keys of argocd-secret can be referenced ($key)"
            ));
        }
        match secret.get(reference).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            Some(v) => Ok(Some(v.to_owned())),
            None => Err(format!(
                "{field} refers to ${reference}, which argocd-secret does not have"
            )),
        }
    };
    let issuer = resolve("issuer", raw.issuer)?.ok_or("issuer is required")?;
    check_url("issuer", &issuer)?;
    let client_id = resolve("clientID", raw.client_id)?.ok_or("clientID is required")?;
    let root_ca = match resolve("rootCA", raw.root_ca)? {
        None => Vec::new(),
        Some(pem) => {
            let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(pem.as_bytes())
                .map(|c| c.map(CertificateDer::into_owned))
                .collect();
            let certs = certs.map_err(|e| format!("rootCA is not PEM certificates: {e}"))?;
            if certs.is_empty() {
                return Err("rootCA holds no PEM certificate".to_owned());
            }
            certs
        }
    };
    let logout_url = resolve("logoutURL", raw.logout_url)?;
    let user_info_base_url = resolve("userInfoBaseURL", raw.user_info_base_url.or(raw.user_info_url))?;
    if let Some(base) = &user_info_base_url {
        check_url("userInfoBaseURL", base)?;
    }
    let enable_user_info_groups = raw.enable_user_info_groups.unwrap_or(false);
    let user_info_path = resolve("userInfoPath", raw.user_info_path)?;
    if enable_user_info_groups && user_info_path.is_none() {
        return Err("enableUserInfoGroups needs userInfoPath (e.g. /userinfo)".to_owned());
    }
    let groups_claim = raw.groups_claim.map(|c| c.trim().to_owned()).unwrap_or_default();
    Ok(OidcConfig {
        id: String::new(),
        qualified: false,
        groups_claim: if groups_claim.is_empty() {
            DEFAULT_GROUPS_CLAIM.to_owned()
        } else {
            groups_claim
        },
        name: resolve("name", raw.name)?.unwrap_or_default(),
        issuer,
        client_id,
        client_secret: resolve("clientSecret", raw.client_secret)?,
        cli_client_id: resolve("cliClientID", raw.cli_client_id)?,
        requested_scopes: raw.requested_scopes.unwrap_or_default(),
        id_token_claims: raw.requested_id_token_claims.unwrap_or_default(),
        allowed_audiences: raw.allowed_audiences.unwrap_or_default(),
        skip_audience_check_when_token_has_no_audience: raw
            .skip_audience_check_when_token_has_no_audience
            .unwrap_or(false),
        root_ca,
        enable_pkce_authentication: raw.enable_pkce_authentication.unwrap_or(false),
        logout_url,
        domain_hint: resolve("domainHint", raw.domain_hint)?,
        enable_user_info_groups,
        user_info_path,
        user_info_base_url,
    })
}

fn check_url(field: &str, value: &str) -> Result<(), String> {
    if super::http_url::parse(value).is_ok() {
        Ok(())
    } else {
        Err(format!("{field} {value:?} is not an absolute http(s) URL"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn full_config_with_secret_reference() {
        let c = parse(
            "name: Okta\nissuer: https://idp.example.com\nclientID: cd\nclientSecret: $oidc.secret\n\
             cliClientID: cd-cli\nrequestedScopes: [openid, groups]\nallowedAudiences: [a, b]\n\
             requestedIDTokenClaims: {groups: {essential: true}}\nlogoutURL: https://idp/logout\n",
            &secret(&[("oidc.secret", "s3cret")]),
        )
        .unwrap();
        assert_eq!(c.client_secret.as_deref(), Some("s3cret"));
        assert_eq!(c.audiences(), ["a", "b"]);
        assert!(c.id_token_claims["groups"].essential);
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = parse("issuer: https://i\nclientID: x\ncliClientID: y\n", &secret(&[])).unwrap();
        assert_eq!(c.audiences(), ["x", "y"]);
        assert_eq!(c.scopes(), ["openid", "profile", "email", "groups"]);
    }

    #[test]
    fn errors_are_specific() {
        let s = secret(&[]);
        assert_eq!(parse("clientID: x", &s).unwrap_err(), "issuer is required");
        assert_eq!(
            parse("issuer: https://i", &s).unwrap_err(),
            "clientID is required"
        );
        assert!(
            parse("issuer: idp.example.com\nclientID: x", &s)
                .unwrap_err()
                .contains("not an absolute")
        );
        assert_eq!(
            parse("issuer: https://i\nclientID: x\nclientSecret: $missing", &s).unwrap_err(),
            "clientSecret refers to $missing, which argocd-secret does not have"
        );
        assert!(
            parse("issuer: https://i\nclientID: x\nrootCA: nope", &s)
                .unwrap_err()
                .contains("rootCA")
        );
        assert!(parse("[", &s).unwrap_err().starts_with("invalid YAML"));
    }

    const TWO: &str = "- name: corp\n  issuer: https://corp.example\n  clientID: cd\n  clientSecret: $corp.secret\n\
                       - name: partners\n  issuer: https://partners.example\n  clientID: cd2\n  groupsClaim: roles\n";

    #[test]
    fn a_list_of_providers_with_oidc_config_first() {
        let s = secret(&[("corp.secret", "c0rp")]);
        let list = parse_providers(TWO, &s, None).unwrap();
        assert_eq!(
            list.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["corp", "partners"]
        );
        assert_eq!(list[0].client_secret.as_deref(), Some("c0rp"));
        assert_eq!(
            (list[0].groups_claim.as_str(), list[1].groups_claim.as_str()),
            ("groups", "roles")
        );
        assert!(list.iter().all(|p| p.qualified));
        let primary = parse("name: Okta\nissuer: https://okta.example\nclientID: x\n", &s).unwrap();
        assert_eq!(
            (primary.id.as_str(), primary.qualified),
            (DEFAULT_PROVIDER, false)
        );
        let list = parse_providers(TWO, &s, Some(&primary)).unwrap();
        assert_eq!(
            list.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["default", "corp", "partners"]
        );
        assert!(list[0].qualified && list[0].name == "Okta");
    }

    #[test]
    fn list_errors_name_the_entry() {
        let s = secret(&[("corp.secret", "x")]);
        let err = |text: &str| parse_providers(text, &s, None).unwrap_err();
        assert_eq!(
            err(
                "- name: a\n  issuer: https://a\n  clientID: x\n- name: a\n  issuer: https://b\n  clientID: y\n"
            ),
            "providers[1] (a): the name is used twice (also providers[0])"
        );
        assert_eq!(
            err("- issuer: https://a\n  clientID: x\n"),
            "providers[0]: name is required"
        );
        assert_eq!(
            err("- name: a\n  clientID: x\n"),
            "providers[0] (a): issuer is required"
        );
        assert_eq!(
            err("- name: a\n  issuer: https://a\n"),
            "providers[0] (a): clientID is required"
        );
        assert!(err("- name: A b\n  issuer: https://a\n  clientID: x\n").contains("lowercase letters"));
        for reserved in ["default", "role", "proj", "system", "sso"] {
            let text = format!("- name: {reserved}\n  issuer: https://a\n  clientID: x\n");
            assert_eq!(err(&text), format!("providers[0]: name {reserved:?} is reserved"));
        }
        assert!(
            err("- name: a\n  issuer: https://a\n  clientID: x\n- name: b\n  issuer: https://a\n  clientID: y\n")
                .starts_with("providers[1] (b): issuer \"https://a\" is also provider \"a\"'s")
        );
        let primary = parse("issuer: https://a\nclientID: x\n", &s).unwrap();
        assert!(
            parse_providers(
                "- name: b\n  issuer: https://a\n  clientID: y\n",
                &s,
                Some(&primary)
            )
            .unwrap_err()
            .contains("also provider \"default\"'s")
        );
        assert!(err("[]").starts_with("the list is empty"));
        assert!(err("name: a").starts_with("invalid YAML"));
        assert!(err("- 3").starts_with("providers[0]: not a provider"));
        assert_eq!(
            err("- name: a\n  issuer: https://a\n  clientID: x\n  clientSecret: $nope\n"),
            "providers[0] (a): clientSecret refers to $nope, which argocd-secret does not have"
        );
    }
}
