//! Rate limits per caller: a token bucket per authenticated subject and class (reads, writes),
//! and per client address for what callers without a session reach (logins, webhooks, badges,
//! the CLI download). The limits are argocd-cm's (`tiphys.ratelimit.*`), read at each check, so
//! an edit applies to the next request. Logins are counted in Redis when `--redis` is given
//! (every replica sees the same bucket: see `shared_buckets`); the rest in this process, where a
//! caller spread over replicas gets each replica's allowance, which is what each replica can
//! bear. Time comes from the state's clock ([`Clock`]), never from a global.

use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::buckets::{Cell, Table};
use super::shared_buckets::SharedBuckets;
use crate::clock::Clock;
use crate::config::ConfigWatch;
use crate::config::rate_limits::{Class, Limit};
use crate::error::AppError;

/// Who a request is counted as.
#[derive(Clone, Copy, Debug)]
pub enum Bucket<'a> {
    /// An authenticated caller's RBAC subject.
    Subject(&'a str),
    /// A client address (an IPv6 client by its /64, as the brute-force rules count it).
    Address(IpAddr),
}

#[derive(Default)]
struct Tables {
    subjects: Table<Box<str>>,
    addresses: Table<IpAddr>,
}

pub struct RateLimiter {
    config: Arc<ConfigWatch>,
    clock: Clock,
    tables: [Mutex<Tables>; 6],
    shared: Option<SharedBuckets>,
    refused: [AtomicU64; 6],
    /// When Redis was last reported unreachable (Unix µs): once a minute at most.
    warned_at: AtomicI64,
}

impl RateLimiter {
    pub fn new(config: Arc<ConfigWatch>, clock: Clock, shared: Option<SharedBuckets>) -> Self {
        Self {
            config,
            clock,
            tables: Default::default(),
            shared,
            refused: Default::default(),
            warned_at: AtomicI64::new(i64::MIN),
        }
    }

    /// Admits one request of `class` from `who`, or refuses it with how long to wait.
    pub async fn check(&self, class: Class, who: Bucket<'_>) -> Result<(), AppError> {
        let limits = self.config.peek().rate_limits;
        if !limits.enabled {
            return Ok(());
        }
        let limit = limits.limit(class);
        let cell = Cell::of(limit);
        let now = self.clock.now_us();
        let verdict = match (class, who, &self.shared) {
            (Class::Login, Bucket::Address(ip), Some(shared)) => {
                match shared.admit(class, scope(ip), now, cell).await {
                    Ok(verdict) => verdict,
                    Err(why) => {
                        self.warn_unshared(now, &why);
                        self.local(class, who, now, cell)
                    }
                }
            }
            _ => self.local(class, who, now, cell),
        };
        verdict.map_err(|wait| {
            self.refused[class.index()].fetch_add(1, Ordering::Relaxed);
            AppError::RateLimited(message(class, who, limit, wait), wait)
        })
    }

    fn local(&self, class: Class, who: Bucket<'_>, now: u64, cell: Cell) -> Result<(), Duration> {
        let mut tables = self.tables[class.index()]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match who {
            Bucket::Subject(subject) => tables.subjects.admit(subject, || subject.into(), now, cell),
            Bucket::Address(ip) => {
                let ip = scope(ip);
                tables.addresses.admit(&ip, || ip, now, cell)
            }
        }
    }

    fn warn_unshared(&self, now: u64, why: &str) {
        let now = i64::try_from(now).unwrap_or(i64::MAX);
        let last = self.warned_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 60_000_000
            && self
                .warned_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                "login rate limits are counted on this replica alone until Redis answers again: {why}"
            );
        }
    }

    /// Requests refused in `class` so far (for a metric).
    pub fn refused(&self, class: Class) -> u64 {
        self.refused[class.index()].load(Ordering::Relaxed)
    }

    /// Buckets held in this process (for a metric): full ones are forgotten by [`Self::purge`].
    pub fn held(&self) -> usize {
        self.tables
            .iter()
            .map(|t| {
                let t = t.lock().unwrap_or_else(PoisonError::into_inner);
                t.subjects.len() + t.addresses.len()
            })
            .sum()
    }

    /// Forgets the buckets that are full again: they mean nothing.
    pub fn purge(&self) {
        let now = self.clock.now_us();
        for table in &self.tables {
            let mut t = table.lock().unwrap_or_else(PoisonError::into_inner);
            t.subjects.purge(now);
            t.addresses.purge(now);
        }
    }
}

fn scope(ip: IpAddr) -> IpAddr {
    crate::principal::client_scope(ip)
}

/// What a refused caller reads: the limit it met, where it is set, and when to come back.
fn message(class: Class, who: Bucket<'_>, limit: Limit, wait: Duration) -> String {
    let per = match who {
        Bucket::Subject(_) => "caller",
        Bucket::Address(_) => "client address",
    };
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    format!(
        "too many requests: {} requests are limited to {} at once and {} a second per {per} \
         (tiphys.ratelimit.{}.burst and .rate in argocd-cm); retry in {} s",
        class.as_str(),
        limit.burst,
        limit.per_second,
        class.as_str(),
        secs.max(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ARGOCD_CM, ARGOCD_RBAC_CM, ARGOCD_SECRET, RawObject, Settings};

    fn watch(cm: &[(&str, &str)]) -> Arc<ConfigWatch> {
        let mut obj = RawObject::empty(ARGOCD_CM);
        for (k, v) in cm {
            obj.data.insert((*k).to_owned(), (*v).to_owned());
        }
        let settings = Settings::from_raw(
            &obj,
            &RawObject::empty(ARGOCD_RBAC_CM),
            &RawObject::empty(ARGOCD_SECRET),
        )
        .unwrap();
        let watch = ConfigWatch::new(None).unwrap();
        watch.publish(Arc::new(settings));
        watch
    }

    #[tokio::test]
    async fn subjects_and_addresses_have_buckets_of_their_own() {
        let config = watch(&[
            ("tiphys.ratelimit.read.rate", "1"),
            ("tiphys.ratelimit.read.burst", "2"),
            ("tiphys.ratelimit.login.rate", "0.5"),
            ("tiphys.ratelimit.login.burst", "1"),
        ]);
        let clock = Clock::paused();
        let limiter = RateLimiter::new(config, clock.clone(), None);
        let alice = Bucket::Subject("alice");
        for _ in 0..2 {
            limiter.check(Class::Read, alice).await.unwrap();
        }
        let err = limiter.check(Class::Read, alice).await.unwrap_err();
        let AppError::RateLimited(why, wait) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(*wait, Duration::from_secs(1));
        assert!(
            why.contains("read requests are limited to 2 at once and 1 a second per caller"),
            "{why}"
        );
        assert!(why.contains("retry in 1 s"), "{why}");
        assert_eq!(err.codes().1, http::StatusCode::TOO_MANY_REQUESTS);
        // Bob, alice's writes, and alice's logins are counted apart.
        limiter.check(Class::Read, Bucket::Subject("bob")).await.unwrap();
        limiter.check(Class::Write, alice).await.unwrap();
        let here: IpAddr = "2001:db8::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8::2:3".parse().unwrap();
        limiter.check(Class::Login, Bucket::Address(here)).await.unwrap();
        let err = limiter
            .check(Class::Login, Bucket::Address(same_64))
            .await
            .unwrap_err();
        assert!(
            matches!(err, AppError::RateLimited(_, w) if w == Duration::from_secs(2)),
            "{err:?}"
        );
        assert_eq!(
            (limiter.refused(Class::Read), limiter.refused(Class::Login)),
            (1, 1)
        );
        clock.advance(Duration::from_secs(2));
        limiter
            .check(Class::Login, Bucket::Address(same_64))
            .await
            .unwrap();
        limiter.check(Class::Read, alice).await.unwrap();
        assert_eq!(limiter.held(), 4);
        clock.advance(Duration::from_secs(60));
        limiter.purge();
        assert_eq!(limiter.held(), 0);
    }

    #[tokio::test]
    async fn limits_follow_the_configuration_and_can_be_turned_off() {
        let config = watch(&[("tiphys.ratelimit.badge.burst", "1")]);
        let limiter = RateLimiter::new(Arc::clone(&config), Clock::paused(), None);
        let client = Bucket::Address("127.0.0.1".parse().unwrap());
        limiter.check(Class::Badge, client).await.unwrap();
        limiter.check(Class::Badge, client).await.unwrap_err();
        let off = watch(&[("tiphys.ratelimit.enabled", "false")]).current();
        config.publish(off);
        for _ in 0..100 {
            limiter.check(Class::Badge, client).await.unwrap();
        }
    }
}
