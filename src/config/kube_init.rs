//! What a server writes into an installation on its first start, as upstream's
//! `InitializeSettings` (util/settings/settings.go) does: a `server.secretkey` in `argocd-secret`
//! when it has none (32 random bytes, base64, as util.MakeSignature), and, while the admin
//! account is enabled and has no password, an initial one: 16 characters of upstream's
//! alphabet, kept in clear in `argocd-initial-admin-secret` (`password`) and as a bcrypt hash in
//! `argocd-secret` (`admin.password`, with `admin.passwordMtime`). So a fresh installation
//! keeps its signing key and admin password across restarts and replicas, and tokens signed by
//! either server work on the other.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use super::{ARGOCD_CM, ARGOCD_SECRET};
use crate::kubernetes::{Connection, Verb, store_error};

const INITIAL_SECRET: &str = "argocd-initial-admin-secret";
/// Upstream's initial password: its length and alphabet.
const INITIAL_LENGTH: usize = 16;
const LETTERS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-";
/// bcrypt's cost in Go's `bcrypt.DefaultCost`, which upstream's password.HashPassword uses.
const BCRYPT_COST: u32 = 10;

/// Writes what `argocd-secret` in `namespace` lacks (see the module doc); `now` is the time
/// stamped as the password's mtime (RFC 3339, UTC). A conflict means another replica did it.
pub async fn initialize(connection: &Connection, namespace: &str, now: &str) -> anyhow::Result<()> {
    let client = connection.client.clone();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    let failed = |verb, resource: &'static str| {
        move |e| anyhow::anyhow!("{}", store_error(e, connection, verb, resource, namespace))
    };
    let cm = config_maps
        .get_opt(ARGOCD_CM)
        .await
        .map_err(failed(Verb::Get, "configmaps"))?;
    let admin_enabled = cm
        .as_ref()
        .and_then(|cm| cm.data.as_ref()?.get("admin.enabled").cloned())
        .is_none_or(|v| v.trim() != "false");
    let existing = secrets
        .get_opt(ARGOCD_SECRET)
        .await
        .map_err(failed(Verb::Get, "secrets"))?;
    let mut data: BTreeMap<String, ByteString> =
        existing.as_ref().and_then(|s| s.data.clone()).unwrap_or_default();
    let missing =
        |data: &BTreeMap<String, ByteString>, key: &str| data.get(key).is_none_or(|v| v.0.is_empty());
    let mut changed = false;
    if admin_enabled {
        if missing(&data, "admin.password") {
            let password = initial_password();
            let hash = bcrypt::hash(&password, BCRYPT_COST)?;
            save_initial_secret(&secrets, &password)
                .await
                .map_err(failed(Verb::Update, "secrets"))?;
            data.insert("admin.password".to_owned(), ByteString(hash.into_bytes()));
            data.insert(
                "admin.passwordMtime".to_owned(),
                ByteString(now.as_bytes().to_vec()),
            );
            tracing::info!("initialized the admin password (in {INITIAL_SECRET})");
            changed = true;
        } else if missing(&data, "admin.passwordMtime") {
            data.insert(
                "admin.passwordMtime".to_owned(),
                ByteString(now.as_bytes().to_vec()),
            );
            changed = true;
        }
    }
    if missing(&data, "server.secretkey") {
        let key = base64::engine::general_purpose::STANDARD.encode(crate::random::bytes(32));
        data.insert("server.secretkey".to_owned(), ByteString(key.into_bytes()));
        tracing::info!("initialized server.secretkey in {ARGOCD_SECRET}");
        changed = true;
    }
    if !changed {
        return Ok(());
    }
    let written = match existing {
        Some(mut secret) => {
            // The resourceVersion read above is the precondition.
            secret.data = Some(data);
            secrets
                .replace(ARGOCD_SECRET, &PostParams::default(), &secret)
                .await
                .map(drop)
        }
        None => secrets
            .create(&PostParams::default(), &labelled(ARGOCD_SECRET, data))
            .await
            .map(drop),
    };
    match written {
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::warn!("{ARGOCD_SECRET} was initialized meanwhile, assuming by another replica");
            Ok(())
        }
        other => other.map_err(failed(Verb::Update, "secrets")),
    }
}

/// 16 characters of upstream's alphabet, drawn without bias.
fn initial_password() -> String {
    let mut out = String::with_capacity(INITIAL_LENGTH);
    while out.len() < INITIAL_LENGTH {
        for byte in crate::random::bytes(INITIAL_LENGTH) {
            // 256 = 4 * 64, and the alphabet has 63 letters: drop what would favour some.
            let index = usize::from(byte & 0x3f);
            if out.len() < INITIAL_LENGTH && index < LETTERS.len() {
                out.push(char::from(LETTERS[index]));
            }
        }
    }
    out
}

/// Creates or updates `argocd-initial-admin-secret` with `password` (upstream's
/// CreateOrUpdateSecretField).
async fn save_initial_secret(secrets: &Api<Secret>, password: &str) -> Result<(), kube::Error> {
    let field = BTreeMap::from([("password".to_owned(), ByteString(password.as_bytes().to_vec()))]);
    match secrets.get_opt(INITIAL_SECRET).await? {
        Some(mut secret) => {
            secret.data.get_or_insert_with(BTreeMap::new).extend(field);
            secrets
                .replace(INITIAL_SECRET, &PostParams::default(), &secret)
                .await?;
        }
        None => {
            let mut secret = labelled(INITIAL_SECRET, field);
            secret.metadata.labels = None;
            secrets.create(&PostParams::default(), &secret).await?;
        }
    }
    Ok(())
}

/// A Secret `name` with `data`, labelled as Argo CD's settings are.
fn labelled(name: &str, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".to_owned(), name.to_owned()),
                ("app.kubernetes.io/part-of".to_owned(), "argocd".to_owned()),
            ])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_passwords_are_sixteen_letters_of_upstreams_alphabet() {
        for _ in 0..200 {
            let p = initial_password();
            assert_eq!(p.len(), INITIAL_LENGTH);
            assert!(p.bytes().all(|b| LETTERS.contains(&b)), "{p}");
        }
    }
}
