//! Brute-force protection for password logins.
//!
//! Policy (documented in the README):
//! - **Per username and client address**: one attempt at a time; each failure
//!   delays its own answer more (0.2 s, 0.4 s, 0.8 s, …); after `max_failures`
//!   failures within `window` that pair is locked until `window` has passed
//!   since its last failure. Another address is not affected, so nobody can
//!   lock a real user out from elsewhere.
//! - **Per client address**, whatever the usernames: `4 × max_failures`
//!   failures within `window` lock the address out. Spraying made-up
//!   usernames from one address is stopped by this rule.
//! - **Per username**, whatever the addresses: past `4 × max_failures`
//!   failures within `window`, each attempt for that username waits a
//!   growing pause (at most 3 s) first: slowed, never locked or queued.
//! - Throttled attempts are answered at once with a distinct error (429 /
//!   RESOURCE_EXHAUSTED with `Retry-After`) and never reach bcrypt.
//!
//! Every count, lock and "attempt in progress" mark is a record in the store, read at each
//! attempt and changed with conditional writes (retried, bounded, on a conflict), so the
//! limits hold across replicas sharing a store: 5 failures of one pair spread over two
//! replicas lock that pair on both. Nothing of it lives in one process's memory, and every
//! change is written before the answer is sent, so a crash resets nothing.
//!
//! The store is bounded like the tables it replaced: [`LoginGuard::purge`] (every
//! `capacity / 10` failures a process records, and periodically) drops expired records and,
//! past `capacity` records of one kind, the oldest that do not belong to a real account, so
//! failures for made-up usernames can never evict the state of a real account within its
//! window.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::revocations::delete_in_batches;
use crate::store::{self, Entry, Expect, Op, Revision, Store, StoreError};

const PREFIX: &str = "loginfail/";
/// "An attempt of this pair is in progress", until this long after it began at the latest (a
/// replica that died mid-attempt leaves its mark behind).
const LEASE_MS: i64 = 15_000;
/// Conflicting writers of one attempt's records before giving up.
const ATTEMPTS: usize = 16;

#[derive(Clone, Debug)]
pub struct ThrottlePolicy {
    pub max_failures: u32,
    pub window: Duration,
    /// Records per kind (pairs, addresses, usernames) kept past a purge.
    pub capacity: usize,
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        Self {
            max_failures: 5,
            window: Duration::from_secs(300),
            capacity: 10_000,
        }
    }
}

/// Failures counted for one key, in unix milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    pub count: u32,
    pub first: i64,
    pub last: i64,
    /// The key is a real account's: never evicted within its window.
    #[serde(default)]
    pub protected: bool,
}

/// An attempt of one pair is in progress until `until` (unix ms).
#[derive(Serialize, Deserialize)]
struct Busy {
    until: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Pair(String, IpAddr),
    Address(IpAddr),
    User(String),
    /// The mark of a pair's attempt in progress.
    Busy(String, IpAddr),
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

impl Key {
    fn store_key(&self) -> String {
        match self {
            Self::Pair(u, ip) => format!("{PREFIX}pair/{}/{ip}", enc(u)),
            Self::Address(ip) => format!("{PREFIX}addr/{ip}"),
            Self::User(u) => format!("{PREFIX}user/{}", enc(u)),
            Self::Busy(u, ip) => format!("{PREFIX}busy/{}/{ip}", enc(u)),
        }
    }
}

/// The kind of a stored record: `pair`, `addr`, `user` or `busy`.
fn kind_of(store_key: &str) -> &str {
    store_key
        .strip_prefix(PREFIX)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("")
}

/// Why an attempt is not even tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: Duration,
}

/// Why an attempt was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("throttled for {:?}", .0.retry_after)]
    Throttled(Throttled),
    #[error("cannot read the failed-login state: {0}")]
    Store(#[from] StoreError),
}

/// A login attempt admitted by the guard. Hand it back to [`LoginGuard::release`] once the
/// answer is decided; dropped otherwise, its mark is removed in the background.
pub struct Attempt {
    user: String,
    ip: IpAddr,
    known: bool,
    /// Pause before checking the password (username under attack).
    pub pause: Duration,
    lease: Lease,
}

/// The mark of this attempt in the store, and the revision it was written at.
struct Lease {
    store: Arc<dyn Store>,
    key: String,
    rev: Revision,
    released: bool,
}

impl Lease {
    fn delete(&self) -> Op {
        Op::Delete {
            key: self.key.clone(),
            // Another attempt that took over an expired mark keeps its own.
            expect: Expect::ModRevision(self.rev),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (store, op) = (Arc::clone(&self.store), self.delete());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = store.commit(vec![op]).await;
            });
        }
    }
}

pub struct LoginGuard {
    policy: ThrottlePolicy,
    store: Arc<dyn Store>,
    /// Failures this process recorded since it last purged: when to purge next.
    since_purge: AtomicUsize,
    /// Records held: counted at each purge, plus those this process created since (a metric
    /// only; never consulted).
    held: AtomicUsize,
}

impl LoginGuard {
    /// A guard over the records under `loginfail/` in `store`.
    pub fn new(policy: ThrottlePolicy, store: Arc<dyn Store>) -> Self {
        Self {
            policy,
            store,
            since_purge: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
        }
    }

    pub const STORE_PREFIX: &'static str = PREFIX;

    fn window_ms(&self) -> i64 {
        i64::try_from(self.policy.window.as_millis()).unwrap_or(i64::MAX)
    }

    fn expired(&self, f: &Failures, now_ms: i64) -> bool {
        now_ms.saturating_sub(f.first) >= self.window_ms()
            && now_ms.saturating_sub(f.last) >= self.window_ms()
    }

    fn locked_for(&self, f: Option<&Failures>, limit: u32, now_ms: i64) -> Option<Duration> {
        let f = f?;
        if f.count < limit || self.expired(f, now_ms) {
            return None;
        }
        let until = f.last.saturating_add(self.window_ms());
        let left = u64::try_from(until.saturating_sub(now_ms)).unwrap_or(0);
        (left > 0).then(|| Duration::from_millis(left))
    }

    /// Admits an attempt for `user` from `ip`, or says how long to wait.
    /// `known`: `user` is a real account (its state is protected from eviction).
    pub async fn admit(&self, user: &str, ip: IpAddr, known: bool, now_ms: i64) -> Result<Attempt, Refused> {
        let ip = scope(ip);
        let busy_key = Key::Busy(user.to_owned(), ip).store_key();
        let keys = vec![
            Key::Pair(user.to_owned(), ip).store_key(),
            Key::Address(ip).store_key(),
            Key::User(user.to_owned()).store_key(),
            busy_key.clone(),
        ];
        let read = self.store.get_many(keys).await?;
        let failures = |i: usize| read[i].as_ref().and_then(parse_failures);
        let wide = self.policy.max_failures.saturating_mul(4);
        if let Some(wait) = self
            .locked_for(failures(0).as_ref(), self.policy.max_failures, now_ms)
            .or_else(|| self.locked_for(failures(1).as_ref(), wide, now_ms))
        {
            return Err(Refused::Throttled(Throttled { retry_after: wait }));
        }
        let pause = match failures(2) {
            Some(f) if !self.expired(&f, now_ms) && f.count >= wide => {
                let over = (f.count - wide).min(8);
                Duration::from_millis(100 << over).min(Duration::from_secs(3))
            }
            _ => Duration::ZERO,
        };
        // One attempt at a time per pair, on every replica: parallel guessing gains nothing.
        let expect = match &read[3] {
            Some(entry) => {
                let busy = serde_json::from_slice::<Busy>(&entry.value).ok();
                if busy.is_some_and(|b| b.until > now_ms) {
                    return Err(Refused::Throttled(busy_for(Duration::from_secs(1))));
                }
                Expect::ModRevision(entry.mod_revision)
            }
            None => Expect::Absent,
        };
        let mark = Busy {
            until: now_ms.saturating_add(LEASE_MS),
        };
        let rev = match self
            .store
            .commit(vec![store::put_json(&busy_key, &mark, expect)?])
            .await
        {
            Ok(rev) => rev,
            Err(StoreError::Conflict { .. }) => {
                return Err(Refused::Throttled(busy_for(Duration::from_secs(1))));
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Attempt {
            user: user.to_owned(),
            ip,
            known,
            pause,
            lease: Lease {
                store: Arc::clone(&self.store),
                key: busy_key,
                rev,
                released: false,
            },
        })
    }

    /// Records a failed attempt durably; returns how long to hold the answer back.
    pub async fn failed(&self, attempt: &Attempt, now_ms: i64) -> Result<Duration, StoreError> {
        let keys = [
            (Key::Pair(attempt.user.clone(), attempt.ip), attempt.known),
            (Key::Address(attempt.ip), false),
            (Key::User(attempt.user.clone()), attempt.known),
        ];
        let store_keys: Vec<String> = keys.iter().map(|(k, _)| k.store_key()).collect();
        let mut pair_count = None;
        for _ in 0..ATTEMPTS {
            let read = self.store.get_many(store_keys.clone()).await?;
            let mut ops = Vec::new();
            let mut counts = Vec::new();
            for ((key, protected), entry) in keys.iter().zip(&read) {
                let fresh = Failures {
                    count: 0,
                    first: now_ms,
                    last: now_ms,
                    protected: *protected,
                };
                let mut f = match entry.as_ref().and_then(parse_failures) {
                    Some(f) if now_ms.saturating_sub(f.first) < self.window_ms() => f,
                    _ => fresh,
                };
                f.count = f.count.saturating_add(1);
                f.last = now_ms;
                counts.push(f.count);
                let expect = entry
                    .as_ref()
                    .map_or(Expect::Absent, |e| Expect::ModRevision(e.mod_revision));
                ops.push(store::put_json(&key.store_key(), &f, expect)?);
            }
            let created = ops.iter().filter(|op| op.expect() == Expect::Absent).count();
            match self.store.commit(ops).await {
                Ok(_) => {
                    self.held.fetch_add(created, Ordering::Relaxed);
                    pair_count = counts.first().copied();
                    break;
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        let Some(pair_count) = pair_count else {
            return Err(StoreError::Unavailable(format!(
                "the failed-login records kept changing ({ATTEMPTS} attempts)"
            )));
        };
        let every = (self.policy.capacity / 10).max(1);
        if self.since_purge.fetch_add(1, Ordering::Relaxed) + 1 >= every {
            self.since_purge.store(0, Ordering::Relaxed);
            if let Err(err) = self.purge(now_ms).await {
                tracing::warn!(error = %err, "cannot purge failed-login records");
            }
        }
        Ok(Duration::from_millis(
            200u64 << pair_count.saturating_sub(1).min(5),
        ))
    }

    /// Records a successful login: the pair's failures are forgotten.
    pub async fn succeeded(&self, attempt: &Attempt) -> Result<(), StoreError> {
        let key = Key::Pair(attempt.user.clone(), attempt.ip).store_key();
        for _ in 0..ATTEMPTS {
            let Some(entry) = self.store.get(&key).await? else {
                return Ok(());
            };
            let op = Op::Delete {
                key: key.clone(),
                expect: Expect::ModRevision(entry.mod_revision),
            };
            match self.store.commit(vec![op]).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Unavailable(format!(
            "the failed-login record {key} kept changing"
        )))
    }

    /// Ends the attempt: its pair may be tried again.
    pub async fn release(&self, mut attempt: Attempt) {
        attempt.lease.released = true;
        match self.store.commit(vec![attempt.lease.delete()]).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => {}
            Err(err) => tracing::warn!(error = %err, "cannot clear a login attempt's mark"),
        }
    }

    /// Drops expired records and marks and, past `capacity` records of one kind, the oldest
    /// that are not a real account's, down to 90% (so that the work is paid rarely). Deletes
    /// are conditional: a record updated meanwhile stays. Returns how many went.
    pub async fn purge(&self, now_ms: i64) -> Result<usize, StoreError> {
        let entries = self.store.list(PREFIX).await?;
        let total = entries.len();
        let mut gone: Vec<&Entry> = Vec::new();
        let mut live: [Vec<(&Entry, Failures)>; 3] = Default::default();
        for entry in &entries {
            let table = match kind_of(&entry.key) {
                "pair" => 0,
                "addr" => 1,
                "user" => 2,
                "busy" => {
                    let busy = serde_json::from_slice::<Busy>(&entry.value).ok();
                    if busy.is_none_or(|b| b.until <= now_ms) {
                        gone.push(entry);
                    }
                    continue;
                }
                _ => {
                    gone.push(entry);
                    continue;
                }
            };
            match parse_failures(entry) {
                Some(f) if !self.expired(&f, now_ms) => live[table].push((entry, f)),
                _ => gone.push(entry),
            }
        }
        let target = self.policy.capacity - self.policy.capacity / 10;
        for table in &mut live {
            if table.len() <= self.policy.capacity {
                continue;
            }
            let excess = table.len() - target;
            table.retain(|(_, f)| !f.protected);
            table.sort_by_key(|(_, f)| f.last);
            gone.extend(table.iter().take(excess).map(|(e, _)| *e));
        }
        let deletes = gone
            .into_iter()
            .map(|e| Op::Delete {
                key: e.key.clone(),
                expect: Expect::ModRevision(e.mod_revision),
            })
            .collect();
        let deleted = delete_in_batches(self.store.as_ref(), deletes).await?.len();
        self.held.store(total - deleted, Ordering::Relaxed);
        Ok(deleted)
    }

    /// Failure records in the store now, marks of attempts in progress left out (for tests).
    pub async fn records(&self) -> Result<usize, StoreError> {
        let entries = self.store.list(PREFIX).await?;
        Ok(entries.iter().filter(|e| kind_of(&e.key) != "busy").count())
    }

    /// Records held (a metric: see the field).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

fn parse_failures(entry: &Entry) -> Option<Failures> {
    serde_json::from_slice(&entry.value).ok()
}

/// The address a limit applies to: IPv4 as is (IPv4-mapped IPv6 too), IPv6
/// by its /64, since one client commonly holds a whole /64.
fn scope(ip: IpAddr) -> IpAddr {
    crate::principal::client_scope(ip)
}

fn busy_for(retry_after: Duration) -> Throttled {
    Throttled { retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;

    const IP_A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const IP_B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));

    /// A guard on a fresh store; the directory lives as long as the guard's test.
    fn guard(capacity: usize) -> (LoginGuard, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FileStore::open(dir.path()).unwrap());
        (on(store, capacity), dir)
    }

    fn on(store: Arc<dyn Store>, capacity: usize) -> LoginGuard {
        LoginGuard::new(
            ThrottlePolicy {
                capacity,
                ..ThrottlePolicy::default()
            },
            store,
        )
    }

    async fn admit(g: &LoginGuard, user: &str, ip: IpAddr, now: i64) -> Result<Attempt, Throttled> {
        match g.admit(user, ip, true, now).await {
            Ok(a) => Ok(a),
            Err(Refused::Throttled(t)) => Err(t),
            Err(Refused::Store(e)) => panic!("{e}"),
        }
    }

    async fn fail(g: &LoginGuard, user: &str, ip: IpAddr, known: bool, now: i64) -> Result<(), Throttled> {
        let a = match g.admit(user, ip, known, now).await {
            Ok(a) => a,
            Err(Refused::Throttled(t)) => return Err(t),
            Err(Refused::Store(e)) => panic!("{e}"),
        };
        g.failed(&a, now).await.unwrap();
        g.release(a).await;
        Ok(())
    }

    #[tokio::test]
    async fn five_failures_lock_the_pair_but_not_another_address() {
        let (g, _dir) = guard(100);
        for i in 0..5 {
            fail(&g, "admin", IP_A, true, i).await.unwrap();
        }
        let locked = admit(&g, "admin", IP_A, 10).await.err().unwrap();
        assert!(locked.retry_after > Duration::from_secs(299));
        assert!(admit(&g, "admin", IP_B, 10).await.is_ok());
        // The lock lifts once the window has passed since the last failure.
        assert!(admit(&g, "admin", IP_A, 4 + 300_000).await.is_ok());
    }

    #[tokio::test]
    async fn ipv6_addresses_of_one_64_share_limits() {
        let (g, _dir) = guard(100);
        for i in 0..5u16 {
            let ip = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, i));
            fail(&g, "admin", ip, true, i64::from(i)).await.unwrap();
        }
        let other = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 9, 9, 9, 9));
        assert!(admit(&g, "admin", other, 10).await.is_err());
    }

    #[tokio::test]
    async fn parallel_attempts_from_one_pair_are_refused() {
        let (g, _dir) = guard(100);
        let first = admit(&g, "admin", IP_A, 0).await.unwrap();
        assert!(admit(&g, "admin", IP_A, 0).await.is_err());
        g.release(first).await;
        assert!(admit(&g, "admin", IP_A, 0).await.is_ok());
    }

    #[tokio::test]
    async fn a_mark_left_by_a_dead_attempt_expires() {
        let (g, _dir) = guard(100);
        let first = admit(&g, "admin", IP_A, 0).await.unwrap();
        std::mem::forget(first);
        assert!(admit(&g, "admin", IP_A, LEASE_MS - 1).await.is_err());
        assert!(admit(&g, "admin", IP_A, LEASE_MS).await.is_ok());
    }

    #[tokio::test]
    async fn spraying_usernames_from_one_address_locks_the_address() {
        let (g, _dir) = guard(100);
        for i in 0..20 {
            fail(&g, &format!("fake{i}"), IP_A, false, i).await.unwrap();
        }
        assert!(admit(&g, "admin", IP_A, 30).await.is_err());
        assert!(admit(&g, "admin", IP_B, 30).await.is_ok());
    }

    #[tokio::test]
    async fn failures_grow_the_delay() {
        let (g, _dir) = guard(100);
        let a = admit(&g, "u", IP_A, 0).await.unwrap();
        let d1 = g.failed(&a, 0).await.unwrap();
        let d2 = g.failed(&a, 1).await.unwrap();
        assert!(d2 > d1);
    }

    #[tokio::test]
    async fn many_addresses_slow_a_username_but_never_lock_it() {
        let (g, _dir) = guard(1000);
        for i in 0..40u8 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 1, i));
            fail(&g, "admin", ip, true, i64::from(i)).await.unwrap();
        }
        let a = admit(&g, "admin", IP_B, 100).await.unwrap();
        assert!(a.pause > Duration::ZERO);
    }

    /// SEC-09: a flood of made-up usernames cannot evict a real account's lock, and the store
    /// stays bounded (at a smaller capacity than the default: each failure is a durable write).
    #[tokio::test]
    async fn sec_09_flood_of_fake_users_keeps_real_lock_and_bounded_memory() {
        let capacity = 40;
        let (g, _dir) = guard(capacity);
        for i in 0..5 {
            fail(&g, "alice", IP_A, true, i).await.unwrap();
        }
        for i in 0..(5 * capacity as u32) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + 10 + i));
            let _ = fail(&g, &format!("ghost-{i}"), ip, false, 10).await;
        }
        let held = g.records().await.unwrap();
        assert!(held <= 3 * capacity + 3, "the store must stay bounded: {held}");
        assert!(
            admit(&g, "alice", IP_A, 20).await.is_err(),
            "the real lock survived"
        );
    }

    #[tokio::test]
    async fn another_guard_on_the_same_store_sees_the_lock() {
        let (g, dir) = guard(100);
        for i in 0..3 {
            fail(&g, "admin", IP_A, true, i).await.unwrap();
        }
        // A second replica on the same records (here: the same store) counts on.
        let store = Arc::clone(&g.store);
        let other = on(store, 100);
        for i in 3..5 {
            fail(&other, "admin", IP_A, true, i).await.unwrap();
        }
        assert!(admit(&g, "admin", IP_A, 10).await.is_err());
        assert!(admit(&other, "admin", IP_A, 10).await.is_err());
        assert!(admit(&g, "admin", IP_B, 10).await.is_ok());
        drop(dir);
    }

    #[tokio::test]
    async fn a_success_forgets_the_pair_and_purge_drops_expired_records() {
        let (g, _dir) = guard(100);
        for i in 0..4 {
            fail(&g, "admin", IP_A, true, i).await.unwrap();
        }
        let a = admit(&g, "admin", IP_A, 10).await.unwrap();
        g.succeeded(&a).await.unwrap();
        g.release(a).await;
        // The address and username records stay; the pair starts over.
        assert_eq!(g.records().await.unwrap(), 2);
        assert_eq!(g.purge(10 + 300_000).await.unwrap(), 2);
        assert_eq!(g.records().await.unwrap(), 0);
    }
}
