//! A read-only hash table from names to numbers, laid out so that a lookup
//! reads one cache line: each slot is 64 bytes and holds the key's full
//! 64-bit hash, its number, and the key itself when it is at most
//! [`INLINE`] bytes long (topic names mostly are). A general map keeps the
//! key in an allocation of its own and its control bytes apart from its
//! slots: three cache misses per lookup once the map is far larger than the
//! caches (a million routes), against one here.
//!
//! Open addressing with linear probing, at most half the slots used, so a
//! lookup that finds nothing stops at an empty slot within a line or two.
//! A large table lies in an anonymous mapping the kernel is asked to back
//! with huge pages (Linux's transparent huge pages, where enabled): with
//! 4 KiB pages, a random slot of a 128 MB table also misses the TLB, and a
//! page walk (two-dimensional in a virtual machine) costs as much as the
//! slot itself.
//! Keys longer than [`INLINE`] bytes keep their first [`HEAD`] bytes in the
//! slot and the rest in one shared buffer.

use std::hash::BuildHasher;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The longest key a slot holds whole.
pub(crate) const INLINE: usize = 48;
/// How much of a longer key a slot holds; the next 8 bytes are where the
/// rest lies in the shared buffer.
const HEAD: usize = INLINE - 8;

#[derive(Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C, align(64))]
struct Slot {
    /// The key's hash, never 0; 0 marks an empty slot.
    hash: u64,
    /// What the key maps to.
    value: u32,
    /// The key's length in bytes.
    len: u32,
    /// The key (up to [`INLINE`] bytes), or its first [`HEAD`] bytes and
    /// the offset of the rest in the shared buffer (little-endian `u64`).
    bytes: [u8; INLINE],
}

const EMPTY: Slot = Slot {
    hash: 0,
    value: 0,
    len: 0,
    bytes: [0; INLINE],
};

/// Tables from this size on are mapped (and offered huge pages): one huge
/// page.
const MAPPED_FROM: usize = 2 << 20;

/// Where the slots lie.
enum Slots {
    /// An anonymous mapping (zero-filled: every slot empty).
    Mapped(memmap2::MmapMut),
    /// The heap.
    Heap(Box<[Slot]>),
}

impl Slots {
    /// `n` empty slots.
    fn new(n: usize) -> Slots {
        let bytes = n * std::mem::size_of::<Slot>();
        if bytes >= MAPPED_FROM {
            if let Ok(map) = memmap2::MmapOptions::new().len(bytes).map_anon() {
                // Advice only: without huge pages the table works the same.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage);
                return Slots::Mapped(map);
            }
        }
        Slots::Heap(vec![EMPTY; n].into_boxed_slice())
    }

    #[inline]
    fn get(&self) -> &[Slot] {
        match self {
            // A mapping is page-aligned and holds whole slots.
            Slots::Mapped(map) => <[Slot]>::ref_from_bytes(map).expect("whole aligned slots"),
            Slots::Heap(slots) => slots,
        }
    }

    fn get_mut(&mut self) -> &mut [Slot] {
        match self {
            Slots::Mapped(map) => <[Slot]>::mut_from_bytes(map).expect("whole aligned slots"),
            Slots::Heap(slots) => slots,
        }
    }
}

impl Clone for Slots {
    fn clone(&self) -> Slots {
        let mut copy = Slots::new(self.get().len());
        copy.get_mut().copy_from_slice(self.get());
        copy
    }
}

/// Names → numbers, built once and then only read.
#[derive(Clone)]
pub(crate) struct FlatMap {
    slots: Slots,
    /// The tails of keys longer than [`INLINE`] bytes.
    spill: Box<[u8]>,
    hasher: foldhash::quality::RandomState,
    len: usize,
}

impl std::fmt::Debug for FlatMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlatMap")
            .field("len", &self.len)
            .field("slots", &self.slots.get().len())
            .field("spilled_bytes", &self.spill.len())
            .finish()
    }
}

impl Default for FlatMap {
    fn default() -> FlatMap {
        FlatMap::new(std::iter::empty())
    }
}

impl FlatMap {
    /// The map of `entries` (a key given twice keeps its last number).
    pub(crate) fn new<'k>(entries: impl ExactSizeIterator<Item = (&'k str, u32)>) -> FlatMap {
        let hasher = foldhash::quality::RandomState::default();
        // At most half the slots used, and at least one slot empty.
        let slots = entries.len().saturating_mul(2).max(8);
        let mut map = FlatMap {
            slots: Slots::new(slots),
            spill: Box::default(),
            hasher,
            len: 0,
        };
        let mut spill = Vec::new();
        for (key, value) in entries {
            map.insert(key, value, &mut spill);
        }
        map.spill = spill.into_boxed_slice();
        map
    }

    /// How many keys the map holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The number `key` maps to.
    #[inline]
    pub(crate) fn get(&self, key: &str) -> Option<u32> {
        let hash = self.hash(key);
        let slots = self.slots.get();
        let mut at = home(hash, slots.len());
        loop {
            let slot = &slots[at];
            if slot.hash == 0 {
                return None;
            }
            if slot.hash == hash && holds(slot, key.as_bytes(), &self.spill) {
                return Some(slot.value);
            }
            at = next(at, slots.len());
        }
    }

    /// Starts loading the slot where a lookup of `key` begins, so that a
    /// lookup soon after finds it in the cache: a proxy calls it for every
    /// lookup of a batch before answering the first, and the batch's memory
    /// accesses overlap instead of following one another.
    #[inline]
    pub(crate) fn prefetch(&self, key: &str) {
        let slots = self.slots.get();
        if let Some(slot) = slots.get(home(self.hash(key), slots.len())) {
            prefetch(slot);
        }
    }

    fn insert(&mut self, key: &str, value: u32, spill: &mut Vec<u8>) {
        let hash = self.hash(key);
        let slots = self.slots.get_mut();
        let mut at = home(hash, slots.len());
        loop {
            let slot = &mut slots[at];
            if slot.hash == 0 {
                break;
            }
            if slot.hash == hash && holds(slot, key.as_bytes(), spill) {
                slot.value = value;
                return;
            }
            at = next(at, slots.len());
        }
        let key = key.as_bytes();
        let mut slot = Slot {
            hash,
            value,
            // Keys are names far shorter than 4 GiB.
            len: u32::try_from(key.len()).expect("a name shorter than 4 GiB"),
            bytes: [0; INLINE],
        };
        if key.len() <= INLINE {
            slot.bytes[..key.len()].copy_from_slice(key);
        } else {
            slot.bytes[..HEAD].copy_from_slice(&key[..HEAD]);
            slot.bytes[HEAD..].copy_from_slice(&(spill.len() as u64).to_le_bytes());
            spill.extend_from_slice(&key[HEAD..]);
        }
        slots[at] = slot;
        self.len += 1;
    }

    #[inline]
    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key).max(1)
    }

    /// The bytes of the map that lie in a memory mapping (its slots, when
    /// many), not on the heap.
    pub(crate) fn mapped_bytes(&self) -> usize {
        match &self.slots {
            Slots::Mapped(map) => map.len(),
            Slots::Heap(_) => 0,
        }
    }
}

/// Asks the processor to load `slot`'s line into its caches.
#[inline]
#[allow(
    unsafe_code,
    reason = "a prefetch is a hint: it reads nothing and cannot fault"
)]
fn prefetch(slot: &Slot) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 processor has;
    // it only hints the cache, and the address is a live reference.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(slot).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

/// The first of `slots` slots `hash` may lie in.
#[inline]
fn home(hash: u64, slots: usize) -> usize {
    // The high bits pick the slot: no division, any number of slots.
    ((u128::from(hash) * slots as u128) >> 64) as usize
}

/// The slot after `at` of `slots`, wrapping around.
#[inline]
fn next(at: usize, slots: usize) -> usize {
    if at + 1 == slots {
        0
    } else {
        at + 1
    }
}

/// Whether `slot` holds `key` (its hash already matched), `spill` holding
/// the tails of long keys.
#[inline]
fn holds(slot: &Slot, key: &[u8], spill: &[u8]) -> bool {
    if slot.len as usize != key.len() {
        return false;
    }
    if key.len() <= INLINE {
        return slot.bytes[..key.len()] == *key;
    }
    let mut offset = [0; 8];
    offset.copy_from_slice(&slot.bytes[HEAD..]);
    let Ok(offset) = usize::try_from(u64::from_le_bytes(offset)) else {
        return false;
    };
    slot.bytes[..HEAD] == key[..HEAD]
        && spill.get(offset..offset + key.len() - HEAD) == Some(&key[HEAD..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_it_holds_and_nothing_else() {
        let keys: Vec<String> = (0..5_000)
            .map(|i| match i % 4 {
                0 => format!("k{i}"),
                1 => "x".repeat(i % 120),
                2 => format!("persistent://tenant/ns/{}", "é".repeat(i % 40)),
                _ => format!("{i}-{}", "long".repeat(i % 30)),
            })
            .collect();
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        let map = FlatMap::new(keys.iter().enumerate().map(|(i, k)| (k.as_str(), i as u32)));
        assert_eq!(map.len(), unique.len());
        for key in &unique {
            let last = keys.iter().rposition(|k| k == key).unwrap();
            assert_eq!(map.get(key), Some(last as u32), "{key}");
        }
        for absent in [
            "",
            "k1x",
            "xx-",
            "persistent://tenant/ns/",
            &"x".repeat(200),
        ] {
            assert_eq!(map.get(absent), None, "{absent}");
        }
        // Same length and first bytes as a spilled key, another tail.
        let long = "x".repeat(117);
        let mut other = long.clone();
        other.pop();
        other.push('y');
        assert_eq!(map.get(&other), None);
        assert!(map.get(&long).is_some());
        // A prefetch is a hint: nothing found or changed.
        map.prefetch(&long);
        map.prefetch("absent");
        assert!(map.get(&long).is_some());
    }

    #[test]
    fn a_large_map_is_mapped_and_clones() {
        let keys: Vec<String> = (0..20_000)
            .map(|i| format!("persistent://tenant/ns-{}/t-{i}", i % 7))
            .collect();
        let map = FlatMap::new(keys.iter().enumerate().map(|(i, k)| (k.as_str(), i as u32)));
        assert!(matches!(map.slots, Slots::Mapped(_)));
        assert!(map.mapped_bytes() >= MAPPED_FROM);
        let copy = map.clone();
        drop(map);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(copy.get(key), Some(i as u32));
        }
        assert_eq!(copy.get("persistent://tenant/ns-0/t-20000"), None);
    }

    #[test]
    fn an_empty_map_finds_nothing() {
        let map = FlatMap::default();
        assert_eq!(map.len(), 0);
        assert_eq!(map.mapped_bytes(), 0);
        assert_eq!(map.get("anything"), None);
        assert_eq!(map.get(""), None);
        map.prefetch("anything");
    }

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }
}
