//! Walking the metadata for schema and cursor ledgers.

use std::collections::BTreeMap;

use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::ml::{CompressionType, ManagedCursorInfo, ManagedCursorInfoMetadata};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};

use crate::error::{OrchestratorError, Result};
use crate::model::LedgerKind;

/// Root of the managed-ledger tree.
pub(crate) const ML_ROOT: &str = "/managed-ledgers";
/// Root of the schema locators.
pub(crate) const SCHEMAS_ROOT: &str = "/schemas";

/// A schema or cursor ledger found in the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) kind: LedgerKind,
    pub(crate) ledger_id: i64,
    pub(crate) owner_path: String,
    pub(crate) managed_ledger: Option<String>,
    pub(crate) cursor: Option<String>,
    /// The stamp, `None` for a legacy ledger.
    pub(crate) stamp: Option<String>,
}

impl Found {
    /// The cluster that holds the ledger: its stamp, or the bootstrap cluster
    /// ([I17](bkswitch_docs::invariants::I17)).
    pub(crate) fn cluster<'a>(&'a self, bootstrap: Option<&'a str>) -> Option<&'a str> {
        self.stamp.as_deref().or(bootstrap)
    }
}

fn md(what: &str, e: bkswitch_metadata_store::MetadataError) -> OrchestratorError {
    OrchestratorError::metadata(what.to_owned(), e)
}

/// Calls `f` on every node under `root` (itself included) with a non-empty
/// value, depth first, in sorted order. Memory is bounded by the children
/// lists of the nodes on the current path (one level's names at a time), not
/// by the size of the tree: nothing visited is kept.
pub(crate) async fn visit<F>(store: &dyn MetadataStore, root: &str, mut f: F) -> Result<()>
where
    F: FnMut(&str, Vec<u8>) -> Result<()>,
{
    let mut stack: Vec<(String, std::vec::IntoIter<String>)> = Vec::new();
    let mut next = Some(root.to_owned());
    loop {
        if let Some(p) = next.take() {
            if let Some(r) = store
                .get(&p)
                .await
                .map_err(|e| md(&format!("reading `{p}`"), e))?
            {
                if !r.value.is_empty() {
                    f(&p, r.value)?;
                }
            }
            let children = store
                .children(&p)
                .await
                .map_err(|e| md(&format!("listing `{p}`"), e))?;
            stack.push((p, children.into_iter()));
        }
        let Some((parent, children)) = stack.last_mut() else {
            return Ok(());
        };
        match children.next() {
            Some(c) => next = Some(format!("{parent}/{c}")),
            None => {
                stack.pop();
            }
        }
    }
}

/// Every node under `root` with a non-empty value, depth first.
async fn walk(store: &dyn MetadataStore, root: &str) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    visit(store, root, |p, v| {
        out.push((p.to_owned(), v));
        Ok(())
    })
    .await?;
    Ok(out)
}

/// Whether a managed-ledger tree value is a cursor (`ManagedCursorInfo`) rather
/// than a `ManagedLedgerInfo`: a cursor value starts with the varint field 1
/// (`cursorsLedgerId`, required), which a `ManagedLedgerInfo` cannot decode
/// (its field 1 is a length-delimited `LedgerInfo`).
pub(crate) fn decode_cursor(value: &[u8]) -> Option<ManagedCursorInfo> {
    if value.is_empty() || decode_managed_ledger_info(value).is_ok() {
        return None;
    }
    decode_managed_cursor_info(value).ok()
}

/// The compression of a stored cursor value, to write it back the same way.
pub(crate) fn cursor_compression(value: &[u8]) -> CompressionType {
    let Some((magic, rest)) = value.split_first_chunk::<2>() else {
        return CompressionType::None;
    };
    if u16::from_be_bytes(*magic) != bkswitch_proto::codec::MAGIC {
        return CompressionType::None;
    }
    let Some((size, rest)) = rest.split_first_chunk::<4>() else {
        return CompressionType::None;
    };
    let size = u32::from_be_bytes(*size) as usize;
    rest.get(..size)
        .and_then(|m| ManagedCursorInfoMetadata::decode(m).ok())
        .and_then(|m| CompressionType::try_from(m.compression_type).ok())
        .unwrap_or(CompressionType::None)
}

/// Every schema locator: path → locator.
pub(crate) async fn schema_locators(
    store: &dyn MetadataStore,
) -> Result<BTreeMap<String, SchemaLocator>> {
    let mut out = BTreeMap::new();
    for (path, value) in walk(store, SCHEMAS_ROOT).await? {
        match SchemaLocator::decode(value.as_slice()) {
            Ok(l) => {
                out.insert(path, l);
            }
            Err(e) => {
                tracing::warn!(path, error = %e, "not a schema locator; skipped");
            }
        }
    }
    Ok(out)
}

/// Every schema ledger and every cursor ledger recorded in the metadata.
pub(crate) async fn scan(store: &dyn MetadataStore) -> Result<Vec<Found>> {
    let mut out = Vec::new();
    for (path, locator) in schema_locators(store).await? {
        let mut seen = std::collections::BTreeSet::new();
        for entry in std::iter::once(&locator.info).chain(locator.index.iter()) {
            let pos = &entry.position;
            if pos.ledger_id < 0 || !seen.insert(pos.ledger_id) {
                continue;
            }
            let stamp = match pos.cluster_stamp() {
                Ok(s) => s.map(str::to_owned),
                Err(e) => {
                    tracing::warn!(path, error = %e, "corrupt stamp; schema ledger skipped");
                    continue;
                }
            };
            out.push(Found {
                kind: LedgerKind::Schema,
                ledger_id: pos.ledger_id,
                owner_path: path.clone(),
                managed_ledger: None,
                cursor: None,
                stamp,
            });
        }
    }
    let prefix = format!("{ML_ROOT}/");
    for (path, value) in walk(store, ML_ROOT).await? {
        let Some(info) = decode_cursor(&value) else {
            continue;
        };
        if info.cursors_ledger_id < 0 {
            continue;
        }
        let Some((parent, name)) = path.rsplit_once('/') else {
            continue;
        };
        let Some(ml) = parent.strip_prefix(&prefix) else {
            continue;
        };
        let stamp = match info.cluster_stamp() {
            Ok(s) => s.map(str::to_owned),
            Err(e) => {
                tracing::warn!(path, error = %e, "corrupt stamp; cursor ledger skipped");
                continue;
            }
        };
        out.push(Found {
            kind: LedgerKind::Cursor,
            ledger_id: info.cursors_ledger_id,
            owner_path: path.clone(),
            managed_ledger: Some(ml.to_owned()),
            cursor: Some(name.to_owned()),
            stamp,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use bkswitch_proto::codec::{encode_managed_cursor_info, encode_managed_ledger_info};
    use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
    use bkswitch_proto::ml::{KeyValue, ManagedLedgerInfo};

    use super::*;

    #[test]
    fn cursor_values_are_told_apart_from_managed_ledger_values() {
        let ml = ManagedLedgerInfo {
            ledger_info: vec![LedgerInfo {
                ledger_id: 3,
                ..Default::default()
            }],
            ..Default::default()
        };
        let props_only = ManagedLedgerInfo {
            properties: vec![KeyValue {
                key: "k".into(),
                value: "v".into(),
            }],
            ..Default::default()
        };
        for info in [ml, props_only] {
            for c in [CompressionType::None, CompressionType::Zstd] {
                let bytes = encode_managed_ledger_info(&info, c).unwrap();
                assert_eq!(decode_cursor(&bytes), None, "{info:?} {c:?}");
            }
        }
        let cursor = ManagedCursorInfo {
            cursors_ledger_id: 7,
            mark_delete_ledger_id: Some(3),
            mark_delete_entry_id: Some(1),
            ..Default::default()
        };
        for c in [
            CompressionType::None,
            CompressionType::Lz4,
            CompressionType::Zstd,
        ] {
            let bytes = encode_managed_cursor_info(&cursor, c).unwrap();
            assert_eq!(decode_cursor(&bytes), Some(cursor.clone()), "{c:?}");
            assert_eq!(cursor_compression(&bytes), c);
        }
        assert_eq!(decode_cursor(&[]), None);
    }
}
