//! Reading a cluster stamp must not allocate: it runs on every ledger open.
//!
//! A counting global allocator is process-wide, so this test lives in its own
//! test binary. The count is per thread, so the test harness's other threads do
//! not disturb it.
#![allow(unsafe_code, reason = "a counting GlobalAlloc needs unsafe impls")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use bkswitch_proto::ml::{self, managed_ledger_info::LedgerInfo};
use bkswitch_proto::{schema, DuplicateStamp, Stamped, ATTR_KEY};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the slot may already be gone while a thread shuts down.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a const-initialised thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// Runs `read` many times and returns how many allocations it made.
fn allocations_during(read: impl Fn() -> Option<usize>) -> usize {
    let before = allocations();
    for _ in 0..100 {
        black_box(read());
    }
    allocations() - before
}

fn kv(key: &str, value: &str) -> ml::KeyValue {
    ml::KeyValue {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

fn eight_properties_stamp_last() -> Vec<(String, String)> {
    let mut props: Vec<(String, String)> = (0..7)
        .map(|i| (format!("key-{i}"), format!("value-{i}")))
        .collect();
    props.push((ATTR_KEY.to_owned(), "blue".to_owned()));
    props
}

#[test]
fn the_counter_sees_allocations() {
    let counted = allocations_during(|| Some(black_box(vec![1u8, 2, 3]).len()));
    assert_eq!(counted, 100);
}

#[test]
fn ledger_info_stamp_read_does_not_allocate() {
    let only = LedgerInfo {
        ledger_id: 1,
        properties: vec![kv(ATTR_KEY, "blue")],
        ..Default::default()
    };
    let none = LedgerInfo {
        ledger_id: 2,
        ..Default::default()
    };
    let last_of_eight = LedgerInfo {
        ledger_id: 3,
        properties: eight_properties_stamp_last()
            .iter()
            .map(|(k, v)| kv(k, v))
            .collect(),
        ..Default::default()
    };
    assert_eq!(only.cluster_stamp(), Ok(Some("blue")));
    assert_eq!(none.cluster_stamp(), Ok(None));
    assert_eq!(last_of_eight.properties.len(), 8);
    assert_eq!(last_of_eight.cluster_stamp(), Ok(Some("blue")));

    let read = |info: &LedgerInfo| info.cluster_stamp().ok().map(|s| s.map_or(0, str::len));
    assert_eq!(allocations_during(|| read(black_box(&only))), 0);
    assert_eq!(allocations_during(|| read(black_box(&none))), 0);
    assert_eq!(allocations_during(|| read(black_box(&last_of_eight))), 0);
}

#[test]
fn cursor_info_stamp_read_does_not_allocate() {
    let prop = |name: &str, value: &str| ml::StringProperty {
        name: name.to_owned(),
        value: value.to_owned(),
    };
    let only = ml::ManagedCursorInfo {
        cursor_properties: vec![prop(ATTR_KEY, "blue")],
        ..Default::default()
    };
    let none = ml::ManagedCursorInfo::default();
    let last_of_eight = ml::ManagedCursorInfo {
        cursor_properties: eight_properties_stamp_last()
            .iter()
            .map(|(k, v)| prop(k, v))
            .collect(),
        ..Default::default()
    };
    assert_eq!(last_of_eight.cluster_stamp(), Ok(Some("blue")));

    let read =
        |info: &ml::ManagedCursorInfo| info.cluster_stamp().ok().map(|s| s.map_or(0, str::len));
    assert_eq!(allocations_during(|| read(black_box(&only))), 0);
    assert_eq!(allocations_during(|| read(black_box(&none))), 0);
    assert_eq!(allocations_during(|| read(black_box(&last_of_eight))), 0);
}

#[test]
fn schema_position_stamp_read_does_not_allocate() {
    let kv = |key: &str, value: &str| schema::KeyValue {
        key: key.to_owned(),
        value: value.to_owned(),
    };
    let position = |properties| schema::PositionInfo {
        ledger_id: 4,
        entry_id: 0,
        properties,
    };
    let only = position(vec![kv(ATTR_KEY, "blue")]);
    let none = position(vec![]);
    let last_of_eight = position(
        eight_properties_stamp_last()
            .iter()
            .map(|(k, v)| kv(k, v))
            .collect(),
    );
    assert_eq!(last_of_eight.cluster_stamp(), Ok(Some("blue")));

    let read =
        |info: &schema::PositionInfo| info.cluster_stamp().ok().map(|s| s.map_or(0, str::len));
    assert_eq!(allocations_during(|| read(black_box(&only))), 0);
    assert_eq!(allocations_during(|| read(black_box(&none))), 0);
    assert_eq!(allocations_during(|| read(black_box(&last_of_eight))), 0);
}

#[test]
fn replacing_a_stamp_with_one_of_equal_or_shorter_length_does_not_allocate() {
    let mut info = LedgerInfo {
        ledger_id: 5,
        properties: vec![kv("a", "1"), kv(ATTR_KEY, "green")],
        ..Default::default()
    };
    let before = allocations();
    info.set_cluster_stamp("blue").unwrap();
    info.set_cluster_stamp("green").unwrap();
    assert_eq!(allocations() - before, 0);
    assert_eq!(info.cluster_stamp(), Ok(Some("green")));
}

#[test]
fn the_hot_path_scan_does_not_allocate_even_for_a_duplicate() {
    let ledger = |properties| LedgerInfo {
        ledger_id: 6,
        properties,
        ..Default::default()
    };
    let only = ledger(vec![kv(ATTR_KEY, "blue")]);
    let none = ledger(vec![]);
    let last_of_eight = ledger(
        eight_properties_stamp_last()
            .iter()
            .map(|(k, v)| kv(k, v))
            .collect(),
    );
    let duplicate = ledger(vec![kv(ATTR_KEY, "blue"), kv(ATTR_KEY, "green")]);
    assert_eq!(last_of_eight.scan_cluster_stamp(), Ok(Some("blue")));
    assert_eq!(duplicate.scan_cluster_stamp(), Err(DuplicateStamp));

    let scan = |info: &LedgerInfo| {
        info.scan_cluster_stamp()
            .map_or(Some(usize::MAX), |s| s.map(str::len))
    };
    assert_eq!(allocations_during(|| scan(black_box(&only))), 0);
    assert_eq!(allocations_during(|| scan(black_box(&none))), 0);
    assert_eq!(allocations_during(|| scan(black_box(&last_of_eight))), 0);
    assert_eq!(allocations_during(|| scan(black_box(&duplicate))), 0);
}
