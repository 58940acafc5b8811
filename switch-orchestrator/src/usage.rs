//! Which recorded ledgers a bookie cluster holds: the exact check behind
//! refusing to unregister a cluster that still holds data
//! ([I2](bkswitch_docs::invariants::I2)).

use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::decode_managed_ledger_info;
use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::scan::{decode_cursor, visit};

/// How many ledger ids [`KindUsage::sample`] keeps.
pub const USAGE_SAMPLE: usize = 10;

/// The ledgers of one kind that a cluster holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindUsage {
    /// How many recorded ledgers of this kind the cluster holds.
    pub count: u64,
    /// Of those, how many carry no stamp (held by the bootstrap cluster,
    /// [I17](bkswitch_docs::invariants::I17)).
    pub unstamped: u64,
    /// The first [`USAGE_SAMPLE`] of their ids, in metadata order.
    pub sample: Vec<i64>,
}

impl KindUsage {
    fn add(&mut self, ledger_id: i64, unstamped: bool) {
        self.count += 1;
        if unstamped {
            self.unstamped += 1;
        }
        if self.sample.len() < USAGE_SAMPLE {
            self.sample.push(ledger_id);
        }
    }
}

/// The recorded ledgers that one bookie cluster holds: those stamped with
/// its name and, when it is the bootstrap cluster, the unstamped ones. Found
/// by [`Orchestrator::cluster_usage`](crate::Orchestrator::cluster_usage),
/// which streams the metadata (one node at a time, nothing kept but these
/// counts and samples).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUsage {
    /// The cluster.
    pub cluster: String,
    /// Whether unstamped ledgers count as its: it is the bootstrap cluster,
    /// or no bootstrap cluster is recorded (then any cluster may hold them).
    pub holds_unstamped: bool,
    /// Data ledgers (a managed ledger's `ledgerInfo`).
    pub data: KindUsage,
    /// Cursor ledgers (a cursor's `cursorsLedgerId`).
    pub cursor: KindUsage,
    /// Schema ledgers (a schema locator's positions).
    pub schema: KindUsage,
    /// Records whose stamp is corrupt (a duplicated stamp property), so the
    /// cluster that holds them cannot be told: `owner path → ledger id`, at
    /// most [`USAGE_SAMPLE`] listed, `corrupt_count` in all.
    pub corrupt: Vec<(String, i64)>,
    /// How many corrupt records were found.
    pub corrupt_count: u64,
    /// Metadata values that decode as none of the known records: which
    /// cluster their ledgers are on cannot be told.
    pub undecodable: u64,
    /// The paths of the first [`USAGE_SAMPLE`] of them.
    #[serde(default)]
    pub undecodable_paths: Vec<String>,
}

impl ClusterUsage {
    /// Whether no recorded ledger is (or may be) held by the cluster.
    pub fn is_empty(&self) -> bool {
        self.total() == 0 && self.corrupt_count == 0
    }

    /// Ledgers held, all kinds.
    pub fn total(&self) -> u64 {
        self.data.count + self.cursor.count + self.schema.count
    }

    /// A one-line account for error messages: counts per kind with samples.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (kind, u) in [
            ("data", &self.data),
            ("cursor", &self.cursor),
            ("schema", &self.schema),
        ] {
            if u.count == 0 {
                continue;
            }
            let unstamped = if u.unstamped > 0 {
                format!(", {} unstamped", u.unstamped)
            } else {
                String::new()
            };
            parts.push(format!(
                "{} {kind} ledger(s){unstamped} (e.g. {:?})",
                u.count, u.sample
            ));
        }
        if self.corrupt_count > 0 {
            parts.push(format!(
                "{} record(s) with a corrupt stamp (e.g. {:?})",
                self.corrupt_count, self.corrupt
            ));
        }
        parts.join(", ")
    }
}

/// Streams the managed-ledger and schema trees of `store`, counting the
/// ledgers held by `cluster` (`holds_unstamped`: whether unstamped ledgers
/// count as its).
pub(crate) async fn usage(
    store: &dyn MetadataStore,
    cluster: &str,
    holds_unstamped: bool,
) -> Result<ClusterUsage> {
    let mut u = ClusterUsage {
        cluster: cluster.to_owned(),
        holds_unstamped,
        ..Default::default()
    };
    let holds = |stamp: Option<&str>| match stamp {
        Some(s) => s == cluster,
        None => holds_unstamped,
    };
    visit(store, SCHEMAS_ROOT, |path, value| {
        let Ok(locator) = SchemaLocator::decode(value.as_slice()) else {
            undecodable(&mut u, path);
            return Ok(());
        };
        let mut seen = Vec::new();
        for entry in std::iter::once(&locator.info).chain(locator.index.iter()) {
            let pos = &entry.position;
            if pos.ledger_id < 0 || seen.contains(&pos.ledger_id) {
                continue;
            }
            seen.push(pos.ledger_id);
            match pos.cluster_stamp() {
                Ok(s) if holds(s) => u.schema.add(pos.ledger_id, s.is_none()),
                Ok(_) => {}
                Err(_) => corrupt(&mut u, path, pos.ledger_id),
            }
        }
        Ok(())
    })
    .await?;
    visit(store, MANAGED_LEDGERS_ROOT, |path, value| {
        if let Ok(info) = decode_managed_ledger_info(&value) {
            for l in &info.ledger_info {
                match l.cluster_stamp() {
                    Ok(s) if holds(s) => u.data.add(l.ledger_id, s.is_none()),
                    Ok(_) => {}
                    Err(_) => corrupt(&mut u, path, l.ledger_id),
                }
            }
        } else if let Some(c) = decode_cursor(&value) {
            if c.cursors_ledger_id >= 0 {
                match c.cluster_stamp() {
                    Ok(s) if holds(s) => u.cursor.add(c.cursors_ledger_id, s.is_none()),
                    Ok(_) => {}
                    Err(_) => corrupt(&mut u, path, c.cursors_ledger_id),
                }
            }
        } else {
            undecodable(&mut u, path);
        }
        Ok(())
    })
    .await?;
    Ok(u)
}

fn undecodable(u: &mut ClusterUsage, path: &str) {
    u.undecodable += 1;
    if u.undecodable_paths.len() < USAGE_SAMPLE {
        u.undecodable_paths.push(path.to_owned());
    }
}

fn corrupt(u: &mut ClusterUsage, path: &str, ledger_id: i64) {
    u.corrupt_count += 1;
    if u.corrupt.len() < USAGE_SAMPLE {
        u.corrupt.push((path.to_owned(), ledger_id));
    }
}
