//! Histories on real ZooKeeper and real bookies (see the crate README).

/// Runs `count` histories on real ZooKeeper and bookies.
///
/// # Errors
///
/// When the real stack cannot start.
pub fn run_real(_first: u64, _count: u64) -> Result<crate::Totals, String> {
    Err("not built yet".into())
}
