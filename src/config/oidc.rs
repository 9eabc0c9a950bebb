//! `oidc.config` in `argocd-cm`: the OpenID Connect provider users log in
//! with. Values of the form `$key` are read from `argocd-secret`.

use std::collections::BTreeMap;
use std::fmt;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};

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
    #[serde(flatten)]
    other: BTreeMap<String, serde_yaml_ng::Value>,
}

/// Keys upstream knows that tiphys reads but does not act on.
const IGNORED_KEYS: &[&str] = &["userInfoCacheExpiration", "refreshTokenThreshold", "azure"];

/// Parses `oidc.config`; `secret` resolves `$key` references. The error says
/// what is wrong without the value of any secret.
pub fn parse(text: &str, secret: &BTreeMap<String, String>) -> Result<OidcConfig, String> {
    let raw: RawOidc = serde_yaml_ng::from_str(text).map_err(|e| format!("invalid YAML: {e}"))?;
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
    Ok(OidcConfig {
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
}
