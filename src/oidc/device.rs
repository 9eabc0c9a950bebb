//! The device authorization grant (RFC 8628) of one provider, for `tiphys login --sso --device`:
//! a login on a machine without a browser, or one whose loopback port the browser cannot reach
//! (a remote shell, a container). The CLI shows a code and a URL, the user approves on any
//! device, and the CLI polls the token endpoint until the provider answers.
//!
//! `openidconnect` (through `oauth2`) makes the requests and keeps to the protocol while it polls:
//! it waits the interval the provider gave, and longer after `slow_down` or a failed request. What
//! is tiphys's here is the end of the wait: the code's own lifetime, never more than
//! [`MAX_WAIT`], and the names of the two ways a login ends without tokens.

use std::time::Duration;

use openidconnect::core::CoreDeviceAuthorizationResponse;
use openidconnect::{DeviceCodeErrorResponseType, RequestTokenError, Scope};

use super::provider::{Provider, ProviderError, Tokens, tokens};

/// The longest the CLI waits for an approval, whatever lifetime the provider gives its code.
pub const MAX_WAIT: Duration = Duration::from_secs(900);
/// The polling interval at most, after `slow_down` answers or failed requests.
const MAX_INTERVAL: Duration = Duration::from_secs(30);

/// A device login the provider has started: what to show the user, and what to poll with.
#[derive(Debug)]
pub struct DeviceLogin {
    response: CoreDeviceAuthorizationResponse,
}

impl DeviceLogin {
    /// The code the user types in (or checks) at [`Self::verification_uri`].
    pub fn user_code(&self) -> &str {
        self.response.user_code().secret()
    }

    pub fn verification_uri(&self) -> &str {
        self.response.verification_uri().as_str()
    }

    /// The verification URL with the code in it, when the provider gives one.
    pub fn verification_uri_complete(&self) -> Option<&str> {
        (self.response.verification_uri_complete()).map(|u| u.secret().as_str())
    }

    /// How long the code is valid, as the provider says, capped at [`MAX_WAIT`].
    pub fn expires_in(&self) -> Duration {
        self.response.expires_in().min(MAX_WAIT)
    }
}

impl Provider {
    /// Starts a device login for the public client `client_id` with `scopes` (`openid`
    /// included).
    pub async fn start_device_login(
        &self,
        client_id: &str,
        scopes: &[String],
    ) -> Result<DeviceLogin, ProviderError> {
        let discovery = self.discovery().await?;
        let endpoint = (discovery.additional_metadata().additional_metadata)
            .device_authorization_endpoint
            .clone()
            .ok_or(ProviderError::NoDeviceLogin)?;
        // The scopes come configured with `openid`; do not let the library add it twice.
        let response = self
            .client(&discovery, client_id, None)
            .set_device_authorization_url(endpoint)
            .disable_openid_scope()
            .exchange_device_code()
            .add_scopes(scopes.iter().cloned().map(Scope::new))
            .request_async(self.http())
            .await
            .map_err(super::provider::token_error)?;
        Ok(DeviceLogin { response })
    }

    /// Polls the token endpoint until the user approves or denies `login`, or its code expires.
    pub async fn finish_device_login(
        &self,
        login: &DeviceLogin,
        client_id: &str,
    ) -> Result<Tokens, ProviderError> {
        let discovery = self.discovery().await?;
        let client = self.client(&discovery, client_id, None);
        let response = client
            .exchange_device_access_token(&login.response)
            .map_err(super::provider::configuration_error)?
            .set_max_backoff_interval(MAX_INTERVAL)
            .request_async(self.http(), tokio::time::sleep, Some(login.expires_in()))
            .await
            .map_err(|err| match err {
                RequestTokenError::ServerResponse(answer) => match answer.error() {
                    DeviceCodeErrorResponseType::AccessDenied => ProviderError::DeviceLoginDenied,
                    DeviceCodeErrorResponseType::ExpiredToken => ProviderError::DeviceLoginExpired,
                    other => ProviderError::Refused(
                        super::http::safe_code(other.as_ref()).unwrap_or_else(|| "an error".to_owned()),
                    ),
                },
                RequestTokenError::Request(err) => ProviderError::Unreachable(err),
                RequestTokenError::Parse(err, _) => {
                    ProviderError::BadAnswer(format!("the token answer is not the JSON expected: {err}"))
                }
                RequestTokenError::Other(message) => ProviderError::BadAnswer(message),
            })?;
        Ok(tokens(&response))
    }
}

#[cfg(test)]
mod tests {
    use super::super::provider::Discovery;

    fn discovery(extra: &str) -> Discovery {
        serde_json::from_str(&format!(
            r#"{{"issuer": "https://idp.test", "authorization_endpoint": "https://idp.test/auth",
                "jwks_uri": "https://idp.test/jwks", "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"]{extra}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_discovery_document_names_the_device_endpoint_beside_the_logout_one() {
        let doc = discovery(
            r#", "device_authorization_endpoint": "https://idp.test/device/auth",
                "end_session_endpoint": "https://idp.test/logout""#,
        );
        let extra = doc.additional_metadata();
        assert_eq!(
            extra
                .additional_metadata
                .device_authorization_endpoint
                .as_ref()
                .map(|u| u.as_str()),
            Some("https://idp.test/device/auth")
        );
        assert_eq!(
            extra.end_session_endpoint.as_ref().map(|u| u.as_str()),
            Some("https://idp.test/logout")
        );
        let plain = discovery("");
        assert!(
            plain
                .additional_metadata()
                .additional_metadata
                .device_authorization_endpoint
                .is_none()
        );
    }
}
