//! Seeding the stored certificates (and GnuPG keys) from Argo CD's ConfigMaps in
//! `--config-dir` at start: `argocd-tls-certs-cm` (one PEM bundle per host name key),
//! `argocd-ssh-known-hosts-cm` (`ssh_known_hosts`, known_hosts lines) and `argocd-gpg-keys-cm`
//! (one armored key per key ID). What the store already holds is kept: after the first start
//! the API (and `tiphys cert`, `tiphys gpg`) is where they change, and `admin export` writes
//! them back out in these formats. A malformed entry stops the start, naming where it is.

use std::path::Path;

use serde_json::Value;

use super::known_hosts::parse_known_hosts;
use super::{HTTPS, SSH, key, ssh_value, tls, tls_value};
use crate::config::source::{ConfigError, RawObject, read_object};
use crate::registry::{Change, Key, Registry, RegistryError};

pub const TLS_CERTS_CM: &str = "argocd-tls-certs-cm";
pub const SSH_KNOWN_HOSTS_CM: &str = "argocd-ssh-known-hosts-cm";
pub const GPG_KEYS_CM: &str = "argocd-gpg-keys-cm";
/// The key of `argocd-ssh-known-hosts-cm` that holds the lines.
pub const KNOWN_HOSTS_KEY: &str = "ssh_known_hosts";

/// The objects the three ConfigMaps in `dir` describe, checked.
pub fn objects(dir: &Path) -> Result<Vec<(Key, Value)>, ConfigError> {
    let mut out = Vec::new();
    let tls_cm = read_object(dir, TLS_CERTS_CM)?;
    for (host, pem) in &tls_cm.data {
        tls::parse_bundle(pem.as_bytes())
            .map_err(|e| ConfigError::new(tls_cm.locate(host), e).in_object(TLS_CERTS_CM))?;
        out.push((key(HTTPS, host, ""), tls_value(host, pem.as_bytes())));
    }
    let ssh_cm = read_object(dir, SSH_KNOWN_HOSTS_CM)?;
    if let Some(text) = ssh_cm.data.get(KNOWN_HOSTS_KEY) {
        let entries = parse_known_hosts(text)
            .map_err(|e| located(&ssh_cm, KNOWN_HOSTS_KEY, e).in_object(SSH_KNOWN_HOSTS_CM))?;
        for entry in entries {
            out.push((key(SSH, &entry.host, &entry.sub_type), ssh_value(&entry)));
        }
    }
    let gpg_cm = read_object(dir, GPG_KEYS_CM)?;
    for (key_id, armored) in &gpg_cm.data {
        let objects = crate::service::gpgkey::stored_objects(armored, Some(key_id))
            .map_err(|e| ConfigError::new(gpg_cm.locate(key_id), e).in_object(GPG_KEYS_CM))?;
        out.extend(objects);
    }
    Ok(out)
}

/// A known_hosts error ("line N: …") placed at that line of the key's value.
fn located(object: &RawObject, key: &str, error: String) -> ConfigError {
    let line = error
        .strip_prefix("line ")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse::<usize>().ok());
    match line {
        Some(line) => ConfigError::new(object.locate_line(key, line), error),
        None => ConfigError::new(object.locate(key), error),
    }
}

/// [`seed`] for a server's state, from the config dir it was started with. The server calls it
/// right after opening its state, before it serves.
pub async fn seed_app(app: &crate::state::ServerState) -> anyhow::Result<usize> {
    seed(&app.registry, app.config.dir()).await
}

/// Creates what `dir` describes and the store lacks; the number created.
pub async fn seed(registry: &Registry, dir: Option<&Path>) -> anyhow::Result<usize> {
    let Some(dir) = dir else {
        return Ok(0);
    };
    let mut created = 0;
    for (key, value) in objects(dir)? {
        if registry.get(&key).is_some() {
            continue;
        }
        match registry.apply_one(Change::Create { key, value }).await {
            Ok(_) => created += 1,
            // Another replica seeded it first.
            Err(RegistryError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if created > 0 {
        tracing::info!(created, "certificates and GnuPG keys seeded from the config dir");
    }
    Ok(created)
}
