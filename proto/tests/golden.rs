//! Golden-byte tests: values laid out by hand from the protobuf wire format, as
//! a Java proto2 writer (Pulsar) produces them: fields in tag order, set optional
//! fields written even when they hold their default, required fields always
//! written, repeated scalars unpacked.
//!
//! Every fixture must decode to the expected message, and both the decoded and
//! the expected message must encode back to exactly the same bytes.
//!
//! Fixtures are written as hex dumps (see `common::wire`). Wire-format reminders used
//! in the comments:
//! - a field key is one byte `(tag << 3) | wire_type`; wire type 0 is a varint
//!   (keys 08, 10, 18, 20, 28, 30, 38, 40 for tags 1..=8), wire type 2 is
//!   length-delimited: string, bytes, nested message (keys 0a, 12, 1a, 22, 2a,
//!   32, 3a, 42 for tags 1..=8);
//! - int64 is a plain varint: 7 bits per byte, least significant group first,
//!   high bit set on every byte but the last. 2^32 is `80 80 80 80 10`; a
//!   negative int64 is sign-extended to 64 bits and so always takes 10 bytes
//!   (-1 is `ff ff ff ff ff ff ff ff ff 01`).

use std::fmt::Debug;

use bkswitch_proto::ml::{self, managed_ledger_info::LedgerInfo};
use bkswitch_proto::{schema, Message, ATTR_KEY};

mod common;
use common::wire;

/// Decodes `bytes` into `M`, checks it equals `expected`, and checks both the
/// decoded and the expected message encode back to `bytes`.
fn check_golden<M: Message + Default + PartialEq + Debug>(bytes: &[u8], expected: &M) {
    let decoded = M::decode(bytes).expect("golden bytes must decode");
    assert_eq!(&decoded, expected, "decoded message differs");
    assert_eq!(
        hex(&decoded.encode_to_vec()),
        hex(bytes),
        "re-encoding the decoded message changed the bytes"
    );
    assert_eq!(
        hex(&expected.encode_to_vec()),
        hex(bytes),
        "encoding the expected message gives other bytes"
    );
    assert_eq!(expected.encoded_len(), bytes.len());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x} ")).collect()
}

/// The 33 bytes of a `{ "_pulsar.bookieClusterName", "blue" }` entry; the same
/// for `ml::KeyValue`, `ml::StringProperty` and `schema::KeyValue` (all three
/// are `1: string, 2: string`).
const STAMP_BLUE: &str = "
    0a 19 '_pulsar.bookieClusterName'   # 1: key/name, len 25
    12 04 'blue'                        # 2: value, len 4
";

#[test]
fn stamp_fixture_is_the_attribution_key() {
    assert_eq!(
        wire("0a 'ab' # ignored 12\n ff"),
        vec![0x0a, b'a', b'b', 0xff]
    );
    let stamp = wire(STAMP_BLUE);
    assert_eq!(stamp.len(), 0x21);
    assert_eq!(&stamp[2..27], ATTR_KEY.as_bytes());
}

fn ml_kv(key: &str, value: &str) -> ml::KeyValue {
    ml::KeyValue {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

fn npi(ledger_id: i64, entry_id: i64) -> ml::NestedPositionInfo {
    ml::NestedPositionInfo {
        ledger_id,
        entry_id,
    }
}

fn long_prop(name: &str, value: i64) -> ml::LongProperty {
    ml::LongProperty {
        name: name.to_owned(),
        value,
    }
}

fn string_prop(name: &str, value: &str) -> ml::StringProperty {
    ml::StringProperty {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

fn schema_kv(key: &str, value: &str) -> schema::KeyValue {
    schema::KeyValue {
        key: key.to_owned(),
        value: value.to_owned(),
    }
}

// ---------------------------------------------------------------- MLDataFormats

#[test]
fn ml_key_value() {
    let bytes = wire(
        "
        0a 01 'k'   # 1: key, len 1
        12 01 'v'   # 2: value, len 1
        ",
    );
    check_golden(&bytes, &ml_kv("k", "v"));

    // A required string holding "" is still written, with length 0.
    let bytes = wire(
        "
        0a 01 'a'   # 1: key, len 1
        12 00       # 2: value, len 0
        ",
    );
    check_golden(&bytes, &ml_kv("a", ""));

    check_golden(&wire(STAMP_BLUE), &ml_kv(ATTR_KEY, "blue"));
}

#[test]
fn ml_offload_driver_metadata() {
    let bytes = wire(
        "
        0a 02 'S3'          # 1: name, len 2
        12 0b               # 2: properties[0], len 11
        0a 06 'bucket'      #    1: key, len 6
        12 01 'b'           #    2: value, len 1
        ",
    );
    check_golden(
        &bytes,
        &ml::OffloadDriverMetadata {
            name: "S3".to_owned(),
            properties: vec![ml_kv("bucket", "b")],
        },
    );
}

#[test]
fn ml_offload_segment() {
    let bytes = wire(
        "
        08 ff ff ff ff ff ff ff ff ff 01    # 1: uidMsb = -1 (10-byte varint)
        10 00                               # 2: uidLsb = 0, present with its default
        18 01                               # 3: complete = true
        20 80 d0 95 ff bc 31                # 4: assignedTimestamp = 1700000000000
        28 fb d0 95 ff bc 31                # 5: offloadedTimestamp = 1700000000123
        30 09                               # 6: endEntryId = 9
        3a 04                               # 7: driverMetadata, len 4
        0a 02 'fs'                          #    1: name, len 2
        ",
    );
    check_golden(
        &bytes,
        &ml::OffloadSegment {
            uid_msb: Some(-1),
            uid_lsb: Some(0),
            complete: Some(true),
            assigned_timestamp: Some(1_700_000_000_000),
            offloaded_timestamp: Some(1_700_000_000_123),
            end_entry_id: Some(9),
            driver_metadata: Some(ml::OffloadDriverMetadata {
                name: "fs".to_owned(),
                properties: vec![],
            }),
        },
    );
}

#[test]
fn ml_offload_context() {
    let bytes = wire(
        "
        08 ef 9b af cd f8 ac d1 91 01       # 1: uidMsb = 0x0123456789abcdef (9 bytes)
        10 91 e4 d0 b2 87 d3 ae ee fe 01    # 2: uidLsb = -0x0123456789abcdef (10 bytes)
        18 00                               # 3: complete = false, present
        20 00                               # 4: bookkeeperDeleted = false, present
        28 80 d0 95 ff bc 31                # 5: timestamp = 1700000000000
        32 11                               # 6: driverMetadata, len 17
        0a 02 'S3'                          #    1: name, len 2
        12 0b                               #    2: properties[0], len 11
        0a 06 'bucket'                      #       1: key, len 6
        12 01 'b'                           #       2: value, len 1
        3a 04                               # 7: offloadSegment[0], len 4
        18 01                               #    3: complete = true
        30 7f                               #    6: endEntryId = 127
        ",
    );
    check_golden(
        &bytes,
        &ml::OffloadContext {
            uid_msb: Some(0x0123_4567_89ab_cdef),
            uid_lsb: Some(-0x0123_4567_89ab_cdef),
            complete: Some(false),
            bookkeeper_deleted: Some(false),
            timestamp: Some(1_700_000_000_000),
            driver_metadata: Some(ml::OffloadDriverMetadata {
                name: "S3".to_owned(),
                properties: vec![ml_kv("bucket", "b")],
            }),
            offload_segment: vec![ml::OffloadSegment {
                complete: Some(true),
                end_entry_id: Some(127),
                ..Default::default()
            }],
        },
    );
    // Nothing set: nothing written.
    check_golden(&[], &ml::OffloadContext::default());
}

#[test]
fn ml_ledger_info_full() {
    let bytes = [
        wire(
            "
            08 80 e4 97 d0 12               # 1: ledgerId = 5000000000 (above 2^32)
            10 00                           # 2: entries = 0, present
            18 00                           # 3: size = 0, present
            20 80 d0 95 ff bc 31            # 4: timestamp = 1700000000000
            2a 02                           # 5: offloadContext, len 2
            18 01                           #    3: complete = true
            32 06                           # 6: properties[0], len 6
            0a 01 'k' 12 01 'v'             #    key 'k', value 'v'
            32 21                           # 6: properties[1], len 33: the stamp
            ",
        ),
        wire(STAMP_BLUE),
    ]
    .concat();
    check_golden(
        &bytes,
        &LedgerInfo {
            ledger_id: 5_000_000_000,
            entries: Some(0),
            size: Some(0),
            timestamp: Some(1_700_000_000_000),
            offload_context: Some(ml::OffloadContext {
                complete: Some(true),
                ..Default::default()
            }),
            properties: vec![ml_kv("k", "v"), ml_kv(ATTR_KEY, "blue")],
        },
    );
}

#[test]
fn ml_ledger_info_optional_present_with_default_round_trips() {
    // entries absent: only the required ledgerId is written.
    let absent = LedgerInfo {
        ledger_id: 3,
        ..Default::default()
    };
    check_golden(&wire("08 03  # 1: ledgerId = 3"), &absent);

    // entries present with value 0: Java writes it, and so must we.
    let present = LedgerInfo {
        ledger_id: 3,
        entries: Some(0),
        ..Default::default()
    };
    let bytes = wire(
        "
        08 03   # 1: ledgerId = 3
        10 00   # 2: entries = 0
        ",
    );
    check_golden(&bytes, &present);
    assert_ne!(absent, present);

    // A required field holding zero is written too.
    check_golden(&wire("08 00  # 1: ledgerId = 0"), &LedgerInfo::default());
}

#[test]
fn ml_managed_ledger_info() {
    let bytes = [
        wire(
            "
            0a 0b                           # 1: ledgerInfo[0], len 11
            08 80 80 80 80 10               #    1: ledgerId = 2^32
            10 64                           #    2: entries = 100
            18 d2 09                        #    3: size = 1234
            0a 29                           # 1: ledgerInfo[1], len 41
            08 81 80 80 80 10               #    1: ledgerId = 2^32 + 1
            32 21                           #    6: properties[0], len 33: the stamp
            ",
        ),
        wire(STAMP_BLUE),
        wire(
            "
            12 11                           # 2: terminatedPosition, len 17
            08 81 80 80 80 10               #    1: ledgerId = 2^32 + 1
            10 ff ff ff ff ff ff ff ff ff 01 #   2: entryId = -1
            1a 0a                           # 3: properties[0], len 10
            0a 05 'owner'                   #    1: key, len 5
            12 01 'x'                       #    2: value, len 1
            ",
        ),
    ]
    .concat();
    check_golden(
        &bytes,
        &ml::ManagedLedgerInfo {
            ledger_info: vec![
                LedgerInfo {
                    ledger_id: 1 << 32,
                    entries: Some(100),
                    size: Some(1234),
                    ..Default::default()
                },
                LedgerInfo {
                    ledger_id: (1 << 32) + 1,
                    properties: vec![ml_kv(ATTR_KEY, "blue")],
                    ..Default::default()
                },
            ],
            terminated_position: Some(npi((1 << 32) + 1, -1)),
            properties: vec![ml_kv("owner", "x")],
        },
    );
    check_golden(&[], &ml::ManagedLedgerInfo::default());
}

#[test]
fn ml_nested_position_info() {
    let bytes = wire(
        "
        08 80 80 80 80 10                   # 1: ledgerId = 2^32
        10 ff ff ff ff ff ff ff ff ff 01    # 2: entryId = -1
        ",
    );
    check_golden(&bytes, &npi(1 << 32, -1));
    // Both fields are required: zeros are written.
    check_golden(&wire("08 00 10 00"), &npi(0, 0));
}

#[test]
fn ml_message_range() {
    let bytes = wire(
        "
        0a 04           # 1: lowerEndpoint, len 4
        08 01 10 00     #    ledgerId 1, entryId 0
        12 04           # 2: upperEndpoint, len 4
        08 01 10 09     #    ledgerId 1, entryId 9
        ",
    );
    check_golden(
        &bytes,
        &ml::MessageRange {
            lower_endpoint: npi(1, 0),
            upper_endpoint: npi(1, 9),
        },
    );
}

#[test]
fn ml_long_list_map() {
    let bytes = wire(
        "
        08 80 80 80 80 10                   # 1: key = 2^32
        10 ff ff ff ff ff ff ff ff ff 01    # 2: values[0] = -1
        10 00                               # 2: values[1] = 0 (unpacked: a key per value)
        10 07                               # 2: values[2] = 7
        ",
    );
    check_golden(
        &bytes,
        &ml::LongListMap {
            key: 1 << 32,
            values: vec![-1, 0, 7],
        },
    );
}

#[test]
fn ml_batched_entry_deletion_index_info() {
    let bytes = wire(
        "
        0a 04 08 02 10 03                   # 1: position, len 4: ledgerId 2, entryId 3
        10 fe ff ff ff ff ff ff ff ff 01    # 2: deleteSet[0] = -2
        10 ff ff ff ff ff ff ff ff 7f       # 2: deleteSet[1] = i64::MAX (9 bytes)
        ",
    );
    check_golden(
        &bytes,
        &ml::BatchedEntryDeletionIndexInfo {
            position: npi(2, 3),
            delete_set: vec![-2, i64::MAX],
        },
    );
}

#[test]
fn ml_long_property() {
    let bytes = wire(
        "
        0a 01 'n'                           # 1: name, len 1
        10 80 80 80 80 80 80 80 80 80 01    # 2: value = i64::MIN
        ",
    );
    check_golden(&bytes, &long_prop("n", i64::MIN));
}

#[test]
fn ml_string_property() {
    let bytes = wire(
        "
        0a 01 'a'   # 1: name, len 1
        12 01 'b'   # 2: value, len 1
        ",
    );
    check_golden(&bytes, &string_prop("a", "b"));
    check_golden(&wire(STAMP_BLUE), &string_prop(ATTR_KEY, "blue"));
}

#[test]
fn ml_position_info() {
    let bytes = wire(
        "
        08 81 80 80 80 10                   # 1: ledgerId = 2^32 + 1
        10 09                               # 2: entryId = 9
        1a 0c                               # 3: individualDeletedMessages[0], len 12
        0a 04 08 01 10 00                   #    lowerEndpoint {1, 0}
        12 04 08 01 10 09                   #    upperEndpoint {1, 9}
        22 05                               # 4: properties[0], len 5
        0a 01 'n' 10 05                     #    name 'n', value 5
        2a 11                               # 5: batchedEntryDeletionIndexInfo[0], len 17
        0a 04 08 02 10 03                   #    position {2, 3}
        10 fe ff ff ff ff ff ff ff ff 01    #    deleteSet[0] = -2
        32 04                               # 6: individualDeletedMessageRanges[0], len 4
        08 01 10 03                         #    key 1, values [3]
        38 80 d0 95 ff bc 31                # 7: idleSince = 1700000000000 (Pulsar 5.0)
        ",
    );
    check_golden(
        &bytes,
        &ml::PositionInfo {
            ledger_id: (1 << 32) + 1,
            entry_id: 9,
            individual_deleted_messages: vec![ml::MessageRange {
                lower_endpoint: npi(1, 0),
                upper_endpoint: npi(1, 9),
            }],
            properties: vec![long_prop("n", 5)],
            batched_entry_deletion_index_info: vec![ml::BatchedEntryDeletionIndexInfo {
                position: npi(2, 3),
                delete_set: vec![-2],
            }],
            individual_deleted_message_ranges: vec![ml::LongListMap {
                key: 1,
                values: vec![3],
            }],
            idle_since: Some(1_700_000_000_000),
        },
    );
}

#[test]
#[allow(deprecated, reason = "lastActive must still round-trip")]
fn ml_managed_cursor_info() {
    let bytes = [
        wire(
            "
            08 ff ff ff ff ff ff ff ff ff 01    # 1: cursorsLedgerId = -1 (no cursor ledger)
            10 80 80 80 80 10                   # 2: markDeleteLedgerId = 2^32
            18 00                               # 3: markDeleteEntryId = 0, present
            22 0c                               # 4: individualDeletedMessages[0], len 12
            0a 04 08 01 10 00                   #    lowerEndpoint {1, 0}
            12 04 08 01 10 09                   #    upperEndpoint {1, 9}
            2a 05                               # 5: properties[0], len 5
            0a 01 'n' 10 05                     #    name 'n', value 5
            30 80 d0 95 ff bc 31                # 6: lastActive = 1700000000000
            3a 11                               # 7: batchedEntryDeletionIndexInfo[0], len 17
            0a 04 08 02 10 03                   #    position {2, 3}
            10 fe ff ff ff ff ff ff ff ff 01    #    deleteSet[0] = -2
            42 06                               # 8: cursorProperties[0], len 6
            0a 01 'a' 12 01 'b'                 #    name 'a', value 'b'
            42 21                               # 8: cursorProperties[1], len 33: the stamp
            ",
        ),
        wire(STAMP_BLUE),
        wire("48 80 d0 95 ff bc 31             # 9: idleSince = 1700000000000 (Pulsar 5.0)"),
    ]
    .concat();
    check_golden(
        &bytes,
        &ml::ManagedCursorInfo {
            cursors_ledger_id: -1,
            mark_delete_ledger_id: Some(1 << 32),
            mark_delete_entry_id: Some(0),
            individual_deleted_messages: vec![ml::MessageRange {
                lower_endpoint: npi(1, 0),
                upper_endpoint: npi(1, 9),
            }],
            properties: vec![long_prop("n", 5)],
            last_active: Some(1_700_000_000_000),
            batched_entry_deletion_index_info: vec![ml::BatchedEntryDeletionIndexInfo {
                position: npi(2, 3),
                delete_set: vec![-2],
            }],
            cursor_properties: vec![string_prop("a", "b"), string_prop(ATTR_KEY, "blue")],
            idle_since: Some(1_700_000_000_000),
        },
    );
    // Only the required field: cursorsLedgerId = 0 is still written.
    check_golden(
        &wire("08 00  # 1: cursorsLedgerId = 0"),
        &ml::ManagedCursorInfo::default(),
    );
}

#[test]
fn ml_compression_metadata() {
    let bytes = wire(
        "
        08 03       # 1: compressionType = ZSTD (3)
        10 d2 09    # 2: uncompressedSize = 1234
        ",
    );
    check_golden(
        &bytes,
        &ml::ManagedLedgerInfoMetadata {
            compression_type: ml::CompressionType::Zstd.into(),
            uncompressed_size: 1234,
        },
    );

    // Required fields holding their defaults are written.
    let bytes = wire(
        "
        08 00       # 1: compressionType = NONE (0)
        10 00       # 2: uncompressedSize = 0
        ",
    );
    check_golden(
        &bytes,
        &ml::ManagedCursorInfoMetadata {
            compression_type: ml::CompressionType::None.into(),
            uncompressed_size: 0,
        },
    );

    let bytes = wire(
        "
        08 04       # 1: compressionType = SNAPPY (4)
        10 ac 02    # 2: uncompressedSize = 300
        ",
    );
    check_golden(
        &bytes,
        &ml::ManagedCursorInfoMetadata {
            compression_type: ml::CompressionType::Snappy.into(),
            uncompressed_size: 300,
        },
    );
}

#[test]
fn ml_compression_type_numbers() {
    use ml::CompressionType as C;
    let numbers: Vec<(&str, i32)> = [C::None, C::Lz4, C::Zlib, C::Zstd, C::Snappy]
        .into_iter()
        .map(|c| (c.as_str_name(), c as i32))
        .collect();
    assert_eq!(
        numbers,
        vec![
            ("NONE", 0),
            ("LZ4", 1),
            ("ZLIB", 2),
            ("ZSTD", 3),
            ("SNAPPY", 4)
        ]
    );
}

// ---------------------------------------------------------- SchemaStorageFormat

#[test]
fn schema_position_info() {
    let bytes = [
        wire(
            "
            08 80 80 80 80 10   # 1: ledgerId = 2^32
            10 00               # 2: entryId = 0 (required, written)
            1a 21               # 3: properties[0], len 33: the stamp
            ",
        ),
        wire(STAMP_BLUE),
    ]
    .concat();
    check_golden(
        &bytes,
        &schema::PositionInfo {
            ledger_id: 1 << 32,
            entry_id: 0,
            properties: vec![schema_kv(ATTR_KEY, "blue")],
        },
    );
}

#[test]
fn schema_position_info_legacy_without_properties() {
    // What Pulsar wrote before field 3 existed.
    let bytes = wire(
        "
        08 07   # 1: ledgerId = 7
        10 00   # 2: entryId = 0
        ",
    );
    check_golden(
        &bytes,
        &schema::PositionInfo {
            ledger_id: 7,
            entry_id: 0,
            properties: vec![],
        },
    );
}

#[test]
fn schema_key_value() {
    let bytes = wire(
        "
        0a 01 'k'   # 1: key, len 1
        12 01 'v'   # 2: value, len 1
        ",
    );
    check_golden(&bytes, &schema_kv("k", "v"));
    check_golden(&wire(STAMP_BLUE), &schema_kv(ATTR_KEY, "blue"));
}

fn index_entry_v0() -> schema::IndexEntry {
    schema::IndexEntry {
        version: 0,
        position: schema::PositionInfo {
            ledger_id: 7,
            entry_id: 0,
            properties: vec![],
        },
        hash: vec![0xde, 0xad],
    }
}

/// The 12 bytes of `index_entry_v0()`.
const INDEX_ENTRY_V0: &str = "
    08 00           # 1: version = 0 (required, written)
    12 04           # 2: position, len 4
    08 07 10 00     #    ledgerId 7, entryId 0
    1a 02 de ad     # 3: hash, len 2
";

#[test]
fn schema_index_entry() {
    check_golden(&wire(INDEX_ENTRY_V0), &index_entry_v0());

    // A required bytes field holding nothing is written with length 0.
    let bytes = wire(
        "
        08 02               # 1: version = 2
        12 04 08 07 10 00   # 2: position, len 4: ledgerId 7, entryId 0
        1a 00               # 3: hash, len 0
        ",
    );
    check_golden(
        &bytes,
        &schema::IndexEntry {
            version: 2,
            hash: vec![],
            ..index_entry_v0()
        },
    );
}

#[test]
fn schema_schema_entry() {
    let bytes = [
        wire(
            "
            12 02 '{}'      # 2: schema_data, len 2
            2a 0c           # 5: index[0], len 12
            ",
        ),
        wire(INDEX_ENTRY_V0),
    ]
    .concat();
    check_golden(
        &bytes,
        &schema::SchemaEntry {
            schema_data: b"{}".to_vec(),
            index: vec![index_entry_v0()],
        },
    );
}

#[test]
fn schema_schema_locator() {
    // The IndexEntry of version 1, stored in ledger 8 and stamped: 46 bytes.
    let index_entry_v1 = [
        wire(
            "
            08 01           # 1: version = 1
            12 27           # 2: position, len 39
            08 08 10 00     #    ledgerId 8, entryId 0
            1a 21           #    3: properties[0], len 33: the stamp
            ",
        ),
        wire(STAMP_BLUE),
        wire("1a 01 01  # 3: hash, len 1"),
    ]
    .concat();
    assert_eq!(index_entry_v1.len(), 0x2e);
    let bytes = [
        wire("0a 2e  # 1: info, len 46"),
        index_entry_v1.clone(),
        wire("12 0c  # 2: index[0], len 12"),
        wire(INDEX_ENTRY_V0),
        wire("12 2e  # 2: index[1], len 46"),
        index_entry_v1,
    ]
    .concat();
    let v1 = schema::IndexEntry {
        version: 1,
        position: schema::PositionInfo {
            ledger_id: 8,
            entry_id: 0,
            properties: vec![schema_kv(ATTR_KEY, "blue")],
        },
        hash: vec![0x01],
    };
    check_golden(
        &bytes,
        &schema::SchemaLocator {
            info: v1.clone(),
            index: vec![index_entry_v0(), v1],
        },
    );
}
