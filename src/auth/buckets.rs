//! Token buckets, kept as one number each: the generic cell rate algorithm (GCRA), which is a
//! token bucket written as the time at which the bucket will be full again (its "theoretical
//! arrival time", TAT). A bucket holding `burst` tokens refilled at `rate` admits a request at
//! `now` when `max(tat, now) + interval - now <= burst * interval`, and then moves its TAT on by
//! one interval. A bucket whose TAT has passed is full: it is the same as no bucket, so
//! forgetting it loses nothing.
//!
//! Written here rather than taken from `governor`: that crate reads time through its own clock
//! trait and keeps a quota fixed per limiter, while these buckets take the time from the state's
//! [`crate::clock::Clock`] as an argument (so tests stop it), change size when argocd-cm changes
//! (the limit is an argument too), are bounded in number (below), and are evaluated by the same
//! arithmetic in Redis for the limits shared between replicas (`shared_buckets`). The algorithm
//! is a few lines; the rest is the bound.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use crate::config::rate_limits::Limit;

/// A limit in the units of the algorithm: microseconds per token, and the bucket's depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub interval_us: u64,
    /// `burst * interval_us`: how far ahead of now a TAT may run.
    pub depth_us: u64,
}

impl Cell {
    pub fn of(limit: Limit) -> Self {
        // Rates are validated to (0, 1e6] per second: the interval is at least 1 µs.
        let interval_us = (1_000_000.0 / limit.per_second).ceil().max(1.0) as u64;
        Self {
            interval_us,
            depth_us: interval_us.saturating_mul(u64::from(limit.burst.max(1))),
        }
    }
}

/// The TAT after admitting one request at `now` to a bucket at `tat` (`None`: full), or how long
/// until one would be admitted.
pub fn admit(tat: Option<u64>, now: u64, cell: Cell) -> Result<u64, Duration> {
    let next = tat.unwrap_or(now).max(now).saturating_add(cell.interval_us);
    let ahead = next - now;
    if ahead <= cell.depth_us {
        Ok(next)
    } else {
        Err(Duration::from_micros(ahead - cell.depth_us))
    }
}

/// How many buckets one table holds. A caller beyond that (a flood from ever-new addresses)
/// shares the table's overflow bucket, so the callers already known keep their own and the
/// memory stays bounded.
pub const TABLE_CAPACITY: usize = 50_000;
/// A full table is swept of full buckets at most this often (a sweep visits every bucket).
const SWEEP_EVERY_US: u64 = 1_000_000;

/// The buckets of one class, by key.
pub struct Table<K> {
    tats: HashMap<K, u64, foldhash::fast::RandomState>,
    capacity: usize,
    /// Shared by the keys that found the table full.
    overflow: Option<u64>,
    swept_at: u64,
}

impl<K: Hash + Eq> Default for Table<K> {
    fn default() -> Self {
        Self::with_capacity(TABLE_CAPACITY)
    }
}

impl<K: Hash + Eq> Table<K> {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            tats: HashMap::default(),
            capacity,
            overflow: None,
            swept_at: 0,
        }
    }

    /// Admits one request of `key` at `now` (`owned` makes the key when it is new), or says
    /// how long to wait.
    pub fn admit<Q>(
        &mut self,
        key: &Q,
        owned: impl FnOnce() -> K,
        now: u64,
        cell: Cell,
    ) -> Result<(), Duration>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some(tat) = self.tats.get_mut(key) {
            *tat = admit(Some(*tat), now, cell)?;
            return Ok(());
        }
        if self.tats.len() >= self.capacity && now.saturating_sub(self.swept_at) >= SWEEP_EVERY_US {
            self.tats.retain(|_, tat| *tat > now);
            self.swept_at = now;
        }
        if self.tats.len() >= self.capacity {
            self.overflow = Some(admit(self.overflow, now, cell)?);
            return Ok(());
        }
        // A new key is a full bucket: admitted whatever the limit (a burst is at least one).
        let tat = admit(None, now, cell)?;
        self.tats.insert(owned(), tat);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.tats.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tats.is_empty()
    }

    /// Forgets the full buckets (they mean nothing).
    pub fn purge(&mut self, now: u64) {
        self.tats.retain(|_, tat| *tat > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    fn cell(per_second: f64, burst: u32) -> Cell {
        Cell::of(Limit { per_second, burst })
    }

    /// Requests admitted out of `n` sent at the clock's time.
    fn burst_of(table: &mut Table<String>, key: &str, clock: &Clock, cell: Cell, n: usize) -> usize {
        (0..n)
            .filter(|_| table.admit(key, || key.to_owned(), clock.now_us(), cell).is_ok())
            .count()
    }

    #[test]
    fn a_full_bucket_admits_its_burst_then_refills_at_the_rate() {
        let clock = Clock::paused();
        let mut table = Table::default();
        let c = cell(2.0, 5);
        assert_eq!(burst_of(&mut table, "a", &clock, c, 20), 5);
        // The next token is half a second away.
        let wait = table
            .admit("a", || "a".to_owned(), clock.now_us(), c)
            .unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        clock.advance(Duration::from_millis(499));
        assert!(table.admit("a", || "a".to_owned(), clock.now_us(), c).is_err());
        clock.advance(Duration::from_millis(1));
        assert_eq!(burst_of(&mut table, "a", &clock, c, 20), 1);
        // Two seconds refill four tokens; ten refill it to five, never more.
        clock.advance(Duration::from_secs(2));
        assert_eq!(burst_of(&mut table, "a", &clock, c, 20), 4);
        clock.advance(Duration::from_secs(10));
        assert_eq!(burst_of(&mut table, "a", &clock, c, 20), 5);
        // Another key has its own bucket.
        assert_eq!(burst_of(&mut table, "b", &clock, c, 20), 5);
    }

    #[test]
    fn a_changed_limit_applies_to_buckets_already_there() {
        let clock = Clock::paused();
        let mut table = Table::default();
        assert_eq!(burst_of(&mut table, "a", &clock, cell(1.0, 10), 4), 4);
        // Shrunk to 2: the 4 spent are more than it holds; the next is admitted once 3 are back.
        let small = cell(1.0, 2);
        let wait = table
            .admit("a", || "a".to_owned(), clock.now_us(), small)
            .unwrap_err();
        assert_eq!(wait, Duration::from_secs(3));
        // Grown to 100: room at once.
        assert_eq!(burst_of(&mut table, "a", &clock, cell(1.0, 100), 200), 96);
    }

    #[test]
    fn slow_rates_and_fast_rates() {
        let clock = Clock::paused();
        let mut table = Table::default();
        let slow = cell(0.2, 1);
        assert_eq!(burst_of(&mut table, "s", &clock, slow, 3), 1);
        let wait = table
            .admit("s", || "s".to_owned(), clock.now_us(), slow)
            .unwrap_err();
        assert_eq!(wait, Duration::from_secs(5));
        let fast = cell(1_000_000.0, 1_000_000);
        assert_eq!(burst_of(&mut table, "f", &clock, fast, 10_000), 10_000);
    }

    #[test]
    fn a_full_table_sweeps_then_shares_one_overflow_bucket() {
        let clock = Clock::paused();
        let mut table = Table::with_capacity(3);
        let c = cell(1.0, 2);
        for key in ["a", "b", "c"] {
            assert_eq!(burst_of(&mut table, key, &clock, c, 1), 1);
        }
        // Newcomers share one bucket of two; the known keys keep theirs.
        assert_eq!(burst_of(&mut table, "d", &clock, c, 5), 2);
        assert_eq!(burst_of(&mut table, "e", &clock, c, 5), 0);
        assert_eq!(burst_of(&mut table, "a", &clock, c, 5), 1);
        assert_eq!(table.len(), 3);
        // Once the known buckets are full again they are swept, and room is made.
        clock.advance(Duration::from_secs(3));
        assert_eq!(burst_of(&mut table, "e", &clock, c, 5), 2);
        assert_eq!(table.len(), 1);
        table.purge(clock.now_us() + 10_000_000);
        assert!(table.is_empty());
    }
}
