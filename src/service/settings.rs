//! `cluster.SettingsService`: what a browser
//! needs before anyone has logged in. Nothing secret is ever part of it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Ctx, Empty, Reply};
use crate::app::App;
use crate::config::oidc::{ClaimRequest, OidcConfig};
use crate::error::AppError;
use crate::json::is_zero;
use crate::principal::Principal;

/// The settings a caller may see. Field names and the always-present nested
/// objects (`googleAnalytics`, `help`, `kustomizeOptions`) follow Argo CD,
/// whose UI crashes without `help`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicSettings {
    #[serde(skip_serializing_if = "is_zero")]
    pub url: String,
    /// Single sign-on, when configured: what a client needs to start a login. Never a secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oidc_config: Option<OidcSettings>,
    #[serde(skip_serializing_if = "is_zero")]
    pub app_label_key: String,
    pub google_analytics: GoogleAnalytics,
    pub kustomize_options: KustomizeOptions,
    pub help: Help,
    #[serde(skip_serializing_if = "is_zero")]
    pub user_logins_disabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub status_badge_enabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub exec_enabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub tracking_method: String,
    #[serde(rename = "additionalUrls", skip_serializing_if = "is_zero")]
    pub additional_urls: Vec<String>,
    /// Only for logged-in callers.
    #[serde(skip_serializing_if = "is_zero")]
    pub password_pattern: String,
}

/// `oidcConfig`: upstream's `OIDCConfig` message, without its client secret.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OidcSettings {
    #[serde(skip_serializing_if = "is_zero")]
    pub name: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub issuer: String,
    #[serde(rename = "clientID", skip_serializing_if = "is_zero")]
    pub client_id: String,
    #[serde(rename = "cliClientID", skip_serializing_if = "is_zero")]
    pub cli_client_id: String,
    /// `requestedScopes` as configured (absent when not set).
    #[serde(skip_serializing_if = "is_zero")]
    pub scopes: Vec<String>,
    #[serde(rename = "idTokenClaims", skip_serializing_if = "BTreeMap::is_empty")]
    pub id_token_claims: BTreeMap<String, ClaimRequest>,
    #[serde(rename = "enablePKCEAuthentication", skip_serializing_if = "is_zero")]
    pub enable_pkce_authentication: bool,
}

impl From<&OidcConfig> for OidcSettings {
    fn from(c: &OidcConfig) -> Self {
        Self {
            name: c.name.clone(),
            issuer: c.issuer.clone(),
            client_id: c.client_id.clone(),
            cli_client_id: c.cli_client_id.clone().unwrap_or_default(),
            scopes: c.requested_scopes.clone(),
            id_token_claims: c.id_token_claims.clone(),
            enable_pkce_authentication: c.enable_pkce_authentication,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GoogleAnalytics {
    #[serde(rename = "trackingID", skip_serializing_if = "is_zero")]
    pub tracking_id: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub anonymize_users: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeOptions {
    #[serde(skip_serializing_if = "is_zero")]
    pub build_options: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Help {
    #[serde(skip_serializing_if = "is_zero")]
    pub chat_url: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub chat_text: String,
}

/// Inputs the settings are derived from; the server's configuration fills it.
#[derive(Clone, Debug, Default)]
pub struct SettingsSource {
    /// The external URL (`url` in `argocd-cm`, else `--url`).
    pub url: String,
    pub app_label_key: String,
    pub user_logins_disabled: bool,
    pub password_pattern: String,
    pub oidc: Option<OidcSettings>,
}

impl SettingsSource {
    pub fn of(state: &App) -> Self {
        let settings = state.config.current();
        Self {
            url: state.url(),
            app_label_key: String::new(),
            user_logins_disabled: state.auth.accounts.logins_disabled(),
            password_pattern: settings.password_pattern.as_str().to_owned(),
            oidc: settings.oidc.as_deref().map(OidcSettings::from),
        }
    }
}

/// `Get`: open to everyone.
pub async fn get(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    Reply::json(settings(&SettingsSource::of(&ctx.app), &ctx.caller.principal))
}

/// `GetPlugins`: tiphys runs no config management plugins.
pub async fn get_plugins(ctx: Ctx, _: Empty) -> Result<Reply, AppError> {
    ctx.caller.require()?;
    Ok(Reply::empty())
}

pub fn settings(source: &SettingsSource, principal: &Principal) -> PublicSettings {
    PublicSettings {
        url: source.url.clone(),
        oidc_config: source.oidc.clone(),
        app_label_key: source.app_label_key.clone(),
        tracking_method: "label".to_owned(),
        user_logins_disabled: source.user_logins_disabled,
        password_pattern: if principal.is_authenticated() {
            source.password_pattern.clone()
        } else {
            String::new()
        },
        ..PublicSettings::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_settings_have_the_objects_the_ui_reads() {
        let src = SettingsSource {
            url: "https://cd.example.com".into(),
            password_pattern: "^.{8,32}$".into(),
            ..SettingsSource::default()
        };
        let json = serde_json::to_value(settings(&src, &Principal::Anonymous)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "url": "https://cd.example.com",
                "googleAnalytics": {},
                "kustomizeOptions": {},
                "help": {},
                "trackingMethod": "label",
            })
        );
    }
}
