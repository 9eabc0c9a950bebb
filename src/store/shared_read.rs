//! Store reads shared by the checks that overlap, without ever answering from a read that
//! started before the check did (token checks; the registry's fence reads). On etcd every token check reads the account's record and the
//! token's revocation (one quorum read), so that a logout on another replica is in force at the
//! next request. One event sent to 1,000 watches of one user makes 1,000 checks at once; here
//! they cost two reads: the one running when they arrive cannot serve them (it may have started
//! before a logout they must see), so they wait for it to end and share the next.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Notify, watch};

/// Reads by key; see the module's doc.
pub struct SharedReads<V> {
    slots: Mutex<HashMap<String, Slot<V>>>,
}

struct Slot<V> {
    /// A read of this key is running.
    busy: bool,
    /// The callers waiting for the next read, which they all called before.
    next: Option<watch::Sender<Option<V>>>,
    /// Told when the running read ends, so that a waiter starts the next.
    ended: Arc<Notify>,
}

impl<V> Default for SharedReads<V> {
    fn default() -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

enum Step<V> {
    /// Read now, and hand the value to the callers waiting for the next read, if any.
    Lead(Option<watch::Sender<Option<V>>>),
    Wait(watch::Receiver<Option<V>>, Arc<Notify>),
}

impl<V: Clone> SharedReads<V> {
    /// The value of `read()` for `key`, from a read that started after this call.
    pub async fn get<F, Fut>(&self, key: &str, read: F) -> V
    where
        F: Fn() -> Fut,
        Fut: Future<Output = V>,
    {
        let mut step = self.join(key);
        loop {
            match step {
                Step::Lead(riders) => {
                    let _busy = Busy { reads: self, key };
                    let value = read().await;
                    if let Some(riders) = riders {
                        // Receivers may have gone away; the others still get it.
                        let _ = riders.send(Some(value.clone()));
                    }
                    return value;
                }
                Step::Wait(mut value, ended) => {
                    let notified = ended.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    // A value may have come before `enable`.
                    if let Some(v) = value.borrow().clone() {
                        return v;
                    }
                    let woke = tokio::select! {
                        got = value.wait_for(Option::is_some) => Some(got.ok().and_then(|v| (*v).clone())),
                        () = &mut notified => None,
                    };
                    step = match woke {
                        Some(Some(v)) => return v,
                        // Whoever led this batch went away: start over.
                        Some(None) => self.join(key),
                        // The read that was running has ended: lead this batch, unless another
                        // waiter of it got there first (then wait on).
                        None => self.take_lead(key, value),
                    };
                }
            }
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot<V>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leads a read if none is running, else waits for the next one.
    fn join(&self, key: &str) -> Step<V> {
        let mut slots = self.slots();
        let slot = slots.entry(key.to_owned()).or_insert_with(|| Slot {
            busy: false,
            next: None,
            ended: Arc::new(Notify::new()),
        });
        if slot.busy {
            let next = slot.next.get_or_insert_with(|| watch::Sender::new(None));
            Step::Wait(next.subscribe(), Arc::clone(&slot.ended))
        } else {
            slot.busy = true;
            Step::Lead(slot.next.take())
        }
    }

    /// After the running read ended: leads the batch `value` belongs to if it is still waiting
    /// and no read runs; otherwise keeps waiting.
    fn take_lead(&self, key: &str, value: watch::Receiver<Option<V>>) -> Step<V> {
        let mut slots = self.slots();
        let Some(slot) = slots.get_mut(key) else {
            drop(slots);
            return self.join(key);
        };
        let ours = slot
            .next
            .as_ref()
            .is_some_and(|next| value.same_channel(&next.subscribe()));
        if !slot.busy && ours {
            slot.busy = true;
            return Step::Lead(slot.next.take());
        }
        Step::Wait(value, Arc::clone(&slot.ended))
    }
}

/// Marks a key's read as ended when dropped (also when the leader goes away mid-read).
struct Busy<'a, V> {
    reads: &'a SharedReads<V>,
    key: &'a str,
}

impl<V> Drop for Busy<'_, V> {
    fn drop(&mut self) {
        let mut slots = self.reads.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get_mut(self.key) {
            slot.busy = false;
            slot.ended.notify_waiters();
            if slot.next.is_none() {
                slots.remove(self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A store whose state advances on its own: a read returns the version it started at.
    struct Source {
        version: AtomicU64,
        reads: AtomicUsize,
    }

    impl Source {
        async fn read(&self) -> u64 {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let at = self.version.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            at
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_callers_shares_two_reads_and_none_sees_an_older_state() {
        let reads = Arc::new(SharedReads::<u64>::default());
        let source = Arc::new(Source {
            version: AtomicU64::new(0),
            reads: AtomicUsize::new(0),
        });
        let callers: Vec<_> = (0..500)
            .map(|_| {
                let (reads, source) = (Arc::clone(&reads), Arc::clone(&source));
                tokio::spawn(async move {
                    // Every caller is a write that must be seen: the state advances, then reads.
                    let called_at = source.version.fetch_add(1, Ordering::SeqCst) + 1;
                    let seen = reads.get("k", || source.read()).await;
                    assert!(seen >= called_at, "read from {seen} for a call at {called_at}");
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        let made = source.reads.load(Ordering::SeqCst);
        assert!(made <= 20, "{made} reads for 500 callers");
        assert!(reads.slots().is_empty(), "nothing kept once every read ended");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_get_their_value_when_the_leader_goes_away() {
        let reads = Arc::new(SharedReads::<u64>::default());
        let source = Arc::new(Source {
            version: AtomicU64::new(7),
            reads: AtomicUsize::new(0),
        });
        let leader = {
            let (reads, source) = (Arc::clone(&reads), Arc::clone(&source));
            tokio::spawn(async move { reads.get("k", || source.read()).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let (reads, source) = (Arc::clone(&reads), Arc::clone(&source));
                tokio::spawn(async move { reads.get("k", || source.read()).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        leader.abort();
        for waiter in waiters {
            let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
            assert_eq!(got.expect("answered").unwrap(), 7);
        }
        assert!(reads.slots().is_empty());
    }
}
