//! The application catalog: indexes over the registry's applications that answer pages,
//! filters, sorts and facet counts (a tiphys extension of `List`, see the README's "Pages,
//! filters and facets") without walking the whole list.
//!
//! The catalog follows the registry as a reflector does: it lists the applications once, then
//! applies each change event. A background task drains the events every
//! [`DRAIN_EVERY`], and every query drains what is waiting first; a registry write publishes
//! its events before it returns, so a query sees every write acknowledged before it began (read
//! your writes, as a plain list does). Should the events outrun the catalog, it lists again.
//!
//! - [`field`]: the fields filtered and counted by, and an application's values for each;
//! - [`index`]: the slots, postings, trigrams and sort orders;
//! - [`cursor`]: the sealed `continue` token;
//! - [`visibility`]: remembered RBAC decisions for facet counts.

pub mod cursor;
pub mod field;
pub mod index;
pub mod visibility;

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

pub use self::field::Field;
pub use self::index::{Entry, Index, PageQuery, Position, Sort};
use crate::registry::{DocRef, EventType, Kind, Registry, Subscription, WatchError};

/// How often waiting change events are applied when no query asks.
pub const DRAIN_EVERY: Duration = Duration::from_millis(100);

/// What an application's RBAC object is (the service layer's rule, given to the catalog).
pub type ObjectOf = Box<dyn Fn(&DocRef) -> String + Send + Sync>;

pub struct Catalog {
    registry: Arc<Registry>,
    object_of: ObjectOf,
    inner: Mutex<Inner>,
    pub visibility: visibility::Visibility,
}

struct Inner {
    sub: Subscription,
    index: Index,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").finish_non_exhaustive()
    }
}

impl Catalog {
    /// The catalog of `registry`'s applications, kept current by a task of the runtime it is
    /// made in (which ends with the catalog).
    pub fn open(registry: Arc<Registry>, object_of: ObjectOf) -> Result<Arc<Self>, WatchError> {
        let inner = Inner::listed(&registry, &object_of)?;
        let catalog = Arc::new(Self {
            registry,
            object_of,
            inner: Mutex::new(inner),
            visibility: visibility::Visibility::default(),
        });
        let weak: Weak<Self> = Arc::downgrade(&catalog);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(DRAIN_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                match weak.upgrade() {
                    Some(catalog) => drop(catalog.current()),
                    None => break,
                }
            }
        });
        Ok(catalog)
    }

    /// The index with every waiting change applied, and the revision it is current at.
    pub fn current(&self) -> Current<'_> {
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut relist = false;
        while let Some(event) = inner.sub.try_next() {
            match event {
                Ok(event) => {
                    let doc = &event.doc;
                    match event.kind {
                        EventType::Deleted => inner.index.remove(&doc.key.namespace, &doc.key.name),
                        EventType::Added | EventType::Modified => {
                            let object = (self.object_of)(doc);
                            inner.index.put(Arc::clone(doc), object);
                        }
                    }
                }
                Err(_) => {
                    relist = true;
                    break;
                }
            }
        }
        if relist {
            match Inner::listed(&self.registry, &self.object_of) {
                Ok(fresh) => *inner = fresh,
                Err(err) => tracing::warn!("the application catalog cannot list again: {err}"),
            }
        }
        Current { inner }
    }
}

/// The catalog's index, held while a query reads it.
pub struct Current<'a> {
    inner: MutexGuard<'a, Inner>,
}

impl Current<'_> {
    pub fn index(&self) -> &Index {
        &self.inner.index
    }

    /// The registry revision the index is current at.
    pub fn revision(&self) -> u64 {
        self.inner.sub.last()
    }
}

impl Inner {
    fn listed(registry: &Registry, object_of: &ObjectOf) -> Result<Self, WatchError> {
        let (docs, sub) = registry.list_and_watch(Kind::Application)?;
        let mut index = Index::default();
        for doc in docs {
            let object = object_of(&doc);
            index.put(doc, object);
        }
        Ok(Self { sub, index })
    }
}
