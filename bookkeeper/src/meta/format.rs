//! Ledger metadata as BookKeeper 4.9+ stores it in ZooKeeper: format version 3,
//! i.e. the text line `BookieMetadataFormatVersion\t3\n`, then a varint length,
//! then a `LedgerMetadataFormat` protobuf (`LedgerMetadataSerDe`).

use std::collections::BTreeMap;

use bkswitch_bk_client::{
    BkError, BkErrorKind, DigestType, Ensemble, EntryId, LedgerId, LedgerMetadata, LedgerState,
};
use prost::Message;

use crate::proto::ledger_metadata_format::{self as lmf, CMetadataMapEntry, Segment};
use crate::proto::LedgerMetadataFormat;

/// The header line every metadata version starts with (without the number).
const VERSION_KEY: &[u8] = b"BookieMetadataFormatVersion\t";

/// The metadata format version this client writes (BookKeeper's
/// `CURRENT_METADATA_FORMAT_VERSION`).
pub const METADATA_FORMAT_VERSION: u32 = 3;

/// Everything BookKeeper records about a ledger, with the bits the public
/// [`LedgerMetadata`] leaves out (the creation token, whether ctime is stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRecord {
    /// Ledger id (not stored in the value; it is the znode path).
    pub ledger_id: LedgerId,
    /// Ensemble size.
    pub ensemble_size: u32,
    /// Write quorum size (`quorumSize` in the protobuf).
    pub write_quorum_size: u32,
    /// Ack quorum size.
    pub ack_quorum_size: u32,
    /// State.
    pub state: LedgerState,
    /// Last entry id; `-1` unless closed.
    pub last_entry_id: EntryId,
    /// Length; `0` unless closed.
    pub length: u64,
    /// Ensembles, ordered by first entry id.
    pub ensembles: Vec<Ensemble>,
    /// Digest type (absent only in metadata of very old clients).
    pub digest_type: Option<DigestType>,
    /// Password.
    pub password: Vec<u8>,
    /// Creation time stored in the value (field 10), when the writer stored one.
    pub stored_ctime: Option<i64>,
    /// Creation time to report: the stored one, else the znode's.
    pub ctime: i64,
    /// Custom metadata.
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// Creation token (random on create, so a create retried after a lost reply
    /// recognises its own znode).
    pub ctoken: i64,
}

impl LedgerRecord {
    /// The public view of this record.
    pub fn to_metadata(&self, default_digest: DigestType) -> LedgerMetadata {
        LedgerMetadata {
            ledger_id: self.ledger_id,
            ensembles: self.ensembles.clone(),
            ensemble_size: self.ensemble_size,
            write_quorum_size: self.write_quorum_size,
            ack_quorum_size: self.ack_quorum_size,
            digest_type: self.digest_type.unwrap_or(default_digest),
            password: self.password.clone(),
            custom_metadata: self.custom_metadata.clone(),
            state: self.state,
            last_entry_id: self.last_entry_id,
            length: self.length,
            ctime: self.ctime,
        }
    }

    /// The ensemble that holds `entry_id` (the last one starting at or below it).
    pub fn ensemble_for(&self, entry_id: EntryId) -> &Ensemble {
        let i = self
            .ensembles
            .partition_point(|e| e.first_entry_id <= entry_id.max(0));
        &self.ensembles[i.saturating_sub(1)]
    }

    /// The current (last) ensemble.
    pub fn last_ensemble(&self) -> &Ensemble {
        self.ensembles.last().expect("a ledger has an ensemble")
    }
}

/// Encodes a record as format version 3, byte-identical to what BookKeeper's
/// `LedgerMetadataSerDe.serialize` writes for the same metadata.
pub fn encode(record: &LedgerRecord) -> Vec<u8> {
    let closed = record.state == LedgerState::Closed;
    let msg = LedgerMetadataFormat {
        quorum_size: record.write_quorum_size as i32,
        ensemble_size: record.ensemble_size as i32,
        length: if closed { record.length as i64 } else { 0 },
        last_entry_id: Some(if closed { record.last_entry_id } else { -1 }),
        state: match record.state {
            LedgerState::Open => lmf::State::Open,
            LedgerState::InRecovery => lmf::State::InRecovery,
            LedgerState::Closed => lmf::State::Closed,
        } as i32,
        segment: record
            .ensembles
            .iter()
            .map(|e| Segment {
                ensemble_member: e.bookies.clone(),
                first_entry_id: e.first_entry_id,
            })
            .collect(),
        digest_type: record.digest_type.map(|d| d.metadata_value()),
        password: Some(record.password.clone()),
        ack_quorum_size: Some(record.ack_quorum_size as i32),
        ctime: record.stored_ctime,
        custom_metadata: record
            .custom_metadata
            .iter()
            .map(|(k, v)| CMetadataMapEntry {
                key: Some(k.clone()),
                value: Some(v.clone()),
            })
            .collect(),
        c_token: Some(record.ctoken),
    };
    let mut out = Vec::with_capacity(VERSION_KEY.len() + 2 + 12 + msg.encoded_len());
    out.extend_from_slice(VERSION_KEY);
    out.extend_from_slice(METADATA_FORMAT_VERSION.to_string().as_bytes());
    out.push(b'\n');
    msg.encode_length_delimited(&mut out)
        .expect("a Vec grows as needed");
    out
}

fn corrupt(ledger_id: LedgerId, why: impl std::fmt::Display) -> BkError {
    BkError::new(
        BkErrorKind::Other,
        format!("the metadata of ledger {ledger_id} cannot be decoded: {why}"),
    )
    .with_ledger(ledger_id)
}

/// Decodes a metadata value. `znode_ctime` (the znode's creation time) is the
/// creation time reported when the value stores none, as BookKeeper does.
///
/// # Errors
/// [`BkErrorKind::Other`] naming the ledger when the value is not format
/// version 3 metadata (versions 1 and 2, text formats older than BookKeeper 4.9,
/// are not supported) or is malformed.
pub fn decode(
    ledger_id: LedgerId,
    bytes: &[u8],
    znode_ctime: i64,
) -> Result<LedgerRecord, BkError> {
    let rest = bytes.strip_prefix(VERSION_KEY).ok_or_else(|| {
        corrupt(
            ledger_id,
            "it does not start with `BookieMetadataFormatVersion`",
        )
    })?;
    let nl = rest
        .iter()
        .take(11)
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt(ledger_id, "the version line has no end"))?;
    let version: u32 = std::str::from_utf8(&rest[..nl])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt(ledger_id, "the format version is not a number"))?;
    if version != METADATA_FORMAT_VERSION {
        return Err(corrupt(
            ledger_id,
            format!(
                "format version {version} is not supported (only version 3, written since BookKeeper 4.9)"
            ),
        ));
    }
    let msg = LedgerMetadataFormat::decode_length_delimited(&rest[nl + 1..])
        .map_err(|e| corrupt(ledger_id, e))?;
    let state = match lmf::State::try_from(msg.state) {
        Ok(lmf::State::Open) => LedgerState::Open,
        Ok(lmf::State::InRecovery) => LedgerState::InRecovery,
        Ok(lmf::State::Closed) => LedgerState::Closed,
        Err(_) => return Err(corrupt(ledger_id, format!("unknown state {}", msg.state))),
    };
    let positive = |v: i32, what: &str| {
        u32::try_from(v)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| corrupt(ledger_id, format!("{what} {v} is not positive")))
    };
    let ensemble_size = positive(msg.ensemble_size, "ensemble size")?;
    let write_quorum_size = positive(msg.quorum_size, "write quorum")?;
    let ack_quorum_size = positive(msg.ack_quorum_size.unwrap_or(msg.quorum_size), "ack quorum")?;
    // The quorum arithmetic (write sets, the recovery's absence threshold
    // `WQ - AQ + 1`, the acknowledgement masks) holds only for these.
    if ensemble_size > crate::errors::MAX_ENSEMBLE_SIZE {
        return Err(corrupt(
            ledger_id,
            format!(
                "ensemble size {ensemble_size} is over the {} bookies this client handles",
                crate::errors::MAX_ENSEMBLE_SIZE
            ),
        ));
    }
    if write_quorum_size > ensemble_size {
        return Err(corrupt(
            ledger_id,
            format!(
                "write quorum {write_quorum_size} is larger than the ensemble size {ensemble_size}"
            ),
        ));
    }
    if ack_quorum_size > write_quorum_size {
        return Err(corrupt(
            ledger_id,
            format!(
                "ack quorum {ack_quorum_size} is larger than the write quorum {write_quorum_size}"
            ),
        ));
    }
    if msg.segment.is_empty() {
        return Err(corrupt(ledger_id, "it has no ensemble"));
    }
    let mut ensembles = Vec::with_capacity(msg.segment.len());
    for s in msg.segment {
        if s.ensemble_member.len() != ensemble_size as usize {
            return Err(corrupt(
                ledger_id,
                format!(
                    "an ensemble has {} bookies, the ensemble size is {ensemble_size}",
                    s.ensemble_member.len()
                ),
            ));
        }
        if ensembles
            .last()
            .is_some_and(|e: &Ensemble| e.first_entry_id > s.first_entry_id)
        {
            return Err(corrupt(
                ledger_id,
                "ensembles are not ordered by first entry",
            ));
        }
        ensembles.push(Ensemble {
            first_entry_id: s.first_entry_id,
            bookies: s.ensemble_member,
        });
    }
    // As `LedgerMetadataSerDe.decodeFormat`: password and digest only when the
    // password field is present.
    let (digest_type, password) = match msg.password {
        Some(password) => (
            match msg.digest_type {
                Some(v) => Some(
                    DigestType::from_metadata_value(v)
                        .ok_or_else(|| corrupt(ledger_id, format!("unknown digest type {v}")))?,
                ),
                None => None,
            },
            password,
        ),
        None => (None, Vec::new()),
    };
    let closed = state == LedgerState::Closed;
    Ok(LedgerRecord {
        ledger_id,
        ensemble_size,
        write_quorum_size,
        ack_quorum_size,
        state,
        last_entry_id: if closed {
            msg.last_entry_id.unwrap_or(-1)
        } else {
            -1
        },
        length: if closed {
            u64::try_from(msg.length)
                .map_err(|_| corrupt(ledger_id, format!("negative length {}", msg.length)))?
        } else {
            0
        },
        ensembles,
        digest_type,
        password,
        stored_ctime: msg.ctime,
        ctime: msg.ctime.unwrap_or(znode_ctime),
        custom_metadata: msg
            .custom_metadata
            .into_iter()
            .map(|e| (e.key.unwrap_or_default(), e.value.unwrap_or_default()))
            .collect(),
        ctoken: msg.c_token.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The v3 blob of BookKeeper's own `TestLedgerMetadataSerDe` (ledger 59),
    /// which Java re-serializes byte-identically.
    const UPSTREAM_V3: &str = "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTMKYAgCEAMYACD///////////8BKAEyMgoOMTkyLjAuMi4xOjMxODEKDjE5Mi4wLjIuMjozMTgxCg4xOTIuMC4yLjM6MzE4MRAAOANCBmZvb2JhckgBUP///////////wFgAA==";

    fn base64(s: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let mut acc = 0u32;
        let mut bits = 0;
        for c in s.bytes().filter(|c| *c != b'=') {
            acc = (acc << 6) | ALPHABET.iter().position(|a| *a == c).unwrap() as u32;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }

    #[test]
    fn upstream_golden_blob_round_trips_byte_exact() {
        let bytes = base64(UPSTREAM_V3);
        let r = decode(59, &bytes, 1234).unwrap();
        assert_eq!(r.write_quorum_size, 2);
        assert_eq!(r.ensemble_size, 3);
        assert_eq!(r.ack_quorum_size, 1);
        assert_eq!(r.state, LedgerState::Open);
        assert_eq!(r.last_entry_id, -1);
        assert_eq!(r.length, 0);
        assert_eq!(
            r.ensembles,
            vec![Ensemble {
                first_entry_id: 0,
                bookies: vec![
                    "192.0.2.1:3181".into(),
                    "192.0.2.2:3181".into(),
                    "192.0.2.3:3181".into()
                ]
            }]
        );
        assert_eq!(r.digest_type, Some(DigestType::Crc32c));
        assert_eq!(r.password, b"foobar");
        assert_eq!(r.stored_ctime, Some(-1));
        assert_eq!(r.ctime, -1);
        assert_eq!(r.ctoken, 0);
        assert_eq!(encode(&r), bytes);
    }

    fn sample() -> LedgerRecord {
        LedgerRecord {
            ledger_id: 1 << 40,
            ensemble_size: 3,
            write_quorum_size: 2,
            ack_quorum_size: 2,
            state: LedgerState::Closed,
            last_entry_id: 99,
            length: 12345,
            ensembles: vec![
                Ensemble {
                    first_entry_id: 0,
                    bookies: vec!["a:1".into(), "b:1".into(), "c:1".into()],
                },
                Ensemble {
                    first_entry_id: 50,
                    bookies: vec!["a:1".into(), "d:1".into(), "c:1".into()],
                },
            ],
            digest_type: Some(DigestType::Mac),
            password: Vec::new(),
            stored_ctime: None,
            ctime: 777,
            custom_metadata: [("k".to_owned(), vec![0, 255]), ("e".to_owned(), vec![])]
                .into_iter()
                .collect(),
            ctoken: 4242,
        }
    }

    #[test]
    fn round_trip_with_segments_custom_metadata_and_no_ctime() {
        let r = sample();
        let bytes = encode(&r);
        assert!(bytes.starts_with(b"BookieMetadataFormatVersion\t3\n"));
        let back = decode(r.ledger_id, &bytes, 777).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.ensemble_for(0).first_entry_id, 0);
        assert_eq!(back.ensemble_for(49).first_entry_id, 0);
        assert_eq!(back.ensemble_for(50).first_entry_id, 50);
        assert_eq!(back.ensemble_for(1000).first_entry_id, 50);
        assert_eq!(back.ensemble_for(-1).first_entry_id, 0);
        // An open ledger stores lastEntryId -1 and length 0 whatever the record says.
        let mut open = r.clone();
        open.state = LedgerState::Open;
        let back = decode(r.ledger_id, &encode(&open), 777).unwrap();
        assert_eq!((back.last_entry_id, back.length), (-1, 0));
    }

    #[test]
    fn bad_values_are_refused_with_the_ledger_named() {
        let good = encode(&sample());
        let mut v2 = b"BookieMetadataFormatVersion\t2\n".to_vec();
        v2.extend_from_slice(b"quorumSize: 2\n");
        for (bytes, needle) in [
            (b"garbage".to_vec(), "does not start"),
            (v2, "format version 2"),
            (good[..good.len() - 3].to_vec(), "cannot be decoded"),
        ] {
            let e = decode(7, &bytes, 0).unwrap_err();
            assert_eq!(e.ledger_id(), Some(7));
            assert!(e.to_string().contains(needle), "{e}");
        }
        let mut no_ensemble = sample();
        no_ensemble.ensembles.clear();
        assert!(decode(7, &encode(&no_ensemble), 0)
            .unwrap_err()
            .to_string()
            .contains("no ensemble"));
    }
}
