//! Each provider's proof that it sent an event: an HMAC over the body (GitHub, Gogs, Bitbucket
//! Server), a shared token (GitLab), the webhook's UUID (Bitbucket Cloud) or basic auth (Azure
//! DevOps), checked against `argocd-secret`.

use std::collections::BTreeMap;

use ring::hmac;

use super::Provider;

/// The `argocd-secret` keys that configure a provider's proof.
pub(super) const SECRET_KEYS: [&str; 7] = [
    "webhook.github.secret",
    "webhook.gitlab.secret",
    "webhook.bitbucket.uuid",
    "webhook.bitbucketserver.secret",
    "webhook.gogs.secret",
    "webhook.azuredevops.username",
    "webhook.azuredevops.password",
];

/// Checks the provider's proof against its secret in `argocd-secret`. A provider without a
/// secret is accepted unsigned only while no provider has one. (Upstream accepts it anyway: there,
/// configuring GitHub's secret does not stop a forged event sent with GitLab's headers.)
pub(super) fn verify<'a>(
    provider: Provider,
    header: &impl Fn(&str) -> Option<&'a str>,
    body: &[u8],
    secrets: &BTreeMap<String, String>,
) -> Result<(), String> {
    let secret = |key: &str| secrets.get(key).map(String::as_str).filter(|s| !s.is_empty());
    let unsigned = || {
        if SECRET_KEYS.iter().any(|k| secret(k).is_some()) {
            Err(format!(
                "{provider:?} events are not accepted: this server checks webhook secrets, and none is configured for {provider:?}"
            ))
        } else {
            Ok(())
        }
    };
    match provider {
        Provider::GitHub => {
            let Some(secret) = secret("webhook.github.secret") else {
                return unsigned();
            };
            if let Some(sig) = header("x-hub-signature-256") {
                check_hmac(hmac::HMAC_SHA256, secret, body, sig.strip_prefix("sha256="))
            } else if let Some(sig) = header("x-hub-signature") {
                check_hmac(
                    hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
                    secret,
                    body,
                    sig.strip_prefix("sha1="),
                )
            } else {
                Err("missing X-Hub-Signature-256 header".to_owned())
            }
        }
        Provider::Gogs => {
            let Some(secret) = secret("webhook.gogs.secret") else {
                return unsigned();
            };
            let sig = header("x-gogs-signature").ok_or("missing X-Gogs-Signature header")?;
            check_hmac(hmac::HMAC_SHA256, secret, body, Some(sig))
        }
        Provider::BitbucketServer => {
            let Some(secret) = secret("webhook.bitbucketserver.secret") else {
                return unsigned();
            };
            let sig = header("x-hub-signature").ok_or("missing X-Hub-Signature header")?;
            check_hmac(hmac::HMAC_SHA256, secret, body, sig.strip_prefix("sha256="))
        }
        Provider::GitLab => {
            let Some(secret) = secret("webhook.gitlab.secret") else {
                return unsigned();
            };
            let token = header("x-gitlab-token").ok_or("missing X-Gitlab-Token header")?;
            equal(token, secret)
                .then_some(())
                .ok_or_else(|| "X-Gitlab-Token does not match".to_owned())
        }
        Provider::Bitbucket => {
            let Some(secret) = secret("webhook.bitbucket.uuid") else {
                return unsigned();
            };
            let uuid = header("x-hook-uuid").unwrap_or_default();
            equal(uuid, secret)
                .then_some(())
                .ok_or_else(|| "X-Hook-UUID does not match".to_owned())
        }
        Provider::AzureDevOps => {
            let user = secret("webhook.azuredevops.username");
            let pass = secret("webhook.azuredevops.password");
            if user.is_none() && pass.is_none() {
                return unsigned();
            }
            let expected = format!("{}:{}", user.unwrap_or(""), pass.unwrap_or(""));
            let sent = header("authorization")
                .and_then(|v| v.strip_prefix("Basic "))
                .and_then(|b| {
                    use base64::Engine as _;
                    base64::engine::general_purpose::STANDARD.decode(b.trim()).ok()
                })
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or("missing basic authorization")?;
            equal(&sent, &expected)
                .then_some(())
                .ok_or_else(|| "basic authorization does not match".to_owned())
        }
    }
}

/// Constant-time comparison of two secrets.
pub(super) fn equal(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

pub(super) fn check_hmac(
    alg: hmac::Algorithm,
    secret: &str,
    body: &[u8],
    sig_hex: Option<&str>,
) -> Result<(), String> {
    let sig = sig_hex
        .and_then(decode_hex)
        .ok_or("the signature is not in the provider's format")?;
    let key = hmac::Key::new(alg, secret.as_bytes());
    hmac::verify(&key, body, &sig).map_err(|_| "HMAC verification failed".to_owned())
}

pub(super) fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
