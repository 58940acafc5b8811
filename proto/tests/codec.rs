//! The metadata-store value format: plain and compressed framing, hand-built
//! frames for every codec, every corruption case, and fuzzing for panics.

use bkswitch_proto::codec::{
    decode_managed_cursor_info, decode_managed_ledger_info, encode_managed_cursor_info,
    encode_managed_ledger_info, CodecError, MetadataKind, MAGIC, MAX_UNCOMPRESSED_SIZE,
};
use bkswitch_proto::ml::{self, managed_ledger_info::LedgerInfo, CompressionType};
use bkswitch_proto::{Message, Stamped};
use proptest::prelude::*;

mod common;
use common::wire;

const ALL: [CompressionType; 5] = [
    CompressionType::None,
    CompressionType::Lz4,
    CompressionType::Zlib,
    CompressionType::Zstd,
    CompressionType::Snappy,
];

fn sample_ledger_info() -> ml::ManagedLedgerInfo {
    let ledger_info = (0..200)
        .map(|i| {
            let mut ledger = LedgerInfo {
                ledger_id: (1 << 32) + i,
                entries: Some(1000 + i),
                size: Some(i * 4096),
                timestamp: Some(1_700_000_000_000 + i),
                ..Default::default()
            };
            ledger
                .set_cluster_stamp(if i % 2 == 0 { "blue" } else { "green" })
                .expect("stamp");
            ledger
        })
        .collect();
    ml::ManagedLedgerInfo {
        ledger_info,
        terminated_position: None,
        properties: vec![ml::KeyValue {
            key: "owner".to_owned(),
            value: "tenant-a".to_owned(),
        }],
    }
}

fn sample_cursor_info() -> ml::ManagedCursorInfo {
    let range = |i: i64| ml::MessageRange {
        lower_endpoint: ml::NestedPositionInfo {
            ledger_id: 1 << 33,
            entry_id: i * 2,
        },
        upper_endpoint: ml::NestedPositionInfo {
            ledger_id: 1 << 33,
            entry_id: i * 2 + 1,
        },
    };
    let mut cursor = ml::ManagedCursorInfo {
        cursors_ledger_id: 5_000_000_000,
        mark_delete_ledger_id: Some(1 << 33),
        mark_delete_entry_id: Some(-1),
        individual_deleted_messages: (0..300).map(range).collect(),
        ..Default::default()
    };
    cursor.set_cluster_stamp("blue").expect("stamp");
    cursor
}

/// Splits a framed value into (compression type, uncompressed size, payload).
fn split_frame(value: &[u8]) -> (i32, i32, &[u8]) {
    assert_eq!(u16::from_be_bytes([value[0], value[1]]), MAGIC);
    let len = u32::from_be_bytes([value[2], value[3], value[4], value[5]]) as usize;
    let metadata = ml::ManagedLedgerInfoMetadata::decode(&value[6..6 + len]).expect("metadata");
    (
        metadata.compression_type,
        metadata.uncompressed_size,
        &value[6 + len..],
    )
}

// ------------------------------------------------------------------ round trips

#[test]
fn none_is_the_plain_protobuf() {
    let info = sample_ledger_info();
    let value = encode_managed_ledger_info(&info, CompressionType::None).unwrap();
    assert_eq!(value, info.encode_to_vec());
    assert_eq!(decode_managed_ledger_info(&value).unwrap(), info);

    let cursor = sample_cursor_info();
    let value = encode_managed_cursor_info(&cursor, CompressionType::None).unwrap();
    assert_eq!(value, cursor.encode_to_vec());
    assert_eq!(decode_managed_cursor_info(&value).unwrap(), cursor);
}

#[test]
fn every_codec_round_trips_managed_ledger_info() {
    let info = sample_ledger_info();
    let plain = info.encode_to_vec();
    for compression in ALL {
        let value = encode_managed_ledger_info(&info, compression).unwrap();
        if compression != CompressionType::None {
            let (kind, size, payload) = split_frame(&value);
            assert_eq!(kind, compression as i32);
            assert_eq!(size as usize, plain.len());
            assert!(
                payload.len() < plain.len(),
                "{compression:?} did not compress"
            );
        }
        assert_eq!(
            decode_managed_ledger_info(&value).unwrap(),
            info,
            "{compression:?}"
        );
    }
}

#[test]
fn every_codec_round_trips_managed_cursor_info() {
    let cursor = sample_cursor_info();
    let plain = cursor.encode_to_vec();
    for compression in ALL {
        let value = encode_managed_cursor_info(&cursor, compression).unwrap();
        if compression != CompressionType::None {
            let (kind, size, _) = split_frame(&value);
            assert_eq!(kind, compression as i32);
            assert_eq!(size as usize, plain.len());
        }
        assert_eq!(
            decode_managed_cursor_info(&value).unwrap(),
            cursor,
            "{compression:?}"
        );
    }
}

#[test]
fn empty_messages_round_trip_with_every_codec() {
    for compression in ALL {
        let info = ml::ManagedLedgerInfo::default();
        let value = encode_managed_ledger_info(&info, compression).unwrap();
        assert_eq!(decode_managed_ledger_info(&value).unwrap(), info);
        let cursor = ml::ManagedCursorInfo::default();
        let value = encode_managed_cursor_info(&cursor, compression).unwrap();
        assert_eq!(decode_managed_cursor_info(&value).unwrap(), cursor);
    }
}

#[test]
fn payloads_match_the_java_codec_formats() {
    let info = sample_ledger_info();
    let plain = info.encode_to_vec();
    let payload = |compression| {
        let value = encode_managed_ledger_info(&info, compression).unwrap();
        split_frame(&value).2.to_vec()
    };
    // LZ4: a raw block, no frame magic; decodable knowing only the size.
    let lz4 = payload(CompressionType::Lz4);
    assert_ne!(&lz4[..4], &[0x04, 0x22, 0x4d, 0x18]);
    assert_eq!(
        lz4_flex::block::decompress(&lz4, plain.len()).unwrap(),
        plain
    );
    // ZLIB: a zlib stream with the default-level header 78 9c.
    let zlib = payload(CompressionType::Zlib);
    assert_eq!(&zlib[..2], &[0x78, 0x9c]);
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&zlib[..]), &mut out).unwrap();
    assert_eq!(out, plain);
    // ZSTD: a zstd frame.
    let zstd = payload(CompressionType::Zstd);
    assert_eq!(&zstd[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
    assert_eq!(zstd::bulk::decompress(&zstd, plain.len()).unwrap(), plain);
    // SNAPPY: raw snappy (starts with the uncompressed length), not the framed
    // format (which starts with the stream identifier ff 06 00 00 's' 'N' ...).
    let snappy = payload(CompressionType::Snappy);
    assert_ne!(snappy[0], 0xff);
    assert_eq!(snap::raw::decompress_len(&snappy).unwrap(), plain.len());
    assert_eq!(
        snap::raw::Decoder::new().decompress_vec(&snappy).unwrap(),
        plain
    );
}

// --------------------------------------------------------- hand-built fixtures

/// `ManagedCursorInfo { cursorsLedgerId: 5 }` is `08 05` (2 bytes).
fn cursor_5() -> ml::ManagedCursorInfo {
    ml::ManagedCursorInfo {
        cursors_ledger_id: 5,
        ..Default::default()
    }
}

/// `ManagedLedgerInfo { ledgerInfo: [{ ledgerId: 3 }] }` is `0a 02 08 03` (4 bytes).
fn ledgers_3() -> ml::ManagedLedgerInfo {
    ml::ManagedLedgerInfo {
        ledger_info: vec![LedgerInfo {
            ledger_id: 3,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn hand_built_plain_values() {
    assert_eq!(
        decode_managed_cursor_info(&wire("08 05")).unwrap(),
        cursor_5()
    );
    assert_eq!(
        decode_managed_ledger_info(&wire("0a 02 08 03")).unwrap(),
        ledgers_3()
    );
    assert_eq!(
        decode_managed_ledger_info(&[]).unwrap(),
        ml::ManagedLedgerInfo::default()
    );
}

#[test]
fn hand_built_frames_for_managed_cursor_info() {
    let frames = [
        (
            "NONE",
            "
            47 78               # magic 0x4778
            00 00 00 04         # metadata size 4
            08 00 10 02         # compressionType NONE, uncompressedSize 2
            08 05               # the protobuf itself
            ",
        ),
        (
            "LZ4",
            "
            47 78 00 00 00 04
            08 01 10 02         # compressionType LZ4, uncompressedSize 2
            20 08 05            # raw LZ4 block: token 0x20 = 2 literals, no match; literals
            ",
        ),
        (
            "ZLIB",
            "
            47 78 00 00 00 04
            08 02 10 02         # compressionType ZLIB, uncompressedSize 2
            78 01               # zlib header: deflate, 32K window, no dictionary
            01 02 00 fd ff      # final stored block, LEN 2, NLEN !2 (little-endian)
            08 05               # stored data
            00 17 00 0e         # Adler-32 of 08 05, big-endian
            ",
        ),
        (
            "ZLIB, unfinished as Pulsar writes it",
            "
            47 78 00 00 00 04
            08 02 10 02         # compressionType ZLIB, uncompressedSize 2
            78 01               # zlib header
            00 02 00 fd ff      # stored block, not final, LEN 2, NLEN !2
            08 05               # stored data
            00 00 00 ff ff      # sync flush: empty stored block; no final block, no Adler-32
            ",
        ),
        (
            "ZSTD",
            "
            47 78 00 00 00 04
            08 03 10 02         # compressionType ZSTD, uncompressedSize 2
            28 b5 2f fd         # zstd frame magic
            20 02               # descriptor: single segment, 1-byte content size = 2
            11 00 00            # block header: last, raw, size 2
            08 05               # raw block data
            ",
        ),
        (
            "SNAPPY",
            "
            47 78 00 00 00 04
            08 04 10 02         # compressionType SNAPPY, uncompressedSize 2
            02                  # raw snappy: uncompressed length 2 (varint)
            04 08 05            # literal tag (len-1)<<2 = 0x04, then 2 bytes
            ",
        ),
    ];
    for (name, dump) in frames {
        let decoded = decode_managed_cursor_info(&wire(dump))
            .unwrap_or_else(|err| panic!("{name} frame: {err}"));
        assert_eq!(decoded, cursor_5(), "{name}");
    }
}

#[test]
fn hand_built_frames_for_managed_ledger_info() {
    let frames = [
        (
            "NONE",
            "
            47 78 00 00 00 04   # magic, metadata size 4
            08 00 10 04         # compressionType NONE, uncompressedSize 4
            0a 02 08 03         # the protobuf itself
            ",
        ),
        (
            "LZ4",
            "
            47 78 00 00 00 04
            08 01 10 04         # compressionType LZ4, uncompressedSize 4
            40 0a 02 08 03      # raw LZ4 block: token 0x40 = 4 literals; literals
            ",
        ),
        (
            "ZLIB",
            "
            47 78 00 00 00 04
            08 02 10 04         # compressionType ZLIB, uncompressedSize 4
            78 01               # zlib header
            01 04 00 fb ff      # final stored block, LEN 4, NLEN !4
            0a 02 08 03         # stored data
            00 45 00 18         # Adler-32: b = 11+13+21+24 = 0x45, a = 24 = 0x18
            ",
        ),
        (
            "ZSTD",
            "
            47 78 00 00 00 04
            08 03 10 04         # compressionType ZSTD, uncompressedSize 4
            28 b5 2f fd 20 04   # frame magic; single segment, content size 4
            21 00 00            # block header: last, raw, size 4 (1 | 4 << 3)
            0a 02 08 03
            ",
        ),
        (
            "SNAPPY",
            "
            47 78 00 00 00 04
            08 04 10 04         # compressionType SNAPPY, uncompressedSize 4
            04                  # uncompressed length 4
            0c 0a 02 08 03      # literal tag (4-1)<<2 = 0x0c, then 4 bytes
            ",
        ),
    ];
    for (name, dump) in frames {
        let decoded = decode_managed_ledger_info(&wire(dump))
            .unwrap_or_else(|err| panic!("{name} frame: {err}"));
        assert_eq!(decoded, ledgers_3(), "{name}");
    }
}

#[test]
fn hand_built_header_matches_encoder_output() {
    // The encoder writes the same header bytes as the fixtures above.
    let value = encode_managed_cursor_info(&cursor_5(), CompressionType::Snappy).unwrap();
    assert_eq!(value, wire("47 78 00 00 00 04 08 04 10 02 02 04 08 05"));
    let value = encode_managed_ledger_info(&ledgers_3(), CompressionType::Lz4).unwrap();
    assert_eq!(value, wire("47 78 00 00 00 04 08 01 10 04 40 0a 02 08 03"));
}

// ------------------------------------------------------------------ corruption

fn cursor_err(dump: &str) -> CodecError {
    match decode_managed_cursor_info(&wire(dump)) {
        Ok(info) => panic!("expected an error, decoded {info:?}"),
        Err(err) => err,
    }
}

fn ledger_err(dump: &str) -> CodecError {
    match decode_managed_ledger_info(&wire(dump)) {
        Ok(info) => panic!("expected an error, decoded {info:?}"),
        Err(err) => err,
    }
}

#[test]
fn truncated_header() {
    for dump in ["47 78", "47 78 00", "47 78 00 00 00"] {
        let err = cursor_err(dump);
        assert!(
            matches!(
                err,
                CodecError::TruncatedHeader {
                    kind: MetadataKind::ManagedCursorInfo,
                    len
                } if len == wire(dump).len()
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}

#[test]
fn metadata_size_past_the_end() {
    let err = ledger_err("47 78 00 00 00 09 08 01 10 02");
    assert!(
        matches!(
            err,
            CodecError::MetadataSizePastEnd {
                kind: MetadataKind::ManagedLedgerInfo,
                declared: 9,
                available: 4
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("declares 9 bytes"), "{err}");
    // An absurd size is refused without allocating.
    let err = ledger_err("47 78 ff ff ff ff 08 01");
    assert!(
        matches!(
            err,
            CodecError::MetadataSizePastEnd {
                declared: u32::MAX,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn undecodable_metadata() {
    // Truncated varint in the metadata.
    let err = cursor_err("47 78 00 00 00 02 08 ff 08 05");
    assert!(matches!(err, CodecError::InvalidMetadata { .. }), "{err:?}");
    // Invalid wire type 7.
    let err = cursor_err("47 78 00 00 00 01 0f 08 05");
    assert!(matches!(err, CodecError::InvalidMetadata { .. }), "{err:?}");
    assert!(err.to_string().contains("compression metadata"), "{err}");
}

#[test]
fn unknown_compression_type() {
    let err = cursor_err("47 78 00 00 00 04 08 09 10 02 08 05");
    assert!(
        matches!(err, CodecError::UnknownCompressionType { value: 9, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("unknown compression type 9"),
        "{err}"
    );
}

#[test]
fn uncompressed_size_out_of_range() {
    // uncompressedSize = -1: an int32 is sign-extended, a 10-byte varint.
    let err = cursor_err("47 78 00 00 00 0d 08 00 10 ff ff ff ff ff ff ff ff ff 01 08 05");
    assert!(
        matches!(
            err,
            CodecError::UncompressedSizeOutOfRange { declared: -1, .. }
        ),
        "{err:?}"
    );
    // uncompressedSize = 2^30 (1 GiB), above the 64 MiB limit.
    let err = cursor_err("47 78 00 00 00 08 08 01 10 80 80 80 80 04 20 08 05");
    assert!(
        matches!(
            err,
            CodecError::UncompressedSizeOutOfRange {
                declared: 0x4000_0000,
                limit: MAX_UNCOMPRESSED_SIZE,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("refusing to allocate"), "{err}");
    // Exactly 64 MiB (2^26) is accepted; here the payload then holds too little.
    let err = cursor_err("47 78 00 00 00 07 08 00 10 80 80 80 20 08 05");
    assert!(
        matches!(err, CodecError::SizeMismatch { declared, actual: Some(2), .. } if declared == MAX_UNCOMPRESSED_SIZE),
        "{err:?}"
    );
    // 2^26 + 1 is refused.
    let err = cursor_err("47 78 00 00 00 07 08 00 10 81 80 80 20 08 05");
    assert!(
        matches!(
            err,
            CodecError::UncompressedSizeOutOfRange {
                declared: 0x0400_0001,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn decompression_failure_for_every_codec() {
    let cases = [
        // LZ4: token announces 15+ literals, then the input ends.
        ("LZ4", "47 78 00 00 00 04 08 01 10 02 f0"),
        // ZLIB: not a zlib header.
        ("ZLIB", "47 78 00 00 00 04 08 02 10 02 00 00 00 00"),
        // ZSTD: wrong frame magic.
        ("ZSTD", "47 78 00 00 00 04 08 03 10 02 00 01 02 03 04 05"),
        // SNAPPY: a copy referring before the start of the output.
        ("SNAPPY", "47 78 00 00 00 04 08 04 10 02 02 01 05"),
    ];
    for (name, dump) in cases {
        let err = cursor_err(dump);
        match &err {
            CodecError::Decompress { compression, .. } => {
                assert_eq!(compression.as_str_name(), name)
            }
            other => panic!("{name}: expected a decompression error, got {other:?}"),
        }
        assert!(err.to_string().contains("cannot decompress"), "{err}");
    }
    // A zlib stream whose checksum is wrong.
    let err = cursor_err("47 78 00 00 00 04 08 02 10 02 78 01 01 02 00 fd ff 08 05 00 17 00 0f");
    assert!(matches!(err, CodecError::Decompress { .. }), "{err:?}");
}

#[test]
fn decompressed_size_differs_from_declared() {
    // Each payload holds the 2 bytes 08 05 but the metadata declares 3.
    let smaller = [
        ("NONE", "47 78 00 00 00 04 08 00 10 03 08 05"),
        ("LZ4", "47 78 00 00 00 04 08 01 10 03 20 08 05"),
        (
            "ZLIB",
            "47 78 00 00 00 04 08 02 10 03 78 01 01 02 00 fd ff 08 05 00 17 00 0e",
        ),
        (
            "ZSTD",
            "47 78 00 00 00 04 08 03 10 03 28 b5 2f fd 20 02 11 00 00 08 05",
        ),
        ("SNAPPY", "47 78 00 00 00 04 08 04 10 03 02 04 08 05"),
    ];
    for (name, dump) in smaller {
        let err = cursor_err(dump);
        match &err {
            CodecError::SizeMismatch {
                compression,
                declared: 3,
                ..
            } => assert_eq!(compression.as_str_name(), name),
            other => panic!("{name}: expected a size mismatch, got {other:?}"),
        }
        assert!(err.to_string().contains("uncompressedSize 3"), "{err}");
        assert!(err.to_string().contains("decompressed to 2 bytes"), "{err}");
    }
    // ... and declares 1: the payload holds more than declared.
    let larger = [
        ("NONE", "47 78 00 00 00 04 08 00 10 01 08 05"),
        ("LZ4", "47 78 00 00 00 04 08 01 10 01 20 08 05"),
        (
            "ZLIB",
            "47 78 00 00 00 04 08 02 10 01 78 01 01 02 00 fd ff 08 05 00 17 00 0e",
        ),
        (
            "ZSTD",
            "47 78 00 00 00 04 08 03 10 01 28 b5 2f fd 20 02 11 00 00 08 05",
        ),
        ("SNAPPY", "47 78 00 00 00 04 08 04 10 01 02 04 08 05"),
    ];
    for (name, dump) in larger {
        let err = cursor_err(dump);
        match &err {
            CodecError::SizeMismatch {
                compression,
                declared: 1,
                ..
            } => assert_eq!(compression.as_str_name(), name),
            other => panic!("{name}: expected a size mismatch, got {other:?}"),
        }
        assert!(
            err.to_string().contains("declares uncompressedSize 1;"),
            "{err}"
        );
    }
}

#[test]
fn error_messages_name_the_value_and_the_fault() {
    for dump in [
        "47 78 00",
        "47 78 00 00 00 09 08 01",
        "47 78 00 00 00 02 08 ff",
        "47 78 00 00 00 04 08 09 10 02",
        "47 78 00 00 00 08 08 01 10 80 80 80 80 04",
        "47 78 00 00 00 04 08 02 10 02 00 00",
        "47 78 00 00 00 04 08 01 10 01 20 08 05",
        "0a 05 08 03",
    ] {
        let message = ledger_err(dump).to_string();
        assert!(message.contains("ManagedLedgerInfo"), "{message}");
        assert!(
            message.contains("corrupt") || message.contains("truncated"),
            "{message}"
        );
    }
}

#[test]
fn truncated_protobuf() {
    // Plain: a varint cut short.
    let err = cursor_err("08 80");
    assert!(
        matches!(
            err,
            CodecError::InvalidProtobuf {
                compression: None,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("ManagedCursorInfo"), "{err}");
    // Plain: a nested message longer than the value.
    let err = ledger_err("0a 05 08 03");
    assert!(matches!(err, CodecError::InvalidProtobuf { .. }), "{err:?}");
    // A single byte 0x47 is not the magic: it is an invalid protobuf.
    let err = ledger_err("47");
    assert!(matches!(err, CodecError::InvalidProtobuf { .. }), "{err:?}");
    // Framed: the decompressed bytes are a truncated protobuf.
    let err = ledger_err("47 78 00 00 00 04 08 04 10 03 03 08 0a 05 08");
    assert!(
        matches!(
            err,
            CodecError::InvalidProtobuf {
                compression: Some(CompressionType::Snappy),
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn encoder_refuses_messages_above_the_limit() {
    let info = ml::ManagedLedgerInfo {
        properties: vec![ml::KeyValue {
            key: "k".to_owned(),
            value: "x".repeat(MAX_UNCOMPRESSED_SIZE),
        }],
        ..Default::default()
    };
    let err = encode_managed_ledger_info(&info, CompressionType::Lz4).unwrap_err();
    assert!(
        matches!(err, CodecError::MessageTooLarge { size, .. } if size > MAX_UNCOMPRESSED_SIZE),
        "{err:?}"
    );
    assert!(err.to_string().contains("CompressionType::None"), "{err}");
    // Uncompressed values have no such limit.
    let value = encode_managed_ledger_info(&info, CompressionType::None).unwrap();
    assert_eq!(value.len(), info.encoded_len());
}

// ---------------------------------------------------------------- never panics

/// The frame header (magic, metadata size, metadata) of a compressed value.
/// Both metadata messages have the same fields, hence the same bytes.
fn header(compression: i32, uncompressed_size: i32) -> Vec<u8> {
    let metadata = ml::ManagedCursorInfoMetadata {
        compression_type: compression,
        uncompressed_size,
    }
    .encode_to_vec();
    let mut value = MAGIC.to_be_bytes().to_vec();
    value.extend_from_slice(&(metadata.len() as u32).to_be_bytes());
    value.extend_from_slice(&metadata);
    value
}

fn decode_both(bytes: &[u8]) {
    let _ = decode_managed_ledger_info(bytes);
    let _ = decode_managed_cursor_info(bytes);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        decode_both(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_the_magic_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut value = vec![0x47, 0x78];
        value.extend_from_slice(&bytes);
        decode_both(&value);
    }

    #[test]
    fn arbitrary_payloads_never_panic(
        compression in 0..6i32,
        uncompressed_size in prop_oneof![0..512i32, any::<i32>()],
        payload in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut value = header(compression, uncompressed_size);
        value.extend_from_slice(&payload);
        decode_both(&value);
    }

    #[test]
    fn corrupted_real_values_never_panic(
        compression in 0..5usize,
        position in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut value = encode_managed_cursor_info(&sample_cursor_info(), ALL[compression]).unwrap();
        let at = position.index(value.len());
        value[at] = byte;
        decode_both(&value);
        let keep = cut.index(value.len());
        decode_both(&value[..keep]);
    }
}

#[test]
fn zlib_stream_without_final_block_decodes() {
    // Pulsar's ZLIB codec deflates with SYNC_FLUSH and never finishes the
    // stream: no final block and no Adler-32 trailer. Such values must decode.
    let info = sample_ledger_info();
    let plain = info.encode_to_vec();
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut encoder, &plain).unwrap();
    std::io::Write::flush(&mut encoder).unwrap(); // a sync flush
    let payload = encoder.get_ref().clone();
    assert_eq!(&payload[..2], &[0x78, 0x9c]);
    assert_eq!(&payload[payload.len() - 4..], &[0x00, 0x00, 0xff, 0xff]);

    let mut value = header(2, plain.len() as i32);
    value.extend_from_slice(&payload);
    assert_eq!(decode_managed_ledger_info(&value).unwrap(), info);
}
