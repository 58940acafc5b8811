//! Property tests: for every message type, encode → decode gives the same
//! message and re-encoding gives the same bytes.

use std::fmt::Debug;

use bkswitch_proto::ml::{self, managed_ledger_info::LedgerInfo};
use bkswitch_proto::{schema, Message};
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;

fn round_trip<M: Message + Default + PartialEq + Debug>(message: &M) -> Result<(), TestCaseError> {
    let bytes = message.encode_to_vec();
    prop_assert_eq!(bytes.len(), message.encoded_len());
    let decoded = M::decode(bytes.as_slice())
        .map_err(|err| TestCaseError::fail(format!("decode failed: {err}")))?;
    prop_assert_eq!(&decoded, message);
    prop_assert_eq!(decoded.encode_to_vec(), bytes);
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(bkswitch_proto::ATTR_KEY.to_owned()),
        "[a-zA-Z0-9_.-]{0,12}",
        ".{0,6}",
    ]
}

fn small<T: Debug>(element: impl Strategy<Value = T>) -> impl Strategy<Value = Vec<T>> {
    vec(element, 0..4)
}

prop_compose! {
    fn ml_kv()(key in text(), value in text()) -> ml::KeyValue {
        ml::KeyValue { key, value }
    }
}

prop_compose! {
    fn driver_metadata()(name in text(), properties in small(ml_kv())) -> ml::OffloadDriverMetadata {
        ml::OffloadDriverMetadata { name, properties }
    }
}

prop_compose! {
    fn offload_segment()(
        uid_msb in of(any::<i64>()),
        uid_lsb in of(any::<i64>()),
        complete in of(any::<bool>()),
        assigned_timestamp in of(any::<i64>()),
        offloaded_timestamp in of(any::<i64>()),
        end_entry_id in of(any::<i64>()),
        driver_metadata in of(driver_metadata()),
    ) -> ml::OffloadSegment {
        ml::OffloadSegment {
            uid_msb,
            uid_lsb,
            complete,
            assigned_timestamp,
            offloaded_timestamp,
            end_entry_id,
            driver_metadata,
        }
    }
}

prop_compose! {
    fn offload_context()(
        uid_msb in of(any::<i64>()),
        uid_lsb in of(any::<i64>()),
        complete in of(any::<bool>()),
        bookkeeper_deleted in of(any::<bool>()),
        timestamp in of(any::<i64>()),
        driver_metadata in of(driver_metadata()),
        offload_segment in small(offload_segment()),
    ) -> ml::OffloadContext {
        ml::OffloadContext {
            uid_msb,
            uid_lsb,
            complete,
            bookkeeper_deleted,
            timestamp,
            driver_metadata,
            offload_segment,
        }
    }
}

prop_compose! {
    fn ledger_info()(
        ledger_id in any::<i64>(),
        entries in of(any::<i64>()),
        size in of(any::<i64>()),
        timestamp in of(any::<i64>()),
        offload_context in of(offload_context()),
        properties in small(ml_kv()),
    ) -> LedgerInfo {
        LedgerInfo { ledger_id, entries, size, timestamp, offload_context, properties }
    }
}

prop_compose! {
    fn nested_position()(ledger_id in any::<i64>(), entry_id in any::<i64>()) -> ml::NestedPositionInfo {
        ml::NestedPositionInfo { ledger_id, entry_id }
    }
}

prop_compose! {
    fn managed_ledger_info()(
        ledger_info in small(ledger_info()),
        terminated_position in of(nested_position()),
        properties in small(ml_kv()),
    ) -> ml::ManagedLedgerInfo {
        ml::ManagedLedgerInfo { ledger_info, terminated_position, properties }
    }
}

prop_compose! {
    fn message_range()(
        lower_endpoint in nested_position(),
        upper_endpoint in nested_position(),
    ) -> ml::MessageRange {
        ml::MessageRange { lower_endpoint, upper_endpoint }
    }
}

prop_compose! {
    fn long_list_map()(key in any::<i64>(), values in small(any::<i64>())) -> ml::LongListMap {
        ml::LongListMap { key, values }
    }
}

prop_compose! {
    fn batched_deletion()(
        position in nested_position(),
        delete_set in small(any::<i64>()),
    ) -> ml::BatchedEntryDeletionIndexInfo {
        ml::BatchedEntryDeletionIndexInfo { position, delete_set }
    }
}

prop_compose! {
    fn long_property()(name in text(), value in any::<i64>()) -> ml::LongProperty {
        ml::LongProperty { name, value }
    }
}

prop_compose! {
    fn string_property()(name in text(), value in text()) -> ml::StringProperty {
        ml::StringProperty { name, value }
    }
}

prop_compose! {
    fn position_info()(
        ledger_id in any::<i64>(),
        entry_id in any::<i64>(),
        individual_deleted_messages in small(message_range()),
        properties in small(long_property()),
        batched_entry_deletion_index_info in small(batched_deletion()),
        individual_deleted_message_ranges in small(long_list_map()),
        idle_since in of(any::<i64>()),
    ) -> ml::PositionInfo {
        ml::PositionInfo {
            ledger_id,
            entry_id,
            individual_deleted_messages,
            properties,
            batched_entry_deletion_index_info,
            individual_deleted_message_ranges,
            idle_since,
        }
    }
}

prop_compose! {
    fn managed_cursor_info()(
        cursors_ledger_id in any::<i64>(),
        mark_delete_ledger_id in of(any::<i64>()),
        mark_delete_entry_id in of(any::<i64>()),
        individual_deleted_messages in small(message_range()),
        properties in small(long_property()),
        last_active in of(any::<i64>()),
        batched_entry_deletion_index_info in small(batched_deletion()),
        cursor_properties in small(string_property()),
        idle_since in of(any::<i64>()),
    ) -> ml::ManagedCursorInfo {
        #[allow(deprecated, reason = "lastActive must still round-trip")]
        ml::ManagedCursorInfo {
            cursors_ledger_id,
            mark_delete_ledger_id,
            mark_delete_entry_id,
            individual_deleted_messages,
            properties,
            last_active,
            batched_entry_deletion_index_info,
            cursor_properties,
            idle_since,
        }
    }
}

prop_compose! {
    fn schema_kv()(key in text(), value in text()) -> schema::KeyValue {
        schema::KeyValue { key, value }
    }
}

prop_compose! {
    fn schema_position()(
        ledger_id in any::<i64>(),
        entry_id in any::<i64>(),
        properties in small(schema_kv()),
    ) -> schema::PositionInfo {
        schema::PositionInfo { ledger_id, entry_id, properties }
    }
}

prop_compose! {
    fn index_entry()(
        version in any::<i64>(),
        position in schema_position(),
        hash in vec(any::<u8>(), 0..33),
    ) -> schema::IndexEntry {
        schema::IndexEntry { version, position, hash }
    }
}

prop_compose! {
    fn schema_entry()(
        schema_data in vec(any::<u8>(), 0..64),
        index in small(index_entry()),
    ) -> schema::SchemaEntry {
        schema::SchemaEntry { schema_data, index }
    }
}

prop_compose! {
    fn schema_locator()(info in index_entry(), index in small(index_entry())) -> schema::SchemaLocator {
        schema::SchemaLocator { info, index }
    }
}

proptest! {
    #[test]
    fn ml_key_value(m in ml_kv()) { round_trip(&m)?; }

    #[test]
    fn ml_offload_driver_metadata(m in driver_metadata()) { round_trip(&m)?; }

    #[test]
    fn ml_offload_context(m in offload_context()) { round_trip(&m)?; }

    #[test]
    fn ml_offload_segment(m in offload_segment()) { round_trip(&m)?; }

    #[test]
    fn ml_managed_ledger_info(m in managed_ledger_info()) { round_trip(&m)?; }

    #[test]
    fn ml_ledger_info(m in ledger_info()) { round_trip(&m)?; }

    #[test]
    fn ml_position_info(m in position_info()) { round_trip(&m)?; }

    #[test]
    fn ml_nested_position_info(m in nested_position()) { round_trip(&m)?; }

    #[test]
    fn ml_long_list_map(m in long_list_map()) { round_trip(&m)?; }

    #[test]
    fn ml_message_range(m in message_range()) { round_trip(&m)?; }

    #[test]
    fn ml_batched_entry_deletion_index_info(m in batched_deletion()) { round_trip(&m)?; }

    #[test]
    fn ml_long_property(m in long_property()) { round_trip(&m)?; }

    #[test]
    fn ml_string_property(m in string_property()) { round_trip(&m)?; }

    #[test]
    fn ml_managed_cursor_info(m in managed_cursor_info()) { round_trip(&m)?; }

    #[test]
    fn ml_managed_ledger_info_metadata(compression_type in any::<i32>(), uncompressed_size in any::<i32>()) {
        round_trip(&ml::ManagedLedgerInfoMetadata { compression_type, uncompressed_size })?;
    }

    #[test]
    fn ml_managed_cursor_info_metadata(compression_type in any::<i32>(), uncompressed_size in any::<i32>()) {
        round_trip(&ml::ManagedCursorInfoMetadata { compression_type, uncompressed_size })?;
    }

    #[test]
    fn schema_position_info(m in schema_position()) { round_trip(&m)?; }

    #[test]
    fn schema_key_value(m in schema_kv()) { round_trip(&m)?; }

    #[test]
    fn schema_index_entry(m in index_entry()) { round_trip(&m)?; }

    #[test]
    fn schema_schema_entry(m in schema_entry()) { round_trip(&m)?; }

    #[test]
    fn schema_schema_locator(m in schema_locator()) { round_trip(&m)?; }

    /// Bytes that happen to decode as a message re-encode to bytes that decode
    /// to the same message (decode is stable even for odd inputs).
    #[test]
    fn arbitrary_bytes_decode_stably(bytes in vec(any::<u8>(), 0..64)) {
        if let Ok(message) = ml::ManagedCursorInfo::decode(bytes.as_slice()) {
            round_trip(&message)?;
        }
        if let Ok(message) = schema::SchemaLocator::decode(bytes.as_slice()) {
            round_trip(&message)?;
        }
    }
}
