//! `tiphys admin migrate`: copies a stopped single-node store (the data dir's redb file) into a
//! prefix of etcd, so that a user who outgrows one machine keeps every object, account,
//! session and key when moving to several replicas.
//!
//! Every entry is copied as it is, in batches of at most etcd's 128 operations, each put
//! conditional on the key being absent: a prefix that fills up meanwhile stops the copy instead
//! of being overwritten. An object's `resourceVersion` is its record's revision in the store, so
//! objects get etcd's revisions (clients list again, as after any restart); a record and its
//! stored encoding go into one batch, so that they keep sharing a revision. The data dir's generated admin password file becomes the
//! store record a shared store keeps it in.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};

use super::exit;
use crate::auth::logins::{INITIAL_PASSWORD_FILE, initial_password_record};
use crate::registry::Key;
use crate::server::store_args::StoreArgs;
use crate::store::{Backend, Expect, FileStore, Op, Store};

/// Operations per etcd transaction (etcd's default `--max-txn-ops`).
const BATCH: usize = 128;

#[derive(clap::Args, Debug)]
pub struct MigrateArgs {
    /// The stopped server's data directory, whose store is copied.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Delete what the etcd prefix holds before copying (without it, a prefix that holds
    /// anything is refused).
    #[arg(long)]
    pub replace: bool,
    /// The servers' --config-dir, for argocd-secret's server.secretkey when it seals credentials.
    #[arg(long, env = "TIPHYS_CONFIG_DIR", value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    /// Where to copy to: --etcd-endpoints is required.
    #[command(flatten)]
    pub store: StoreArgs,
}

pub async fn run(args: MigrateArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    if args.store.etcd_endpoints.iter().all(|e| e.trim().is_empty()) {
        return Err(exit::invalid(
            "admin migrate copies into etcd: give --etcd-endpoints",
        ));
    }
    let target = args
        .store
        .backend(&args.data_dir)
        .map_err(|e| exit::invalid(format!("{e:#}")))?;
    let Backend::Etcd(options) = &target else {
        return Err(exit::invalid(
            "admin migrate copies into etcd: give --etcd-endpoints",
        ));
    };
    let prefix = options.prefix.clone();
    if !args.data_dir.join(crate::store::file::FILE_NAME).exists() {
        return Err(exit::invalid(format!(
            "{} holds no tiphys store ({}): nothing to migrate",
            args.data_dir.display(),
            crate::store::file::FILE_NAME
        )));
    }
    let source = open_source(&args.data_dir).await?;
    let entries = source
        .list("")
        .await
        .context("cannot read the data dir's store")?;
    let etcd = target.open().await.context("cannot open the store in etcd")?;

    let existing = etcd.list("").await.context("cannot read the etcd prefix")?;
    if !existing.is_empty() {
        if !args.replace {
            return Err(exit::invalid(format!(
                "the etcd prefix {prefix} already holds {} keys (another tiphys, or a previous \
                 migration): choose another --etcd-prefix, or pass --replace to delete them first",
                existing.len()
            )));
        }
        let deletes: Vec<Op> = existing
            .into_iter()
            .map(|e| Op::Delete {
                key: e.key,
                expect: Expect::ModRevision(e.mod_revision),
            })
            .collect();
        for batch in deletes.chunks(BATCH) {
            etcd.commit(batch.to_vec())
                .await
                .context("cannot empty the etcd prefix (it changed meanwhile: is a server using it?)")?;
        }
    }

    let mut ops: Vec<Op> = entries
        .into_iter()
        .map(|e| Op::Put {
            key: e.key,
            value: e.value,
            expect: Expect::Absent,
        })
        .collect();
    // Each object's record right before its encoding.
    ops.sort_by_cached_key(|op| copy_unit(op.key()));
    let copied = ops.len();
    if let Some(password) = initial_password(&args.data_dir)? {
        // Sealed as the servers on etcd will open it: the copied store's key, or the flags'.
        let keys = super::rotate::store_keys(
            &source,
            args.store.secrets_key_file.as_deref(),
            args.config_dir.as_deref(),
        )
        .await?;
        let record = initial_password_record(&password, &keys, Expect::Absent);
        if !ops.iter().any(|op| op.key() == record.key()) {
            ops.push(record);
        }
    }
    let mut written = 0;
    for batch in batches(&ops) {
        etcd.commit(batch.to_vec()).await.with_context(|| {
            format!(
                "copied {written} of {} keys, then the copy failed (the prefix changed meanwhile, \
                 or etcd refused a value): run again with --replace",
                ops.len()
            )
        })?;
        written += batch.len();
    }
    let check = etcd.list("").await.context("cannot read the copy back")?;
    if check.len() != ops.len() {
        return Err(anyhow!(
            "the etcd prefix {prefix} holds {} keys after copying {}: is a server using it?",
            check.len(),
            ops.len()
        ));
    }
    writeln!(
        out,
        "copied {copied} keys from {} into etcd prefix {prefix}{}",
        args.data_dir.display(),
        if ops.len() > copied {
            " (and the initial admin password)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "start the servers with the same --etcd-* options; the data dir now only holds what is per \
         replica (its TLS certificate)"
    )?;
    Ok(())
}

/// Where a key goes in the copy: an encoding with its object's record.
fn copy_unit(key: &str) -> (String, bool) {
    match Key::record_of_encoding(key) {
        Some(record) => (record, true),
        None => (key.to_owned(), false),
    }
}

/// `ops` (sorted by [`copy_unit`]) in batches of at most [`BATCH`], never parting a record from
/// its encoding.
fn batches(ops: &[Op]) -> Vec<&[Op]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < ops.len() {
        let mut end = (start + BATCH).min(ops.len());
        if end < ops.len()
            && end - start > 1
            && copy_unit(ops[end].key()).0 == copy_unit(ops[end - 1].key()).0
        {
            end -= 1;
        }
        out.push(&ops[start..end]);
        start = end;
    }
    out
}

/// The data dir's store; refused while a server holds it.
async fn open_source(dir: &Path) -> anyhow::Result<FileStore> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || FileStore::open(&dir))
        .await
        .map_err(|e| anyhow!("cannot open the data dir's store: {e}"))?
        .context("cannot open the data dir's store (stop the server that uses it first)")
}

/// The generated admin password the data dir keeps in a file, while it is in force.
fn initial_password(dir: &Path) -> anyhow::Result<Option<String>> {
    let path = dir.join(INITIAL_PASSWORD_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(text.trim_end_matches(['\r', '\n']).to_owned())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("cannot read {}", path.display())),
    }
}
