//! Hostile input for every decoder of stored metadata: the managed-ledger and
//! cursor codecs (plain and every compressed framing), the schema locator and
//! entry protobufs, and the registry's JSON records. Each input decodes to a
//! value or a typed error; what decodes re-encodes stably; valid encodings
//! round-trip; and a corrupt value in the store is refused by its reader
//! without changing it.

mod embedded;

use bkswitch_metadata_store::ExpectedVersion;
use bkswitch_proto::codec::{
    decode_managed_cursor_info, decode_managed_ledger_info, encode_managed_cursor_info,
    encode_managed_ledger_info, CodecError, MAGIC, MAX_UNCOMPRESSED_SIZE,
};
use bkswitch_proto::ml::{
    self, managed_ledger_info::LedgerInfo, CompressionType, ManagedCursorInfo, ManagedLedgerInfo,
};
use bkswitch_proto::schema::{IndexEntry, PositionInfo, SchemaEntry, SchemaLocator};
use bkswitch_proto::Message;
use bkswitch_registry::{BootstrapMarker, ClusterRecord, SwitchDirective};
use proptest::prelude::*;

/// Cases per property: `PROPTEST_CASES`, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const COMPRESSIONS: [CompressionType; 5] = [
    CompressionType::None,
    CompressionType::Lz4,
    CompressionType::Zlib,
    CompressionType::Zstd,
    CompressionType::Snappy,
];

fn compression() -> impl Strategy<Value = CompressionType> {
    proptest::sample::select(COMPRESSIONS.to_vec())
}

fn ledger_info() -> impl Strategy<Value = ManagedLedgerInfo> {
    (
        proptest::collection::vec(
            (any::<i64>(), any::<Option<i64>>(), any::<Option<i64>>()),
            0..20,
        ),
        proptest::collection::vec(("[a-z._]{1,12}", "[ -~]{0,20}"), 0..4),
    )
        .prop_map(|(ledgers, props)| ManagedLedgerInfo {
            ledger_info: ledgers
                .into_iter()
                .map(|(id, entries, size)| LedgerInfo {
                    ledger_id: id,
                    entries,
                    size,
                    ..Default::default()
                })
                .collect(),
            properties: props
                .into_iter()
                .map(|(key, value)| ml::KeyValue { key, value })
                .collect(),
            ..Default::default()
        })
}

fn cursor_info() -> impl Strategy<Value = ManagedCursorInfo> {
    (
        any::<i64>(),
        any::<Option<i64>>(),
        any::<Option<i64>>(),
        proptest::collection::vec(("[a-z._]{1,12}", "[ -~]{0,20}"), 0..4),
    )
        .prop_map(|(id, l, e, props)| ManagedCursorInfo {
            cursors_ledger_id: id,
            mark_delete_ledger_id: l,
            mark_delete_entry_id: e,
            cursor_properties: props
                .into_iter()
                .map(|(name, value)| ml::StringProperty { name, value })
                .collect(),
            ..Default::default()
        })
}

fn index_entry() -> impl Strategy<Value = IndexEntry> {
    (
        any::<i64>(),
        any::<i64>(),
        any::<i64>(),
        proptest::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(version, ledger_id, entry_id, hash)| IndexEntry {
            version,
            position: PositionInfo {
                ledger_id,
                entry_id,
                properties: Vec::new(),
            },
            hash,
        })
}

fn locator() -> impl Strategy<Value = SchemaLocator> {
    (
        index_entry(),
        proptest::collection::vec(index_entry(), 0..6),
    )
        .prop_map(|(info, index)| SchemaLocator { info, index })
}

/// Asserts an error names what the value should have held.
fn assert_typed(e: &CodecError, kind: &str) {
    let msg = e.to_string();
    assert!(msg.contains(kind), "error does not name {kind}: {msg}");
}

/// Decodes `bytes` both ways: each result is a message that re-encodes and
/// decodes to itself, or an error naming the message kind.
fn check_both(bytes: &[u8]) {
    match decode_managed_ledger_info(bytes) {
        Ok(m) => assert_eq!(decode_managed_ledger_info(&m.encode_to_vec()).unwrap(), m),
        Err(e) => assert_typed(&e, "ManagedLedgerInfo"),
    }
    match decode_managed_cursor_info(bytes) {
        Ok(m) => assert_eq!(decode_managed_cursor_info(&m.encode_to_vec()).unwrap(), m),
        Err(e) => assert_typed(&e, "ManagedCursorInfo"),
    }
}

/// A frame with an arbitrary header around `payload`.
fn frame(compression_type: i32, uncompressed_size: i32, payload: &[u8]) -> Vec<u8> {
    let meta = ml::ManagedCursorInfoMetadata {
        compression_type,
        uncompressed_size,
    }
    .encode_to_vec();
    let mut out = MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&(meta.len() as u32).to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(payload);
    out
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_bytes_decode_or_fail_typed(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_both(&bytes);
        // The same bytes behind the magic: a frame header that is most likely
        // garbage.
        let mut framed = MAGIC.to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        check_both(&framed);
        let _ = SchemaLocator::decode(bytes.as_slice());
        let _ = SchemaEntry::decode(bytes.as_slice());
    }

    #[test]
    fn valid_encodings_round_trip(
        info in ledger_info(),
        cursor in cursor_info(),
        c in compression(),
    ) {
        let v = encode_managed_ledger_info(&info, c).unwrap();
        prop_assert_eq!(decode_managed_ledger_info(&v).unwrap(), info.clone());
        let v = encode_managed_cursor_info(&cursor, c).unwrap();
        prop_assert_eq!(decode_managed_cursor_info(&v).unwrap(), cursor.clone());
        if c == CompressionType::None {
            prop_assert_eq!(v, cursor.encode_to_vec());
        } else {
            prop_assert_eq!(&v[..2], &MAGIC.to_be_bytes()[..]);
        }
    }

    /// A truncated framed value never decodes to another message: it fails,
    /// or (a zlib stream cut in its trailer, as Pulsar writes it) decodes to
    /// the original. (Cut below the 2-byte magic it is a plain protobuf.)
    #[test]
    fn truncations_fail_or_decode_the_original(
        info in ledger_info(),
        cursor in cursor_info(),
        c in compression(),
        cut in any::<proptest::sample::Index>(),
    ) {
        let v = encode_managed_ledger_info(&info, c).unwrap();
        let k = cut.index(v.len().max(1));
        let t = &v[..k.min(v.len())];
        match decode_managed_ledger_info(t) {
            Ok(m) if c != CompressionType::None && k >= 2 => prop_assert_eq!(m, info.clone()),
            Ok(m) => prop_assert_eq!(decode_managed_ledger_info(&m.encode_to_vec()).unwrap(), m),
            Err(e) => assert_typed(&e, "ManagedLedgerInfo"),
        }
        let v = encode_managed_cursor_info(&cursor, c).unwrap();
        let k = cut.index(v.len().max(1));
        let t = &v[..k.min(v.len())];
        match decode_managed_cursor_info(t) {
            Ok(m) if c != CompressionType::None && k >= 2 => prop_assert_eq!(m, cursor.clone()),
            Ok(m) => prop_assert_eq!(decode_managed_cursor_info(&m.encode_to_vec()).unwrap(), m),
            Err(e) => assert_typed(&e, "ManagedCursorInfo"),
        }
    }

    #[test]
    fn single_byte_corruptions_decode_or_fail_typed(
        info in ledger_info(),
        cursor in cursor_info(),
        loc in locator(),
        c in compression(),
        at in any::<proptest::sample::Index>(),
        xor in 1u8..=255,
    ) {
        for mut v in [
            encode_managed_ledger_info(&info, c).unwrap(),
            encode_managed_cursor_info(&cursor, c).unwrap(),
        ] {
            if v.is_empty() {
                continue;
            }
            let i = at.index(v.len());
            v[i] ^= xor;
            check_both(&v);
        }
        let mut v = loc.encode_to_vec();
        let i = at.index(v.len());
        v[i] ^= xor;
        if let Ok(l) = SchemaLocator::decode(v.as_slice()) {
            prop_assert_eq!(SchemaLocator::decode(l.encode_to_vec().as_slice()).unwrap(), l);
        }
    }

    /// Frames with arbitrary compression types, declared sizes and payloads
    /// (the payload of a valid frame, possibly cut, or random bytes).
    #[test]
    fn corrupted_framing_is_refused_typed(
        cursor in cursor_info(),
        c in compression(),
        ty in prop_oneof![0i32..5, any::<i32>()],
        size in prop_oneof![0i32..512, any::<i32>()],
        cut in any::<proptest::sample::Index>(),
        noise in proptest::collection::vec(any::<u8>(), 0..64),
        use_noise in any::<bool>(),
    ) {
        let valid = encode_managed_cursor_info(&cursor, c).unwrap();
        let plain = cursor.encode_to_vec();
        let payload: Vec<u8> = if use_noise || c == CompressionType::None {
            noise
        } else {
            // Skip the valid header: magic, size, metadata.
            let meta_len = u32::from_be_bytes(valid[2..6].try_into().unwrap()) as usize;
            let p = &valid[6 + meta_len..];
            p[..cut.index(p.len() + 1).min(p.len())].to_vec()
        };
        let v = frame(ty, size, &payload);
        match decode_managed_cursor_info(&v) {
            Ok(m) => {
                // Only a frame whose header tells the truth decodes.
                prop_assert!((0..5).contains(&ty));
                prop_assert!(size >= 0 && (size as usize) <= MAX_UNCOMPRESSED_SIZE);
                prop_assert_eq!(decode_managed_cursor_info(&m.encode_to_vec()).unwrap(), m);
            }
            Err(e) => {
                assert_typed(&e, "ManagedCursorInfo");
                if !(0..5).contains(&ty) {
                    prop_assert!(matches!(e, CodecError::UnknownCompressionType { .. }), "{}", e);
                } else if size < 0 || size as usize > MAX_UNCOMPRESSED_SIZE {
                    prop_assert!(
                        matches!(e, CodecError::UncompressedSizeOutOfRange { .. }),
                        "{}", e
                    );
                }
            }
        }
        // The declared size is checked against what decompresses.
        if c != CompressionType::None && !plain.is_empty() {
            let meta_len = u32::from_be_bytes(valid[2..6].try_into().unwrap()) as usize;
            let wrong = i32::try_from(plain.len()).unwrap() + 1;
            let v = frame(c as i32, wrong, &valid[6 + meta_len..]);
            let e = decode_managed_cursor_info(&v).unwrap_err();
            prop_assert!(
                matches!(e, CodecError::SizeMismatch { .. } | CodecError::Decompress { .. }),
                "{}", e
            );
        }
    }

    #[test]
    fn registry_records_decode_or_fail_typed(
        bytes in proptest::collection::vec(any::<u8>(), 0..128),
        name in "[a-z0-9-]{1,12}",
        epoch in any::<i64>(),
        extra in "[a-z]{1,8}",
        cut in any::<proptest::sample::Index>(),
        at in any::<proptest::sample::Index>(),
        xor in 1u8..=127,
    ) {
        // Valid records round-trip, unknown fields included.
        let cluster = format!(
            r#"{{"name":"{name}","metadataServiceUri":"zk://h:2181/{name}","status":"STANDBY","x{extra}":[1,{{"a":null}}]}}"#
        );
        let directive = format!(
            r#"{{"target":"{name}","epoch":{epoch},"ts":1,"x{extra}":"y"}}"#
        );
        let marker = format!(
            r#"{{"bootstrapClusterName":"{name}","recordedAt":{epoch},"x{extra}":true}}"#
        );
        let r: ClusterRecord = serde_json::from_str(&cluster).unwrap();
        prop_assert_eq!(&r.name, &name);
        prop_assert_eq!(serde_json::from_slice::<ClusterRecord>(&serde_json::to_vec(&r).unwrap()).unwrap(), r.clone());
        let key = format!("x{extra}");
        prop_assert!(r.extra.contains_key(&key));
        let d: SwitchDirective = serde_json::from_str(&directive).unwrap();
        prop_assert_eq!(d.epoch, epoch);
        prop_assert_eq!(serde_json::from_slice::<SwitchDirective>(&serde_json::to_vec(&d).unwrap()).unwrap(), d);
        let b: BootstrapMarker = serde_json::from_str(&marker).unwrap();
        prop_assert_eq!(serde_json::from_slice::<BootstrapMarker>(&serde_json::to_vec(&b).unwrap()).unwrap(), b);

        // Random bytes, truncations and byte corruptions: a record or an error.
        for text in [cluster.as_bytes(), directive.as_bytes(), marker.as_bytes()] {
            let truncated = &text[..cut.index(text.len())];
            let mut flipped = text.to_vec();
            let i = at.index(flipped.len());
            flipped[i] ^= xor;
            for input in [&bytes[..], truncated, &flipped[..]] {
                if let Ok(r) = serde_json::from_slice::<ClusterRecord>(input) {
                    prop_assert_eq!(serde_json::from_slice::<ClusterRecord>(&serde_json::to_vec(&r).unwrap()).unwrap(), r);
                }
                if let Ok(d) = serde_json::from_slice::<SwitchDirective>(input) {
                    prop_assert_eq!(serde_json::from_slice::<SwitchDirective>(&serde_json::to_vec(&d).unwrap()).unwrap(), d);
                }
                if let Ok(b) = serde_json::from_slice::<BootstrapMarker>(input) {
                    prop_assert_eq!(serde_json::from_slice::<BootstrapMarker>(&serde_json::to_vec(&b).unwrap()).unwrap(), b);
                }
            }
            // A truncated record is never accepted.
            if truncated.len() < text.len() {
                prop_assert!(serde_json::from_slice::<serde_json::Value>(truncated).is_err());
            }
        }
    }
}

#[test]
fn oversized_declared_length_is_refused_before_allocating() {
    for c in COMPRESSIONS {
        for size in [
            i32::try_from(MAX_UNCOMPRESSED_SIZE).unwrap() + 1,
            i32::MAX,
            -1,
        ] {
            let v = frame(c as i32, size, &[0u8; 16]);
            let e = decode_managed_cursor_info(&v).unwrap_err();
            assert!(
                matches!(
                    e,
                    CodecError::UncompressedSizeOutOfRange { declared, limit, .. }
                        if declared == size && limit == MAX_UNCOMPRESSED_SIZE
                ),
                "{c:?} {size}: {e}"
            );
            assert!(e.to_string().contains("refusing to allocate"), "{e}");
        }
        // At the cap the header is accepted, but 16 bytes cannot decompress to
        // 64 MiB.
        let v = frame(
            c as i32,
            i32::try_from(MAX_UNCOMPRESSED_SIZE).unwrap(),
            &[0u8; 16],
        );
        assert!(decode_managed_cursor_info(&v).is_err(), "{c:?}");
    }
}

/// A corrupt schema locator or registry record in the store is refused with
/// a typed error naming it, and nothing rewrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_stored_values_are_refused_and_left_untouched() {
    let env = embedded::env().await;
    let id = embedded::schema_id(0);
    env.schemas.put(&id, b"{}", b"h0").await.unwrap();
    let path = format!("/schemas/{id}");
    let good = env.store.get(&path).await.unwrap().unwrap();
    // Field 1 (info) declared far longer than the value.
    let mut bad = good.value.clone();
    bad.truncate(3);
    bad[1] = 0xff;
    env.store
        .put(&path, &bad, ExpectedVersion::Exactly(good.stat.version))
        .await
        .unwrap();
    let before = embedded::dump(env.store.as_ref(), "/").await;
    let e = env.schemas.get_latest(&id).await.unwrap_err();
    assert!(e.to_string().contains(&id), "{e}");
    let e = env.schemas.put(&id, b"{1}", b"h1").await.unwrap_err();
    assert!(e.to_string().contains(&id), "{e}");
    assert!(env.schemas.list_versions(&id).await.is_err());
    assert_eq!(embedded::dump(env.store.as_ref(), "/").await, before);

    let rec = "/admin/bookie-clusters/broken";
    env.store
        .put(rec, b"{\"name\":\"broken\",", ExpectedVersion::NotExists)
        .await
        .unwrap();
    let before = embedded::dump(env.store.as_ref(), "/").await;
    let e = env.registry.get("broken").await.unwrap_err();
    assert!(e.to_string().contains("broken"), "{e}");
    assert_eq!(embedded::dump(env.store.as_ref(), "/").await, before);
}
