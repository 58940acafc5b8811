//! Corrupt metadata, injected mid-history and repaired later
//! ([`Op::Corrupt`](crate::plan::Op::Corrupt),
//! [`Op::RepairMetadata`](crate::plan::Op::RepairMetadata)).
//!
//! What is damaged: a managed ledger's node, its cursor's node or a schema
//! locator in the metadata store (their bytes replaced by [`GARBAGE`], which
//! no decoder takes, with a compare-and-set on the version read: a write
//! like any other, so the version moves on), or the metadata BookKeeper
//! keeps of one ledger ([`MemoryCluster::corrupt_metadata`]). The nemesis
//! records what it replaced. Nodes are corrupted and repaired only while no
//! metadata migration runs: those writes are made behind the participants'
//! backs, which a migration cannot see (a migration that starts later
//! carries the corrupt bytes, with their version, to the other tree).
//!
//! What the system must do meanwhile, and how it is judged:
//! - never take the damaged bytes for metadata: no node loads a managed
//!   ledger or cursor from them (its version would then be at or past the
//!   corrupt one: [`ViolationKind::CorruptionMishandled`]), and nothing is
//!   read from them (a consumer receiving another message than the next
//!   acknowledged one is `WrongData` or `ConsumerGap`, as always);
//! - never overwrite or delete the damaged node (it would lose what the
//!   backup restores): at repair the node must still hold exactly the
//!   corrupt bytes at the corrupt version, else `CorruptionMishandled`;
//! - refuse loudly: the errors the traffic gets are recorded, and one that
//!   names the damaged object as undecodable counts the corruption as
//!   *refused* in the figures (a corruption the traffic never ran into is
//!   not a violation: nothing read it);
//! - once repaired (the original bytes written back, as an operator restores
//!   a backup; every corruption is repaired when the faults heal, before the
//!   checker runs), everything acknowledged reads back: the checker's usual
//!   checks, which also report any node or ledger metadata still undecodable
//!   as `CorruptMetadata`.

use bkswitch_bk_client::{LedgerId, MemoryCluster, MemoryClusters};
use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};

use crate::plan::CorruptTarget;
use crate::violation::{ViolationKind, Violations};

/// The bytes a corrupted node holds: an unterminated varint (eleven bytes
/// with the continuation bit), which neither the protobuf decoders nor the
/// compressed framing's magic take.
pub const GARBAGE: &[u8] = b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff nemesis: corrupt bytes";

/// What a corruption damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damaged {
    /// A node of the metadata store.
    Node {
        /// Its path.
        path: String,
        /// The bytes it held.
        original: Vec<u8>,
        /// Its version once corrupted.
        version: i64,
    },
    /// The metadata BookKeeper keeps of a ledger.
    Ledger {
        /// The cluster.
        cluster: String,
        /// The ledger.
        ledger_id: LedgerId,
    },
}

/// One corruption of a history.
#[derive(Debug, Clone)]
pub struct Corruption {
    /// What kind of object.
    pub target: CorruptTarget,
    /// What was damaged.
    pub damaged: Damaged,
    /// How many corruption-naming errors the traffic had recorded before.
    pub errors_before: usize,
}

impl Corruption {
    /// The damaged object, for messages.
    pub fn what(&self) -> String {
        match &self.damaged {
            Damaged::Node { path, .. } => format!("node {path}"),
            Damaged::Ledger { cluster, ledger_id } => {
                format!("the metadata of ledger {ledger_id} on `{cluster}`")
            }
        }
    }

    /// Whether the error text `error` names this object as undecodable.
    pub fn named_by(&self, error: &str) -> bool {
        match &self.damaged {
            Damaged::Node { path, .. } => {
                (error.contains("corrupt") || error.contains("decode")) && names_path(error, path)
            }
            Damaged::Ledger { cluster, ledger_id } => {
                error.contains(&format!(
                    "the metadata of ledger {ledger_id} cannot be decoded"
                )) && error.contains(&format!("'{cluster}'"))
            }
        }
    }
}

/// Whether `text` names `path` itself (not a node below it).
fn names_path(text: &str, path: &str) -> bool {
    text.match_indices(path).any(|(i, _)| {
        text[i + path.len()..]
            .chars()
            .next()
            .is_none_or(|c| c != '/' && !c.is_alphanumeric() && c != '-' && c != '_')
    })
}

/// Replaces the bytes of the node at `path` with [`GARBAGE`] (a
/// compare-and-set on the version read); `Err` when there is no such node.
///
/// # Errors
///
/// The node does not exist, or the store failed (described).
pub async fn corrupt_node(store: &MemoryStore, path: &str) -> Result<Damaged, String> {
    for _ in 0..3 {
        let Some(r) = store.get(path).await.map_err(|e| e.to_string())? else {
            return Err(format!("no node {path} yet"));
        };
        if r.value == GARBAGE {
            return Err(format!("{path} is corrupt already"));
        }
        match store
            .put(path, GARBAGE, ExpectedVersion::Exactly(r.stat.version))
            .await
        {
            Ok(stat) => {
                return Ok(Damaged::Node {
                    path: path.to_owned(),
                    original: r.value,
                    version: stat.version,
                })
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("{path} kept changing"))
}

/// Corrupts the metadata of the `pick`-th ledger (by id, modulo) of
/// `cluster`.
///
/// # Errors
///
/// The cluster holds no ledger.
pub fn corrupt_ledger(cluster: &MemoryCluster, pick: u64) -> Result<Damaged, String> {
    let ids = cluster.ledger_ids();
    if ids.is_empty() {
        return Err(format!("`{}` holds no ledger", cluster.name()));
    }
    let ledger_id = ids[(pick % ids.len() as u64) as usize];
    if cluster.is_metadata_corrupt(ledger_id) == Some(true) {
        return Err(format!("ledger {ledger_id} is corrupt already"));
    }
    cluster.corrupt_metadata(ledger_id);
    Ok(Damaged::Ledger {
        cluster: cluster.name().to_owned(),
        ledger_id,
    })
}

/// Repairs `damaged` (writes the original bytes back, as an operator
/// restores a backup), reporting an overwritten or deleted node; returns what
/// was done.
pub async fn repair(
    store: &MemoryStore,
    clusters: &MemoryClusters,
    damaged: &Damaged,
    out: &mut Violations,
) -> String {
    match damaged {
        Damaged::Ledger { cluster, ledger_id } => {
            let restored = clusters
                .get(cluster)
                .is_some_and(|c| c.restore_metadata(*ledger_id));
            if restored {
                format!("ledger {ledger_id} on `{cluster}` restored")
            } else {
                // Deleted by its owner: a delete does not read the metadata;
                // whether it was still referenced is the checker's concern.
                format!("ledger {ledger_id} on `{cluster}` was deleted meanwhile")
            }
        }
        Damaged::Node {
            path,
            original,
            version,
        } => match store.get(path).await {
            Ok(None) => {
                out.push(
                    ViolationKind::CorruptionMishandled,
                    format!(
                        "{path} was deleted while it did not decode (corrupted at version \
                         {version}): what a backup would restore is gone"
                    ),
                );
                "deleted meanwhile".to_owned()
            }
            Ok(Some(r)) if r.value == GARBAGE && r.stat.version == *version => {
                match store
                    .put(path, original, ExpectedVersion::Exactly(*version))
                    .await
                {
                    Ok(_) => format!("{path} restored"),
                    Err(e) => format!("{path} not restored: {e}"),
                }
            }
            Ok(Some(r)) => {
                out.push(
                    ViolationKind::CorruptionMishandled,
                    format!(
                        "{path} was overwritten while it did not decode: version {} now, the \
                         corrupt bytes were version {version}",
                        r.stat.version
                    ),
                );
                "overwritten meanwhile".to_owned()
            }
            Err(e) => format!("{path} not read: {e}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
    use bkswitch_proto::schema::SchemaLocator;
    use bkswitch_proto::Message;

    #[test]
    fn the_garbage_decodes_as_nothing() {
        assert!(decode_managed_ledger_info(GARBAGE).is_err());
        assert!(decode_managed_cursor_info(GARBAGE).is_err());
        assert!(SchemaLocator::decode(GARBAGE).is_err());
    }

    #[test]
    fn an_error_names_the_path_itself() {
        let c = Corruption {
            target: CorruptTarget::ManagedLedger,
            damaged: Damaged::Node {
                path: "/managed-ledgers/t/ns1/persistent/a".into(),
                original: Vec::new(),
                version: 3,
            },
            errors_before: 0,
        };
        assert!(c.named_by(
            "corrupt metadata of managed ledger 't/ns1/persistent/a' at \
             '/managed-ledgers/t/ns1/persistent/a': invalid varint"
        ));
        assert!(!c.named_by(
            "corrupt metadata of cursor 'sub' at '/managed-ledgers/t/ns1/persistent/a/sub': x"
        ));
        assert!(!c.named_by("corrupt metadata at '/managed-ledgers/t/ns1/persistent/ab'"));
    }
}
