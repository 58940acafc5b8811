#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod batch;
mod copy;
mod error;
mod options;
mod reads;
mod verify;

pub use copy::{copy_ledger_preserving_ids, migration_ledger_id_conflict_total};
pub use error::CopyError;
pub use options::{
    CopyOptions, CopyOutcome, CopyProgress, CopyReport, CreatedFn, ProgressFn, Verification,
    DEFAULT_WINDOW,
};
pub use verify::verify_dst_matches_src;
