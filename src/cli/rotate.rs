//! `tiphys admin rotate-secrets-key`: re-seals the credentials at rest (clusters, repositories,
//! credential templates) under the first key of `--secrets-key-file`, and seals those an older
//! version stored in clear. On etcd the servers may keep running; a data dir's store needs its
//! server stopped (it holds the store's lock).
//!
//! A rotation: give every replica the file with the new key *after* the old one (the new key
//! then opens, the old one still seals); then with the new key first (it seals); run this
//! command; then drop the old key from the file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;

use super::exit;
use crate::registry::{Registry, SecretsKeys};
use crate::server::store_args::StoreArgs;
use crate::store::Store;

#[derive(clap::Args, Debug)]
pub struct RotateArgs {
    /// The server's data directory (its store, when no --etcd-endpoints are given).
    #[arg(long, env = "TIPHYS_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The servers' --config-dir: argocd-secret's server.secretkey, when it set the key.
    #[arg(long, env = "TIPHYS_CONFIG_DIR", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Only say how the records stand; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

pub async fn run(args: RotateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let data_dir = match &args.data_dir {
        Some(dir) => dir.clone(),
        None if args.store.etcd_endpoints.is_empty() => {
            return Err(exit::invalid(
                "give --data-dir (the stopped server's) or --etcd-endpoints",
            ));
        }
        None => PathBuf::from("."),
    };
    let backend = args
        .store
        .backend(&data_dir)
        .map_err(|e| exit::invalid(format!("{e:#}")))?;
    if backend.is_exclusive() && !data_dir.join(crate::store::file::FILE_NAME).exists() {
        return Err(exit::invalid(format!(
            "{} holds no tiphys store",
            data_dir.display()
        )));
    }
    let store = backend.open().await.context("cannot open the store")?;
    let registry = open_registry(
        store,
        args.store.secrets_key_file.as_deref(),
        args.config_dir.as_deref(),
    )
    .await?;
    let keys = registry.secrets_keys();
    let keys = &*keys;
    let before = registry.sealed().await?;
    writeln!(
        out,
        "{} records hold credentials: {} in clear, {} under an older key; sealing key {:02x} (keys held: {})",
        before.records,
        before.clear,
        before.other_key,
        keys.sealing_id(),
        keys.describe()
    )?;
    if args.dry_run {
        return Ok(());
    }
    let rewritten = registry.reseal().await?;
    let after = registry.sealed().await?;
    writeln!(
        out,
        "re-sealed {rewritten} records under key {:02x}",
        keys.sealing_id()
    )?;
    if after.stale() > 0 {
        return Err(anyhow::anyhow!(
            "{} records are still not sealed under key {:02x}: a server without the new key first \
             in its --secrets-key-file keeps writing them; update every server, then run this again",
            after.stale(),
            keys.sealing_id()
        ));
    }
    Ok(())
}

/// The registry of `store`, its credentials opened with [`store_keys`].
pub async fn open_registry(
    store: Arc<dyn Store>,
    key_file: Option<&Path>,
    config_dir: Option<&Path>,
) -> anyhow::Result<Arc<Registry>> {
    let keys = store_keys(&*store, key_file, config_dir).await?;
    if keys.ids().is_empty() {
        return Err(exit::invalid(
            "no key opens this store's credentials: no server has started on it (none generated a \
             server key) and no --secrets-key-file or --config-dir with server.secretkey was given",
        ));
    }
    Registry::open(store, Arc::new(keys))
        .await
        .context("cannot read the store")
}

/// The keys a store's credentials open with: `--secrets-key-file`'s, then the server key
/// (`server.secretkey` from `config_dir`'s argocd-secret, else the one a server generated).
/// Read only: a tool never generates a key.
pub async fn store_keys(
    store: &dyn Store,
    key_file: Option<&Path>,
    config_dir: Option<&Path>,
) -> anyhow::Result<SecretsKeys> {
    let config = crate::config::ConfigWatch::new(config_dir.map(Path::to_path_buf))
        .map_err(|e| exit::invalid(format!("--config-dir: {e}")))?;
    crate::state::secrets_keys(store, &config.current(), key_file, false)
        .await
        .map_err(|e| exit::invalid(format!("{e:#}")))
}
