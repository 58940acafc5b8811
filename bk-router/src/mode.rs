//! [`ReadMode`]: which clusters reads and deletes may be routed to.

use std::fmt;
use std::str::FromStr;

use crate::RouterError;

/// Which clusters the S2/S3 resolvers may route reads and deletes to.
///
/// Creation (S1) is never affected: new ledgers are always created on the
/// active cluster. Legacy (unstamped) ledgers count as stamped to the
/// bootstrap cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReadMode {
    /// Route every ledger to the cluster its stamp names (the default, and the
    /// mode during a switch).
    #[default]
    DualRead,
    /// Only the active (new) cluster is read: a ledger stamped to any other
    /// cluster fails fast with
    /// [`RefusedByReadMode`](bkswitch_mledger_spi::HookErrorKind::RefusedByReadMode),
    /// naming the cluster and the ledger. For an old cluster that is being
    /// decommissioned or is known to be down.
    NewClusterOnly,
    /// The active (new) cluster is never read: a ledger stamped to it fails fast
    /// with `RefusedByReadMode`; ledgers on every other cluster route by stamp.
    /// For an operator rolling back who no longer trusts the new cluster: set it,
    /// switch the active cluster back (new ledgers then land on the old cluster,
    /// which from then on *is* the active one), and return to
    /// [`DualRead`](ReadMode::DualRead) once the rollback's stamp flips are done.
    OldClusterOnly,
}

impl ReadMode {
    /// The operator-facing name: `DUAL_READ`, `NEW_CLUSTER_ONLY` or
    /// `OLD_CLUSTER_ONLY`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadMode::DualRead => "DUAL_READ",
            ReadMode::NewClusterOnly => "NEW_CLUSTER_ONLY",
            ReadMode::OldClusterOnly => "OLD_CLUSTER_ONLY",
        }
    }

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            ReadMode::DualRead => 0,
            ReadMode::NewClusterOnly => 1,
            ReadMode::OldClusterOnly => 2,
        }
    }

    pub(crate) fn from_u8(v: u8) -> ReadMode {
        match v {
            1 => ReadMode::NewClusterOnly,
            2 => ReadMode::OldClusterOnly,
            _ => ReadMode::DualRead,
        }
    }
}

impl fmt::Display for ReadMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ReadMode {
    type Err = RouterError;

    /// Parses `DUAL_READ`, `NEW_CLUSTER_ONLY` or `OLD_CLUSTER_ONLY` (case-insensitive).
    ///
    /// # Errors
    ///
    /// [`RouterError::InvalidSettings`] for any other text.
    fn from_str(s: &str) -> Result<ReadMode, RouterError> {
        [
            ReadMode::DualRead,
            ReadMode::NewClusterOnly,
            ReadMode::OldClusterOnly,
        ]
        .into_iter()
        .find(|m| m.as_str().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            RouterError::InvalidSettings(format!(
                "unknown read mode '{s}': expected DUAL_READ, NEW_CLUSTER_ONLY or OLD_CLUSTER_ONLY"
            ))
        })
    }
}
