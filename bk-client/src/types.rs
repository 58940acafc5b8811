//! Plain data of the client SPI: ids, ledger configuration, metadata and entries.

use std::collections::BTreeMap;

use bytes::Bytes;

/// A ledger id. BookKeeper uses signed 64-bit ids; valid ids are `>= 0`.
pub type LedgerId = i64;

/// An entry id. BookKeeper uses signed 64-bit ids; `-1` means "no entry"
/// (e.g. the last add confirmed of an empty ledger).
pub type EntryId = i64;

/// The "no entry" entry id (BookKeeper's `INVALID_ENTRY_ID`).
pub const NO_ENTRY: EntryId = -1;

/// Digest used to checksum entries (BookKeeper's `DigestType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DigestType {
    /// CRC32 (metadata value 1).
    Crc32,
    /// HMAC-SHA1 keyed with the password (metadata value 2).
    Mac,
    /// CRC32C (metadata value 3), Pulsar's default.
    #[default]
    Crc32c,
    /// No digest (metadata value 4).
    Dummy,
}

impl DigestType {
    /// The value BookKeeper stores in `LedgerMetadataFormat.digestType`.
    pub fn metadata_value(self) -> i32 {
        match self {
            DigestType::Crc32 => 1,
            DigestType::Mac => 2,
            DigestType::Crc32c => 3,
            DigestType::Dummy => 4,
        }
    }

    /// The digest type for a `LedgerMetadataFormat.digestType` value.
    pub fn from_metadata_value(value: i32) -> Option<DigestType> {
        match value {
            1 => Some(DigestType::Crc32),
            2 => Some(DigestType::Mac),
            3 => Some(DigestType::Crc32c),
            4 => Some(DigestType::Dummy),
            _ => None,
        }
    }
}

/// How to create a ledger: replication, digest, password and custom metadata.
///
/// The default is ensemble 3, write quorum 2, ack quorum 2, CRC32C, an empty
/// password and no custom metadata.
///
/// ```
/// use bkswitch_bk_client::{DigestType, LedgerConfig};
///
/// let config = LedgerConfig::default()
///     .with_quorums(2, 2, 1)
///     .with_digest_type(DigestType::Crc32)
///     .with_password(b"secret".to_vec())
///     .with_custom_metadata("application", b"pulsar".to_vec());
/// assert_eq!(config.ensemble_size, 2);
/// assert_eq!(config.custom_metadata["application"], b"pulsar".to_vec());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerConfig {
    /// Number of bookies the ledger is striped over.
    pub ensemble_size: u32,
    /// Number of bookies each entry is written to.
    pub write_quorum_size: u32,
    /// Number of acknowledgements an add waits for.
    pub ack_quorum_size: u32,
    /// Digest type of the entries.
    pub digest_type: DigestType,
    /// Ledger password (needed again to open the ledger).
    pub password: Vec<u8>,
    /// Custom metadata stored with the ledger, as given.
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            ensemble_size: 3,
            write_quorum_size: 2,
            ack_quorum_size: 2,
            digest_type: DigestType::Crc32c,
            password: Vec::new(),
            custom_metadata: BTreeMap::new(),
        }
    }
}

impl LedgerConfig {
    /// Set ensemble, write quorum and ack quorum sizes at once.
    pub fn with_quorums(mut self, ensemble: u32, write: u32, ack: u32) -> Self {
        self.ensemble_size = ensemble;
        self.write_quorum_size = write;
        self.ack_quorum_size = ack;
        self
    }

    /// Set the ensemble size.
    pub fn with_ensemble_size(mut self, ensemble: u32) -> Self {
        self.ensemble_size = ensemble;
        self
    }

    /// Set the write quorum size.
    pub fn with_write_quorum_size(mut self, write: u32) -> Self {
        self.write_quorum_size = write;
        self
    }

    /// Set the ack quorum size.
    pub fn with_ack_quorum_size(mut self, ack: u32) -> Self {
        self.ack_quorum_size = ack;
        self
    }

    /// Set the digest type.
    pub fn with_digest_type(mut self, digest_type: DigestType) -> Self {
        self.digest_type = digest_type;
        self
    }

    /// Set the password.
    pub fn with_password(mut self, password: impl Into<Vec<u8>>) -> Self {
        self.password = password.into();
        self
    }

    /// Add (or replace) one custom metadata entry.
    pub fn with_custom_metadata(
        mut self,
        key: impl Into<String>,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.custom_metadata.insert(key.into(), value.into());
        self
    }

    /// Replace all custom metadata.
    pub fn with_custom_metadata_map(mut self, custom_metadata: BTreeMap<String, Vec<u8>>) -> Self {
        self.custom_metadata = custom_metadata;
        self
    }

    /// The configuration a ledger with `metadata` was created with (same quorums,
    /// digest, password and custom metadata), e.g. to re-create it elsewhere.
    pub fn from_metadata(metadata: &LedgerMetadata) -> Self {
        LedgerConfig {
            ensemble_size: metadata.ensemble_size,
            write_quorum_size: metadata.write_quorum_size,
            ack_quorum_size: metadata.ack_quorum_size,
            digest_type: metadata.digest_type,
            password: metadata.password.clone(),
            custom_metadata: metadata.custom_metadata.clone(),
        }
    }
}

/// Lifecycle state of a ledger in the metadata service
/// (`LedgerMetadataFormat.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerState {
    /// Being written (metadata value 1).
    Open,
    /// A recovery open is sealing it (metadata value 2). The in-memory cluster
    /// recovers atomically, so its ledgers never show this state.
    InRecovery,
    /// Sealed: `last_entry_id` and `length` are final (metadata value 3).
    Closed,
}

impl LedgerState {
    /// The value BookKeeper stores in `LedgerMetadataFormat.state`.
    pub fn metadata_value(self) -> i32 {
        match self {
            LedgerState::Open => 1,
            LedgerState::InRecovery => 2,
            LedgerState::Closed => 3,
        }
    }
}

/// One ensemble of a ledger: the bookies that store entries from
/// `first_entry_id` until the next ensemble starts (BookKeeper's metadata
/// `Segment`). A ledger starts with one ensemble; a writer that loses a bookie
/// records a new one (an "ensemble change").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ensemble {
    /// The first entry stored on these bookies.
    pub first_entry_id: EntryId,
    /// Bookie ids (`host:port` by default), `ensemble_size` of them, in
    /// bookie-index order: entry `e` goes to indexes `(e + i) % ensemble_size`
    /// for `i` in `0..write_quorum_size`.
    pub bookies: Vec<String>,
}

/// A ledger's metadata, as stored in the cluster's metadata service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerMetadata {
    /// The ledger id.
    pub ledger_id: LedgerId,
    /// The ensembles, ordered by first entry id; the first starts at entry 0.
    pub ensembles: Vec<Ensemble>,
    /// Ensemble size.
    pub ensemble_size: u32,
    /// Write quorum size.
    pub write_quorum_size: u32,
    /// Ack quorum size.
    pub ack_quorum_size: u32,
    /// Digest type.
    pub digest_type: DigestType,
    /// Password.
    pub password: Vec<u8>,
    /// Custom metadata, as given at creation.
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// Lifecycle state.
    pub state: LedgerState,
    /// Last entry id once [`LedgerState::Closed`]; [`NO_ENTRY`] otherwise or if empty.
    pub last_entry_id: EntryId,
    /// Total payload bytes once [`LedgerState::Closed`]; `0` while open.
    pub length: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub ctime: i64,
}

impl LedgerMetadata {
    /// Whether the ledger is sealed.
    pub fn is_closed(&self) -> bool {
        self.state == LedgerState::Closed
    }

    /// The bookies of the first ensemble (empty if the metadata has none).
    pub fn first_ensemble(&self) -> &[String] {
        self.ensembles
            .first()
            .map(|e| e.bookies.as_slice())
            .unwrap_or_default()
    }
}

/// One entry read from a ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The entry id.
    pub entry_id: EntryId,
    /// The payload (shared, not copied).
    pub data: Bytes,
}

impl LedgerEntry {
    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// What deleting a missing ledger does. BookKeeper's behaviour depends on its
/// metadata driver; callers must treat all three outcomes as "already deleted".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DeleteMissing {
    /// Succeed, like the ZooKeeper driver since BookKeeper 4.10.
    #[default]
    Succeed,
    /// Fail with `NoSuchLedgerExistsException` (-7).
    NoSuchLedger,
    /// Fail with `NoSuchLedgerExistsOnMetadataServerException` (-25).
    NoSuchLedgerOnMetadataServer,
}
