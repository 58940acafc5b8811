//! `MemoryBookKeeper`: an in-process bookie cluster that follows BookKeeper's ledger
//! semantics exactly ([formats §4](bkswitch_docs::formats)), always compiled so it can back
//! doctests, examples, demos and the first run of every suite.
//!
//! - [`MemoryCluster`] is one named cluster: ledgers, id generator, bookies,
//!   settings, fault knobs and introspection.
//! - [`MemoryBookKeeper`] is a client of a cluster; several clients of one cluster
//!   see the same ledgers.
//! - [`MemoryClusters`] is a set of named clusters and [`MemoryClientFactory`]
//!   resolves `memory://<name>` URIs in it.
//!
//! # Behaviour notes
//! - Storing an entry is acknowledging it: the last add confirmed is the largest
//!   `k` with entries `0..=k` stored, so a recovery open closes at exactly the
//!   writer's LAC and bookies know the LAC immediately (a real cluster may lag a
//!   no-recovery reader by one entry).
//! - A write handle's `length()` counts confirmed entries only (BookKeeper's own
//!   handle also counts pushed-but-pending bytes until they fail).
//! - An add that fails because of a fault (unavailable, timeout) closes the writer
//!   for adds and fails its pending adds, as BookKeeper's handle does after an
//!   unrecoverable add error; the ledger stays OPEN until the writer's `close()`
//!   (which may be retried) or a recovery open seals it.
//! - Adds with injected latency or on a hanging cluster continue in a spawned tokio
//!   task, so dropping the add future does not leave a gap; outside a runtime the
//!   add proceeds when its future is polled.
//! - Entries have one copy per bookie of their write set; a bookie can lose
//!   its copies ([`MemoryCluster::lose_copies`], [`MemoryCluster::lose_bookie`])
//!   and reads go to the next copy, and a ledger's metadata can stop decoding
//!   ([`MemoryCluster::corrupt_metadata`]): see `replicas.rs` for what each
//!   operation does then.
//! - Opens use the stored digest type (digest autodetection, as Pulsar configures
//!   BookKeeper) unless [`MemoryClusterConfig::digest_autodetection`] is off.

mod client;
mod cluster;
mod factory;
mod handle;
mod ledger;
mod replicas;

pub use crate::types::DeleteMissing;
pub use client::MemoryBookKeeper;
pub use cluster::{
    FencedRecreateFailure, MemoryCluster, MemoryClusterConfig, MemoryClusters, OpKind,
    UnavailableMode,
};
pub use factory::{MemoryClientFactory, MEMORY_SCHEME};
