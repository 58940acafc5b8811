//! The commands' options and answers, and the BookKeeper error codes the
//! helper reports.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// BookKeeper's client error codes (`BKException.Code`) that tests check most.
pub mod codes {
    /// `ReadException`.
    pub const READ: i32 = -1;
    /// `NotEnoughBookiesException`.
    pub const NOT_ENOUGH_BOOKIES: i32 = -6;
    /// `NoSuchLedgerExistsException`.
    pub const NO_SUCH_LEDGER_EXISTS: i32 = -7;
    /// `LedgerClosedException`.
    pub const LEDGER_CLOSED: i32 = -11;
    /// `NoSuchEntryException`.
    pub const NO_SUCH_ENTRY: i32 = -13;
    /// `MetadataVersionException`.
    pub const METADATA_VERSION: i32 = -17;
    /// `LedgerExistException`.
    pub const LEDGER_EXIST: i32 = -20;
    /// `DuplicateEntryIdException`.
    pub const DUPLICATE_ENTRY_ID: i32 = -22;
    /// `TimeoutException`.
    pub const TIMEOUT: i32 = -23;
    /// `NoSuchLedgerExistsOnMetadataServerException`.
    pub const NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER: i32 = -25;
    /// `LedgerFencedException`.
    pub const LEDGER_FENCED: i32 = -101;
    /// `UnauthorizedAccessException` (wrong password).
    pub const UNAUTHORIZED_ACCESS: i32 = -102;
    /// `DigestMatchException`.
    pub const DIGEST_MATCH: i32 = -5;
    /// `WriteOnReadOnlyBookieException`.
    pub const WRITE_ON_READ_ONLY_BOOKIE: i32 = -104;
}

/// A failed command: BookKeeper's error code (`BKException.getCode()`, see
/// [`codes`]) and message, or one of the harness's own codes
/// ([`JavaError::HELPER`], [`JavaError::SESSION`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Java BookKeeper client error {code}: {message}")]
pub struct JavaError {
    /// The `BKException` code, or [`JavaError::HELPER`] / [`JavaError::SESSION`].
    pub code: i32,
    /// The exception's class and message.
    pub message: String,
}

impl JavaError {
    /// The helper refused the command (bad or missing field, a ledger that is not
    /// open in the session) or hit a Java exception that is not a
    /// `BKException`.
    pub const HELPER: i32 = -10001;
    /// The session failed: it died, did not answer within the call timeout, or
    /// answered something that is not the expected JSON.
    pub const SESSION: i32 = -10000;

    pub(super) fn session(message: impl Into<String>) -> JavaError {
        JavaError {
            code: JavaError::SESSION,
            message: message.into(),
        }
    }
}

/// A digest type, named as Java names it (`BookKeeper.DigestType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum DigestType {
    /// `CRC32`.
    #[serde(rename = "CRC32")]
    Crc32,
    /// `CRC32C` (BookKeeper's and Pulsar's default).
    #[default]
    #[serde(rename = "CRC32C")]
    Crc32c,
    /// `MAC` (HMAC-SHA1 keyed by the password).
    #[serde(rename = "MAC")]
    Mac,
    /// `DUMMY` (no checksum).
    #[serde(rename = "DUMMY")]
    Dummy,
}

impl DigestType {
    /// The Java name (`CRC32`, `CRC32C`, `MAC`, `DUMMY`).
    pub fn java_name(self) -> &'static str {
        match self {
            DigestType::Crc32 => "CRC32",
            DigestType::Crc32c => "CRC32C",
            DigestType::Mac => "MAC",
            DigestType::Dummy => "DUMMY",
        }
    }
}

/// What [`JavaClient::create`](super::JavaClient::create) creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// Ensemble size (E).
    pub ensemble: u32,
    /// Write quorum (WQ).
    pub write_quorum: u32,
    /// Ack quorum (AQ).
    pub ack_quorum: u32,
    /// Digest type.
    pub digest: DigestType,
    /// Password (may be empty).
    pub password: Vec<u8>,
    /// Custom metadata.
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// `Some(id)`: `createLedgerAdv` with that id (entries are then added with
    /// explicit ids, [`JavaClient::add_at`](super::JavaClient::add_at)).
    pub ledger_id: Option<i64>,
}

impl Default for CreateOptions {
    /// E3/WQ2/AQ2, CRC32C, no password, no custom metadata.
    fn default() -> Self {
        CreateOptions::new(3, 2, 2)
    }
}

impl CreateOptions {
    /// E/WQ/AQ with CRC32C, no password, no custom metadata.
    pub fn new(ensemble: u32, write_quorum: u32, ack_quorum: u32) -> CreateOptions {
        CreateOptions {
            ensemble,
            write_quorum,
            ack_quorum,
            digest: DigestType::Crc32c,
            password: Vec::new(),
            custom_metadata: BTreeMap::new(),
            ledger_id: None,
        }
    }

    /// Sets the digest type.
    pub fn digest(mut self, digest: DigestType) -> Self {
        self.digest = digest;
        self
    }

    /// Sets the password.
    pub fn password(mut self, password: impl Into<Vec<u8>>) -> Self {
        self.password = password.into();
        self
    }

    /// Adds a custom metadata entry.
    pub fn custom(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.custom_metadata.insert(key.into(), value.into());
        self
    }

    /// Creates with `createLedgerAdv` at this id.
    pub fn ledger_id(mut self, id: i64) -> Self {
        self.ledger_id = Some(id);
        self
    }

    pub(super) fn to_json(&self) -> Value {
        let custom: serde_json::Map<String, Value> = self
            .custom_metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(B64.encode(v))))
            .collect();
        let mut cmd = json!({
            "cmd": "create",
            "ensemble": self.ensemble,
            "writeQuorum": self.write_quorum,
            "ackQuorum": self.ack_quorum,
            "digest": self.digest.java_name(),
            "password": B64.encode(&self.password),
            "customMetadata": custom,
        });
        if let Some(id) = self.ledger_id {
            cmd["ledgerId"] = json!(id);
        }
        cmd
    }
}

/// What [`JavaClient::open`](super::JavaClient::open) reports of the opened handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenedLedger {
    /// The handle's last add confirmed.
    pub lac: i64,
    /// Whether the ledger's metadata says CLOSED.
    pub closed: bool,
    /// The handle's length in bytes.
    pub length: i64,
    /// The metadata's last entry id (-1 unless closed).
    pub last_entry_id: i64,
}

/// One entry read by [`JavaClient::read`](super::JavaClient::read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The entry id.
    pub entry_id: i64,
    /// The payload.
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
}

/// One ensemble of a ledger: the bookies that hold entries from
/// `first_entry_id` on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    /// The first entry written to this ensemble.
    pub first_entry_id: i64,
    /// Bookie ids, in bookie-index order.
    pub bookies: Vec<String>,
}

/// A ledger's metadata as the Java client reads it from the metadata store
/// (`BookKeeper.getLedgerMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JavaLedgerMetadata {
    /// The ledger id.
    pub ledger_id: i64,
    /// Ensemble size.
    pub ensemble_size: u32,
    /// Write quorum size.
    pub write_quorum_size: u32,
    /// Ack quorum size.
    pub ack_quorum_size: u32,
    /// The digest type (`api.DigestType` name: `CRC32`, `CRC32C`, `MAC`,
    /// `DUMMY`).
    pub digest_type: DigestType,
    /// Whether the metadata carries a password.
    pub has_password: bool,
    /// The password (empty when none).
    #[serde(with = "base64_bytes")]
    pub password: Vec<u8>,
    /// Custom metadata.
    #[serde(with = "base64_map")]
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// `OPEN`, `IN_RECOVERY` or `CLOSED`.
    pub state: String,
    /// Whether the state is `CLOSED`.
    pub closed: bool,
    /// The last entry id (-1 unless closed).
    pub last_entry_id: i64,
    /// The length in bytes (0 unless closed).
    pub length: i64,
    /// Creation time in ms (the znode's ctime unless the creator stored one).
    pub ctime: i64,
    /// The creation token.
    pub c_token: i64,
    /// The metadata format version (3 for ledgers written by 4.9 and later).
    pub metadata_format_version: i32,
    /// The ensembles, by first entry id.
    pub ensembles: Vec<Segment>,
}

/// What [`JavaClient::bench_add`](super::JavaClient::bench_add) measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchAddOptions {
    /// How many entries to add.
    pub entries: u32,
    /// Payload size in bytes.
    pub size: u32,
    /// At most this many adds in flight.
    pub inflight: u32,
    /// Ensemble size.
    pub ensemble: u32,
    /// Write quorum.
    pub write_quorum: u32,
    /// Ack quorum.
    pub ack_quorum: u32,
}

/// The result of [`JavaClient::bench_add`](super::JavaClient::bench_add).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchAddResult {
    /// The ledger written (closed at the end; read it with
    /// [`JavaClient::bench_read`](super::JavaClient::bench_read)).
    pub ledger_id: i64,
    /// Entries added.
    pub entries: u64,
    /// Wall time of the adds.
    pub seconds: f64,
    /// Entries per second.
    pub entries_per_sec: f64,
    /// Payload MiB per second.
    pub mib_per_sec: f64,
    /// Median add latency, µs.
    pub p50_micros: f64,
    /// 99th percentile add latency, µs, each add timed from the call.
    pub p99_micros: f64,
    /// 99th percentile add latency, µs, each add timed from the moment the
    /// window let it go: the completion that freed its permit (the start,
    /// for the first window's adds). This counts the time a freed permit
    /// waits for the issuing thread, which the latency from the call leaves
    /// out.
    pub window_p99_micros: f64,
    /// Adds in flight on average, from the call to the completion (the sum
    /// of their latencies over the wall time): at most the window, less when
    /// the issuing thread lags behind the completions.
    pub in_flight: f64,
}

/// The result of [`JavaClient::bench_read`](super::JavaClient::bench_read).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReadResult {
    /// Entries read.
    pub entries: u64,
    /// Wall time of the reads.
    pub seconds: f64,
    /// Entries per second.
    pub entries_per_sec: f64,
    /// Payload MiB per second.
    pub mib_per_sec: f64,
}

/// The result of [`JavaClient::copy_from`](super::JavaClient::copy_from) and
/// [`JavaClient::copy_pipelined`](super::JavaClient::copy_pipelined).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JavaCopyResult {
    /// Ledgers copied.
    pub ledgers: u64,
    /// Entries copied.
    pub entries: u64,
    /// Payload bytes copied.
    pub bytes: u64,
    /// Wall time of the copies.
    pub seconds: f64,
    /// Payload MiB per second.
    pub mib_per_sec: f64,
    /// Whether Netty's native epoll transport was available to the client
    /// (reported by `copy_pipelined` only).
    #[serde(default)]
    pub epoll: bool,
}

/// The payload the helper writes for the `n`-th entry of
/// [`JavaClient::add_many`](super::JavaClient::add_many) (counting from 0 in that call): the UTF-8 text
/// `entry-<n>` without a size, else `size` bytes where byte `k` is
/// `(n * 31 + k) mod 256`.
pub fn deterministic_payload(n: u64, size: Option<usize>) -> Vec<u8> {
    match size {
        None => format!("entry-{n}").into_bytes(),
        Some(size) => (0..size)
            .map(|k| (n.wrapping_mul(31).wrapping_add(k as u64) & 0xff) as u8)
            .collect(),
    }
}

/// Base64 (standard, padded) byte strings in JSON.
mod base64_bytes {
    use super::*;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// A JSON object of base64 values.
mod base64_map {
    use super::*;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Vec<u8>>, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(d)?;
        map.into_iter()
            .map(|(k, v)| {
                B64.decode(v)
                    .map(|v| (k, v))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn payloads_match_the_helper() {
        assert_eq!(deterministic_payload(7, None), b"entry-7");
        let p = deterministic_payload(3, Some(300));
        assert_eq!(p.len(), 300);
        assert_eq!(p[0], 93);
        assert_eq!(p[1], 94);
        assert_eq!(p[200], ((93 + 200) % 256) as u8);
    }

    #[test]
    fn create_options_encode_as_the_helper_expects() {
        let json = CreateOptions::new(3, 2, 2)
            .digest(DigestType::Mac)
            .password("pw")
            .custom("k", b"v".to_vec())
            .ledger_id(42)
            .to_json();
        assert_eq!(json["cmd"], "create");
        assert_eq!(json["digest"], "MAC");
        assert_eq!(json["password"], B64.encode("pw"));
        assert_eq!(json["customMetadata"]["k"], B64.encode("v"));
        assert_eq!(json["ledgerId"], 42);
    }

    #[test]
    fn metadata_answers_decode() {
        let answer = json!({
            "ok": true, "id": 3, "ledgerId": 5, "ensembleSize": 3, "writeQuorumSize": 2,
            "ackQuorumSize": 2, "digestType": "CRC32C", "hasPassword": true,
            "password": B64.encode("pw"), "customMetadata": {"k": B64.encode("v")},
            "state": "CLOSED", "closed": true, "lastEntryId": 9, "length": 90, "ctime": 1,
            "cToken": 77, "metadataFormatVersion": 3,
            "ensembles": [{"firstEntryId": 0, "bookies": ["127.0.0.1:1", "127.0.0.1:2"]}],
        });
        let md: JavaLedgerMetadata = parse(answer).unwrap();
        assert_eq!(md.digest_type, DigestType::Crc32c);
        assert_eq!(md.password, b"pw");
        assert_eq!(md.custom_metadata["k"], b"v");
        assert_eq!(md.c_token, 77);
        assert_eq!(md.ensembles[0].bookies.len(), 2);
    }
}
