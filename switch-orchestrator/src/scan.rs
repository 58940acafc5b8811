//! Walking the metadata for schema and cursor ledgers.

use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::ml::{CompressionType, ManagedCursorInfo, ManagedCursorInfoMetadata};
use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};

use crate::error::{OrchestratorError, Result};
use crate::model::LedgerKind;

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

/// A depth-first walk of the nodes under a root (itself included) that have
/// a non-empty value, in sorted order, one node at a time. Memory is bounded
/// by the children lists of the nodes on the current path (one level's names
/// at a time), not by the size of the tree: nothing visited is kept.
pub(crate) struct Walk {
    stack: Vec<(String, std::vec::IntoIter<String>)>,
    next: Option<String>,
}

impl Walk {
    pub(crate) fn new(root: &str) -> Walk {
        Walk {
            stack: Vec::new(),
            next: Some(root.to_owned()),
        }
    }

    /// The next node with a value, `None` at the end.
    pub(crate) async fn next(
        &mut self,
        store: &dyn MetadataStore,
    ) -> Result<Option<(String, Vec<u8>)>> {
        loop {
            if let Some(p) = self.next.take() {
                let value = store
                    .get(&p)
                    .await
                    .map_err(|e| md(&format!("reading `{p}`"), e))?
                    .map(|r| r.value)
                    .filter(|v| !v.is_empty());
                let children = store
                    .children(&p)
                    .await
                    .map_err(|e| md(&format!("listing `{p}`"), e))?;
                self.stack.push((p.clone(), children.into_iter()));
                if let Some(v) = value {
                    return Ok(Some((p, v)));
                }
            }
            let Some((parent, children)) = self.stack.last_mut() else {
                return Ok(None);
            };
            match children.next() {
                Some(c) => self.next = Some(format!("{parent}/{c}")),
                None => {
                    self.stack.pop();
                }
            }
        }
    }
}

/// Calls `f` on every node under `root` (itself included) with a non-empty
/// value, depth first, in sorted order, holding one node at a time (see
/// [`Walk`]).
pub(crate) async fn visit<F>(store: &dyn MetadataStore, root: &str, mut f: F) -> Result<()>
where
    F: FnMut(&str, Vec<u8>) -> Result<()>,
{
    let mut walk = Walk::new(root);
    while let Some((path, value)) = walk.next(store).await? {
        f(&path, value)?;
    }
    Ok(())
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

/// Every schema ledger and every cursor ledger recorded in the metadata.
pub(crate) async fn scan(store: &dyn MetadataStore) -> Result<Vec<Found>> {
    let mut out = Vec::new();
    let mut pages = Pages::new();
    while let Some(page) = pages.next(store, usize::MAX).await? {
        out.extend(page);
    }
    Ok(out)
}

/// The schema and cursor ledgers of the metadata, streamed in pages: the
/// schema locators first, then the managed-ledger tree, one node at a time
/// (see [`Walk`]), so the coordinator holds one page however many topics
/// there are.
pub(crate) struct Pages {
    schemas: Option<Walk>,
    mls: Walk,
}

impl Pages {
    pub(crate) fn new() -> Pages {
        Pages {
            schemas: Some(Walk::new(SCHEMAS_ROOT)),
            mls: Walk::new(MANAGED_LEDGERS_ROOT),
        }
    }

    /// The next page of at least one and about `size` ledgers (a locator's
    /// ledgers stay on one page), `None` at the end.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::CorruptMetadata`] naming a node that does not
    /// decode: the ledgers it names cannot be known, so nothing may go on
    /// as if it named none (a switch would leave its ledger behind
    /// uncopied, a cleanup could delete a copy it still names).
    pub(crate) async fn next(
        &mut self,
        store: &dyn MetadataStore,
        size: usize,
    ) -> Result<Option<Vec<Found>>> {
        let mut out = Vec::new();
        while out.len() < size {
            if let Some(walk) = self.schemas.as_mut() {
                match walk.next(store).await? {
                    Some((path, value)) => schema_ledgers(&path, &value, &mut out)?,
                    None => self.schemas = None,
                }
                continue;
            }
            match self.mls.next(store).await? {
                Some((path, value)) => {
                    if let Some(f) = cursor_ledger(&path, &value)? {
                        out.push(f);
                    }
                }
                None => break,
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }
}

/// The schema ledgers of the locator at `path`.
///
/// # Errors
///
/// [`OrchestratorError::CorruptMetadata`] when the value is not a schema
/// locator or a position's stamp does not decode.
pub(crate) fn schema_ledgers(path: &str, value: &[u8], out: &mut Vec<Found>) -> Result<()> {
    let locator = SchemaLocator::decode(value).map_err(|e| {
        OrchestratorError::corrupt_metadata(path, format!("not a SchemaLocator: {e}"))
    })?;
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::iter::once(&locator.info).chain(locator.index.iter()) {
        let pos = &entry.position;
        if pos.ledger_id < 0 || !seen.insert(pos.ledger_id) {
            continue;
        }
        let stamp = pos
            .cluster_stamp()
            .map_err(|e| {
                OrchestratorError::corrupt_metadata(
                    path,
                    format!("the stamp of schema ledger {}: {e}", pos.ledger_id),
                )
            })?
            .map(str::to_owned);
        out.push(Found {
            kind: LedgerKind::Schema,
            ledger_id: pos.ledger_id,
            owner_path: path.to_owned(),
            managed_ledger: None,
            cursor: None,
            stamp,
        });
    }
    Ok(())
}

/// The cursor ledger of the managed-ledger tree node at `path`, if it is a
/// cursor (`None` for a managed ledger's own node, or a cursor without a
/// ledger).
///
/// # Errors
///
/// [`OrchestratorError::CorruptMetadata`] when the value decodes neither as
/// a managed ledger nor as a cursor, or the cursor's stamp does not decode.
pub(crate) fn cursor_ledger(path: &str, value: &[u8]) -> Result<Option<Found>> {
    if value.is_empty() || decode_managed_ledger_info(value).is_ok() {
        return Ok(None);
    }
    let info = decode_managed_cursor_info(value).map_err(|e| {
        OrchestratorError::corrupt_metadata(
            path,
            format!("neither a ManagedLedgerInfo nor a ManagedCursorInfo: {e}"),
        )
    })?;
    if info.cursors_ledger_id < 0 {
        return Ok(None);
    }
    let Some((parent, name)) = path.rsplit_once('/') else {
        return Ok(None);
    };
    let Some(ml) = parent
        .strip_prefix(MANAGED_LEDGERS_ROOT)
        .and_then(|p| p.strip_prefix('/'))
    else {
        return Ok(None);
    };
    let stamp = info
        .cluster_stamp()
        .map_err(|e| {
            OrchestratorError::corrupt_metadata(
                path,
                format!("the stamp of cursor ledger {}: {e}", info.cursors_ledger_id),
            )
        })?
        .map(str::to_owned);
    Ok(Some(Found {
        kind: LedgerKind::Cursor,
        ledger_id: info.cursors_ledger_id,
        owner_path: path.to_owned(),
        managed_ledger: Some(ml.to_owned()),
        cursor: Some(name.to_owned()),
        stamp,
    }))
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
