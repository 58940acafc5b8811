//! Pulsar's custom metadata on the ledgers this crate creates, with the same
//! keys and values as Pulsar's brokers (`LedgerMetadataUtils`), so that
//! BookKeeper tools that list, audit or find orphan ledgers by these keys see
//! bkswitch's ledgers as Pulsar's:
//!
//! | Ledger | `application` | `component` | other keys |
//! |---|---|---|---|
//! | data | `pulsar` | `managed-ledger` | `pulsar/managed-ledger` = the managed ledger's name |
//! | cursor | `pulsar` | `managed-ledger` | `pulsar/managed-ledger` = the managed ledger's name, `pulsar/cursor` = the cursor's name |
//! | schema | `pulsar` | `schema` | `pulsar/schemaId` = the schema id |
//!
//! Values are UTF-8 bytes. A copy made by a switch keeps its source's custom
//! metadata (and adds its own keys).

use std::collections::BTreeMap;

use bkswitch_bk_client::LedgerConfig;

/// Key naming the application that created the ledger.
pub const APPLICATION: &str = "application";
/// The value of [`APPLICATION`] on every ledger: `pulsar`.
pub const APPLICATION_PULSAR: &str = "pulsar";
/// Key naming the component that created the ledger.
pub const COMPONENT: &str = "component";
/// [`COMPONENT`] of data and cursor ledgers.
pub const COMPONENT_MANAGED_LEDGER: &str = "managed-ledger";
/// [`COMPONENT`] of schema ledgers.
pub const COMPONENT_SCHEMA: &str = "schema";
/// Key holding the managed ledger's name (data and cursor ledgers).
pub const MANAGED_LEDGER_NAME: &str = "pulsar/managed-ledger";
/// Key holding the cursor's name (cursor ledgers).
pub const CURSOR_NAME: &str = "pulsar/cursor";
/// Key holding the schema id (schema ledgers).
pub const SCHEMA_ID: &str = "pulsar/schemaId";

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

/// The custom metadata of a data ledger of managed ledger `name`.
pub fn data_ledger(name: &str) -> BTreeMap<String, Vec<u8>> {
    map(&[
        (APPLICATION, APPLICATION_PULSAR),
        (COMPONENT, COMPONENT_MANAGED_LEDGER),
        (MANAGED_LEDGER_NAME, name),
    ])
}

/// The custom metadata of a ledger of cursor `cursor` of managed ledger
/// `name`: the data ledger's, plus the cursor's name.
pub fn cursor_ledger(name: &str, cursor: &str) -> BTreeMap<String, Vec<u8>> {
    let mut m = data_ledger(name);
    m.insert(CURSOR_NAME.to_owned(), cursor.as_bytes().to_vec());
    m
}

/// The custom metadata of a ledger of schema `schema_id`.
pub fn schema_ledger(schema_id: &str) -> BTreeMap<String, Vec<u8>> {
    map(&[
        (APPLICATION, APPLICATION_PULSAR),
        (COMPONENT, COMPONENT_SCHEMA),
        (SCHEMA_ID, schema_id),
    ])
}

/// `config` with `metadata` added to its custom metadata (replacing keys it
/// already has).
pub(crate) fn with_metadata(
    mut config: LedgerConfig,
    metadata: BTreeMap<String, Vec<u8>>,
) -> LedgerConfig {
    for (k, v) in metadata {
        config = config.with_custom_metadata(k, v);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_pulsars() {
        let d = data_ledger("t/ns/persistent/a");
        assert_eq!(d.len(), 3);
        assert_eq!(d["application"], b"pulsar");
        assert_eq!(d["component"], b"managed-ledger");
        assert_eq!(d["pulsar/managed-ledger"], b"t/ns/persistent/a");
        let c = cursor_ledger("t/ns/persistent/a", "sub");
        assert_eq!(c.len(), 4);
        assert_eq!(c["pulsar/managed-ledger"], b"t/ns/persistent/a");
        assert_eq!(c["pulsar/cursor"], b"sub");
        assert_eq!(c["component"], b"managed-ledger");
        let s = schema_ledger("t/ns/a");
        assert_eq!(s["component"], b"schema");
        assert_eq!(s["pulsar/schemaId"], b"t/ns/a");
        let cfg = with_metadata(
            LedgerConfig::default().with_custom_metadata("component", b"x".to_vec()),
            s,
        );
        assert_eq!(cfg.custom_metadata["component"], b"schema");
    }
}
