//! The server's certificate on an installation (`--kube` without `--tls-cert`), taken where
//! upstream's argocd-server takes it (util/settings/settings.go: `loadTLSCertificate`,
//! `InitializeSettings`, `saveSignatureAndCertificate`):
//! - the Secret `argocd-server-tls` (`tls.crt`, `tls.key`), when it has both;
//! - else the same two keys of `argocd-secret`;
//! - else a self-signed certificate for upstream's names (and the `--url` host), written to
//!   `argocd-secret` as upstream's first start writes it, so that every replica, and an
//!   argocd-server beside them, serves the same one. A replica that loses the write's race takes
//!   the winner's.
//!
//! Both Secrets are watched, as upstream's settings manager watches them: a change takes effect
//! for new handshakes within the watch's delay, open connections keep theirs. A certificate that
//! does not load stops the start; later, it is logged and the previous one stays.

use std::path::PathBuf;
use std::sync::Arc;

use futures_util::StreamExt as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use rustls::crypto::CryptoProvider;
use tokio_util::sync::CancellationToken;

use super::tls::{self, CertResolver, Loaded};
use crate::config::ARGOCD_SECRET;

/// The Secret an installation manages the server's certificate in (upstream's
/// `externalServerTLSSecretName`).
pub const SERVER_TLS_SECRET: &str = "argocd-server-tls";
const CERT_KEY: &str = "tls.crt";
const KEY_KEY: &str = "tls.key";

/// Where the certificate is read from.
#[derive(Clone)]
pub struct Installation {
    pub client: kube::Client,
    pub namespace: String,
    /// The names a generated certificate is made for.
    pub names: Vec<String>,
}

/// The names upstream's first start makes its certificate for, plus loopback and `external_host`.
pub fn generated_names(namespace: &str, external_host: Option<&str>) -> Vec<String> {
    let mut names = vec![
        "localhost".to_owned(),
        "argocd-server".to_owned(),
        format!("argocd-server.{namespace}"),
        format!("argocd-server.{namespace}.svc"),
        format!("argocd-server.{namespace}.svc.cluster.local"),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if let Some(host) = external_host.filter(|h| !names.iter().any(|n| n == h)) {
        names.push(host.to_owned());
    }
    names
}

impl Installation {
    fn api(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The certificate in force now, made and stored when the installation has none. Returns
    /// the resolver and where the certificate came from.
    pub async fn load(&self, provider: &CryptoProvider) -> anyhow::Result<(Arc<CertResolver>, String)> {
        let api = self.api();
        let read = |name: &'static str| {
            let api = api.clone();
            async move {
                api.get_opt(name).await.map_err(|e| {
                    anyhow::anyhow!(
                        "cannot read Secret {}/{name} for the server's TLS certificate: {e}",
                        self.namespace
                    )
                })
            }
        };
        let external = read(SERVER_TLS_SECRET).await?;
        let mut internal = read(ARGOCD_SECRET).await?;
        if chosen(external.as_ref(), internal.as_ref()).is_none() {
            internal = Some(self.store_generated(internal).await?);
        }
        let (name, cert, key) = chosen(external.as_ref(), internal.as_ref())
            .ok_or_else(|| anyhow::anyhow!("{ARGOCD_SECRET} holds no certificate after it was written"))?;
        let loaded = self.parse(name, cert, key, provider)?;
        Ok((
            CertResolver::of(loaded),
            format!("Secret {}/{name}", self.namespace),
        ))
    }

    /// Writes a new self-signed certificate into `argocd-secret` (read as `current`), with its
    /// `resourceVersion` as the precondition; after a lost race, the Secret as the winner left it.
    async fn store_generated(&self, current: Option<Secret>) -> anyhow::Result<Secret> {
        let api = self.api();
        let Some(mut secret) = current else {
            anyhow::bail!(
                "Secret {}/{ARGOCD_SECRET} does not exist, so there is nowhere to keep the server's \
                 certificate: give --tls-cert and --tls-key, or create the Secret",
                self.namespace
            );
        };
        let (cert, key) = tls::self_signed_pem(&self.names, "Argo CD")?;
        let data = secret.data.get_or_insert_default();
        data.insert(CERT_KEY.to_owned(), ByteString(cert.into_bytes()));
        data.insert(KEY_KEY.to_owned(), ByteString(key.into_bytes()));
        match api.replace(ARGOCD_SECRET, &PostParams::default(), &secret).await {
            Ok(stored) => {
                tracing::info!(names = ?self.names, "generated a self-signed TLS certificate and stored it in {ARGOCD_SECRET}");
                Ok(stored)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::info!("another server stored a certificate in {ARGOCD_SECRET} first; using it");
                api.get(ARGOCD_SECRET).await.map_err(|e| {
                    anyhow::anyhow!("cannot read Secret {}/{ARGOCD_SECRET}: {e}", self.namespace)
                })
            }
            Err(e) => Err(anyhow::anyhow!(
                "cannot store the server's generated certificate in Secret {}/{ARGOCD_SECRET}: {e}",
                self.namespace
            )),
        }
    }

    fn parse(
        &self,
        name: &str,
        cert: &[u8],
        key: &[u8],
        provider: &CryptoProvider,
    ) -> anyhow::Result<Loaded> {
        let at = |key: &str| PathBuf::from(format!("Secret {}/{name}, key {key}", self.namespace));
        Ok(tls::parse_pair(cert, key, &at(CERT_KEY), &at(KEY_KEY), provider)?)
    }

    /// Follows both Secrets and swaps in each new certificate; a bad one is logged and left out.
    pub fn spawn_reloader(
        self,
        resolver: Arc<CertResolver>,
        provider: Arc<CryptoProvider>,
        cancel: CancellationToken,
    ) {
        tokio::spawn(async move {
            let follow = |name: &'static str| {
                let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
                watcher(self.api(), config)
                    .default_backoff()
                    .map(move |event| (name, event))
                    .boxed()
            };
            let mut events = futures_util::stream::select(follow(SERVER_TLS_SECRET), follow(ARGOCD_SECRET));
            let (mut external, mut internal): (Option<Secret>, Option<Secret>) = (None, None);
            let mut in_force = None;
            loop {
                let (name, event) = tokio::select! {
                    () = cancel.cancelled() => return,
                    next = events.next() => match next {
                        Some(next) => next,
                        None => return,
                    },
                };
                let slot = if name == SERVER_TLS_SECRET {
                    &mut external
                } else {
                    &mut internal
                };
                match event {
                    Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret)) => {
                        *slot = Some(secret)
                    }
                    Ok(watcher::Event::Delete(_)) => *slot = None,
                    // A new list: what it holds follows, and its end says it is complete.
                    Ok(watcher::Event::Init) => {
                        *slot = None;
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => {}
                    Err(err) => {
                        tracing::warn!(error = %err, "watching {name} for the server's TLS certificate failed; retrying");
                        continue;
                    }
                }
                let Some((from, cert, key)) = chosen(external.as_ref(), internal.as_ref()) else {
                    continue;
                };
                let fingerprint = (from, cert.to_vec(), key.to_vec());
                if in_force.as_ref() == Some(&fingerprint) {
                    continue;
                }
                match self.parse(from, cert, key, &provider) {
                    Ok(loaded) => {
                        // The first pair seen is the one loaded at start, unless it changed since.
                        let first = in_force.is_none();
                        resolver.swap(loaded);
                        if !first {
                            tracing::info!(secret = from, "TLS certificate reloaded");
                        }
                        in_force = Some(fingerprint);
                    }
                    Err(err) => {
                        tracing::warn!(error = %format!("{err:#}"), "new TLS certificate rejected; keeping the previous one")
                    }
                }
            }
        });
    }
}

/// The certificate upstream would serve: `argocd-server-tls` when it has both keys, else
/// `argocd-secret` when it has both.
fn chosen<'a>(
    external: Option<&'a Secret>,
    internal: Option<&'a Secret>,
) -> Option<(&'static str, &'a [u8], &'a [u8])> {
    let pair = |secret: Option<&'a Secret>| {
        let data = secret?.data.as_ref()?;
        Some((data.get(CERT_KEY)?.0.as_slice(), data.get(KEY_KEY)?.0.as_slice()))
    };
    if let Some((cert, key)) = pair(external) {
        return Some((SERVER_TLS_SECRET, cert, key));
    }
    pair(internal).map(|(cert, key)| (ARGOCD_SECRET, cert, key))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn the_external_secret_wins_only_with_both_keys() {
        let both = secret(&[(CERT_KEY, "c1"), (KEY_KEY, "k1")]);
        let internal = secret(&[(CERT_KEY, "c2"), (KEY_KEY, "k2"), ("server.secretkey", "s")]);
        let half = secret(&[(CERT_KEY, "c1")]);
        let name = |c: Option<(&'static str, &[u8], &[u8])>| c.map(|(n, cert, _)| (n, cert.to_vec()));
        assert_eq!(
            name(chosen(Some(&both), Some(&internal))),
            Some((SERVER_TLS_SECRET, b"c1".to_vec()))
        );
        assert_eq!(
            name(chosen(Some(&half), Some(&internal))),
            Some((ARGOCD_SECRET, b"c2".to_vec()))
        );
        assert_eq!(
            name(chosen(None, Some(&internal))),
            Some((ARGOCD_SECRET, b"c2".to_vec()))
        );
        assert_eq!(
            name(chosen(Some(&half), Some(&secret(&[("server.secretkey", "s")])))),
            None
        );
        assert_eq!(name(chosen(None, None)), None);
    }

    #[test]
    fn generated_names_are_upstreams_plus_loopback_and_the_url_host() {
        let names = generated_names("argo", Some("cd.example.com"));
        for want in [
            "localhost",
            "argocd-server",
            "argocd-server.argo",
            "argocd-server.argo.svc",
            "argocd-server.argo.svc.cluster.local",
            "127.0.0.1",
            "cd.example.com",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
        assert_eq!(
            generated_names("argo", Some("localhost")).len(),
            7,
            "no name twice"
        );
    }
}
