//! `cluster.SettingsService/Get` and `GET /api/v1/settings`: what a browser
//! needs before anyone has logged in. Nothing secret is ever part of it.

use serde::Serialize;

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
    /// The external URL (`url` in `argocd-cm`).
    pub url: String,
    pub app_label_key: String,
}

pub fn settings(source: &SettingsSource, _principal: &Principal) -> PublicSettings {
    PublicSettings {
        url: source.url.clone(),
        app_label_key: source.app_label_key.clone(),
        tracking_method: "label".to_owned(),
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
            app_label_key: String::new(),
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
