//! What the API server said of recently presented ServiceAccount tokens, so that each request
//! does not cost a TokenReview. Keyed by a hash of the token and the audiences it was reviewed
//! for (the token itself is never kept); bounded in entries, each trusted until its own deadline
//! (the caller picks it: at most the configured duration and never past the token's `exp`).
//! Time is passed in, so tests move it.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// Entries kept at most: a flood of ever-new tokens evicts the soonest to expire, never grows it.
pub const CAPACITY: usize = 4096;

pub type Key = [u8; 32];

/// The key of `token` reviewed for `audiences`.
pub fn key(token: &str, audiences: &[String]) -> Key {
    let mut hash = Sha256::new();
    for audience in audiences {
        hash.update((audience.len() as u64).to_le_bytes());
        hash.update(audience.as_bytes());
    }
    hash.update([0xff]);
    hash.update(token.as_bytes());
    hash.finalize().into()
}

#[derive(Debug)]
pub struct ReviewCache<T> {
    capacity: usize,
    entries: HashMap<Key, (i64, T)>,
}

impl<T: Clone> ReviewCache<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: HashMap::new(),
        }
    }

    /// The answer kept for `key`, if its deadline (ms) is still ahead of `now_ms`.
    pub fn get(&mut self, key: &Key, now_ms: i64) -> Option<T> {
        match self.entries.get(key) {
            Some((until, value)) if *until > now_ms => Some(value.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` until `until_ms` (nothing when that is not ahead of `now_ms`).
    pub fn put(&mut self, key: Key, value: T, until_ms: i64, now_ms: i64) {
        if until_ms <= now_ms {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (until, _)| *until > now_ms);
            if self.entries.len() >= self.capacity {
                // Still full of live entries: the one to expire first goes.
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (until, _))| *until)
                    .map(|(k, _)| *k);
                if let Some(soonest) = soonest {
                    self.entries.remove(&soonest);
                }
            }
        }
        self.entries.insert(key, (until_ms, value));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_at_their_deadline() {
        let mut cache = ReviewCache::new(8);
        let k = key("t", &["tiphys".into()]);
        cache.put(k, 1, 1_000, 0);
        assert_eq!(cache.get(&k, 999), Some(1));
        assert_eq!(cache.get(&k, 1_000), None);
        assert!(cache.is_empty());
        // A deadline already past keeps nothing.
        cache.put(k, 2, 5, 5);
        assert_eq!(cache.get(&k, 0), None);
    }

    #[test]
    fn the_key_depends_on_token_and_audiences() {
        let a = key("t", &["x".into()]);
        assert_ne!(a, key("t", &["y".into()]));
        assert_ne!(a, key("u", &["x".into()]));
        assert_ne!(key("t", &["ab".into()]), key("t", &["a".into(), "b".into()]));
    }

    #[test]
    fn size_is_bounded_evicting_the_expired_then_the_soonest() {
        let mut cache = ReviewCache::new(3);
        let keys: Vec<Key> = (0..5).map(|i| key(&format!("t{i}"), &[])).collect();
        cache.put(keys[0], 0, 100, 0);
        cache.put(keys[1], 1, 50, 0);
        cache.put(keys[2], 2, 200, 0);
        cache.put(keys[3], 3, 300, 10);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&keys[1], 10), None, "the soonest to expire went");
        assert_eq!(cache.get(&keys[0], 10), Some(0));
        // Once some have expired, they go first.
        cache.put(keys[4], 4, 400, 150);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&keys[0], 0), None, "the expired one went");
        assert_eq!(cache.get(&keys[2], 150), Some(2));
        for i in 0..1000 {
            cache.put(key(&format!("flood{i}"), &[]), 9, 10_000 + i, 150);
        }
        assert_eq!(cache.len(), 3);
    }
}
