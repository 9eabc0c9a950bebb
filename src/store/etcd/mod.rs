//! `EtcdStore`: the store on an etcd v3 cluster, for several replicas sharing one state.
//!
//! The store's revision is etcd's (the header revision), an entry's create/mod revisions are
//! etcd's, and a commit is one etcd transaction whose compares are the preconditions. Two
//! differences from [`FileStore`](super::FileStore), both allowed by the trait's callers
//! (none of them reads the revision a commit returns):
//! - etcd's revision is shared by everything written to the cluster, under any prefix, so it
//!   grows by 1 per writing commit of this store but may also grow in between;
//! - a commit that changes nothing (no ops, or only deletes of absent keys) does not advance
//!   etcd's revision: it returns the current revision, which a previous commit returned too.
//!
//! Calls are retried across members on transport errors for up to the request timeout, so a
//! member's (even the leader's) death costs an election's latency, not an error; see
//! [`EtcdStore::commit`] for which writes are retried.

mod failure;
mod options;
mod tls;
mod watch;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, GetResponse, KeyValue, KvClient, SortOrder,
    SortTarget, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::Instant;

use self::failure::{Failure, classify, unavailable};
pub use self::options::{DEFAULT_PREFIX, EtcdOptions};
use self::tls::Material;
pub use self::watch::{Change, Changes, EtcdWatch};
use super::{Entry, Expect, Op, Revision, Store, StoreError, check};

/// Entries per range request of `list` (all pages read at one revision).
const PAGE: i64 = 500;
/// etcd's default limit of operations per transaction (`--max-txn-ops`).
const MAX_TXN_OPS: usize = 128;
/// A page of values may be large; etcd itself limits one value to 1.5 MiB by default.
const MAX_MESSAGE: usize = 64 << 20;
/// An attempt that may be repeated gives up after this share of the request timeout: a
/// follower holding a proposal for a leader that died answers only after its own timeout (7 s
/// with etcd's defaults), while a new leader is usually elected within 1 to 2 s.
const ATTEMPTS_PER_TIMEOUT: u32 = 4;
const MIN_ATTEMPT: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_millis(500);

#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    prefix: String,
    endpoints: String,
    request_timeout: Duration,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.inner.endpoints)
            .field("prefix", &self.inner.prefix)
            .finish()
    }
}

impl EtcdStore {
    /// Connects and checks that a member answers (with the credentials given) within the dial
    /// timeout; the error names the endpoints otherwise, and with TLS, why a handshake fails.
    pub async fn connect(options: EtcdOptions) -> Result<Self, StoreError> {
        let (connect, tls) = options.connect_options()?;
        match (Self::start(&options, connect).await, tls) {
            (Err(StoreError::Unavailable(message)), Some(tls)) => {
                Err(explain_start(&options, &tls, message).await)
            }
            (result, _) => result,
        }
    }

    async fn start(options: &EtcdOptions, connect: ConnectOptions) -> Result<Self, StoreError> {
        let endpoints = options.endpoint_list();
        let deadline = Instant::now() + options.dial_timeout;
        let mut backoff = FIRST_BACKOFF;
        // With credentials, connecting authenticates against one member, which may be down.
        let client = loop {
            let attempt = Client::connect(&options.endpoints, Some(connect.clone()));
            let last = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(client)) => break client,
                Ok(Err(e)) => match classify(&e, &endpoints) {
                    Failure::Fatal(e) => return Err(e),
                    Failure::NotSent(last) | Failure::Unsure(last) => last,
                },
                Err(_) => "timed out".to_owned(),
            };
            if !pause(deadline, &mut backoff).await {
                return Err(unavailable(&endpoints, "at start", &last));
            }
        };
        let store = Self {
            inner: Arc::new(Inner {
                client,
                prefix: options.prefix.clone(),
                endpoints,
                request_timeout: options.request_timeout,
            }),
        };
        store
            .retry("at start", deadline, true, |mut kv, key| async move {
                kv.get(key, Some(GetOptions::new().with_count_only())).await
            })
            .await?;
        Ok(store)
    }

    /// The prefix under which this store's keys live in etcd.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Follows every change under the prefix from `revision` on (inclusive, at least 1); see
    /// [`EtcdWatch`].
    pub fn watch_from(&self, revision: Revision) -> EtcdWatch {
        let (key, end) = range(&self.full_key(""));
        EtcdWatch::new(
            self.inner.client.watch_client(),
            key,
            end,
            self.inner.prefix.clone(),
            self.inner.endpoints.clone(),
            self.inner.request_timeout,
            revision,
        )
    }

    fn full_key(&self, key: &str) -> String {
        format!("{}{key}", self.inner.prefix)
    }

    fn kv(&self) -> KvClient {
        self.inner
            .client
            .kv_client()
            .max_decoding_message_size(MAX_MESSAGE)
    }

    /// Runs `call` until it succeeds, fails for good, or `deadline` passes. A call that may
    /// have been applied is retried only when `may_repeat` (reads, conditional writes).
    async fn retry<T, F, Fut>(
        &self,
        what: &str,
        deadline: Instant,
        may_repeat: bool,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: Fn(KvClient, String) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let attempt = call(self.kv(), self.full_key(""));
            let until = self.attempt_deadline(deadline, may_repeat);
            let last = match tokio::time::timeout_at(until, attempt).await {
                Ok(Ok(out)) => return Ok(out),
                Ok(Err(e)) => match classify(&e, &self.inner.endpoints) {
                    Failure::Fatal(e) => return Err(e),
                    Failure::NotSent(last) => last,
                    Failure::Unsure(last) if may_repeat => last,
                    Failure::Unsure(last) => return Err(self.maybe_applied(what, &last)),
                },
                Err(_) if may_repeat => "timed out".to_owned(),
                Err(_) => return Err(self.maybe_applied(what, "timed out")),
            };
            if !pause(deadline, &mut backoff).await {
                return Err(unavailable(&self.inner.endpoints, what, &last));
            }
        }
    }

    fn maybe_applied(&self, what: &str, last: &str) -> StoreError {
        StoreError::Unavailable(format!(
            "etcd at {} did not confirm {what} ({last}); it may or may not have been applied",
            self.inner.endpoints
        ))
    }

    /// When one attempt is abandoned: early if it may be repeated, else at the call's deadline.
    fn attempt_deadline(&self, deadline: Instant, may_repeat: bool) -> Instant {
        if !may_repeat {
            return deadline;
        }
        let share = (self.inner.request_timeout / ATTEMPTS_PER_TIMEOUT).max(MIN_ATTEMPT);
        deadline.min(Instant::now() + share)
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.inner.request_timeout
    }

    fn entry(&self, kv: &KeyValue) -> Result<Entry, StoreError> {
        let key = std::str::from_utf8(kv.key())
            .ok()
            .and_then(|k| k.strip_prefix(self.inner.prefix.as_str()))
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "etcd returned the key {:?} outside the prefix {} or not UTF-8",
                    String::from_utf8_lossy(kv.key()),
                    self.inner.prefix
                ))
            })?;
        Ok(Entry {
            key: key.to_owned(),
            value: kv.value().to_vec(),
            create_revision: revision(kv.create_revision()),
            mod_revision: revision(kv.mod_revision()),
        })
    }

    /// Reads `keys` in one read-only transaction per chunk, every chunk at the first's revision.
    async fn read_keys(&self, keys: &[String]) -> Result<(Vec<Option<Entry>>, Revision), StoreError> {
        let mut out = Vec::with_capacity(keys.len());
        let mut at = 0;
        for chunk in keys.chunks(MAX_TXN_OPS) {
            let full: Vec<String> = chunk.iter().map(|k| self.full_key(k)).collect();
            let response = self
                .retry("a read", self.deadline(), true, |mut kv, _| {
                    let gets = full
                        .iter()
                        .map(|k| {
                            let options = (at > 0).then(|| GetOptions::new().with_revision(at));
                            TxnOp::get(k.as_str(), options)
                        })
                        .collect::<Vec<_>>();
                    async move { kv.txn(Txn::new().and_then(gets)).await }
                })
                .await?;
            if at == 0 {
                at = header_revision(&response)?;
            }
            for got in response.op_responses() {
                let TxnOpResponse::Get(got) = got else {
                    return Err(self.odd("a read"));
                };
                out.push(got.kvs().first().map(|kv| self.entry(kv)).transpose()?);
            }
        }
        if at == 0 {
            at = self.revision().await? as i64;
        }
        Ok((out, revision(at)))
    }

    fn odd(&self, what: &str) -> StoreError {
        StoreError::Unavailable(format!(
            "etcd at {} answered {what} with an unexpected response",
            self.inner.endpoints
        ))
    }

    /// After a conflict that follows an attempt which may have been applied: whether that
    /// attempt's writes are what the keys hold now (every put's value, at one revision, every
    /// deleted key absent). Returns the revision the commit took effect at, if so.
    async fn applied_earlier(&self, ops: &[Op]) -> Result<Option<Revision>, StoreError> {
        // The guarded writes identify the commit: unguarded ones (a marker every commit puts)
        // may have been overwritten by others since.
        let ours: Vec<&Op> = ops.iter().filter(|op| op.writes() && guards(op)).collect();
        let keys: Vec<String> = ours.iter().map(|op| op.key().to_owned()).collect();
        let (entries, read_at) = self.read_keys(&keys).await?;
        let mut at = None;
        for (op, entry) in ours.into_iter().zip(&entries) {
            match (op, entry) {
                (Op::Put { value, .. }, Some(entry)) if entry.value == *value => {
                    if *at.get_or_insert(entry.mod_revision) != entry.mod_revision {
                        return Ok(None);
                    }
                }
                (Op::Delete { .. }, None) => {}
                _ => return Ok(None),
            }
        }
        Ok(Some(at.unwrap_or(read_at)))
    }

    /// The precondition that the transaction's compares found false, from the failure
    /// branch's reads (taken at the same revision as the compares).
    fn conflict(&self, ops: &[Op], response: &TxnResponse) -> StoreError {
        let reads = response.op_responses();
        let checked = ops.iter().filter(|op| op.expect() != Expect::Any);
        for (op, read) in checked.zip(&reads) {
            let TxnOpResponse::Get(got) = read else {
                return self.odd("a commit");
            };
            let actual = got.kvs().first().map(|kv| revision(kv.mod_revision()));
            if let Err(conflict) = check(op.key(), op.expect(), actual) {
                return conflict;
            }
        }
        self.odd("a commit (it failed with every precondition met)")
    }

    /// Every entry under `prefix`, in pages read at revision `at` (0: the current one, which the
    /// first page fixes); returns the entries and the revision they were read at.
    async fn list_pages(&self, prefix: &str, mut at: i64) -> Result<(Vec<Entry>, i64), StoreError> {
        let (start, end) = range(&self.full_key(prefix));
        let mut out = Vec::new();
        let mut from = start;
        loop {
            let response: GetResponse = self
                .retry("a list", self.deadline(), true, |mut kv, _| {
                    let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
                    if at > 0 {
                        options = options.with_revision(at);
                    }
                    let from = from.clone();
                    async move { kv.get(from, Some(options)).await }
                })
                .await?;
            if at == 0 {
                at = response.header().map_or(0, |h| h.revision());
            }
            for kv in response.kvs() {
                out.push(self.entry(kv)?);
            }
            match response.kvs().last() {
                Some(last) if response.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok((out, at)),
            }
        }
    }
}

#[async_trait::async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let full = self.full_key(key);
        let response = self
            .retry("a read", self.deadline(), true, |mut kv, _| {
                let full = full.clone();
                async move { kv.get(full, None).await }
            })
            .await?;
        response.kvs().first().map(|kv| self.entry(kv)).transpose()
    }

    async fn get_many(&self, keys: Vec<String>) -> Result<Vec<Option<Entry>>, StoreError> {
        Ok(self.read_keys(&keys).await?.0)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        Ok(self.list_pages(prefix, 0).await?.0)
    }

    async fn snapshot(&self, prefixes: &[&str]) -> Result<(Vec<Vec<Entry>>, Revision), StoreError> {
        let mut at = 0;
        let mut lists = Vec::with_capacity(prefixes.len());
        for prefix in prefixes {
            let (entries, read_at) = self.list_pages(prefix, at).await?;
            at = read_at;
            lists.push(entries);
        }
        if at == 0 {
            at = i64::try_from(self.revision().await?).unwrap_or(i64::MAX);
        }
        Ok((lists, revision(at)))
    }

    fn feed(&self, from: Revision) -> Option<Box<dyn crate::store::Feed>> {
        Some(Box::new(self.watch_from(from)))
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// One etcd transaction: compares for the preconditions, puts and deletes on success,
    /// reads of the compared keys on failure (to name the key that conflicted).
    ///
    /// Retries on transport errors: a batch is retried after an attempt that may have been
    /// applied only if it is *guarded*, i.e. one of its preconditions cannot hold once the
    /// batch has been applied (a put expecting absence or a mod revision, a delete expecting a
    /// mod revision). A repeat of an applied guarded batch then fails its compare instead of
    /// writing twice, and [`EtcdStore::applied_earlier`] recognises our own write in that
    /// conflict. An unguarded batch (only `Expect::Any`, or deletes expecting absence) could be
    /// applied twice, the second time over a newer write by someone else, so it is retried
    /// only while no member received it; otherwise the caller gets `Unavailable` saying it may
    /// have been applied.
    async fn commit(&self, ops: Vec<Op>) -> Result<Revision, StoreError> {
        crate::store::keys_once(&ops)?;
        if ops.len() > MAX_TXN_OPS {
            return Err(StoreError::Invalid(format!(
                "a commit of {} operations is more than etcd accepts in one transaction ({MAX_TXN_OPS})",
                ops.len()
            )));
        }
        if ops.is_empty() {
            return self.revision().await;
        }
        let guarded = ops.iter().any(guards);
        let txn = self.transaction(&ops);
        let deadline = self.deadline();
        let mut backoff = FIRST_BACKOFF;
        let mut unsure = false;
        loop {
            let mut kv = self.kv();
            let attempt = kv.txn(txn.clone());
            let until = self.attempt_deadline(deadline, guarded);
            let last = match tokio::time::timeout_at(until, attempt).await {
                Ok(Ok(response)) if response.succeeded() => return header_revision(&response).map(revision),
                Ok(Ok(response)) => {
                    if unsure && let Some(at) = self.applied_earlier(&ops).await? {
                        return Ok(at);
                    }
                    return Err(self.conflict(&ops, &response));
                }
                Ok(Err(e)) => match classify(&e, &self.inner.endpoints) {
                    Failure::Fatal(e) => return Err(e),
                    Failure::NotSent(last) => last,
                    Failure::Unsure(last) if guarded => {
                        unsure = true;
                        last
                    }
                    Failure::Unsure(last) => return Err(self.maybe_applied("a write", &last)),
                },
                Err(_) if guarded => {
                    unsure = true;
                    "timed out".to_owned()
                }
                Err(_) => return Err(self.maybe_applied("a write", "timed out")),
            };
            if !pause(deadline, &mut backoff).await {
                return Err(if unsure {
                    self.maybe_applied("a write", &last)
                } else {
                    unavailable(&self.inner.endpoints, "a write", &last)
                });
            }
        }
    }

    /// etcd's current revision, read with a quorum (linearizable) read.
    async fn revision(&self) -> Result<Revision, StoreError> {
        let response = self
            .retry("a read", self.deadline(), true, |mut kv, key| async move {
                kv.get(key, Some(GetOptions::new().with_count_only())).await
            })
            .await?;
        Ok(revision(response.header().map_or(0, |h| h.revision())))
    }
}

impl EtcdStore {
    fn transaction(&self, ops: &[Op]) -> Txn {
        let mut compares = Vec::new();
        let mut reads = Vec::new();
        for op in ops {
            let key = self.full_key(op.key());
            let at = |r: Revision| i64::try_from(r).unwrap_or(i64::MAX);
            let (compare, read) = match op.expect() {
                Expect::Any => continue,
                Expect::Absent => (
                    Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
                    TxnOp::get(key, None),
                ),
                Expect::ModRevision(r) => (
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, at(r)),
                    TxnOp::get(key, None),
                ),
                Expect::NotAfter(r) if matches!(op, Op::Unchanged { .. }) => (
                    Compare::mod_revision(key.as_str(), CompareOp::Less, at(r).saturating_add(1))
                        .with_prefix(),
                    // On failure, the newest write under the prefix names the conflict.
                    TxnOp::get(
                        key,
                        Some(
                            GetOptions::new()
                                .with_prefix()
                                .with_sort(SortTarget::Mod, SortOrder::Descend)
                                .with_limit(1)
                                .with_keys_only(),
                        ),
                    ),
                ),
                Expect::NotAfter(r) => (
                    Compare::mod_revision(key.as_str(), CompareOp::Less, at(r).saturating_add(1)),
                    TxnOp::get(key, None),
                ),
            };
            compares.push(compare);
            reads.push(read);
        }
        let writes: Vec<TxnOp> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Put { key, value, .. } => Some(TxnOp::put(self.full_key(key), value.clone(), None)),
                Op::Delete { key, .. } => Some(TxnOp::delete(self.full_key(key), None)),
                Op::Check { .. } | Op::Unchanged { .. } => None,
            })
            .collect();
        Txn::new().when(compares).and_then(writes).or_else(reads)
    }
}

/// Whether `op` cannot take effect twice: once applied, its own precondition fails (a put
/// expecting absence or a mod revision, a delete expecting a mod revision).
fn guards(op: &Op) -> bool {
    matches!(
        (op, op.expect()),
        (Op::Put { .. }, Expect::Absent | Expect::ModRevision(_))
            | (Op::Delete { .. }, Expect::ModRevision(_))
    )
}

/// A start over TLS that failed: when handshakes of our own tell why (a member's certificate
/// that the CA did not sign, a client certificate a member requires or refuses), that replaces
/// the client's words, which are often only "connection closed".
async fn explain_start(options: &EtcdOptions, tls: &Material, message: String) -> StoreError {
    let causes = tls.diagnose(&options.endpoints, options.dial_timeout).await;
    if causes.is_empty() {
        return StoreError::Unavailable(message);
    }
    // Members of one cluster usually fail alike: each cause once, with the endpoints it is for.
    let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
    for (endpoint, cause) in causes {
        match grouped.iter_mut().find(|(c, _)| *c == cause) {
            Some((_, endpoints)) => endpoints.push(endpoint),
            None => grouped.push((cause, vec![endpoint])),
        }
    }
    let text: Vec<String> = grouped
        .iter()
        .map(|(cause, endpoints)| format!("TLS with {} failed: {cause}", endpoints.join(", ")))
        .collect();
    StoreError::Unavailable(format!(
        "etcd at {} did not answer at start: {}",
        options.endpoint_list(),
        text.join("; ")
    ))
}

/// Sleeps before the next attempt; false when that would pass `deadline`.
async fn pause(deadline: Instant, backoff: &mut Duration) -> bool {
    if Instant::now() + *backoff >= deadline {
        return false;
    }
    tokio::time::sleep(*backoff).await;
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
    true
}

fn header_revision(response: &TxnResponse) -> Result<i64, StoreError> {
    response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| StoreError::Unavailable("etcd answered without a header".to_owned()))
}

/// etcd's revisions are non-negative `i64`s.
fn revision(r: i64) -> Revision {
    u64::try_from(r).unwrap_or(0)
}

/// The key range `[key, end)` of every key starting with `prefix`.
fn range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let start = prefix.as_bytes().to_vec();
    let mut end = start.clone();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return (start, end);
        }
    }
    // An empty prefix (or only 0xff bytes): every key from `start` on ("\0": the smallest key).
    let start = if start.is_empty() { vec![0] } else { start };
    (start, vec![0])
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn prefix_ranges() {
        assert_eq!(range("/tiphys/"), (b"/tiphys/".to_vec(), b"/tiphys0".to_vec()));
        assert_eq!(range("a"), (b"a".to_vec(), b"b".to_vec()));
        assert_eq!(range(""), (vec![0], vec![0]));
    }
}
