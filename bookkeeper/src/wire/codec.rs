//! The bookie protocol version 2 ("pre-v3", no protobuf), byte for byte as
//! BookKeeper's `BookieProtoEncoding` writes and reads it.
//!
//! Every frame is a big-endian `u32` length that does not count itself, then the
//! body. A request body starts with the header word `version << 24 | opcode <<
//! 16 | flags`:
//!
//! | request | body |
//! |---|---|
//! | ADD (op 1) | header · master key (20) · entry (32-byte header, digest, payload) |
//! | READ (op 2) | header · ledger id · entry id · master key (20, only with the fence flag) |
//! | BATCH_READ (op 7, bookies ≥ 4.17) | header · ledger id · first entry id · request id (`i64`) · max count (`i32`) · max bytes (`i64`) |
//!
//! A response body is the header word, a status code (`i32`), the ledger and
//! entry id of the request, and for a successful READ the stored entry; a
//! BATCH_READ answer has the request id next, then each stored entry after
//! its length (`i32`), consecutive from the first id asked for. Version 2
//! has no request id for the other requests: responses are matched to
//! requests by `(opcode, ledger, entry)`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::digest::{DigestManager, HEADER_LEN, MASTER_KEY_LEN};

/// Protocol version written in every request header.
pub(crate) const PROTOCOL_VERSION: u8 = 2;
/// ADD opcode.
pub(crate) const OP_ADD: u8 = 1;
/// READ opcode.
pub(crate) const OP_READ: u8 = 2;
/// BATCH_READ opcode (BookKeeper 4.17's `BATCH_READ_ENTRY`): consecutive
/// entries from one bookie in one answer. Older bookies close the connection
/// on it.
pub(crate) const OP_BATCH_READ: u8 = 7;

/// READ flag: fence the ledger (carries the master key).
pub(crate) const FLAG_DO_FENCING: u16 = 0x1;
/// ADD flag: recovery add, allowed on a fenced ledger.
pub(crate) const FLAG_RECOVERY_ADD: u16 = 0x2;
/// Flag: high priority (recovery reads and adds).
pub(crate) const FLAG_HIGH_PRIORITY: u16 = 0x4;

/// The largest frame a bookie accepts by default (`nettyMaxFrameSizeBytes`,
/// 5 MiB). Larger entries are refused before they are sent.
pub(crate) const MAX_FRAME_LEN: usize = 5 * 1024 * 1024;

/// Length of the fixed part of every response body.
pub(crate) const RESPONSE_FIXED_LEN: usize = 24;

/// Status codes of version-2 responses (`BookieProtocol`).
#[allow(
    dead_code,
    reason = "the whole table of BookKeeper's codes, some only named in docs"
)]
pub(crate) mod rc {
    /// Success.
    pub(crate) const EOK: i32 = 0;
    /// The bookie does not know the ledger.
    pub(crate) const ENOLEDGER: i32 = 1;
    /// The bookie does not have the entry.
    pub(crate) const ENOENTRY: i32 = 2;
    /// Malformed or unsupported request.
    pub(crate) const EBADREQ: i32 = 100;
    /// I/O error on the bookie.
    pub(crate) const EIO: i32 = 101;
    /// Wrong master key.
    pub(crate) const EUA: i32 = 102;
    /// Unsupported protocol version.
    pub(crate) const EBADVERSION: i32 = 103;
    /// The ledger is fenced.
    pub(crate) const EFENCED: i32 = 104;
    /// The bookie is read-only.
    pub(crate) const EREADONLY: i32 = 105;
    /// The bookie is overloaded.
    pub(crate) const ETOOMANYREQUESTS: i32 = 106;
    /// The bookie cannot tell whether it has the entry.
    pub(crate) const EUNKNOWNLEDGERSTATE: i32 = 107;
}

/// The header word of a request.
pub(crate) fn header_word(op: u8, flags: u16) -> u32 {
    (u32::from(PROTOCOL_VERSION) << 24) | (u32::from(op) << 16) | u32::from(flags)
}

/// The fields of an entry header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryHeader {
    /// Ledger id.
    pub(crate) ledger_id: i64,
    /// Entry id.
    pub(crate) entry_id: i64,
    /// The writer's last add confirmed when it sent the entry.
    pub(crate) last_add_confirmed: i64,
    /// Ledger length in payload bytes including this entry.
    pub(crate) length: i64,
}

impl EntryHeader {
    fn bytes(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&self.ledger_id.to_be_bytes());
        h[8..16].copy_from_slice(&self.entry_id.to_be_bytes());
        h[16..24].copy_from_slice(&self.last_add_confirmed.to_be_bytes());
        h[24..32].copy_from_slice(&self.length.to_be_bytes());
        h
    }
}

/// Encodes a whole ADD frame (length prefix included): the bytes are the same
/// for every bookie of the write set, so they are built once and shared.
pub(crate) fn encode_add(
    master_key: &[u8; MASTER_KEY_LEN],
    digest: &DigestManager,
    header: EntryHeader,
    payload: &[u8],
    flags: u16,
) -> Bytes {
    let body_len = 4 + MASTER_KEY_LEN + HEADER_LEN + digest.len() + payload.len();
    let mut buf = BytesMut::with_capacity(4 + body_len);
    buf.put_u32(body_len as u32);
    buf.put_u32(header_word(OP_ADD, flags));
    buf.put_slice(master_key);
    let h = header.bytes();
    buf.put_slice(&h);
    let at = buf.len();
    buf.put_bytes(0, digest.len());
    digest.compute_into(&h, payload, &mut buf[at..]);
    buf.put_slice(payload);
    buf.freeze()
}

/// The frame length an ADD of `payload_len` bytes takes with `digest_len` digest
/// bytes (to refuse entries above [`MAX_FRAME_LEN`] up front).
pub(crate) fn add_frame_len(digest_len: usize, payload_len: usize) -> usize {
    4 + MASTER_KEY_LEN + HEADER_LEN + digest_len + payload_len
}

/// Encodes a whole READ frame. `master_key` must be given with
/// [`FLAG_DO_FENCING`] and is ignored otherwise.
pub(crate) fn encode_read(
    ledger_id: i64,
    entry_id: i64,
    flags: u16,
    master_key: Option<&[u8; MASTER_KEY_LEN]>,
) -> Bytes {
    let key = if flags & FLAG_DO_FENCING != 0 {
        master_key
    } else {
        None
    };
    let body_len = 4 + 16 + key.map_or(0, |_| MASTER_KEY_LEN);
    let mut buf = BytesMut::with_capacity(4 + body_len);
    buf.put_u32(body_len as u32);
    buf.put_u32(header_word(OP_READ, flags));
    buf.put_i64(ledger_id);
    buf.put_i64(entry_id);
    if let Some(key) = key {
        buf.put_slice(key);
    }
    buf.freeze()
}

/// Encodes a whole BATCH_READ frame: up to `max_count` consecutive entries from
/// `first`, at most `max_bytes` in the answer (the bookie stops earlier at an
/// entry it does not have, and at its own `maxBatchReadSize`).
pub(crate) fn encode_batch_read(
    ledger_id: i64,
    first: i64,
    request_id: i64,
    max_count: i32,
    max_bytes: i64,
) -> Bytes {
    let body_len = 4 + 8 + 8 + 8 + 4 + 8;
    let mut buf = BytesMut::with_capacity(4 + body_len);
    buf.put_u32(body_len as u32);
    buf.put_u32(header_word(OP_BATCH_READ, 0));
    buf.put_i64(ledger_id);
    buf.put_i64(first);
    buf.put_i64(request_id);
    buf.put_i32(max_count);
    buf.put_i64(max_bytes);
    buf.freeze()
}

/// The stored entries of a successful BATCH_READ answer's body (after the
/// request id), in order; they share the frame's memory.
///
/// # Errors
/// [`DecodeError::BadBatch`] when a length runs past the frame.
pub(crate) fn split_batch(mut body: Bytes) -> Result<Vec<Bytes>, DecodeError> {
    let mut entries = Vec::new();
    while !body.is_empty() {
        if body.len() < 4 {
            return Err(DecodeError::BadBatch(body.len()));
        }
        let len = body.get_i32();
        match usize::try_from(len) {
            Ok(len) if len <= body.len() => entries.push(body.split_to(len)),
            _ => return Err(DecodeError::BadBatch(body.len())),
        }
    }
    Ok(entries)
}

/// A decoded response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Response {
    /// The opcode answered.
    pub(crate) op: u8,
    /// The status code ([`rc`]).
    pub(crate) rc: i32,
    /// The ledger id of the request.
    pub(crate) ledger_id: i64,
    /// The entry id of the request (`-1` for a last-add-confirmed read).
    pub(crate) entry_id: i64,
    /// The stored entry of a successful READ (header, digest, payload), the
    /// length-prefixed entries of a BATCH_READ ([`split_batch`]); empty
    /// otherwise.
    pub(crate) body: Bytes,
}

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DecodeError {
    /// The frame is shorter than the fixed part of a response.
    #[error("response frame of {0} bytes is shorter than its fixed part")]
    Short(usize),
    /// The opcode is not one this client sends.
    #[error("response with unexpected opcode {0}")]
    UnknownOp(u8),
    /// The frame announces more than [`MAX_FRAME_LEN`] bytes.
    #[error("frame of {0} bytes is above the {MAX_FRAME_LEN}-byte limit")]
    TooLarge(usize),
    /// A BATCH_READ answer whose entry lengths do not add up.
    #[error("batch read answer with a bad entry length ({0} bytes left)")]
    BadBatch(usize),
}

/// Decodes one response body (the bytes after the length prefix).
///
/// # Errors
/// [`DecodeError`] for a frame that is not a version-2 ADD, READ or
/// BATCH_READ response.
pub(crate) fn decode_response(mut frame: Bytes) -> Result<Response, DecodeError> {
    if frame.len() < RESPONSE_FIXED_LEN {
        return Err(DecodeError::Short(frame.len()));
    }
    let header = frame.get_u32();
    let op = ((header >> 16) & 0xff) as u8;
    if op != OP_ADD && op != OP_READ && op != OP_BATCH_READ {
        return Err(DecodeError::UnknownOp(op));
    }
    let rc = frame.get_i32();
    let ledger_id = frame.get_i64();
    let entry_id = frame.get_i64();
    if op == OP_BATCH_READ {
        // The request id: answers are matched by (opcode, ledger, first entry)
        // like every other answer, the caller checks what came back.
        if frame.len() < 8 {
            return Err(DecodeError::Short(RESPONSE_FIXED_LEN + frame.len()));
        }
        frame.advance(8);
    }
    Ok(Response {
        op,
        rc,
        ledger_id,
        entry_id,
        body: frame,
    })
}

/// Splits complete frames off the front of `buf` (the bytes read so far).
///
/// # Errors
/// [`DecodeError::TooLarge`] when a frame announces more than
/// [`MAX_FRAME_LEN`] bytes: the connection cannot be trusted any more.
pub(crate) fn split_frame(buf: &mut BytesMut) -> Result<Option<Bytes>, DecodeError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME_LEN + 1024 {
        return Err(DecodeError::TooLarge(len));
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// A stored entry, checked against its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VerifiedEntry {
    /// The entry header.
    pub(crate) header: EntryHeader,
    /// The payload (shares the frame's memory).
    pub(crate) payload: Bytes,
}

/// Why a stored entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EntryError {
    /// Shorter than the header and the digest.
    #[error("entry of {len} bytes is shorter than its {need}-byte header and digest")]
    Short {
        /// Bytes received.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The entry belongs to another ledger.
    #[error("entry belongs to ledger {got}, not {expected}")]
    WrongLedger {
        /// The ledger asked for.
        expected: i64,
        /// The ledger in the entry.
        got: i64,
    },
    /// The entry has another id than the one asked for.
    #[error("entry has id {got}, not {expected}")]
    WrongEntry {
        /// The entry asked for.
        expected: i64,
        /// The entry id found.
        got: i64,
    },
    /// The digest does not match the bytes.
    #[error("digest mismatch (corrupt entry, or a wrong digest type or password)")]
    Digest,
}

/// Checks a stored entry: its ledger, its id (unless `expected_entry` is `None`,
/// as for the last-add-confirmed read) and its digest, as BookKeeper's
/// `DigestManager.verifyDigestAndReturnData` does.
///
/// # Errors
/// [`EntryError`] naming what does not match.
pub(crate) fn verify_entry(
    digest: &DigestManager,
    expected_ledger: i64,
    expected_entry: Option<i64>,
    body: Bytes,
) -> Result<VerifiedEntry, EntryError> {
    let need = HEADER_LEN + digest.len();
    if body.len() < need {
        return Err(EntryError::Short {
            len: body.len(),
            need,
        });
    }
    let h = &body[..HEADER_LEN];
    let read = |i: usize| i64::from_be_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    let header = EntryHeader {
        ledger_id: read(0),
        entry_id: read(8),
        last_add_confirmed: read(16),
        length: read(24),
    };
    if header.ledger_id != expected_ledger {
        return Err(EntryError::WrongLedger {
            expected: expected_ledger,
            got: header.ledger_id,
        });
    }
    if let Some(expected) = expected_entry {
        if header.entry_id != expected {
            return Err(EntryError::WrongEntry {
                expected,
                got: header.entry_id,
            });
        }
    }
    if !digest.verify(h, &body[need..], &body[HEADER_LEN..need]) {
        return Err(EntryError::Digest);
    }
    Ok(VerifiedEntry {
        header,
        payload: body.slice(need..),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::master_key;
    use bkswitch_bk_client::DigestType;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The v2 ADD frame of [formats §2](bkswitch_docs::formats): ledger 1, entry 0, LAC -1,
    /// length 5, "hello", CRC32C, empty password.
    #[test]
    fn add_frame_matches_known_bytes() {
        let d = DigestManager::new(DigestType::Crc32c, b"");
        let frame = encode_add(
            &master_key(b""),
            &d,
            EntryHeader {
                ledger_id: 1,
                entry_id: 0,
                last_add_confirmed: -1,
                length: 5,
            },
            b"hello",
            0,
        );
        assert_eq!(
            hex(&frame),
            concat!(
                "00000041",
                "02010000",
                "850bf1071c5e3d8c24235676f8816ae0cbe2f14f",
                "0000000000000001",
                "0000000000000000",
                "ffffffffffffffff",
                "0000000000000005",
                "e3a5f74d",
                "68656c6c6f"
            )
        );
        assert_eq!(frame.len(), 4 + add_frame_len(4, 5));
        // A bookie tells v2 from v3 by the first body byte: the version, 2, is
        // protobuf field number 0, which no v3 request can start with.
        assert_eq!(frame[4], 0x02);
    }

    #[test]
    fn read_frames_match_known_bytes() {
        let key = master_key(b"");
        assert_eq!(
            hex(&encode_read(1, -1, FLAG_DO_FENCING, Some(&key))),
            concat!(
                "00000028",
                "02020001",
                "0000000000000001",
                "ffffffffffffffff",
                "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"
            )
        );
        assert_eq!(
            hex(&encode_read(
                1,
                7,
                FLAG_DO_FENCING | FLAG_HIGH_PRIORITY,
                Some(&key)
            ))[..16],
            *"0000002802020005"
        );
        // A plain read carries no key, even when one is passed.
        assert_eq!(
            hex(&encode_read(1, 7, 0, Some(&key))),
            "000000140202000000000000000000010000000000000007"
        );
    }

    /// BookKeeper 4.17's `RequestEnDeCoderPreV3` writes a batched read as
    /// header, ledger, first entry, request id, max count, max size.
    #[test]
    fn batch_read_frame_matches_known_bytes() {
        assert_eq!(
            hex(&encode_batch_read(1, 2, 3, 16, 4096)),
            concat!(
                "00000028",
                "02070000",
                "0000000000000001",
                "0000000000000002",
                "0000000000000003",
                "00000010",
                "0000000000001000"
            )
        );
    }

    #[test]
    fn batch_answers_decode_and_split() {
        let mut wire = BytesMut::new();
        wire.put_u32(header_word(OP_BATCH_READ, 0));
        wire.put_i32(rc::EOK);
        wire.put_i64(9);
        wire.put_i64(4);
        wire.put_i64(77);
        for body in [&b"abc"[..], b"", b"de"] {
            wire.put_i32(body.len() as i32);
            wire.put_slice(body);
        }
        let r = decode_response(wire.clone().freeze()).unwrap();
        assert_eq!(
            (r.op, r.rc, r.ledger_id, r.entry_id),
            (OP_BATCH_READ, 0, 9, 4)
        );
        let entries = split_batch(r.body).unwrap();
        assert_eq!(entries, vec![&b"abc"[..], b"", b"de"]);
        // A length past the end, a negative one, a torn length: refused.
        for bad in [&[0, 0, 0, 9, 1][..], &[0xff, 0xff, 0xff, 0xff], &[0, 0]] {
            let mut b = wire.clone();
            b.put_slice(bad);
            let r = decode_response(b.freeze()).unwrap();
            assert!(matches!(split_batch(r.body), Err(DecodeError::BadBatch(_))));
        }
        // An error answer carries no entries; one without its request id is short.
        let mut e = BytesMut::new();
        e.put_u32(header_word(OP_BATCH_READ, 0));
        e.put_i32(rc::ENOENTRY);
        e.put_i64(9);
        e.put_i64(4);
        assert_eq!(
            decode_response(e.clone().freeze()),
            Err(DecodeError::Short(24))
        );
        e.put_i64(1);
        let r = decode_response(e.freeze()).unwrap();
        assert_eq!(r.rc, rc::ENOENTRY);
        assert!(split_batch(r.body).unwrap().is_empty());
    }

    #[test]
    fn responses_decode_and_split() {
        let mut wire = BytesMut::new();
        // ADD response, rc EFENCED.
        wire.put_u32(24);
        wire.put_u32(header_word(OP_ADD, 0));
        wire.put_i32(rc::EFENCED);
        wire.put_i64(9);
        wire.put_i64(3);
        // READ response with a body, split across two reads.
        let d = DigestManager::new(DigestType::Crc32, b"");
        let entry = encode_add(
            &master_key(b""),
            &d,
            EntryHeader {
                ledger_id: 9,
                entry_id: 4,
                last_add_confirmed: 3,
                length: 10,
            },
            b"abc",
            0,
        )
        .slice(4 + 4 + MASTER_KEY_LEN..);
        wire.put_u32((24 + entry.len()) as u32);
        wire.put_u32(header_word(OP_READ, 0));
        wire.put_i32(rc::EOK);
        wire.put_i64(9);
        wire.put_i64(-1);
        wire.put_slice(&entry);
        let mut tail = wire.split_off(30);
        let first = split_frame(&mut wire).unwrap().unwrap();
        let add = decode_response(first).unwrap();
        assert_eq!(
            (add.op, add.rc, add.ledger_id, add.entry_id),
            (1, 104, 9, 3)
        );
        assert!(split_frame(&mut wire).unwrap().is_none());
        wire.unsplit(tail.split());
        let read = decode_response(split_frame(&mut wire).unwrap().unwrap()).unwrap();
        assert_eq!((read.op, read.rc, read.entry_id), (OP_READ, 0, -1));
        let v = verify_entry(&d, 9, None, read.body.clone()).unwrap();
        assert_eq!(v.header.entry_id, 4);
        assert_eq!(v.header.last_add_confirmed, 3);
        assert_eq!(&v.payload[..], b"abc");
        assert_eq!(
            verify_entry(&d, 9, Some(5), read.body.clone()),
            Err(EntryError::WrongEntry {
                expected: 5,
                got: 4
            })
        );
        assert_eq!(
            verify_entry(&d, 8, Some(4), read.body.clone()),
            Err(EntryError::WrongLedger {
                expected: 8,
                got: 9
            })
        );
        let c = DigestManager::new(DigestType::Crc32c, b"");
        assert!(verify_entry(&c, 9, Some(4), read.body.clone()).is_err());
        assert_eq!(
            verify_entry(&d, 9, Some(4), read.body.slice(..20)),
            Err(EntryError::Short { len: 20, need: 40 })
        );
        assert!(wire.is_empty());
    }

    #[test]
    fn bad_frames_are_refused() {
        assert_eq!(
            decode_response(Bytes::from_static(&[0; 10])),
            Err(DecodeError::Short(10))
        );
        let mut b = BytesMut::new();
        b.put_u32(header_word(3, 0));
        b.put_bytes(0, 20);
        assert_eq!(decode_response(b.freeze()), Err(DecodeError::UnknownOp(3)));
        let mut big = BytesMut::new();
        big.put_u32(u32::MAX);
        assert!(matches!(
            split_frame(&mut big),
            Err(DecodeError::TooLarge(_))
        ));
    }
}
