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
//! Memory is bounded: each table holds at most `capacity` entries. When one
//! is full, expired entries go first, then the oldest entries that do not
//! belong to a real account, so failures for made-up usernames can never
//! evict the state of a real account within its window. Every change is
//! written to the store before the answer is sent, so a crash resets nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{Expect, Op};

const PREFIX: &str = "loginfail/";

#[derive(Clone, Debug)]
pub struct ThrottlePolicy {
    pub max_failures: u32,
    pub window: Duration,
    /// Entries per table.
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

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Pair(String, IpAddr),
    Address(IpAddr),
    User(String),
}

impl Key {
    fn store_key(&self) -> String {
        let enc = |s: &str| {
            percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
        };
        match self {
            Self::Pair(u, ip) => format!("{PREFIX}pair/{}/{ip}", enc(u)),
            Self::Address(ip) => format!("{PREFIX}addr/{ip}"),
            Self::User(u) => format!("{PREFIX}user/{}", enc(u)),
        }
    }

    fn parse(store_key: &str) -> Option<Self> {
        let dec = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|c| c.into_owned())
        };
        let rest = store_key.strip_prefix(PREFIX)?;
        let (kind, rest) = rest.split_once('/')?;
        match kind {
            "pair" => {
                let (u, ip) = rest.split_once('/')?;
                Some(Self::Pair(dec(u)?, ip.parse().ok()?))
            }
            "addr" => Some(Self::Address(rest.parse().ok()?)),
            "user" => Some(Self::User(dec(rest)?)),
            _ => None,
        }
    }
}

/// Why an attempt is not even tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: Duration,
}

/// A login attempt admitted by the guard. Hold it until the answer is sent.
pub struct Attempt {
    user: String,
    ip: IpAddr,
    known: bool,
    /// Pause before checking the password (username under attack).
    pub pause: Duration,
    _pair: PairLease,
}

/// Marks a (username, address) pair busy while its attempt runs.
struct PairLease {
    busy: Arc<Mutex<std::collections::HashSet<(String, IpAddr)>>>,
    key: (String, IpAddr),
}

impl Drop for PairLease {
    fn drop(&mut self) {
        if let Ok(mut busy) = self.busy.lock() {
            busy.remove(&self.key);
        }
    }
}

pub struct LoginGuard {
    policy: ThrottlePolicy,
    tables: Mutex<Tables>,
    busy: Arc<Mutex<std::collections::HashSet<(String, IpAddr)>>>,
}

#[derive(Default)]
struct Tables {
    pairs: HashMap<Key, Failures>,
    addresses: HashMap<Key, Failures>,
    users: HashMap<Key, Failures>,
}

impl Tables {
    fn table(&mut self, key: &Key) -> &mut HashMap<Key, Failures> {
        match key {
            Key::Pair(..) => &mut self.pairs,
            Key::Address(_) => &mut self.addresses,
            Key::User(_) => &mut self.users,
        }
    }
}

impl LoginGuard {
    /// A guard holding the persisted state (`entries` from the store under `loginfail/`).
    pub fn new(
        policy: ThrottlePolicy,
        entries: impl IntoIterator<Item = (String, Failures)>,
        now_ms: i64,
    ) -> Self {
        let guard = Self {
            policy,
            tables: Mutex::new(Tables::default()),
            busy: Arc::default(),
        };
        if let Ok(mut tables) = guard.tables.lock() {
            for (store_key, failures) in entries {
                if let Some(key) = Key::parse(&store_key)
                    && !guard.expired(&failures, now_ms)
                {
                    tables.table(&key).insert(key, failures);
                }
            }
        }
        guard
    }

    pub const STORE_PREFIX: &'static str = PREFIX;

    fn window_ms(&self) -> i64 {
        i64::try_from(self.policy.window.as_millis()).unwrap_or(i64::MAX)
    }

    /// Whether a stored entry no longer matters (to drop it from the store at startup).
    pub fn is_stale(&self, f: &Failures, now_ms: i64) -> bool {
        self.expired(f, now_ms)
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
    pub async fn admit(
        &self,
        user: &str,
        ip: IpAddr,
        known: bool,
        now_ms: i64,
    ) -> Result<Attempt, Throttled> {
        let ip = scope(ip);
        let pause = {
            let tables = self.tables.lock().map_err(|_| busy())?;
            let pair = tables.pairs.get(&Key::Pair(user.to_owned(), ip));
            let addr = tables.addresses.get(&Key::Address(ip));
            let wide = self.policy.max_failures.saturating_mul(4);
            if let Some(wait) = self
                .locked_for(pair, self.policy.max_failures, now_ms)
                .or_else(|| self.locked_for(addr, wide, now_ms))
            {
                return Err(Throttled { retry_after: wait });
            }
            match tables.users.get(&Key::User(user.to_owned())) {
                Some(f) if !self.expired(f, now_ms) && f.count >= wide => {
                    let over = (f.count - wide).min(8);
                    Duration::from_millis(100 << over).min(Duration::from_secs(3))
                }
                _ => Duration::ZERO,
            }
        };
        let lease = {
            let mut busy = self.busy.lock().map_err(|_| busy())?;
            let key = (user.to_owned(), ip);
            if !busy.insert(key.clone()) {
                // One attempt at a time per pair: parallel guessing gains nothing.
                return Err(busy_with(Duration::from_secs(1)));
            }
            PairLease {
                busy: Arc::clone(&self.busy),
                key,
            }
        };
        Ok(Attempt {
            user: user.to_owned(),
            ip,
            known,
            pause,
            _pair: lease,
        })
    }

    /// Records a failed attempt. Returns how long to hold the answer back and
    /// the store operations that make the new state durable.
    pub fn failed(&self, attempt: &Attempt, now_ms: i64) -> (Duration, Vec<Op>) {
        let Ok(mut tables) = self.tables.lock() else {
            return (Duration::ZERO, Vec::new());
        };
        let mut ops = Vec::new();
        let keys = [
            (Key::Pair(attempt.user.clone(), attempt.ip), attempt.known),
            (Key::Address(attempt.ip), false),
            (Key::User(attempt.user.clone()), attempt.known),
        ];
        let mut pair_count = 0;
        for (key, protected) in keys {
            let window = self.window_ms();
            let table = tables.table(&key);
            let entry = table.entry(key.clone()).or_insert(Failures {
                count: 0,
                first: now_ms,
                last: now_ms,
                protected,
            });
            if now_ms.saturating_sub(entry.first) >= window {
                *entry = Failures {
                    count: 0,
                    first: now_ms,
                    last: now_ms,
                    protected,
                };
            }
            entry.count = entry.count.saturating_add(1);
            entry.last = now_ms;
            if matches!(key, Key::Pair(..)) {
                pair_count = entry.count;
            }
            if let Ok(op) = crate::store::put_json(&key.store_key(), &*entry, Expect::Any) {
                ops.push(op);
            }
            for evicted in self.evict(table, now_ms) {
                ops.push(Op::Delete {
                    key: evicted.store_key(),
                    expect: Expect::Any,
                });
            }
        }
        let delay = Duration::from_millis(200u64 << pair_count.saturating_sub(1).min(5));
        (delay, ops)
    }

    /// Records a successful login: the pair's failures are forgotten.
    pub fn succeeded(&self, attempt: &Attempt) -> Vec<Op> {
        let key = Key::Pair(attempt.user.clone(), attempt.ip);
        let removed = self
            .tables
            .lock()
            .is_ok_and(|mut t| t.pairs.remove(&key).is_some());
        if removed {
            vec![Op::Delete {
                key: key.store_key(),
                expect: Expect::Any,
            }]
        } else {
            Vec::new()
        }
    }

    /// Frees room in a full table: expired entries, then the oldest
    /// unprotected ones, down to 90% so that the sort is paid rarely.
    fn evict(&self, table: &mut HashMap<Key, Failures>, now_ms: i64) -> Vec<Key> {
        if table.len() <= self.policy.capacity {
            return Vec::new();
        }
        let target = self.policy.capacity - self.policy.capacity / 10;
        let mut gone: Vec<Key> = table
            .iter()
            .filter(|(_, f)| self.expired(f, now_ms))
            .map(|(k, _)| k.clone())
            .collect();
        let excess = table.len().saturating_sub(gone.len()).saturating_sub(target);
        if excess > 0 {
            let mut unprotected: Vec<(&Key, &Failures)> = table
                .iter()
                .filter(|(_, f)| !f.protected && !self.expired(f, now_ms))
                .collect();
            unprotected.sort_by_key(|(_, f)| f.last);
            gone.extend(unprotected.into_iter().take(excess).map(|(k, _)| k.clone()));
        }
        for key in &gone {
            table.remove(key);
        }
        gone
    }

    /// Entries held in memory (for tests and a metric).
    pub fn len(&self) -> usize {
        self.tables
            .lock()
            .map(|t| t.pairs.len() + t.addresses.len() + t.users.len())
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The address a limit applies to: IPv4 as is (IPv4-mapped IPv6 too), IPv6
/// by its /64, since one client commonly holds a whole /64.
fn scope(ip: IpAddr) -> IpAddr {
    crate::principal::client_scope(ip)
}

fn busy() -> Throttled {
    busy_with(Duration::from_secs(1))
}

fn busy_with(retry_after: Duration) -> Throttled {
    Throttled { retry_after }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP_A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const IP_B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));

    fn guard(capacity: usize) -> LoginGuard {
        LoginGuard::new(
            ThrottlePolicy {
                capacity,
                ..ThrottlePolicy::default()
            },
            [],
            0,
        )
    }

    async fn fail(
        g: &LoginGuard,
        user: &str,
        ip: IpAddr,
        known: bool,
        now: i64,
    ) -> Result<Vec<Op>, Throttled> {
        let a = g.admit(user, ip, known, now).await?;
        Ok(g.failed(&a, now).1)
    }

    #[tokio::test]
    async fn five_failures_lock_the_pair_but_not_another_address() {
        let g = guard(100);
        for i in 0..5 {
            fail(&g, "admin", IP_A, true, i).await.unwrap();
        }
        let locked = g.admit("admin", IP_A, true, 10).await.err().unwrap();
        assert!(locked.retry_after > Duration::from_secs(299));
        assert!(g.admit("admin", IP_B, true, 10).await.is_ok());
        // The lock lifts once the window has passed since the last failure.
        assert!(g.admit("admin", IP_A, true, 4 + 300_000).await.is_ok());
    }

    #[tokio::test]
    async fn ipv6_addresses_of_one_64_share_limits() {
        let g = guard(100);
        for i in 0..5u16 {
            let ip = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, i));
            fail(&g, "admin", ip, true, i64::from(i)).await.unwrap();
        }
        let other = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 9, 9, 9, 9));
        assert!(g.admit("admin", other, true, 10).await.is_err());
    }

    #[tokio::test]
    async fn parallel_attempts_from_one_pair_are_refused() {
        let g = guard(100);
        let first = g.admit("admin", IP_A, true, 0).await.unwrap();
        assert!(g.admit("admin", IP_A, true, 0).await.is_err());
        drop(first);
        assert!(g.admit("admin", IP_A, true, 0).await.is_ok());
    }

    #[tokio::test]
    async fn spraying_usernames_from_one_address_locks_the_address() {
        let g = guard(100);
        for i in 0..20 {
            fail(&g, &format!("fake{i}"), IP_A, false, i).await.unwrap();
        }
        assert!(g.admit("admin", IP_A, true, 30).await.is_err());
        assert!(g.admit("admin", IP_B, true, 30).await.is_ok());
    }

    #[tokio::test]
    async fn failures_grow_the_delay() {
        let g = guard(100);
        let a = g.admit("u", IP_A, true, 0).await.unwrap();
        let (d1, _) = g.failed(&a, 0);
        let (d2, _) = g.failed(&a, 1);
        assert!(d2 > d1);
    }

    #[tokio::test]
    async fn many_addresses_slow_a_username_but_never_lock_it() {
        let g = guard(1000);
        for i in 0..40u8 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 1, i));
            fail(&g, "admin", ip, true, i64::from(i)).await.unwrap();
        }
        let a = g.admit("admin", IP_B, true, 100).await.unwrap();
        assert!(a.pause > Duration::ZERO);
    }

    /// SEC-09: a flood of made-up usernames cannot evict a real account's lock.
    #[tokio::test]
    async fn sec_09_flood_of_fake_users_keeps_real_lock_and_bounded_memory() {
        let g = guard(1000);
        for i in 0..5 {
            fail(&g, "alice", IP_A, true, i).await.unwrap();
        }
        for i in 0..50_000u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + 10 + (i % 60_000)));
            let _ = fail(&g, &format!("ghost-{i}"), ip, false, 10).await;
        }
        assert!(g.len() <= 3 * 1000 + 3, "memory must stay bounded: {}", g.len());
        assert!(
            g.admit("alice", IP_A, true, 20).await.is_err(),
            "the real lock survived"
        );
    }

    #[tokio::test]
    async fn state_round_trips_through_store_entries() {
        let g = guard(100);
        let mut ops = Vec::new();
        for i in 0..5 {
            ops = fail(&g, "admin", IP_A, true, i).await.unwrap();
        }
        let entries: Vec<(String, Failures)> = ops
            .into_iter()
            .filter_map(|op| match op {
                Op::Put { key, value, .. } => Some((key, serde_json::from_slice(&value).unwrap())),
                Op::Delete { .. } => None,
            })
            .collect();
        let restored = LoginGuard::new(ThrottlePolicy::default(), entries, 10);
        assert!(restored.admit("admin", IP_A, true, 10).await.is_err());
    }
}
