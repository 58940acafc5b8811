//! Per-managed-ledger configuration: replication, rollover, retention, metadata
//! compression and the PIP-477 hooks.

use std::time::Duration;

use bkswitch_bk_client::{DigestType, LedgerConfig};
use bkswitch_proto::ml::CompressionType;

use crate::hooks::StorageHooks;

/// How a managed ledger creates ledgers, when it rolls them over, what it keeps,
/// and which hooks it consults.
///
/// Defaults follow Pulsar's broker defaults (`managedLedgerDefault*`,
/// `managedLedgerMaxEntriesPerLedger`, `managedLedgerCursorMaxEntriesPerLedger`, …).
///
/// ```
/// use std::time::Duration;
/// use bkswitch_mledger_spi::ManagedLedgerConfig;
///
/// let config = ManagedLedgerConfig::default()
///     .with_max_entries_per_ledger(1_000)
///     .with_retention(Some(Duration::from_secs(3600)), None);
/// assert_eq!(config.max_entries_per_ledger, 1_000);
/// assert!(config.hooks.is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct ManagedLedgerConfig {
    /// Ensemble size of data ledgers.
    pub ensemble_size: u32,
    /// Write quorum of data ledgers.
    pub write_quorum_size: u32,
    /// Ack quorum of data ledgers.
    pub ack_quorum_size: u32,
    /// Ensemble size of cursor ledgers.
    pub metadata_ensemble_size: u32,
    /// Write quorum of cursor ledgers.
    pub metadata_write_quorum_size: u32,
    /// Ack quorum of cursor ledgers.
    pub metadata_ack_quorum_size: u32,
    /// Digest type of every ledger created.
    pub digest_type: DigestType,
    /// Password of every ledger created (needed again to open them).
    pub password: Vec<u8>,

    /// Roll the data ledger over after this many entries.
    pub max_entries_per_ledger: u64,
    /// Roll the data ledger over after this many payload bytes.
    pub max_size_per_ledger_bytes: u64,
    /// Roll the data ledger over once it is this old (checked on append).
    pub max_ledger_rollover_time: Duration,
    /// Never roll a data ledger over by size or count before it is this old.
    pub min_ledger_rollover_time: Duration,

    /// Keep consumed ledgers for at least this long (`None`: no time retention).
    pub retention_time: Option<Duration>,
    /// Keep consumed ledgers while their total size is below this (`None`: none).
    pub retention_size_bytes: Option<u64>,

    /// Roll the cursor ledger over after this many mark-delete entries.
    pub cursor_max_entries_per_ledger: u64,
    /// Roll the cursor ledger over once it is this old (checked on mark-delete).
    pub cursor_ledger_rollover_time: Duration,

    /// Compression of the `ManagedLedgerInfo` value (`None` is written by default).
    pub ledger_info_compression: CompressionType,
    /// Compression of `ManagedCursorInfo` values.
    pub cursor_info_compression: CompressionType,

    /// The PIP-477 hooks; none set by default.
    pub hooks: StorageHooks,
}

impl Default for ManagedLedgerConfig {
    fn default() -> Self {
        ManagedLedgerConfig {
            ensemble_size: 2,
            write_quorum_size: 2,
            ack_quorum_size: 2,
            metadata_ensemble_size: 2,
            metadata_write_quorum_size: 2,
            metadata_ack_quorum_size: 2,
            digest_type: DigestType::Crc32c,
            password: Vec::new(),
            max_entries_per_ledger: 50_000,
            max_size_per_ledger_bytes: 2048 * 1024 * 1024,
            max_ledger_rollover_time: Duration::from_secs(4 * 3600),
            min_ledger_rollover_time: Duration::ZERO,
            retention_time: None,
            retention_size_bytes: None,
            cursor_max_entries_per_ledger: 50_000,
            cursor_ledger_rollover_time: Duration::from_secs(4 * 3600),
            ledger_info_compression: CompressionType::None,
            cursor_info_compression: CompressionType::None,
            hooks: StorageHooks::default(),
        }
    }
}

impl ManagedLedgerConfig {
    /// Set the data-ledger quorums.
    pub fn with_quorums(mut self, ensemble: u32, write: u32, ack: u32) -> Self {
        self.ensemble_size = ensemble;
        self.write_quorum_size = write;
        self.ack_quorum_size = ack;
        self
    }

    /// Set the cursor-ledger quorums.
    pub fn with_metadata_quorums(mut self, ensemble: u32, write: u32, ack: u32) -> Self {
        self.metadata_ensemble_size = ensemble;
        self.metadata_write_quorum_size = write;
        self.metadata_ack_quorum_size = ack;
        self
    }

    /// Set the entry-count rollover threshold of data ledgers.
    pub fn with_max_entries_per_ledger(mut self, entries: u64) -> Self {
        self.max_entries_per_ledger = entries;
        self
    }

    /// Set the size rollover threshold of data ledgers.
    pub fn with_max_size_per_ledger_bytes(mut self, bytes: u64) -> Self {
        self.max_size_per_ledger_bytes = bytes;
        self
    }

    /// Set the age rollover thresholds of data ledgers.
    pub fn with_rollover_time(mut self, min: Duration, max: Duration) -> Self {
        self.min_ledger_rollover_time = min;
        self.max_ledger_rollover_time = max;
        self
    }

    /// Set the retention limits.
    pub fn with_retention(mut self, time: Option<Duration>, size_bytes: Option<u64>) -> Self {
        self.retention_time = time;
        self.retention_size_bytes = size_bytes;
        self
    }

    /// Set the cursor-ledger rollover thresholds.
    pub fn with_cursor_rollover(mut self, max_entries: u64, max_age: Duration) -> Self {
        self.cursor_max_entries_per_ledger = max_entries;
        self.cursor_ledger_rollover_time = max_age;
        self
    }

    /// Set the metadata compression of ledger and cursor infos.
    pub fn with_metadata_compression(
        mut self,
        ledger_info: CompressionType,
        cursor_info: CompressionType,
    ) -> Self {
        self.ledger_info_compression = ledger_info;
        self.cursor_info_compression = cursor_info;
        self
    }

    /// Install hooks (replacing any set before).
    pub fn with_hooks(mut self, hooks: StorageHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// The client configuration for a new data ledger.
    pub fn data_ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default()
            .with_quorums(
                self.ensemble_size,
                self.write_quorum_size,
                self.ack_quorum_size,
            )
            .with_digest_type(self.digest_type)
            .with_password(self.password.clone())
    }

    /// The client configuration for a new cursor ledger.
    pub fn cursor_ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default()
            .with_quorums(
                self.metadata_ensemble_size,
                self.metadata_write_quorum_size,
                self.metadata_ack_quorum_size,
            )
            .with_digest_type(self.digest_type)
            .with_password(self.password.clone())
    }

    /// Checks the settings for values a managed ledger cannot work with.
    ///
    /// # Errors
    ///
    /// A message naming the first invalid setting and the accepted range.
    pub fn validate(&self) -> Result<(), String> {
        let quorums = [
            (
                "ensemble/write/ack quorum",
                self.ensemble_size,
                self.write_quorum_size,
                self.ack_quorum_size,
            ),
            (
                "metadata ensemble/write/ack quorum",
                self.metadata_ensemble_size,
                self.metadata_write_quorum_size,
                self.metadata_ack_quorum_size,
            ),
        ];
        for (what, e, w, a) in quorums {
            if a == 0 || a > w || w > e {
                return Err(format!(
                    "invalid {what} {e}/{w}/{a}: need ensemble >= write >= ack >= 1"
                ));
            }
        }
        if self.max_entries_per_ledger == 0 {
            return Err("max_entries_per_ledger must be at least 1".into());
        }
        if self.max_size_per_ledger_bytes == 0 {
            return Err("max_size_per_ledger_bytes must be at least 1".into());
        }
        if self.cursor_max_entries_per_ledger == 0 {
            return Err("cursor_max_entries_per_ledger must be at least 1".into());
        }
        if self.min_ledger_rollover_time > self.max_ledger_rollover_time {
            return Err(format!(
                "min_ledger_rollover_time ({:?}) exceeds max_ledger_rollover_time ({:?})",
                self.min_ledger_rollover_time, self.max_ledger_rollover_time
            ));
        }
        Ok(())
    }
}
