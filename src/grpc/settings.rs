use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::app::App;
use crate::pb::cluster::settings_service_server::SettingsService;
use crate::pb::cluster::{
    Claim, GoogleAnalyticsConfig, Help, KustomizeOptions, OidcConfig, Settings, SettingsPluginsResponse,
    SettingsQuery,
};
use crate::service::settings::{PublicSettings, SettingsSource, settings};

pub struct SettingsGrpc {
    pub state: Arc<App>,
}

#[tonic::async_trait]
impl SettingsService for SettingsGrpc {
    async fn get(&self, request: Request<SettingsQuery>) -> Result<Response<Settings>, Status> {
        Ok(Response::new(
            settings(
                &SettingsSource::of(&self.state),
                &super::caller(&request).principal,
            )
            .into(),
        ))
    }

    async fn get_plugins(
        &self,
        request: Request<SettingsQuery>,
    ) -> Result<Response<SettingsPluginsResponse>, Status> {
        super::caller(&request).require()?;
        Ok(Response::new(SettingsPluginsResponse::default()))
    }
}

impl From<PublicSettings> for Settings {
    fn from(s: PublicSettings) -> Self {
        Self {
            url: s.url,
            oidc_config: s.oidc_config.map(|o| OidcConfig {
                name: o.name,
                issuer: o.issuer,
                client_id: o.client_id,
                cli_client_id: o.cli_client_id,
                scopes: o.scopes,
                id_token_claims: o
                    .id_token_claims
                    .into_iter()
                    .map(|(k, c)| {
                        let claim = Claim {
                            essential: c.essential,
                            value: c.value,
                            values: c.values,
                        };
                        (k, claim)
                    })
                    .collect(),
                enable_pkce_authentication: o.enable_pkce_authentication,
            }),
            app_label_key: s.app_label_key,
            google_analytics: Some(GoogleAnalyticsConfig {
                tracking_id: s.google_analytics.tracking_id,
                anonymize_users: s.google_analytics.anonymize_users,
            }),
            kustomize_options: Some(KustomizeOptions {
                build_options: s.kustomize_options.build_options,
            }),
            help: Some(Help {
                chat_url: s.help.chat_url,
                chat_text: s.help.chat_text,
                ..Help::default()
            }),
            user_logins_disabled: s.user_logins_disabled,
            status_badge_enabled: s.status_badge_enabled,
            exec_enabled: s.exec_enabled,
            tracking_method: s.tracking_method,
            additional_urls: s.additional_urls,
            password_pattern: s.password_pattern,
            ..Self::default()
        }
    }
}
