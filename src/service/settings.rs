//! `cluster.SettingsService`: what a browser
//! needs before anyone has logged in. Nothing secret is ever part of it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use super::{Ctx, Empty, Reply};
use crate::config::oidc::{ClaimRequest, OidcConfig};
use crate::error::AppError;
use crate::principal::Principal;
use crate::schema::is_zero;
use crate::state::ServerState;

/// The settings a caller may see. Field names and the always-present nested
/// objects (`googleAnalytics`, `help`, `kustomizeOptions`) follow Argo CD,
/// whose UI crashes without `help`. Every field comes from `argocd-cm` with
/// upstream's key and default (`server/settings/settings.go` and
/// `util/settings/settings.go` upstream); the banner and the controller's
/// namespace are shown to logged-in callers only, the password pattern too.
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
    #[serde(skip_serializing_if = "is_zero")]
    pub status_badge_enabled: bool,
    pub google_analytics: GoogleAnalytics,
    pub kustomize_options: KustomizeOptions,
    pub help: Help,
    #[serde(skip_serializing_if = "is_zero")]
    pub user_logins_disabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub kustomize_versions: Vec<String>,
    #[serde(rename = "uiCssURL", skip_serializing_if = "is_zero")]
    pub ui_css_url: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub ui_banner_content: String,
    #[serde(rename = "uiBannerURL", skip_serializing_if = "is_zero")]
    pub ui_banner_url: String,
    /// Only for logged-in callers.
    #[serde(skip_serializing_if = "is_zero")]
    pub password_pattern: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub tracking_method: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub ui_banner_permanent: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub ui_banner_position: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub status_badge_root_url: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub exec_enabled: bool,
    #[serde(skip_serializing_if = "is_zero")]
    pub controller_namespace: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub impersonation_enabled: bool,
    #[serde(rename = "installationID", skip_serializing_if = "is_zero")]
    pub installation_id: String,
    #[serde(rename = "additionalUrls", skip_serializing_if = "is_zero")]
    pub additional_urls: Vec<String>,
    /// Upstream's `--sync-with-replace-allowed` (default on): the UI offers the Replace option.
    #[serde(skip_serializing_if = "is_zero")]
    pub sync_with_replace_allowed: bool,
    /// tiphys's field 1000: every provider a user may log in with, when
    /// `tiphys.oidc.providers` is set, each under its `name` (`oidc.config`'s as `default`),
    /// the default one first (`/auth/login?provider=<name>`, `tiphys login --sso --provider`).
    #[serde(skip_serializing_if = "is_zero")]
    pub sso_providers: Vec<OidcSettings>,
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
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub binary_urls: BTreeMap<String, String>,
}

/// Inputs the settings are derived from; the server's configuration fills it.
#[derive(Clone, Debug, Default)]
pub struct SettingsSource {
    /// The external URL (`url` in `argocd-cm`, else `--url`).
    pub url: String,
    pub user_logins_disabled: bool,
    pub password_pattern: String,
    pub oidc: Option<OidcSettings>,
    /// Every provider, under its name, when `tiphys.oidc.providers` is set (else empty).
    pub sso_providers: Vec<OidcSettings>,
    /// `argocd-cm` as read: the other fields come from its keys.
    pub cm: BTreeMap<String, String>,
    /// The namespace the server keeps its objects in (upstream: the controller's).
    pub namespace: String,
}

impl SettingsSource {
    pub fn of(state: &ServerState) -> Self {
        let settings = state.config.current();
        Self {
            url: state.url(),
            user_logins_disabled: state.auth.accounts.logins_disabled(),
            password_pattern: settings.password_pattern.as_str().to_owned(),
            // Upstream's clients know one provider: `oidc.config`, else the first listed.
            oidc: settings.oidc_providers.first().map(|p| OidcSettings::from(&**p)),
            sso_providers: if settings.oidc_listed {
                let named = |p: &Arc<OidcConfig>| OidcSettings {
                    name: p.id.clone(),
                    ..OidcSettings::from(&**p)
                };
                settings.oidc_providers.iter().map(named).collect()
            } else {
                Vec::new()
            },
            cm: settings.cm.clone(),
            namespace: state.namespace.clone(),
        }
    }

    fn get(&self, key: &str) -> &str {
        self.cm.get(key).map_or("", String::as_str)
    }

    /// Upstream's booleans in `argocd-cm`: on only when the value is `true`.
    fn on(&self, key: &str) -> bool {
        self.get(key) == "true"
    }
}

/// Upstream's default `application.instanceLabelKey`.
const DEFAULT_APP_LABEL_KEY: &str = "app.kubernetes.io/instance";
/// The platforms upstream reads `help.download.<platform>` for.
const DOWNLOAD_PLATFORMS: [&str; 7] = [
    "darwin-amd64",
    "darwin-arm64",
    "windows-amd64",
    "linux-amd64",
    "linux-arm64",
    "linux-ppc64le",
    "linux-s390x",
];

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
    let logged_in = principal.is_authenticated();
    let shown = |value: &str| {
        if logged_in {
            value.to_owned()
        } else {
            String::new()
        }
    };
    let app_label_key = match source.get("application.instanceLabelKey") {
        "" => DEFAULT_APP_LABEL_KEY.to_owned(),
        key => key.to_owned(),
    };
    // Upstream: "Chat now!" unless `help.chatText` says otherwise, and no text without a URL.
    let chat_url = source.cm.get("help.chatUrl").cloned();
    let chat_text = match (&chat_url, source.cm.get("help.chatText")) {
        (None, _) => String::new(),
        (Some(_), Some(text)) => text.clone(),
        (Some(_), None) => "Chat now!".to_owned(),
    };
    let binary_urls = DOWNLOAD_PLATFORMS
        .iter()
        .filter_map(|p| {
            source
                .cm
                .get(&format!("help.download.{p}"))
                .map(|u| ((*p).to_owned(), u.clone()))
        })
        .collect();
    let kustomize_versions = source
        .cm
        .keys()
        .filter_map(|k| k.strip_prefix("kustomize.version."))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    // A list that does not parse is left out, as upstream does (it logs a warning).
    let additional_urls = match source.get("additionalUrls") {
        "" => Vec::new(),
        text => serde_yaml_ng::from_str::<Vec<String>>(text).unwrap_or_default(),
    };
    PublicSettings {
        url: source.url.clone(),
        oidc_config: source.oidc.clone(),
        sso_providers: source.sso_providers.clone(),
        app_label_key,
        status_badge_enabled: source.on("statusbadge.enabled"),
        google_analytics: GoogleAnalytics {
            tracking_id: source.get("ga.trackingid").to_owned(),
            anonymize_users: source.get("ga.anonymizeusers") != "false",
        },
        kustomize_options: KustomizeOptions {
            build_options: source.get("kustomize.buildOptions").to_owned(),
        },
        help: Help {
            chat_url: chat_url.unwrap_or_default(),
            chat_text,
            binary_urls,
        },
        user_logins_disabled: source.user_logins_disabled,
        kustomize_versions,
        ui_css_url: source.get("ui.cssurl").to_owned(),
        ui_banner_content: shown(source.get("ui.bannercontent")),
        ui_banner_url: shown(source.get("ui.bannerurl")),
        password_pattern: shown(&source.password_pattern),
        tracking_method: source.get("application.resourceTrackingMethod").to_owned(),
        ui_banner_permanent: logged_in && source.on("ui.bannerpermanent"),
        ui_banner_position: shown(source.get("ui.bannerposition")),
        status_badge_root_url: source.get("statusbadge.url").to_owned(),
        exec_enabled: source.on("exec.enabled"),
        controller_namespace: shown(&source.namespace),
        impersonation_enabled: source.on("application.sync.impersonation.enabled"),
        installation_id: source.get("installationID").to_owned(),
        additional_urls,
        sync_with_replace_allowed: true,
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
                "appLabelKey": "app.kubernetes.io/instance",
                "googleAnalytics": {"anonymizeUsers": true},
                "kustomizeOptions": {},
                "help": {},
                "syncWithReplaceAllowed": true,
            })
        );
    }

    fn configured() -> SettingsSource {
        let cm = [
            ("application.instanceLabelKey", "team.example.com/app"),
            ("application.resourceTrackingMethod", "annotation+label"),
            ("statusbadge.enabled", "true"),
            ("statusbadge.url", "https://badges.example.com/"),
            ("ga.trackingid", "UA-1"),
            ("ga.anonymizeusers", "false"),
            ("help.chatUrl", "https://chat.example.com"),
            ("help.download.linux-amd64", "https://dl.example.com/argocd"),
            ("help.download.plan9-mips", "ignored"),
            ("kustomize.buildOptions", "--enable-helm"),
            ("kustomize.version.v5.4.0", "/usr/bin/kustomize-5.4"),
            ("ui.cssurl", "./custom.css"),
            ("ui.bannercontent", "Maintenance at noon"),
            ("ui.bannerurl", "https://status.example.com"),
            ("ui.bannerpermanent", "true"),
            ("ui.bannerposition", "bottom"),
            ("exec.enabled", "yes"),
            ("application.sync.impersonation.enabled", "true"),
            ("installationID", "prod-eu"),
            ("additionalUrls", "- https://cd2.example.com\n"),
        ];
        SettingsSource {
            url: "https://cd.example.com".into(),
            password_pattern: "^.{8,32}$".into(),
            cm: cm
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            namespace: "argocd".into(),
            ..SettingsSource::default()
        }
    }

    #[test]
    fn argocd_cm_keys_become_settings_as_upstream_reads_them() {
        let user = Principal::Account(crate::principal::AccountPrincipal {
            name: "alice".into(),
            kind: crate::principal::TokenKind::Login,
            jti: "j".into(),
            issued_at_ms: 0,
            expires_at: None,
        });
        let json = serde_json::to_value(settings(&configured(), &user)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "url": "https://cd.example.com",
                "appLabelKey": "team.example.com/app",
                "statusBadgeEnabled": true,
                "googleAnalytics": {"trackingID": "UA-1"},
                "kustomizeOptions": {"buildOptions": "--enable-helm"},
                "help": {
                    "chatUrl": "https://chat.example.com",
                    "chatText": "Chat now!",
                    "binaryUrls": {"linux-amd64": "https://dl.example.com/argocd"},
                },
                "kustomizeVersions": ["v5.4.0"],
                "uiCssURL": "./custom.css",
                "uiBannerContent": "Maintenance at noon",
                "uiBannerURL": "https://status.example.com",
                "passwordPattern": "^.{8,32}$",
                "trackingMethod": "annotation+label",
                "uiBannerPermanent": true,
                "uiBannerPosition": "bottom",
                "statusBadgeRootUrl": "https://badges.example.com/",
                "controllerNamespace": "argocd",
                "impersonationEnabled": true,
                "installationID": "prod-eu",
                "additionalUrls": ["https://cd2.example.com"],
                "syncWithReplaceAllowed": true,
            })
        );
    }

    #[test]
    fn the_banner_and_namespace_are_for_logged_in_callers() {
        let json = serde_json::to_value(settings(&configured(), &Principal::Anonymous)).unwrap();
        for hidden in [
            "uiBannerContent",
            "uiBannerURL",
            "uiBannerPermanent",
            "uiBannerPosition",
            "controllerNamespace",
            "passwordPattern",
        ] {
            assert!(
                json.get(hidden).is_none(),
                "{hidden} shown to an anonymous caller: {json}"
            );
        }
        assert_eq!(json["statusBadgeEnabled"], true);
    }
}
