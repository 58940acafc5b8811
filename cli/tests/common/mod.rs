//! Shared helpers of the CLI tests: the admin tests' common module (nodes on
//! shared in-memory clusters, raw HTTP requests, metadata-tree snapshots),
//! one file for both crates, and [`procs`], the one way these tests start
//! `bookie-switch` processes.
#![allow(dead_code, unused_imports, unreachable_pub, missing_docs)]

#[path = "../../../admin/tests/common/mod.rs"]
mod admin_common;
pub mod procs;

pub use admin_common::*;
