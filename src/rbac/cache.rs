//! Decisions already made by one policy version. Listing thousands of objects
//! asks the same few questions over and over; the answer is a hash lookup.
//!
//! The cache belongs to one [`super::Policy`], so a policy reload starts empty;
//! entries also carry the project generation they were made under, so a
//! project change is never answered from an older decision. Memory is bounded:
//! a full shard is simply emptied (cheap, and rare in steady state).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

const SHARDS: usize = 16;
const SHARD_CAPACITY: usize = 4096;

/// Decisions by key: the project generation they were made under, and the answer.
type Shard = Mutex<HashMap<Vec<u8>, (u64, bool), foldhash::fast::RandomState>>;

pub struct DecisionCache {
    hasher: foldhash::fast::RandomState,
    shards: [Shard; SHARDS],
}

impl Default for DecisionCache {
    fn default() -> Self {
        Self {
            hasher: foldhash::fast::RandomState::default(),
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

impl DecisionCache {
    /// An unambiguous key: every part length-prefixed, groups kept apart
    /// from a plain subject (the two are decided differently).
    pub fn key(user: &str, groups: Option<&[&str]>, resource: &str, action: &str, object: &str) -> Vec<u8> {
        let group_bytes: usize = groups.unwrap_or_default().iter().map(|g| g.len() + 4).sum();
        let mut key =
            Vec::with_capacity(user.len() + resource.len() + action.len() + object.len() + group_bytes + 18);
        /// Each part prefixed by its length, so no two requests share a key.
        fn push(key: &mut Vec<u8>, part: &str) {
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            key.extend_from_slice(&len.to_le_bytes());
            key.extend_from_slice(part.as_bytes());
        }
        for part in [resource, action, object, user] {
            push(&mut key, part);
        }
        match groups {
            None => key.push(b'P'),
            Some(groups) => {
                key.push(b'C');
                for group in groups {
                    push(&mut key, group);
                }
            }
        }
        key
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        let index = usize::try_from(self.hasher.hash_one(key) % SHARDS as u64).unwrap_or_default();
        &self.shards[index]
    }

    pub fn get(&self, key: &[u8], generation: u64) -> Option<bool> {
        let shard = self.shard(key).lock().unwrap_or_else(PoisonError::into_inner);
        match shard.get(key) {
            Some(&(made_under, allowed)) if made_under == generation => Some(allowed),
            _ => None,
        }
    }

    pub fn put(&self, key: Vec<u8>, generation: u64, allowed: bool) {
        let mut shard = self.shard(&key).lock().unwrap_or_else(PoisonError::into_inner);
        if shard.len() >= SHARD_CAPACITY && !shard.contains_key(&key) {
            shard.clear();
        }
        shard.insert(key, (generation, allowed));
    }
}

#[cfg(test)]
mod tests {
    use super::DecisionCache;

    #[test]
    fn keys_cannot_collide_by_joining() {
        let a = DecisionCache::key("a$$b", None, "c", "d", "e");
        let b = DecisionCache::key("a", None, "b$$c", "d", "e");
        assert_ne!(a, b);
        assert_ne!(
            DecisionCache::key("x", None, "r", "a", "o"),
            DecisionCache::key("x", Some(&[]), "r", "a", "o")
        );
        assert_ne!(
            DecisionCache::key("x", Some(&["ab"]), "r", "a", "o"),
            DecisionCache::key("x", Some(&["a", "b"]), "r", "a", "o")
        );
    }

    #[test]
    fn generation_mismatch_is_a_miss_and_size_is_bounded() {
        let cache = DecisionCache::default();
        cache.put(b"k".to_vec(), 1, true);
        assert_eq!(cache.get(b"k", 1), Some(true));
        assert_eq!(cache.get(b"k", 2), None);
        for i in 0..(super::SHARDS * super::SHARD_CAPACITY * 2) {
            cache.put(i.to_string().into_bytes(), 0, false);
        }
        let total: usize = cache.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= super::SHARDS * super::SHARD_CAPACITY);
    }
}
