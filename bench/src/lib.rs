//! Shared helpers for the bkswitch criterion benches (see `benches/`).
