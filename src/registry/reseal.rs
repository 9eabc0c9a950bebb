//! Re-sealing credentials at rest under the key in force (`tiphys admin rotate-secrets-key`):
//! after a new key was put first in `--secrets-key-file`, or to seal what an older version
//! stored in clear.

use std::sync::Arc;

use super::sealing::SecretsKeys;
use super::{Change, Kind, Registry, RegistryError, record};
use crate::seal;

/// Rounds of re-sealing before giving up on records that others keep rewriting.
const ROUNDS: usize = 5;

/// How the records that hold credentials stand.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// Records of kinds that hold credentials.
    pub records: usize,
    /// Of those, stored in clear (written by a version before sealing).
    pub clear: usize,
    /// Of those, sealed under another key than the sealing one.
    pub other_key: usize,
}

impl Sealed {
    /// Records not sealed under the key in force.
    pub fn stale(&self) -> usize {
        self.clear + self.other_key
    }
}

impl Registry {
    /// The keys sealing credentials at rest.
    pub fn secrets_keys(&self) -> Arc<SecretsKeys> {
        self.keys.load_full()
    }

    /// Takes a new server key into the ring (`server.secretkey` edited while running). When it
    /// now seals (no `--secrets-key-file`), the records sealed before are re-sealed under it
    /// in the background, so that the next start, which holds only the new server key, opens
    /// them. Returns whether the sealing key changed.
    pub fn server_key_changed(&self, server_key: &[u8]) -> bool {
        let current = self.keys.load_full();
        let Some(next) = current.with_server_key(server_key) else {
            return false;
        };
        let resealing = next.sealing_id() != current.sealing_id();
        self.keys.store(Arc::new(next));
        if !resealing {
            return false;
        }
        let Some(this) = self.this.upgrade() else {
            return true;
        };
        tokio::spawn(async move {
            match this.reseal().await {
                Ok(n) => tracing::info!(
                    records = n,
                    "server key changed: credentials at rest re-sealed under it"
                ),
                Err(e) => tracing::error!(
                    error = %e,
                    "server key changed, but the credentials at rest could not all be re-sealed under it: \
                     run `tiphys admin rotate-secrets-key` before the next start"
                ),
            }
        });
        true
    }

    /// How the stored records that hold credentials are sealed, as the store has them now.
    pub async fn sealed(&self) -> Result<Sealed, RegistryError> {
        Ok(self.scan().await?.0)
    }

    /// Rewrites every record that holds credentials and is not sealed under the sealing key,
    /// each on the condition that it is unchanged since read (a record changed meanwhile was
    /// sealed by its writer, and is looked at again). Returns how many were rewritten.
    pub async fn reseal(&self) -> Result<usize, RegistryError> {
        let mut rewritten = 0;
        for _ in 0..ROUNDS {
            let (_, stale) = self.scan().await?;
            if stale.is_empty() {
                return Ok(rewritten);
            }
            for (key, rv) in stale {
                let Some(doc) = self.get(&key).filter(|d| d.rv == rv) else {
                    continue;
                };
                let change = Change::Update {
                    key,
                    value: doc.value(),
                    expect: Some(rv),
                };
                match self.apply(vec![change]).await {
                    Ok(_) => rewritten += 1,
                    Err(RegistryError::Conflict { .. } | RegistryError::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(rewritten)
    }

    /// The records that hold credentials as stored: counts, and the keys (with revisions) of
    /// those not sealed under the sealing key.
    async fn scan(&self) -> Result<(Sealed, Vec<(super::Key, u64)>), RegistryError> {
        self.fresh().await?;
        let want = self.keys.load().sealing_id();
        let mut sealed = Sealed::default();
        let mut stale = Vec::new();
        for kind in Kind::ALL.into_iter().filter(|k| k.holds_credentials()) {
            let docs = self.list(kind).1;
            let keys = docs.iter().map(|d| d.key.store_key()).collect();
            for (doc, entry) in docs.iter().zip(self.store.get_many(keys).await?) {
                let Some(entry) = entry else { continue };
                sealed.records += 1;
                match record::sealed_body(&entry.value).map(|(_, body)| seal::key_id(body)) {
                    Some(Some(id)) if id == want => continue,
                    Some(_) => sealed.other_key += 1,
                    None => sealed.clear += 1,
                }
                stale.push((doc.key.clone(), doc.rv));
            }
        }
        Ok((sealed, stale))
    }
}
