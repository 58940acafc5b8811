//! [`SlotTable`]: the lock-free, append-only table of cluster slots every resolve
//! and every S1 supply reads, with the active and bootstrap slot indexes.
//!
//! Writers (registration, a switch, recording the bootstrap) are rare and
//! serialize on one lock inside the table; readers never lock, load no
//! snapshot and allocate nothing: a lookup is one `Acquire` load of the length,
//! a scan comparing names (length, then one or two machine words) and, for the
//! active or bootstrap slot, one more atomic load.
//!
//! Why this holds without `unsafe`: slot `i` is a [`OnceLock`], set once before
//! the length is published past `i` (`Release`), and never replaced or removed.
//! A reader that loads the length (`Acquire`) sees every slot below it fully
//! initialized; an index read from `active` or `bootstrap` was stored after its
//! slot was set, so it also names an initialized slot.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::routed::{ClusterState, RoutedClient};

/// Most clusters one storage can route to (registered clusters are never
/// removed from routing, so that every stamped ledger stays readable).
pub const MAX_CLUSTERS: usize = 64;

/// Slot index meaning "none".
const NONE: usize = usize::MAX;

/// One registered cluster in the routing table. Never removed or replaced once
/// published.
pub(crate) struct Slot {
    /// The cluster name, inline (compared on every stamped resolve).
    name: Box<str>,
    pub(crate) state: Arc<ClusterState>,
    /// The cluster's client, for the life of the storage (its started client
    /// is installed and taken out inside).
    pub(crate) client: Arc<RoutedClient>,
}

impl Slot {
    /// A slot for the cluster called `name`, with a client that has nothing
    /// installed yet.
    pub(crate) fn new(name: &str) -> Slot {
        let state = Arc::new(ClusterState::new(name));
        Slot {
            name: name.into(),
            client: Arc::new(RoutedClient::new(state.clone())),
            state,
        }
    }

    /// The cluster's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

/// Why [`SlotTable::push`] refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushError {
    /// Every one of the [`MAX_CLUSTERS`] slots is taken.
    Full,
    /// A slot of that name exists, at this index.
    Taken(usize),
}

/// The append-only slot table and the active and bootstrap indexes.
///
/// What lookups read (`slots`, `len`, `bootstrap`), the active index (written
/// by every swap) and the writers' lock each have a cache line of their own,
/// so that a swap, or a writer taking the lock, does not evict what the other
/// readers use.
#[repr(align(128))]
pub(crate) struct SlotTable {
    /// Slot `i` is set once, before `len` covers it.
    slots: Box<[OnceLock<Slot>]>,
    len: AtomicUsize,
    /// Index of the bootstrap slot, or [`NONE`].
    bootstrap: AtomicUsize,
    /// Index of the active slot, or [`NONE`].
    active: CacheLine<AtomicUsize>,
    /// Serializes writers; readers never take it.
    write: CacheLine<Mutex<()>>,
}

/// `T` alone on its cache line (128 bytes: x86 fetches lines in adjacent
/// pairs).
#[repr(align(128))]
struct CacheLine<T>(T);

/// `a == b`, comparing the length first and short names (the usual cluster
/// names) as one or two machine words instead of calling `memcmp`.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word8 = |s: &[u8], i: usize| {
        s.get(i..i + 8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
    };
    let word4 = |s: &[u8], i: usize| {
        s.get(i..i + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    match n {
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        _ => a == b,
    }
}

impl Default for SlotTable {
    fn default() -> Self {
        SlotTable::with_capacity(MAX_CLUSTERS)
    }
}

impl SlotTable {
    /// An empty table of `capacity` slots.
    pub(crate) fn with_capacity(capacity: usize) -> SlotTable {
        SlotTable {
            slots: (0..capacity).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            bootstrap: AtomicUsize::new(NONE),
            active: CacheLine(AtomicUsize::new(NONE)),
            write: CacheLine(Mutex::new(())),
        }
    }

    /// The slot at `index`, if it is set (`None` also for [`NONE`]).
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&Slot> {
        self.slots.get(index).and_then(OnceLock::get)
    }

    /// The slot (and its index) of the cluster called `name`.
    #[inline]
    pub(crate) fn find(&self, name: &str) -> Option<(usize, &Slot)> {
        let len = self.len.load(Ordering::Acquire);
        let wanted = name.as_bytes();
        for (i, cell) in self.slots.iter().take(len).enumerate() {
            if let Some(slot) = cell.get() {
                if same_bytes(slot.name.as_bytes(), wanted) {
                    return Some((i, slot));
                }
            }
        }
        None
    }

    /// Appends `slot` and returns its index, unless the table is full or a slot
    /// of that name exists.
    pub(crate) fn push(&self, slot: Slot) -> Result<usize, PushError> {
        let _write = self.write.0.lock();
        if let Some((index, _)) = self.find(&slot.name) {
            return Err(PushError::Taken(index));
        }
        let index = self.len.load(Ordering::Relaxed);
        let Some(cell) = self.slots.get(index) else {
            return Err(PushError::Full);
        };
        if cell.set(slot).is_err() {
            // Unreachable: cells at or beyond `len` are set only here, under
            // the write lock.
            return Err(PushError::Taken(index));
        }
        self.len.store(index + 1, Ordering::Release);
        Ok(index)
    }

    /// The active slot, once one is set.
    #[inline]
    pub(crate) fn active(&self) -> Option<&Slot> {
        self.get(self.active.0.load(Ordering::Acquire))
    }

    /// Makes the slot at `index` the active one and returns the previous active
    /// slot. Every slot's [`ClusterState`] `active` flag follows: the previous
    /// one is cleared before the new one is set. `None` (nothing changed) when
    /// no slot is set at `index`.
    pub(crate) fn set_active(&self, index: usize) -> Option<Option<&Slot>> {
        let _write = self.write.0.lock();
        let slot = self.get(index)?;
        let previous = self.get(self.active.0.load(Ordering::Relaxed));
        if let Some(prev) = previous {
            prev.state.set_active(false);
        }
        slot.state.set_active(true);
        self.active.0.store(index, Ordering::Release);
        Some(previous)
    }

    /// The index of the bootstrap slot, or `usize::MAX` while none is set.
    #[inline]
    pub(crate) fn bootstrap_index(&self) -> usize {
        self.bootstrap.load(Ordering::Acquire)
    }

    /// The bootstrap slot, once one is set.
    #[inline]
    pub(crate) fn bootstrap(&self) -> Option<&Slot> {
        self.get(self.bootstrap_index())
    }

    /// Makes the slot at `index` the bootstrap one (`None`: no slot, e.g. the
    /// recorded bootstrap cluster is not registered). Returns whether a slot is
    /// set at `index`; nothing changes when it is not.
    pub(crate) fn set_bootstrap(&self, index: Option<usize>) -> bool {
        let _write = self.write.0.lock();
        let index = match index {
            Some(i) if self.get(i).is_some() => i,
            Some(_) => return false,
            None => NONE,
        };
        self.bootstrap.store(index, Ordering::Release);
        true
    }

    /// The slots set so far, in index order.
    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &Slot> {
        let len = self.len.load(Ordering::Acquire);
        self.slots.iter().take(len).filter_map(OnceLock::get)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Barrier;
    use std::thread;

    use bkswitch_bk_client::BookKeeper;

    use super::*;

    fn name(writer: usize, i: usize) -> String {
        // Names of every length class the comparison special-cases: < 4,
        // 4..=7, 8..=16 and longer; several share a length and differ late.
        match i % 4 {
            0 => format!("{writer}{i}"),
            1 => format!("w{writer}-c{i:02}"),
            2 => format!("cluster-{writer}-{i:04}"),
            _ => format!("a-rather-long-cluster-name-{writer}-{i:06}"),
        }
    }

    #[test]
    fn same_bytes_is_equality() {
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcde",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "abcdefghijklmnop",
            "abcdefghijklmnopq",
            "bbcd",
            "abce",
            "abcdefgi",
            "bbcdefgh",
            "abcdefghijklmnoq",
            "Abcdefghijklmnop",
            "abcdefghXjklmnop",
        ];
        for a in words {
            for b in words {
                assert_eq!(
                    same_bytes(a.as_bytes(), b.as_bytes()),
                    a == b,
                    "{a:?} {b:?}"
                );
            }
        }
    }

    #[test]
    fn push_find_and_indexes() {
        let table = SlotTable::with_capacity(2);
        assert!(table.active().is_none() && table.bootstrap().is_none());
        assert_eq!(table.push(Slot::new("bk-a")), Ok(0));
        assert_eq!(
            table.push(Slot::new("bk-a")).unwrap_err(),
            PushError::Taken(0)
        );
        assert_eq!(table.push(Slot::new("bk-b")), Ok(1));
        assert_eq!(table.push(Slot::new("bk-c")).unwrap_err(), PushError::Full);
        assert_eq!(
            table.find("bk-b").map(|(i, s)| (i, s.name())),
            Some((1, "bk-b"))
        );
        assert!(table.find("bk-c").is_none() && table.find("bk-").is_none());

        assert!(table.set_active(2).is_none(), "no slot 2");
        assert!(table.active().is_none());
        assert!(table.set_active(0).is_some_and(|p| p.is_none()));
        assert!(table
            .set_active(1)
            .is_some_and(|p| p.is_some_and(|p| p.name() == "bk-a")));
        assert_eq!(table.active().map(Slot::name), Some("bk-b"));
        assert!(table.get(1).is_some_and(|s| s.state.is_active()));
        assert!(table.get(0).is_some_and(|s| !s.state.is_active()));

        assert!(!table.set_bootstrap(Some(5)));
        assert!(table.set_bootstrap(Some(0)));
        assert_eq!(table.bootstrap().map(Slot::name), Some("bk-a"));
        assert!(table.set_bootstrap(None));
        assert!(table.bootstrap().is_none());
        assert_eq!(
            table.iter().map(Slot::name).collect::<Vec<_>>(),
            ["bk-a", "bk-b"]
        );
    }

    /// Writers register clusters and swap the active and bootstrap slots while
    /// readers look clusters up and read the active slot, all at once. Every
    /// lookup must find the cluster asked for (once it is registered) and
    /// nothing else, a slot seen at an index is always the same slot, and the
    /// active and bootstrap indexes always name registered slots.
    #[test]
    fn racing_registrations_swaps_and_lookups() {
        const WRITERS: usize = 3;
        const PER_WRITER: usize = 20;
        const READERS: usize = 3;
        let table = SlotTable::with_capacity(WRITERS * PER_WRITER + 1);
        // One cluster up front, so that swappers have something to swap to.
        table.push(Slot::new("seed")).unwrap();
        table.set_active(0).unwrap();
        let registered = WRITERS * PER_WRITER + 1;
        let done = AtomicBool::new(false);
        let start = Barrier::new(WRITERS + 2 + READERS);

        thread::scope(|s| {
            for w in 0..WRITERS {
                let (table, start) = (&table, &start);
                s.spawn(move || {
                    start.wait();
                    for i in 0..PER_WRITER {
                        let index = table.push(Slot::new(&name(w, i))).unwrap();
                        assert_eq!(table.get(index).map(Slot::name), Some(&*name(w, i)));
                        // A second registration of the same name never adds a slot.
                        assert_eq!(
                            table.push(Slot::new(&name(w, i))).unwrap_err(),
                            PushError::Taken(index)
                        );
                    }
                });
            }
            // Swappers: the active slot, and the bootstrap slot.
            for role in 0..2 {
                let (table, start, done) = (&table, &start, &done);
                s.spawn(move || {
                    start.wait();
                    let mut n = 0usize;
                    while !done.load(Ordering::Relaxed) {
                        n = n.wrapping_mul(31).wrapping_add(7);
                        let len = table.len.load(Ordering::Acquire);
                        let index = n % len;
                        if role == 0 {
                            let previous = table.set_active(index).expect("registered");
                            assert!(previous.is_some(), "the active slot was set up front");
                        } else {
                            assert!(table.set_bootstrap(Some(index)));
                        }
                        // An index beyond the registered ones is refused.
                        assert!(table.set_active(table.slots.len()).is_none());
                    }
                });
            }
            for r in 0..READERS {
                let (table, start, done) = (&table, &start, &done);
                s.spawn(move || {
                    start.wait();
                    // The pointer of the slot first seen at each index.
                    let mut seen: Vec<Option<*const Slot>> = vec![None; table.slots.len()];
                    let mut rounds = 0u64;
                    while !done.load(Ordering::Relaxed) || rounds < 1_000 {
                        rounds += 1;
                        for w in 0..WRITERS {
                            let i = (rounds as usize + r) % PER_WRITER;
                            let wanted = name(w, i);
                            if let Some((index, slot)) = table.find(&wanted) {
                                assert_eq!(slot.name(), wanted);
                                assert_eq!(&*slot.state.name, wanted, "torn slot");
                                assert_eq!(slot.client.cluster_name(), wanted, "torn slot");
                                let ptr: *const Slot = slot;
                                let first = *seen[index].get_or_insert(ptr);
                                assert_eq!(first, ptr, "slot {index} changed");
                            }
                        }
                        let active = table.active().expect("always set");
                        let (_, found) = table.find(active.name()).expect("registered");
                        assert!(std::ptr::eq(found, active));
                        if let Some(b) = table.bootstrap() {
                            let (index, found) = table.find(b.name()).expect("registered");
                            assert!(std::ptr::eq(found, b));
                            assert!(index < table.len.load(Ordering::Acquire));
                        }
                        let active_index = table.active.0.load(Ordering::Acquire);
                        assert!(active_index < table.len.load(Ordering::Acquire));
                    }
                });
            }
            // Stop the swappers and readers once every writer is done.
            let (table, done) = (&table, &done);
            s.spawn(move || {
                while table.len.load(Ordering::Acquire) < registered {
                    thread::yield_now();
                }
                thread::sleep(std::time::Duration::from_millis(20));
                done.store(true, Ordering::Relaxed);
            });
        });

        assert_eq!(table.len.load(Ordering::Acquire), registered);
        for w in 0..WRITERS {
            for i in 0..PER_WRITER {
                let wanted = name(w, i);
                let (index, slot) = table.find(&wanted).expect("registered");
                assert_eq!(slot.name(), wanted);
                assert_eq!(table.get(index).map(Slot::name), Some(&*wanted));
            }
        }
        // Exactly one slot is flagged active: the one the index names.
        let flagged: Vec<&str> = table
            .iter()
            .filter(|s| s.state.is_active())
            .map(Slot::name)
            .collect();
        assert_eq!(
            flagged,
            [table.active().map(Slot::name).unwrap_or_default()]
        );
    }
}
