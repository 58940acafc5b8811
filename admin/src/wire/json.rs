//! Tolerant reads of one field of a JSON document: a missing field or one of
//! another type reads as `None` (or 0 for counters).

use serde_json::Value;

pub(super) fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub(super) fn i64_field(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

pub(super) fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The field, unless it is missing or `null`.
pub(super) fn present<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|v| !v.is_null())
}

/// Each element of the array `key`, read by `read`; an empty list when the
/// field is missing or not an array.
pub(super) fn array<T>(v: &Value, key: &str, read: impl FnMut(&Value) -> T) -> Vec<T> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(read).collect())
        .unwrap_or_default()
}
