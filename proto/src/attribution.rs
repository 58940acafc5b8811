//! Cluster attribution stamps.
//!
//! Every ledger records the name of the bookie cluster that holds its bytes under
//! the reserved key [`ATTR_KEY`] in metadata that Pulsar already has:
//!
//! | message | property list |
//! |---|---|
//! | [`ml::managed_ledger_info::LedgerInfo`] (a data ledger) | `properties` ([`ml::KeyValue`]) |
//! | [`ml::ManagedCursorInfo`] (the cursor ledger) | `cursor_properties` ([`ml::StringProperty`]) |
//! | [`schema::PositionInfo`] (a schema ledger) | `properties` ([`schema::KeyValue`]) |
//!
//! A message without the key is a legacy ledger. The key must appear at most
//! once: a second occurrence means the metadata is corrupt, and every method of
//! [`Stamped`] reports it as [`StampError::Duplicate`] instead of picking one of
//! the values.
//!
//! Every method finds the stamp with one scan of the property list (keys
//! compared by length, then bytes), which never allocates.
//! [`Stamped::scan_cluster_stamp`] is that scan on its own, for hot paths such
//! as a resolver consulted on every ledger open: a duplicate comes back as the
//! zero-sized [`DuplicateStamp`], and [`Stamped::cluster_stamp`] gives the full
//! error when one is needed.
//!
//! ```
//! use bkswitch_proto::ml::ManagedCursorInfo;
//! use bkswitch_proto::Stamped;
//!
//! let mut cursor = ManagedCursorInfo { cursors_ledger_id: 42, ..Default::default() };
//! assert_eq!(cursor.cluster_stamp()?, None);
//! cursor.set_cluster_stamp("blue")?;
//! assert_eq!(cursor.cluster_stamp()?, Some("blue"));
//! assert_eq!(cursor.remove_cluster_stamp()?, Some("blue".to_owned()));
//! # Ok::<(), bkswitch_proto::StampError>(())
//! ```

use crate::{ml, schema};

/// The property key that names the bookie cluster holding a ledger.
pub const ATTR_KEY: &str = "_pulsar.bookieClusterName";

/// The key prefix reserved for properties written by Pulsar itself (invariant
/// [I16](bkswitch_docs::invariants::I16)).
///
/// User-supplied properties must not use it; see [`is_reserved_key`].
pub const RESERVED_PREFIX: &str = "_pulsar.";

/// Returns `true` when `key` starts with [`RESERVED_PREFIX`].
///
/// ```
/// assert!(bkswitch_proto::attribution::is_reserved_key(bkswitch_proto::ATTR_KEY));
/// assert!(!bkswitch_proto::attribution::is_reserved_key("owner"));
/// ```
pub fn is_reserved_key(key: &str) -> bool {
    key.starts_with(RESERVED_PREFIX)
}

/// Why a cluster stamp could not be read or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StampError {
    /// The stamp key appears more than once in one property list.
    #[error(
        "corrupt metadata: key `{key}` appears {count} times in {field} of ledger {ledger_id} \
         (values: {values:?}); it must appear at most once. Repair the metadata so that it \
         names the one cluster that holds ledger {ledger_id} before using it",
        count = values.len()
    )]
    Duplicate {
        /// The duplicated key (always [`ATTR_KEY`]).
        key: &'static str,
        /// The message field holding the properties, e.g. `LedgerInfo.properties`.
        field: &'static str,
        /// The ledger the message describes.
        ledger_id: i64,
        /// Every value found under the key, in property order.
        values: Vec<String>,
    },
    /// [`Stamped::set_cluster_stamp`] was given an empty cluster name.
    #[error(
        "cannot stamp {field} of ledger {ledger_id} with an empty cluster name; \
         pass the name of a registered bookie cluster"
    )]
    EmptyClusterName {
        /// The message field holding the properties.
        field: &'static str,
        /// The ledger the message describes.
        ledger_id: i64,
    },
}

/// The stamp key appears more than once in a property list: the metadata is
/// corrupt.
///
/// What [`Stamped::scan_cluster_stamp`] reports, without detail so that the scan
/// never allocates; [`Stamped::cluster_stamp`] reports the same condition as
/// [`StampError::Duplicate`], with the field, the ledger and every value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("corrupt metadata: key `{ATTR_KEY}` appears more than once in one property list")]
pub struct DuplicateStamp;

/// A metadata message that carries a cluster attribution stamp.
///
/// Implemented for [`ml::managed_ledger_info::LedgerInfo`],
/// [`ml::ManagedCursorInfo`] and [`schema::PositionInfo`].
///
/// # Contract
///
/// - Reading never allocates: the returned name borrows from the message.
/// - Every method fails with [`StampError::Duplicate`] when the stamp key appears
///   more than once, and a failing method leaves the message untouched.
/// - Every other property keeps its value and its position.
pub trait Stamped {
    /// Returns the stamped cluster name, or `None` for a legacy (unstamped) ledger.
    ///
    /// # Errors
    ///
    /// [`StampError::Duplicate`] when the key appears more than once.
    fn cluster_stamp(&self) -> Result<Option<&str>, StampError>;

    /// Returns the stamped cluster name, or `None` for a legacy (unstamped)
    /// ledger, without ever allocating: the scan behind every other method,
    /// for hot paths. On a duplicate, call
    /// [`cluster_stamp`](Stamped::cluster_stamp) for the full error.
    ///
    /// The default calls `cluster_stamp`; the implementations of this crate
    /// scan directly, so that no error is built even for a duplicate.
    ///
    /// # Errors
    ///
    /// [`DuplicateStamp`] when the key appears more than once.
    fn scan_cluster_stamp(&self) -> Result<Option<&str>, DuplicateStamp> {
        self.cluster_stamp().map_err(|_| DuplicateStamp)
    }

    /// Stamps the message with `cluster`.
    ///
    /// An existing stamp is replaced in place (same position in the list); without
    /// one, the stamp is appended after the other properties.
    ///
    /// # Errors
    ///
    /// [`StampError::EmptyClusterName`] when `cluster` is empty and
    /// [`StampError::Duplicate`] when the key appears more than once; the message
    /// is left unchanged in both cases.
    fn set_cluster_stamp(&mut self, cluster: &str) -> Result<(), StampError>;

    /// Removes the stamp and returns the cluster name it held, if any.
    ///
    /// # Errors
    ///
    /// [`StampError::Duplicate`] when the key appears more than once; the message
    /// is left unchanged.
    fn remove_cluster_stamp(&mut self) -> Result<Option<String>, StampError>;
}

/// A string-valued entry of a property list.
trait Property {
    fn key(&self) -> &str;
    fn value(&self) -> &str;
    fn value_mut(&mut self) -> &mut String;
    fn into_value(self) -> String;
    fn stamp(cluster: &str) -> Self;
}

macro_rules! impl_property {
    ($ty:ty, $key:ident) => {
        impl Property for $ty {
            fn key(&self) -> &str {
                &self.$key
            }
            fn value(&self) -> &str {
                &self.value
            }
            fn value_mut(&mut self) -> &mut String {
                &mut self.value
            }
            fn into_value(self) -> String {
                self.value
            }
            fn stamp(cluster: &str) -> Self {
                Self {
                    $key: ATTR_KEY.to_owned(),
                    value: cluster.to_owned(),
                }
            }
        }
    };
}

impl_property!(ml::KeyValue, key);
impl_property!(ml::StringProperty, name);
impl_property!(schema::KeyValue, key);

/// Identifies a property list in error messages.
#[derive(Clone, Copy)]
struct Site {
    field: &'static str,
    ledger_id: i64,
}

/// The only stamp entry and its index: the one scan every reader and writer of
/// stamps uses. Compares each key by length, then bytes; allocates nothing and
/// does not branch out of the loop, so that it stays cheap inlined into a
/// resolver.
#[inline]
fn scan<P: Property>(props: &[P]) -> Result<Option<(usize, &P)>, DuplicateStamp> {
    let mut found = None;
    let mut duplicate = false;
    for (index, prop) in props.iter().enumerate() {
        let key = prop.key().as_bytes();
        if key.len() == ATTR_KEY.len() && key == ATTR_KEY.as_bytes() {
            duplicate |= found.is_some();
            found = Some((index, prop));
        }
    }
    if duplicate {
        Err(DuplicateStamp)
    } else {
        Ok(found)
    }
}

/// The index of the only stamp entry, failing on duplicates with the full error.
fn position<P: Property>(props: &[P], site: Site) -> Result<Option<usize>, StampError> {
    match scan(props) {
        Ok(found) => Ok(found.map(|(index, _)| index)),
        Err(DuplicateStamp) => Err(duplicate(props, site)),
    }
}

#[cold]
fn duplicate<P: Property>(props: &[P], site: Site) -> StampError {
    StampError::Duplicate {
        key: ATTR_KEY,
        field: site.field,
        ledger_id: site.ledger_id,
        values: props
            .iter()
            .filter(|prop| prop.key() == ATTR_KEY)
            .map(|prop| prop.value().to_owned())
            .collect(),
    }
}

fn get<P: Property>(props: &[P], site: Site) -> Result<Option<&str>, StampError> {
    match scan(props) {
        Ok(found) => Ok(found.map(|(_, prop)| prop.value())),
        Err(DuplicateStamp) => Err(duplicate(props, site)),
    }
}

fn set<P: Property>(props: &mut Vec<P>, site: Site, cluster: &str) -> Result<(), StampError> {
    if cluster.is_empty() {
        return Err(StampError::EmptyClusterName {
            field: site.field,
            ledger_id: site.ledger_id,
        });
    }
    match position(props, site)? {
        Some(index) => {
            let value = props[index].value_mut();
            if value != cluster {
                value.clear();
                value.push_str(cluster);
            }
        }
        None => props.push(P::stamp(cluster)),
    }
    Ok(())
}

fn remove<P: Property>(props: &mut Vec<P>, site: Site) -> Result<Option<String>, StampError> {
    Ok(position(props, site)?.map(|index| props.remove(index).into_value()))
}

macro_rules! impl_stamped {
    ($ty:ty, $props:ident, $ledger_id:ident, $field:literal) => {
        impl Stamped for $ty {
            fn cluster_stamp(&self) -> Result<Option<&str>, StampError> {
                let site = Site {
                    field: $field,
                    ledger_id: self.$ledger_id,
                };
                get(&self.$props, site)
            }

            #[inline]
            fn scan_cluster_stamp(&self) -> Result<Option<&str>, DuplicateStamp> {
                Ok(scan(&self.$props)?.map(|(_, prop)| prop.value()))
            }

            fn set_cluster_stamp(&mut self, cluster: &str) -> Result<(), StampError> {
                let site = Site {
                    field: $field,
                    ledger_id: self.$ledger_id,
                };
                set(&mut self.$props, site, cluster)
            }

            fn remove_cluster_stamp(&mut self) -> Result<Option<String>, StampError> {
                let site = Site {
                    field: $field,
                    ledger_id: self.$ledger_id,
                };
                remove(&mut self.$props, site)
            }
        }
    };
}

impl_stamped!(
    ml::managed_ledger_info::LedgerInfo,
    properties,
    ledger_id,
    "LedgerInfo.properties"
);
impl_stamped!(
    ml::ManagedCursorInfo,
    cursor_properties,
    cursors_ledger_id,
    "ManagedCursorInfo.cursorProperties"
);
impl_stamped!(
    schema::PositionInfo,
    properties,
    ledger_id,
    "schema PositionInfo.properties"
);

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str) -> ml::KeyValue {
        ml::KeyValue {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    fn ledger(props: &[(&str, &str)]) -> ml::managed_ledger_info::LedgerInfo {
        ml::managed_ledger_info::LedgerInfo {
            ledger_id: 7,
            properties: props.iter().map(|(k, v)| kv(k, v)).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn reserved_prefix_covers_the_stamp_key() {
        assert!(ATTR_KEY.starts_with(RESERVED_PREFIX));
        assert!(is_reserved_key("_pulsar.anything"));
        assert!(!is_reserved_key("pulsar.bookieClusterName"));
    }

    #[test]
    fn read_missing_and_present() {
        assert_eq!(ledger(&[]).cluster_stamp(), Ok(None));
        assert_eq!(ledger(&[("a", "1")]).cluster_stamp(), Ok(None));
        let info = ledger(&[("a", "1"), (ATTR_KEY, "blue"), ("b", "2")]);
        assert_eq!(info.cluster_stamp(), Ok(Some("blue")));
    }

    #[test]
    fn set_appends_when_absent() {
        let mut info = ledger(&[("a", "1"), ("b", "2")]);
        info.set_cluster_stamp("blue").unwrap();
        assert_eq!(
            info.properties,
            vec![kv("a", "1"), kv("b", "2"), kv(ATTR_KEY, "blue")]
        );
    }

    #[test]
    fn set_replaces_in_place_and_keeps_order() {
        let mut info = ledger(&[("a", "1"), (ATTR_KEY, "blue"), ("b", "2")]);
        info.set_cluster_stamp("green").unwrap();
        assert_eq!(
            info.properties,
            vec![kv("a", "1"), kv(ATTR_KEY, "green"), kv("b", "2")]
        );
        info.set_cluster_stamp("green").unwrap();
        assert_eq!(info.properties.len(), 3);
    }

    #[test]
    fn set_rejects_empty_name_and_leaves_message_untouched() {
        let mut info = ledger(&[(ATTR_KEY, "blue")]);
        let before = info.clone();
        let err = info.set_cluster_stamp("").unwrap_err();
        assert_eq!(
            err,
            StampError::EmptyClusterName {
                field: "LedgerInfo.properties",
                ledger_id: 7
            }
        );
        assert_eq!(info, before);
    }

    #[test]
    fn remove_returns_value_and_keeps_order() {
        let mut info = ledger(&[("a", "1"), (ATTR_KEY, "blue"), ("b", "2")]);
        assert_eq!(info.remove_cluster_stamp(), Ok(Some("blue".to_owned())));
        assert_eq!(info.properties, vec![kv("a", "1"), kv("b", "2")]);
        assert_eq!(info.remove_cluster_stamp(), Ok(None));
        assert_eq!(info.properties, vec![kv("a", "1"), kv("b", "2")]);
    }

    #[test]
    fn duplicates_are_reported_never_resolved() {
        let mut info = ledger(&[(ATTR_KEY, "blue"), ("a", "1"), (ATTR_KEY, "green")]);
        let before = info.clone();
        let expected = StampError::Duplicate {
            key: ATTR_KEY,
            field: "LedgerInfo.properties",
            ledger_id: 7,
            values: vec!["blue".to_owned(), "green".to_owned()],
        };
        assert_eq!(info.cluster_stamp(), Err(expected.clone()));
        assert_eq!(info.set_cluster_stamp("red"), Err(expected.clone()));
        assert_eq!(info, before);
        assert_eq!(info.remove_cluster_stamp(), Err(expected.clone()));
        assert_eq!(info, before);

        let message = expected.to_string();
        assert!(message.contains(ATTR_KEY), "{message}");
        assert!(message.contains("\"blue\""), "{message}");
        assert!(message.contains("\"green\""), "{message}");
        assert!(message.contains("ledger 7"), "{message}");
        assert!(message.contains("corrupt"), "{message}");
        assert!(message.contains("Repair"), "{message}");
    }

    #[test]
    fn scan_agrees_with_cluster_stamp() {
        let cases: [&[(&str, &str)]; 5] = [
            &[],
            &[("a", "1")],
            &[("a", "1"), (ATTR_KEY, "blue"), ("b", "2")],
            &[(ATTR_KEY, "blue"), ("a", "1"), (ATTR_KEY, "green")],
            // Same length as the key, different bytes; and a key one byte short.
            &[
                ("_pulsar.bookieClusterNamf", "x"),
                ("_pulsar.bookieClusterNam", "y"),
            ],
        ];
        for props in cases {
            let info = ledger(props);
            match info.cluster_stamp() {
                Ok(stamp) => assert_eq!(info.scan_cluster_stamp(), Ok(stamp), "{props:?}"),
                Err(StampError::Duplicate { .. }) => {
                    assert_eq!(info.scan_cluster_stamp(), Err(DuplicateStamp), "{props:?}")
                }
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert!(DuplicateStamp.to_string().contains(ATTR_KEY));
    }

    #[test]
    fn cursor_info_uses_cursor_properties() {
        let mut cursor = ml::ManagedCursorInfo {
            cursors_ledger_id: 99,
            cursor_properties: vec![ml::StringProperty {
                name: "x".to_owned(),
                value: "y".to_owned(),
            }],
            ..Default::default()
        };
        cursor.set_cluster_stamp("blue").unwrap();
        assert_eq!(cursor.cursor_properties[1].name, ATTR_KEY);
        assert_eq!(cursor.cluster_stamp(), Ok(Some("blue")));
        assert_eq!(cursor.scan_cluster_stamp(), Ok(Some("blue")));
        cursor.cursor_properties.push(ml::StringProperty {
            name: ATTR_KEY.to_owned(),
            value: "blue".to_owned(),
        });
        match cursor.cluster_stamp() {
            Err(StampError::Duplicate {
                field, ledger_id, ..
            }) => {
                assert_eq!(field, "ManagedCursorInfo.cursorProperties");
                assert_eq!(ledger_id, 99);
            }
            other => panic!("expected a duplicate error, got {other:?}"),
        }
        assert_eq!(cursor.scan_cluster_stamp(), Err(DuplicateStamp));
    }

    #[test]
    fn schema_position_uses_properties() {
        let mut position = schema::PositionInfo {
            ledger_id: 5,
            entry_id: 0,
            properties: Vec::new(),
        };
        position.set_cluster_stamp("blue").unwrap();
        assert_eq!(position.scan_cluster_stamp(), Ok(Some("blue")));
        assert_eq!(
            position.properties,
            vec![schema::KeyValue {
                key: ATTR_KEY.to_owned(),
                value: "blue".to_owned()
            }]
        );
        assert_eq!(position.remove_cluster_stamp(), Ok(Some("blue".to_owned())));
        assert!(position.properties.is_empty());
    }
}
