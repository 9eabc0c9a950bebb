//! `FileStore`: the embedded default store, one redb file (`tiphys.redb`) in the data dir.
//!
//! redb gives atomic, fsync-durable commits (default `Durability::Immediate`), a single writer
//! (which serializes commits) and an exclusive file lock (which keeps a second server off the
//! same data dir). Its calls block, so every one runs on tokio's blocking pool.

use std::fmt;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{
    Database, DatabaseError, ReadTransaction, ReadableDatabase as _, ReadableTable, TableDefinition,
    WriteTransaction,
};

use super::{Entry, Op, Revision, Store, StoreError, check};

/// key → create_revision (u64 LE) ++ mod_revision (u64 LE) ++ value.
const KV: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("kv");
/// "revision" → the store-wide revision.
const META: TableDefinition<'_, &str, u64> = TableDefinition::new("meta");
const REVISION: &str = "revision";
const HEADER: usize = 16;

pub const FILE_NAME: &str = "tiphys.redb";
const CACHE_BYTES: usize = 16 << 20;

#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Database,
    path: PathBuf,
    /// Write transactions begun (each commits with one fsync, or aborts).
    transactions: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for FileStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

impl FileStore {
    /// Opens (or creates) `data_dir/tiphys.redb`, creating `data_dir` with mode 0700 if needed.
    /// A file that is not a readable store is reported and left as it is, never recreated.
    /// Blocking (it reads the whole file once); meant for startup.
    pub fn open(data_dir: &Path) -> Result<FileStore, StoreError> {
        let path = data_dir.join(FILE_NAME);
        create_private(data_dir, &path).map_err(|e| {
            StoreError::Unavailable(format!("cannot create the store {}: {e}", path.display()))
        })?;
        let mut builder = Database::builder();
        // A plain open trusts the file and may panic on one altered outside redb; the check turns
        // that into an error (and costs one read of the file per start).
        builder.set_check_integrity_on_open(true);
        // Reads are served from the registry's in-memory index, so redb's page cache only
        // speeds up commits; its default (1 GiB) would mostly hold a second copy of everything.
        builder.set_cache_size(CACHE_BYTES);
        let db = catch_unwind(AssertUnwindSafe(|| builder.create(&path)))
            .map_err(|_| corrupt(&path, "redb panicked while opening it"))?
            .map_err(|e| open_error(&path, e))?;
        let inner = Inner {
            db,
            path,
            transactions: std::sync::atomic::AtomicU64::new(0),
        };
        // Create the tables up front so readers never meet a missing table.
        inner.write(|tx| {
            tx.open_table(KV)?;
            let mut meta = tx.open_table(META)?;
            if meta.get(REVISION)?.is_none() {
                meta.insert(REVISION, 0)?;
            }
            Ok(())
        })?;
        Ok(FileStore {
            inner: Arc::new(inner),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// How many write transactions this process has made (a group commit is one).
    pub fn write_transactions(&self) -> u64 {
        self.inner.transactions.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| StoreError::Unavailable(format!("store task failed: {e}")))?
    }
}

impl Inner {
    /// Runs `f` in a write transaction; commits (fsync) if it succeeds, aborts otherwise.
    fn write<T>(&self, f: impl FnOnce(&WriteTransaction) -> Result<T, Fail>) -> Result<T, StoreError> {
        let run = || {
            self.transactions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tx = self.db.begin_write()?;
            match f(&tx) {
                Ok(out) => {
                    tx.commit()?;
                    Ok(out)
                }
                Err(e) => {
                    tx.abort()?;
                    Err(e)
                }
            }
        };
        run().map_err(|e| self.fail(e))
    }

    fn read<T>(&self, f: impl FnOnce(&ReadTransaction) -> Result<T, Fail>) -> Result<T, StoreError> {
        let run = || f(&self.db.begin_read()?);
        run().map_err(|e| self.fail(e))
    }

    fn fail(&self, e: Fail) -> StoreError {
        match e {
            Fail::Store(e) => e,
            Fail::Redb(redb::Error::Corrupted(m)) => corrupt(&self.path, &m),
            Fail::Redb(redb::Error::ValueTooLarge(n)) => {
                StoreError::Invalid(format!("a value of {n} bytes is too large for the store"))
            }
            Fail::Redb(e) => {
                StoreError::Unavailable(format!("the store {} failed: {e}", self.path.display()))
            }
        }
    }
}

/// What goes wrong inside a transaction; redb errors get the file's path at the boundary.
enum Fail {
    Redb(redb::Error),
    Store(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Store(e)
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Fail {
            fn from(e: $t) -> Self {
                Fail::Redb(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

/// Creates the data dir (0700) and an empty store file (0600: it holds secrets) if they are
/// missing, and fsyncs the directories so that a new store is not lost with its directory entry.
fn create_private(data_dir: &Path, path: &Path) -> std::io::Result<()> {
    let new_dir = !data_dir.is_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)?;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        // redb initializes an empty file; a racing second server meets redb's lock instead.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    std::fs::File::open(data_dir)?.sync_all()?;
    match data_dir.parent().filter(|p| new_dir && !p.as_os_str().is_empty()) {
        Some(parent) => std::fs::File::open(parent)?.sync_all(),
        None => Ok(()),
    }
}

fn corrupt(path: &Path, why: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "the store {} is not readable ({why}); it was left as it is: restore a backup, or move it \
         away to start with an empty store",
        path.display()
    ))
}

fn open_error(path: &Path, e: DatabaseError) -> StoreError {
    match e {
        DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
            StoreError::Unavailable(format!(
                "the store {} is in use by another tiphys process (only one server may use a data dir)",
                path.display()
            ))
        }
        DatabaseError::Storage(redb::StorageError::Io(io))
            if io.kind() != std::io::ErrorKind::InvalidData =>
        {
            StoreError::Unavailable(format!("cannot open the store {}: {io}", path.display()))
        }
        // InvalidData (not a redb file), Corrupted, an old file format, an aborted repair.
        e => corrupt(path, &e.to_string()),
    }
}

fn encode(create: Revision, modified: Revision, value: &[u8]) -> Vec<u8> {
    let mut raw = Vec::with_capacity(HEADER + value.len());
    raw.extend_from_slice(&create.to_le_bytes());
    raw.extend_from_slice(&modified.to_le_bytes());
    raw.extend_from_slice(value);
    raw
}

fn decode(key: &str, raw: &[u8]) -> Result<Entry, StoreError> {
    let revision = |range: std::ops::Range<usize>| {
        raw.get(range)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    match (revision(0..8), revision(8..16)) {
        (Some(create_revision), Some(mod_revision)) => Ok(Entry {
            key: key.to_owned(),
            value: raw[HEADER..].to_vec(),
            create_revision,
            mod_revision,
        }),
        _ => Err(StoreError::Corrupt(format!(
            "the stored entry of {key} is truncated"
        ))),
    }
}

/// Every entry whose key starts with `prefix`, in key order.
fn list_in(kv: &impl ReadableTable<&'static str, &'static [u8]>, prefix: &str) -> Result<Vec<Entry>, Fail> {
    let mut out = Vec::new();
    // Keys sort bytewise, so the keys with this prefix are one run starting at it.
    for item in kv.range(prefix..)? {
        let (key, raw) = item?;
        if !key.value().starts_with(prefix) {
            break;
        }
        out.push(decode(key.value(), raw.value())?);
    }
    Ok(out)
}

fn read_revision(meta: &impl ReadableTable<&'static str, u64>) -> Result<Revision, Fail> {
    match meta.get(REVISION)? {
        Some(r) => Ok(r.value()),
        None => Err(StoreError::Corrupt("the store has no revision".to_owned()).into()),
    }
}

/// Checks every precondition against the state before the commit, then applies the ops.
fn apply(tx: &WriteTransaction, ops: &[Op]) -> Result<Revision, Fail> {
    apply_checked(tx, ops)?.map_err(Fail::Store)
}

/// [`apply`], telling a precondition that does not hold (`Ok(Err)`: nothing was written) from a
/// failure of the store (`Err`: the transaction must be aborted).
fn apply_checked(tx: &WriteTransaction, ops: &[Op]) -> Result<Result<Revision, StoreError>, Fail> {
    if let Err(e) = super::keys_once(ops) {
        return Ok(Err(e));
    }
    let mut kv = tx.open_table(KV)?;
    let mut meta = tx.open_table(META)?;
    let next = read_revision(&meta)? + 1;
    let mut created = Vec::with_capacity(ops.len());
    for op in ops {
        let actual = match op {
            Op::Unchanged { prefix, .. } => {
                // The newest write under the prefix decides.
                list_in(&kv, prefix)?.iter().map(|e| e.mod_revision).max()
            }
            _ => {
                let entry = kv
                    .get(op.key())?
                    .map(|raw| decode(op.key(), raw.value()))
                    .transpose()?;
                created.push(entry.as_ref().map(|e| e.create_revision));
                entry.map(|e| e.mod_revision)
            }
        };
        if let Err(e) = check(op.key(), op.expect(), actual) {
            return Ok(Err(e));
        }
    }
    let keyed = ops.iter().filter(|op| !matches!(op, Op::Unchanged { .. }));
    for (op, create) in keyed.zip(created) {
        match op {
            Op::Put { key, value, .. } => {
                kv.insert(
                    key.as_str(),
                    encode(create.unwrap_or(next), next, value).as_slice(),
                )?;
            }
            Op::Delete { key, .. } => {
                kv.remove(key.as_str())?;
            }
            Op::Check { .. } | Op::Unchanged { .. } => {}
        }
    }
    meta.insert(REVISION, next)?;
    Ok(Ok(next))
}

#[async_trait::async_trait]
impl Store for FileStore {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let key = key.to_owned();
        self.blocking(move |inner| {
            inner.read(|tx| {
                let kv = tx.open_table(KV)?;
                let raw = kv.get(key.as_str())?;
                Ok(raw.map(|raw| decode(&key, raw.value())).transpose()?)
            })
        })
        .await
    }

    async fn get_many(&self, keys: Vec<String>) -> Result<Vec<Option<Entry>>, StoreError> {
        self.blocking(move |inner| {
            inner.read(|tx| {
                let kv = tx.open_table(KV)?;
                let mut out = Vec::with_capacity(keys.len());
                for key in &keys {
                    let raw = kv.get(key.as_str())?;
                    out.push(raw.map(|raw| decode(key, raw.value())).transpose()?);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        let prefix = prefix.to_owned();
        self.blocking(move |inner| inner.read(|tx| list_in(&tx.open_table(KV)?, &prefix)))
            .await
    }

    async fn snapshot(&self, prefixes: &[&str]) -> Result<(Vec<Vec<Entry>>, Revision), StoreError> {
        let prefixes: Vec<String> = prefixes.iter().map(|&p| p.to_owned()).collect();
        self.blocking(move |inner| {
            inner.read(|tx| {
                let kv = tx.open_table(KV)?;
                let lists = prefixes
                    .iter()
                    .map(|prefix| list_in(&kv, prefix))
                    .collect::<Result<_, _>>()?;
                Ok((lists, read_revision(&tx.open_table(META)?)?))
            })
        })
        .await
    }

    async fn commit(&self, ops: Vec<Op>) -> Result<Revision, StoreError> {
        super::keys_once(&ops)?;
        self.blocking(move |inner| inner.write(|tx| apply(tx, &ops)))
            .await
    }

    async fn commit_each(&self, batches: Vec<Vec<Op>>) -> Vec<Result<Revision, StoreError>> {
        let count = batches.len();
        let done = self
            .blocking(move |inner| {
                inner.write(|tx| {
                    batches
                        .iter()
                        .map(|ops| apply_checked(tx, ops))
                        .collect::<Result<Vec<_>, Fail>>()
                })
            })
            .await;
        match done {
            Ok(outcomes) => outcomes,
            // Nothing was written: every batch gets the store's failure.
            Err(e) => (0..count).map(|_| Err(e.clone())).collect(),
        }
    }

    async fn revision(&self) -> Result<Revision, StoreError> {
        self.blocking(|inner| inner.read(|tx| read_revision(&tx.open_table(META)?)))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::process::{Command, Stdio};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::store::Expect;

    fn put(key: &str, value: &str, expect: Expect) -> Op {
        Op::Put {
            key: key.to_owned(),
            value: value.as_bytes().to_vec(),
            expect,
        }
    }

    fn delete(key: &str, expect: Expect) -> Op {
        Op::Delete {
            key: key.to_owned(),
            expect,
        }
    }

    // The contract shared with EtcdStore is tested against both in tests/store; FileStore
    // also advances on a commit that changes nothing (etcd does not).
    #[tokio::test]
    async fn revision_advances_by_exactly_one_per_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        for i in 1..=5 {
            let ops = vec![
                put(&format!("k{i}"), "v", Expect::Absent),
                put("shared", "v", Expect::Any),
            ];
            assert_eq!(store.commit(ops).await.unwrap(), i);
            assert_eq!(store.revision().await.unwrap(), i);
        }
        // Deleting an absent key without a precondition succeeds and still advances.
        assert_eq!(
            store.commit(vec![delete("missing", Expect::Any)]).await.unwrap(),
            6
        );
        assert_eq!(store.commit(vec![]).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn reopen_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileStore::open(dir.path()).unwrap();
        store
            .commit(vec![put("a", "1", Expect::Absent), put("b", "2", Expect::Absent)])
            .await
            .unwrap();
        store
            .commit(vec![put("a", "3", Expect::ModRevision(1))])
            .await
            .unwrap();
        let before = store.list("").await.unwrap();
        drop(store);
        let store = FileStore::open(dir.path()).unwrap();
        assert_eq!(store.revision().await.unwrap(), 2);
        assert_eq!(store.list("").await.unwrap(), before);
        assert_eq!(store.path(), dir.path().join(FILE_NAME));
    }

    #[tokio::test]
    async fn creates_a_private_data_dir_and_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("nested/data");
        let store = FileStore::open(&data).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(store.path()), 0o600);
    }

    #[test]
    fn a_second_open_says_the_store_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let _first = FileStore::open(dir.path()).unwrap();
        let err = FileStore::open(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let path = dir.path().join(FILE_NAME);
        assert_eq!(
            err.to_string(),
            format!(
                "the store {} is in use by another tiphys process (only one server may use a data dir)",
                path.display()
            )
        );
    }

    #[test]
    fn a_garbage_file_is_reported_and_left_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let noise: Vec<u8> = (0..64 * 1024)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        for garbage in [b"not a database".to_vec(), noise] {
            std::fs::write(&path, &garbage).unwrap();
            let err = FileStore::open(dir.path()).unwrap_err();
            assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
            assert!(err.to_string().contains(&path.display().to_string()), "{err}");
            assert_eq!(std::fs::read(&path).unwrap(), garbage);
        }
    }

    const CHILD_ENV: &str = "TIPHYS_TEST_STORE_CRASH_DIR";
    const CHILD_TEST: &str = "store::file::tests::crash_writer_child";

    fn crash_value(i: usize) -> Vec<u8> {
        format!("value {i};").repeat(40).into_bytes()
    }

    /// The child side of `acknowledged_commits_survive_sigkill`; does nothing when run directly.
    #[tokio::test]
    #[ignore = "run by acknowledged_commits_survive_sigkill in a child process"]
    async fn crash_writer_child() {
        let Some(dir) = std::env::var_os(CHILD_ENV) else {
            return;
        };
        let store = FileStore::open(Path::new(&dir)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut out = std::io::stdout();
        for i in 0..100_000 {
            if Instant::now() > deadline {
                break;
            }
            let op = Op::Put {
                key: format!("crash/{i:06}"),
                value: crash_value(i),
                expect: Expect::Absent,
            };
            store.commit(vec![op]).await.unwrap();
            // Written past the test harness's capture, and only once the commit returned.
            writeln!(out, "store-ack {i}").unwrap();
            out.flush().unwrap();
        }
    }

    #[tokio::test]
    async fn acknowledged_commits_survive_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                CHILD_TEST,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // The harness may have started the line ("test ... ") before the first ack.
                if let Some((_, i)) = line.rsplit_once("store-ack ") {
                    let _ = tx.send(i.parse::<usize>().unwrap());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut acked = Vec::new();
        while acked.len() < 50 {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(i) => acked.push(i),
                Err(_) => break,
            }
        }
        child.kill().unwrap(); // SIGKILL, mid-commit as likely as not
        let status = child.wait().unwrap();
        reader.join().unwrap(); // the pipe is closed now that the child is gone
        acked.extend(rx.try_iter()); // lines still in the pipe were acknowledged too
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert!(
            acked.len() >= 50,
            "the child acknowledged {} commits ({status}): {stderr}",
            acked.len()
        );
        assert_eq!(
            status.code(),
            None,
            "the child ended before it was killed: {stderr}"
        );
        assert_eq!(acked, (0..acked.len()).collect::<Vec<_>>());

        let store = FileStore::open(dir.path()).unwrap();
        let entries = store.list("crash/").await.unwrap();
        // Every acknowledged commit, intact; at most one more that was not acknowledged yet.
        assert!(
            (acked.len()..=acked.len() + 1).contains(&entries.len()),
            "{} entries",
            entries.len()
        );
        for (i, entry) in entries.iter().enumerate() {
            assert_eq!(entry.key, format!("crash/{i:06}"));
            assert_eq!(entry.value, crash_value(i), "{}", entry.key);
            assert_eq!(entry.mod_revision, i as u64 + 1);
        }
        assert_eq!(store.revision().await.unwrap(), entries.len() as u64);
    }
}
