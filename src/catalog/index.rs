//! The indexes over the applications: each application in a numbered slot, the slots of each
//! field value (postings), the slots whose lower-case name holds each three-letter sequence
//! (trigrams, for the search text), and one ordered set per sort.

use std::collections::{BTreeSet, HashMap};

use super::field::Field;
use crate::registry::DocRef;

/// An order applications are listed in; within equal values, by name, then namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    Name,
    /// `metadata.creationTimestamp`, oldest first.
    Created,
    /// Out of sync first, then unknown, then synced.
    Sync,
    /// The least healthy first: degraded, missing, unknown, progressing, suspended, healthy.
    Health,
}

impl Sort {
    pub const ALL: [Sort; 4] = [Sort::Name, Sort::Created, Sort::Sync, Sort::Health];

    pub fn name(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Created => "created",
            Sort::Sync => "sync",
            Sort::Health => "health",
        }
    }

    pub fn parse(name: &str) -> Option<Sort> {
        Sort::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The value this sort orders `doc` by first.
    fn primary(self, doc: &DocRef) -> String {
        let s = &doc.summary;
        match self {
            Sort::Name => String::new(),
            Sort::Created => s.created.clone(),
            Sort::Sync => rank(&["OutOfSync", "", "Unknown", "Synced"], &s.sync_status),
            Sort::Health => rank(
                &[
                    "Degraded",
                    "Missing",
                    "",
                    "Unknown",
                    "Progressing",
                    "Suspended",
                    "Healthy",
                ],
                &s.health_status,
            ),
        }
    }
}

/// `value` prefixed by its place in `order` (statuses outside it last), so that the text sorts
/// in that order.
fn rank(order: &[&str], value: &str) -> String {
    let at = order.iter().position(|o| *o == value).unwrap_or(order.len());
    format!("{at:02}{value}")
}

/// Where a page stops in one sort: the sort value, the name and the namespace of its last item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Position {
    pub primary: String,
    pub name: String,
    pub namespace: String,
}

/// One application in the indexes.
pub struct Entry {
    pub doc: DocRef,
    /// Changes whenever the slot holds another application or the application's RBAC object
    /// changes: what decisions about it are remembered by ([`super::visibility`]).
    pub uid: u64,
    /// Its RBAC object (`<project>/<name>` or `<project>/<namespace>/<name>`).
    pub rbac: String,
}

type Slot = u32;
/// An entry's place in one sort: its sort value, name and namespace, and its slot.
type SortKey = (String, String, String, Slot);
/// Candidates up to this many are sorted; more are found by walking the sort order (sorting
/// 5,000 took 14 ms at 100,000 applications, the walk under 1 ms: BENCHMARKS.md).
const SORTED_AT_MOST: usize = 1024;
type Sorted = BTreeSet<SortKey>;

pub struct Index {
    slots: Vec<Option<Entry>>,
    free: Vec<Slot>,
    by_key: HashMap<(String, String), Slot>,
    postings: HashMap<(Field, String), Vec<Slot>>,
    trigrams: HashMap<[u8; 3], Vec<Slot>>,
    sorted: [Sorted; Sort::ALL.len()],
    next_uid: u64,
    len: usize,
    /// [`SORTED_AT_MOST`] (smaller in tests, to take both ways).
    sorted_at_most: usize,
}

impl Default for Index {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::new(),
            postings: HashMap::new(),
            trigrams: HashMap::new(),
            sorted: Default::default(),
            next_uid: 0,
            len: 0,
            sorted_at_most: SORTED_AT_MOST,
        }
    }
}

impl Index {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.slots.iter().flatten()
    }

    /// Puts `doc` in (replacing the state of the same application), `rbac` being its RBAC object.
    pub fn put(&mut self, doc: DocRef, rbac: String) {
        let key = (doc.key.namespace.clone(), doc.key.name.clone());
        if let Some(&slot) = self.by_key.get(&key)
            && let Some(old) = self.slots[slot as usize].take()
        {
            let uid = if old.rbac == rbac { old.uid } else { self.uid() };
            // A controller reports status often: only the indexes whose values moved change
            // (the name, and so the trigrams, never does).
            for field in Field::ALL {
                let (was, is) = (field.values(&old.doc.summary), field.values(&doc.summary));
                if was != is {
                    self.unpost(slot, field, was);
                    self.post(slot, field, is);
                }
            }
            for sort in Sort::ALL {
                let (was, is) = (sort_key(sort, &old.doc, slot), sort_key(sort, &doc, slot));
                if was != is {
                    self.sorted[sort as usize].remove(&was);
                    self.sorted[sort as usize].insert(is);
                }
            }
            self.slots[slot as usize] = Some(Entry { doc, uid, rbac });
            return;
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            Slot::try_from(self.slots.len() - 1).unwrap_or(Slot::MAX)
        });
        self.by_key.insert(key, slot);
        self.len += 1;
        for field in Field::ALL {
            self.post(slot, field, field.values(&doc.summary));
        }
        for tri in trigrams(&doc.key.name) {
            insert(self.trigrams.entry(tri).or_default(), slot);
        }
        for sort in Sort::ALL {
            self.sorted[sort as usize].insert(sort_key(sort, &doc, slot));
        }
        let uid = self.uid();
        self.slots[slot as usize] = Some(Entry { doc, uid, rbac });
    }

    /// Takes application `name` in `namespace` out.
    pub fn remove(&mut self, namespace: &str, name: &str) {
        let Some(slot) = self.by_key.remove(&(namespace.to_owned(), name.to_owned())) else {
            return;
        };
        let Some(entry) = self.slots[slot as usize].take() else {
            return;
        };
        let doc = &entry.doc;
        for field in Field::ALL {
            self.unpost(slot, field, field.values(&doc.summary));
        }
        for tri in trigrams(&doc.key.name) {
            if let Some(list) = self.trigrams.get_mut(&tri) {
                delete(list, slot);
                if list.is_empty() {
                    self.trigrams.remove(&tri);
                }
            }
        }
        for sort in Sort::ALL {
            self.sorted[sort as usize].remove(&sort_key(sort, doc, slot));
        }
        self.free.push(slot);
        self.len -= 1;
    }

    fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    fn post(&mut self, slot: Slot, field: Field, values: Vec<String>) {
        for value in values {
            insert(self.postings.entry((field, value)).or_default(), slot);
        }
    }

    fn unpost(&mut self, slot: Slot, field: Field, values: Vec<String>) {
        for value in values {
            let key = (field, value);
            if let Some(list) = self.postings.get_mut(&key) {
                delete(list, slot);
                if list.is_empty() {
                    self.postings.remove(&key);
                }
            }
        }
    }

    /// The slots holding one of `values` of `field`, or `None` when that would be more than
    /// `at_most`.
    fn field_slots(&self, field: Field, values: &[String], at_most: usize) -> Option<Vec<Slot>> {
        let lists: Vec<&Vec<Slot>> = values
            .iter()
            .filter_map(|v| self.postings.get(&(field, v.clone())))
            .collect();
        if lists.iter().map(|l| l.len()).sum::<usize>() > at_most {
            return None;
        }
        let mut slots: Vec<Slot> = lists.into_iter().flatten().copied().collect();
        slots.sort_unstable();
        slots.dedup();
        Some(slots)
    }

    /// The slots whose name may hold `text` (lower case, three letters or more): those holding
    /// its rarest trigram; `None` when that is more than `at_most`.
    fn search_slots(&self, text: &str, at_most: usize) -> Option<Vec<Slot>> {
        let mut rarest: Option<&[Slot]> = None;
        for tri in trigrams(text) {
            let list = self.trigrams.get(&tri).map_or(&[][..], Vec::as_slice);
            if rarest.is_none_or(|r| list.len() < r.len()) {
                rarest = Some(list);
            }
        }
        rarest.filter(|r| r.len() <= at_most).map(<[Slot]>::to_vec)
    }

    /// Up to `limit` entries that `accept` takes, in `sort` order (reversed when `descending`)
    /// after `after`, and whether more follow. `fields` and `search` are what `accept`
    /// requires (every field one of its values; the name holding the lower-case text): they pick
    /// the entries to look at when they are few, so that a narrow filter never walks the list.
    pub fn page(&self, query: &PageQuery<'_>, mut accept: impl FnMut(&Entry) -> bool) -> (Vec<&Entry>, bool) {
        // A candidate set pays off when it is well below the list: otherwise walking the sort
        // order finds a page after looking at about limit × (list / candidates) entries.
        let at_most = self.len / 8;
        let mut candidates: Option<Vec<Slot>> = None;
        let mut narrow = |found: Option<Vec<Slot>>| {
            if let Some(found) = found
                && candidates.as_ref().is_none_or(|c| found.len() < c.len())
            {
                candidates = Some(found);
            }
        };
        for (field, values) in query.fields {
            narrow(self.field_slots(*field, values, at_most));
        }
        if query.search.len() >= 3 {
            narrow(self.search_slots(query.search, at_most));
        }
        let want = query.limit.saturating_add(1);
        let sorted = &self.sorted[query.sort as usize];
        let past = |key: &SortKey| match query.after {
            None => true,
            Some(after) => {
                let at = (&key.0, &key.1, &key.2);
                let cut = (&after.primary, &after.name, &after.namespace);
                if query.descending { at < cut } else { at > cut }
            }
        };
        let mut found: Vec<&Entry> = match candidates {
            // Few: look at each, then sort them.
            Some(slots) if slots.len() <= self.sorted_at_most => {
                let mut keyed: Vec<(&SortKey, &Entry)> = Vec::new();
                for slot in slots {
                    let Some(entry) = self.slots[slot as usize].as_ref() else {
                        continue;
                    };
                    let key = sort_key(query.sort, &entry.doc, slot);
                    // The key as stored, so that the page borrows from the index.
                    let Some(stored) = sorted.get(&key) else { continue };
                    if past(stored) && accept(entry) {
                        keyed.push((stored, entry));
                    }
                }
                keyed.sort_unstable_by(|a, b| a.0.cmp(b.0));
                if query.descending {
                    keyed.reverse();
                }
                keyed.into_iter().take(want).map(|(_, e)| e).collect()
            }
            // More: walk the sort order, looking only at the candidates (a test of one bit for
            // the others), so that the cost is the walk's, not the sort's.
            Some(slots) => {
                let mut member = vec![false; self.slots.len()];
                for slot in slots {
                    member[slot as usize] = true;
                }
                self.walk(query, want, &past, |slot| member[slot as usize], &mut accept)
            }
            None => self.walk(query, want, &past, |_| true, &mut accept),
        };
        let more = found.len() > query.limit;
        found.truncate(query.limit);
        (found, more)
    }

    /// Up to `want` entries in `query`'s order after its cut, among the slots `candidate` takes,
    /// that `accept` takes.
    fn walk<'i>(
        &'i self,
        query: &PageQuery<'_>,
        want: usize,
        past: &dyn Fn(&SortKey) -> bool,
        candidate: impl Fn(Slot) -> bool,
        accept: &mut impl FnMut(&Entry) -> bool,
    ) -> Vec<&'i Entry> {
        let sorted = &self.sorted[query.sort as usize];
        let keys: Box<dyn Iterator<Item = &SortKey>> = match (query.after, query.descending) {
            (None, false) => Box::new(sorted.iter()),
            (None, true) => Box::new(sorted.iter().rev()),
            (Some(after), false) => Box::new(sorted.range(bound(after, Slot::MAX)..).filter(|k| past(k))),
            (Some(after), true) => Box::new(sorted.range(..bound(after, 0)).rev().filter(|k| past(k))),
        };
        let mut out = Vec::new();
        for key in keys {
            if out.len() == want {
                break;
            }
            if candidate(key.3)
                && let Some(entry) = self.slots[key.3 as usize].as_ref()
                && accept(entry)
            {
                out.push(entry);
            }
        }
        out
    }
}

/// What [`Index::page`] is asked for.
pub struct PageQuery<'a> {
    pub sort: Sort,
    pub descending: bool,
    pub after: Option<&'a Position>,
    pub limit: usize,
    pub fields: &'a [(Field, Vec<String>)],
    pub search: &'a str,
}

/// Where `doc` stands in `sort`.
pub fn position(sort: Sort, doc: &DocRef) -> Position {
    Position {
        primary: sort.primary(doc),
        name: doc.key.name.clone(),
        namespace: doc.key.namespace.clone(),
    }
}

fn sort_key(sort: Sort, doc: &DocRef, slot: Slot) -> SortKey {
    let p = position(sort, doc);
    (p.primary, p.name, p.namespace, slot)
}

fn bound(p: &Position, slot: Slot) -> SortKey {
    (p.primary.clone(), p.name.clone(), p.namespace.clone(), slot)
}

/// The distinct three-byte sequences of `text` in lower case.
pub fn trigrams(text: &str) -> Vec<[u8; 3]> {
    let lower = text.to_ascii_lowercase();
    let mut out: Vec<[u8; 3]> = lower.as_bytes().windows(3).map(|w| [w[0], w[1], w[2]]).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Inserts `slot` into the sorted `list` (new slots usually come last).
fn insert(list: &mut Vec<Slot>, slot: Slot) {
    match list.last() {
        Some(last) if *last >= slot => {
            if let Err(at) = list.binary_search(&slot) {
                list.insert(at, slot);
            }
        }
        _ => list.push(slot),
    }
}

fn delete(list: &mut Vec<Slot>, slot: Slot) {
    if let Ok(at) = list.binary_search(&slot) {
        list.remove(at);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::registry::{Doc, Key, Kind};

    const SYNC: [&str; 3] = ["Synced", "OutOfSync", ""];
    const HEALTH: [&str; 3] = ["Healthy", "Degraded", "Missing"];

    fn doc(name: &str, n: u64) -> DocRef {
        let value = json!({
            "metadata": {"name": name, "namespace": "argocd", "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", n % 60)},
            "spec": {"project": format!("p{}", n % 3), "destination": {"server": "https://k", "namespace": format!("ns{}", n % 4)},
                     "source": {"repoURL": "https://git/r.git"}},
            "status": {"sync": {"status": SYNC[(n % 3) as usize]}, "health": {"status": HEALTH[(n % 5 % 3) as usize]}},
        });
        Doc::of_value(Key::new(Kind::Application, "argocd", name), &value, n + 1).unwrap()
    }

    /// Every page of `query`'s filter in `sort`, `limit` at a time, following the positions.
    fn pages(
        index: &Index,
        sort: Sort,
        descending: bool,
        fields: &[(Field, Vec<String>)],
        search: &str,
    ) -> Vec<String> {
        let accept = |e: &Entry| {
            fields
                .iter()
                .all(|(f, values)| values.iter().any(|v| f.has(&e.doc.summary, v)))
                && e.doc.key.name.contains(search)
        };
        let mut out = Vec::new();
        let mut after: Option<Position> = None;
        for _ in 0..1000 {
            let query = PageQuery {
                sort,
                descending,
                after: after.as_ref(),
                limit: 7,
                fields,
                search,
            };
            let (page, more) = index.page(&query, accept);
            out.extend(page.iter().map(|e| e.doc.key.name.clone()));
            if !more {
                return out;
            }
            after = page.last().map(|e| position(sort, &e.doc));
        }
        panic!("pages never end");
    }

    #[test]
    fn pages_match_a_sort_of_the_whole_after_puts_updates_and_removes() {
        let mut index = Index::default();
        let mut held: std::collections::BTreeMap<String, DocRef> = Default::default();
        // A fixed pseudo-random walk of creations, status changes and deletions.
        let mut x: u64 = 7;
        for step in 0..600u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let name = format!("app-{:03}", (x >> 33) % 150);
            if (x >> 20).is_multiple_of(7) {
                index.remove("argocd", &name);
                held.remove(&name);
            } else {
                let d = doc(&name, step);
                index.put(Arc::clone(&d), format!("obj/{name}"));
                held.insert(name, d);
            }
        }
        assert_eq!(index.len(), held.len());
        assert_eq!(index.entries().count(), held.len());
        let mut walking = Index {
            sorted_at_most: 1,
            ..Index::default()
        };
        for d in held.values() {
            walking.put(Arc::clone(d), String::new());
        }
        type Case<'a> = (Vec<(Field, Vec<String>)>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (vec![], ""),
            (vec![(Field::Sync, vec!["Unknown".into()])], ""),
            (
                vec![
                    (Field::Health, vec!["Degraded".into()]),
                    (Field::Project, vec!["p1".into(), "p2".into()]),
                ],
                "",
            ),
            (vec![(Field::Namespace, vec!["ns3".into()])], "-01"),
            (vec![], "pp-00"),
            (vec![(Field::Cluster, vec!["nowhere".into()])], ""),
        ];
        for (fields, search) in &cases {
            for sort in Sort::ALL {
                let mut expected: Vec<(Position, String)> = held
                    .values()
                    .filter(|d| {
                        fields
                            .iter()
                            .all(|(f, vs)| vs.iter().any(|v| f.has(&d.summary, v)))
                    })
                    .filter(|d| d.key.name.contains(search))
                    .map(|d| (position(sort, d), d.key.name.clone()))
                    .collect();
                expected.sort();
                let names: Vec<String> = expected.into_iter().map(|(_, n)| n).collect();
                assert_eq!(
                    pages(&index, sort, false, fields, search),
                    names,
                    "{sort:?} {fields:?} {search}"
                );
                assert_eq!(
                    pages(&walking, sort, false, fields, search),
                    names,
                    "walked {sort:?} {fields:?} {search}"
                );
                let reversed: Vec<String> = names.iter().rev().cloned().collect();
                assert_eq!(
                    pages(&index, sort, true, fields, search),
                    reversed,
                    "-{sort:?} {fields:?} {search}"
                );
                assert_eq!(
                    pages(&walking, sort, true, fields, search),
                    reversed,
                    "walked -{sort:?} {fields:?} {search}"
                );
            }
        }
    }

    #[test]
    fn an_entry_keeps_its_uid_until_its_rbac_object_changes() {
        let mut index = Index::default();
        index.put(doc("a", 1), "p0/a".into());
        let uid = index.entries().next().unwrap().uid;
        index.put(doc("a", 2), "p0/a".into());
        assert_eq!(index.entries().next().unwrap().uid, uid);
        index.put(doc("a", 3), "p1/a".into());
        assert_ne!(index.entries().next().unwrap().uid, uid);
        index.remove("argocd", "a");
        index.put(doc("a", 4), "p1/a".into());
        assert_ne!(
            index.entries().next().unwrap().uid,
            uid,
            "a re-created application is another"
        );
    }

    #[test]
    fn trigrams_are_distinct_and_lower_case() {
        assert_eq!(trigrams("AbAbA"), vec![*b"aba", *b"bab"]);
        assert!(trigrams("ab").is_empty());
    }
}
