//! Merging `(key, value)` pairs into the property lists of the protobuf
//! messages this crate writes: `LedgerInfo.properties`,
//! `ManagedCursorInfo.cursorProperties` and a schema `PositionInfo.properties`.

use bkswitch_proto::{ml, schema};

/// A key/value entry of a protobuf property list.
pub(crate) trait Property {
    /// A new entry.
    fn new(key: String, value: String) -> Self;
    /// Its key.
    fn key(&self) -> &str;
    /// Replaces its value.
    fn set_value(&mut self, value: String);
}

macro_rules! property {
    ($ty:ty, $key:ident) => {
        impl Property for $ty {
            fn new(key: String, value: String) -> Self {
                Self { $key: key, value }
            }

            fn key(&self) -> &str {
                &self.$key
            }

            fn set_value(&mut self, value: String) {
                self.value = value;
            }
        }
    };
}

property!(ml::KeyValue, key);
property!(ml::StringProperty, name);
property!(schema::KeyValue, key);

/// Merges `props` into `list`: a key already present has its value replaced
/// in place, other keys are appended in the order given.
pub(crate) fn merge_properties<P: Property>(list: &mut Vec<P>, props: Vec<(String, String)>) {
    for (key, value) in props {
        match list.iter_mut().find(|p| p.key() == key) {
            Some(p) => p.set_value(value),
            None => list.push(P::new(key, value)),
        }
    }
}
