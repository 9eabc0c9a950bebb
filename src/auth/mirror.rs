//! The records of one kind as this process last wrote them, for a store it is the only writer
//! of (redb, see `store::Backend::is_exclusive`): a token check then answers from memory, with
//! no store read. Nothing else changes: writes are the same conditional writes against the
//! store, and each one that succeeds is noted here after its commit. On a shared store (etcd)
//! [`Mirror::get`] answers nothing and every check reads the store, where other replicas'
//! writes are; what the checks read is noted too, and [`Mirror::last_known`] answers from it
//! only while the store cannot be reached.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::store::Revision;

pub struct Mirror<T> {
    /// `None`: off (nothing is kept).
    held: Option<RwLock<Held<T>>>,
    /// This process is the store's only writer: what is held is what the store has.
    exclusive: bool,
}

/// By id, each record with the revision of the commit that wrote it.
type Held<T> = HashMap<String, (Revision, Arc<T>)>;

impl<T> Mirror<T> {
    /// A mirror holding `records` (`(id, mod revision, record)`, all the store has of this kind,
    /// read before this process writes any); `exclusive`: this process is the store's only
    /// writer.
    pub fn load(exclusive: bool, records: impl IntoIterator<Item = (String, Revision, T)>) -> Self {
        let records = records
            .into_iter()
            .map(|(id, rev, record)| (id, (rev, Arc::new(record))))
            .collect();
        Self {
            held: Some(RwLock::new(records)),
            exclusive,
        }
    }

    /// Off: every read goes to the store, and nothing is kept for an outage.
    pub fn off() -> Self {
        Self {
            held: None,
            exclusive: false,
        }
    }

    /// Record `id`: `Some(None)` when there is none, `None` when the store must be read (it is
    /// shared, or the mirror is off).
    pub fn get(&self, id: &str) -> Option<Option<Arc<T>>> {
        if !self.exclusive {
            return None;
        }
        Some(self.last_known(id))
    }

    /// Record `id` as this process last wrote or read it; for a shared store that cannot be
    /// reached.
    pub fn last_known(&self, id: &str) -> Option<Arc<T>> {
        let held = self.held.as_ref()?.read().unwrap_or_else(PoisonError::into_inner);
        held.get(id).map(|(_, record)| Arc::clone(record))
    }

    /// Forgets the records `keep` refuses (what has expired).
    pub fn retain(&self, keep: impl Fn(&T) -> bool) {
        let Some(held) = &self.held else { return };
        let mut held = held.write().unwrap_or_else(PoisonError::into_inner);
        held.retain(|_, (_, record)| keep(record));
    }

    /// After a successful commit at `revision`: record `id` is now `written` (`None`: deleted);
    /// also after a read of a shared store, with the record's mod revision.
    /// Of two writes noted in another order than they were committed, the later commit stays.
    /// A delete noted before an older write's note would let that write back in: no kind here
    /// deletes a record whose write may still be in flight (a session ends through its token,
    /// handed out once its write is noted; what is purged had expired, and its token with it).
    pub fn note_written(&self, id: &str, revision: Revision, written: Option<T>) {
        let Some(held) = &self.held else { return };
        let mut held = held.write().unwrap_or_else(PoisonError::into_inner);
        if held.get(id).is_some_and(|(rev, _)| *rev > revision) {
            return;
        }
        match written {
            Some(record) => {
                held.insert(id.to_owned(), (revision, Arc::new(record)));
            }
            None => {
                held.remove(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_later_commit_stays_whatever_the_order_of_notes() {
        let m = Mirror::load(true, [("a".to_owned(), 1, 1)]);
        m.note_written("a", 3, Some(3));
        m.note_written("a", 2, Some(2));
        assert_eq!(m.get("a").flatten().as_deref(), Some(&3));
        m.note_written("a", 2, None);
        assert_eq!(m.get("a").flatten().as_deref(), Some(&3));
        m.note_written("a", 4, None);
        assert_eq!(m.get("a"), Some(None));
    }

    #[test]
    fn on_a_shared_store_only_the_last_known_record_is_answered() {
        let m = Mirror::load(false, [("a".to_owned(), 1, 1)]);
        m.note_written("b", 2, Some(2));
        assert_eq!(m.get("a"), None);
        assert_eq!(m.last_known("b").as_deref(), Some(&2));
        let off = Mirror::<i32>::off();
        off.note_written("b", 2, Some(2));
        assert_eq!((off.get("b"), off.last_known("b")), (None, None));
    }
}
