//! How many streams (watches) one caller may hold open at once. A watch costs the server a
//! subscription, a timer and a stream's buffers for as long as it lasts, so without a bound one
//! caller (or one leaked token) could open them until memory runs out. Counted per RBAC subject:
//! one person's browser tabs and CLI sessions share one allowance.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::AppError;

/// The default allowance: a person with a dozen dashboard tabs and a few `app wait`s stays far
/// below it; a client that opens watches in a loop meets it long before memory is a concern.
pub const DEFAULT_PER_CALLER: u32 = 100;

pub struct StreamSlots {
    per_caller: usize,
    open: Mutex<HashMap<String, usize>>,
}

impl StreamSlots {
    pub fn new(per_caller: usize) -> Arc<Self> {
        Arc::new(Self {
            per_caller,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more stream of `subject`, held until the slot is dropped.
    pub fn take(self: &Arc<Self>, subject: &str) -> Result<StreamSlot, AppError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(subject.to_owned()).or_insert(0);
        if *count >= self.per_caller {
            let who = if subject.is_empty() {
                "anonymous callers"
            } else {
                subject
            };
            return Err(AppError::Exhausted(format!(
                "too many watches open for {who}: {} at once (--max-watches-per-caller); close one and retry",
                self.per_caller
            )));
        }
        *count += 1;
        Ok(StreamSlot {
            slots: Arc::clone(self),
            subject: subject.to_owned(),
        })
    }

    /// Streams open for `subject` now.
    pub fn open(&self, subject: &str) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(subject).copied().unwrap_or(0)
    }
}

pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    subject: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.subject) {
            *count -= 1;
            // No entry per caller who once watched: the map holds only open streams.
            if *count == 0 {
                open.remove(&self.subject);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_gets_its_allowance_and_a_closed_stream_gives_its_slot_back() {
        let slots = StreamSlots::new(2);
        let a = slots.take("alice").unwrap();
        let _b = slots.take("alice").unwrap();
        let refused = slots.take("alice").err().unwrap();
        assert!(matches!(refused, AppError::Exhausted(_)), "{refused:?}");
        assert!(
            refused
                .to_string()
                .contains("too many watches open for alice: 2 at once"),
            "{refused}"
        );
        // Someone else is not affected.
        let _c = slots.take("bob").unwrap();
        drop(a);
        assert_eq!(slots.open("alice"), 1);
        let _d = slots.take("alice").unwrap();
        assert_eq!(slots.open("alice"), 2);
    }

    #[test]
    fn the_count_goes_away_with_the_last_stream() {
        let slots = StreamSlots::new(1);
        drop(slots.take("alice").unwrap());
        assert_eq!(slots.open("alice"), 0);
        assert!(slots.open.lock().unwrap().is_empty());
    }
}
