//! The design of bkswitch, compiled into rustdoc.
//!
//! The documents live in the repository's `docs/` folder as Markdown and are
//! included here verbatim, so that code can cite them with intra-doc links that
//! `cargo doc` checks (`RUSTDOCFLAGS=-D warnings` turns a dangling citation into
//! an error):
//!
//! - [`invariants`] — I1–I17, what each means and what upholds it; every
//!   invariant is also an item, e.g. [`invariants::I1`], to link to;
//! - [`design`] — what bkswitch builds and why, the hooks, the components, and
//!   where it goes beyond the proposal it implements;
//! - [`formats`] — the wire formats, metadata paths and BookKeeper semantics
//!   matched byte for byte, with upstream references;
//! - [`reliability`] — what the fault, race, property and load tests try and what
//!   held.
//!
//! This crate has no code and no dependencies.

#![deny(missing_docs)]

#[doc = include_str!("../INVARIANTS.md")]
pub mod invariants {
    macro_rules! invariants {
        ($($name:ident => $text:literal,)*) => {
            $(
                #[doc = $text]
                #[doc = ""]
                #[doc = "See the [module documentation](self) for what upholds it."]
                #[derive(Debug, Clone, Copy, PartialEq, Eq)]
                pub struct $name;
            )*
        };
    }

    invariants! {
        I1 => "**I1 — stamp in the same CAS as the id.** A new ledger's cluster stamp is written in the same metadata compare-and-set that records its id.",
        I2 => "**I2 — old ledgers stay readable.** Every recorded ledger can be read, from the cluster its stamp names, at every phase of a switch.",
        I3 => "**I3 — every metadata update is a CAS.** No shared metadata is written without an expected version.",
        I4 => "**I4 — resolver once per handle open.** The per-ledger resolver is consulted once for each handle a managed ledger opens, not per read.",
        I5 => "**I5 — close an old client only with no active reads.** A cluster's client is closed only when nothing reads through it.",
        I6 => "**I6 — restart recovers switch state from metadata.** A coordinator that restarts resumes a switch from what is recorded, and never copies a ledger twice.",
        I7 => "**I7 — protobuf changes stay proto2-compatible.** Fields are only added; data written by others is never dropped on rewrite.",
        I8 => "**I8 — a copy keeps ledger id, entry ids and custom metadata.**",
        I9 => "**I9 — cursor PROMOTE changes only the stamp.**",
        I10 => "**I10 — schema PROMOTE changes only the stamp** (never ledger id, entry id, version or hash).",
        I11 => "**I11 — idgen precheck.** The destination's next ledger id is beyond every id the switch may copy or the source has issued.",
        I12 => "**I12 — exactly one ACTIVE cluster** at any time.",
        I13 => "**I13 — cursor PROMOTE runs on the owner under the cursor lock.**",
        I14 => "**I14 — schema phases run centrally** (on the coordinator).",
        I15 => "**I15 — delete and first open route by stamp.** Every open and delete path resolves the ledger's cluster from its stamp.",
        I16 => "**I16 — the `_pulsar.` property prefix is reserved.**",
        I17 => "**I17 — the bootstrap cluster is the legacy fallback, written once.** An unstamped ledger belongs to the bootstrap cluster; an unstamped ledger created after bootstrap is corruption, reported and never guessed.",
    }
}

#[doc = include_str!("../DESIGN.md")]
pub mod design {}

#[doc = include_str!("../FORMATS.md")]
pub mod formats {}

#[doc = include_str!("../RELIABILITY.md")]
pub mod reliability {}
