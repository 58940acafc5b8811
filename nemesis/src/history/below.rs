//! The faults below the metadata: bookie copies lost, metadata corrupted and
//! repaired ([`crate::corrupt`]).

use std::time::Duration;

use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};

use crate::checker::ViolationKind;
use crate::corrupt::{corrupt_ledger, corrupt_node, repair, Corruption, Damaged};
use crate::plan::{CorruptTarget, CLUSTERS, SCHEMAS, TOPICS};
use crate::traffic::CURSOR;

use super::*;

impl Run {
    /// One bookie of `cluster` loses its copies of one ledger, or of every
    /// ledger; never an entry's last copy.
    pub(super) fn lose_copies(
        &mut self,
        cluster: usize,
        bookie: usize,
        ledger: Option<u64>,
    ) -> String {
        let c = self.stack.cluster(CLUSTERS[cluster]);
        let Some(b) = c.bookies().get(bookie % c.bookies().len().max(1)).cloned() else {
            return "no bookie".to_owned();
        };
        let lost = match ledger {
            None => c.lose_bookie(&b, false),
            Some(pick) => {
                let ids = c.ledger_ids();
                if ids.is_empty() {
                    return "no ledger".to_owned();
                }
                let id = ids[(pick % ids.len() as u64) as usize];
                c.lose_copies(id, &b, 0, i64::MAX, false)
            }
        };
        self.copies_lost += lost;
        format!("{b}: {lost} copies lost")
    }

    /// Whether a metadata migration is under way (its record in the tree in
    /// use is not final).
    async fn migration_running(&mut self) -> bool {
        self.stack.sync_root();
        matches!(
            bkswitch_metadata_migration::read_current(&self.stack.root).await,
            Ok(Some((rec, _))) if !rec.phase.is_terminal()
        )
    }

    /// Corrupts what `target` and `pick` name; records it. A node is not
    /// corrupted while a metadata migration runs: the nemesis writes behind
    /// the participants' backs, so a migration would not know the node
    /// changed (it copies the bytes it finds, corrupt or not, otherwise).
    pub(super) async fn corrupt(&mut self, target: CorruptTarget, pick: u64) -> String {
        let node_target = !matches!(target, CorruptTarget::LedgerMetadata(_));
        if node_target && self.migration_running().await {
            return "nothing corrupted: a metadata migration is running".to_owned();
        }
        let topic = TOPICS[(pick % TOPICS.len() as u64) as usize];
        let damaged = match target {
            CorruptTarget::ManagedLedger => {
                corrupt_node(&self.stack.root, &format!("{MANAGED_LEDGERS_ROOT}/{topic}")).await
            }
            CorruptTarget::Cursor => {
                let path = format!("{MANAGED_LEDGERS_ROOT}/{topic}/{CURSOR}");
                corrupt_node(&self.stack.root, &path).await
            }
            CorruptTarget::SchemaLocator => {
                let id = SCHEMAS[(pick % SCHEMAS.len() as u64) as usize];
                corrupt_node(&self.stack.root, &format!("{SCHEMAS_ROOT}/{id}")).await
            }
            CorruptTarget::LedgerMetadata(cluster) => {
                corrupt_ledger(&self.stack.cluster(CLUSTERS[cluster]), pick)
            }
        };
        match damaged {
            Ok(damaged) => {
                let c = Corruption {
                    target,
                    damaged,
                    errors_before: self.model.lock().refusals.len(),
                };
                let what = c.what();
                self.corruptions.push(c);
                self.corrupted += 1;
                format!("{what} corrupted")
            }
            Err(e) => format!("nothing corrupted: {e}"),
        }
    }

    /// Repairs every corruption so far (each checked first: not taken for
    /// metadata, neither overwritten nor deleted).
    pub(super) async fn repair_all(&mut self) -> String {
        // Not while a migration runs either (the restore is a write behind
        // the participants' backs): up to a minute for it to end.
        let nodes = self
            .corruptions
            .iter()
            .any(|c| matches!(c.damaged, Damaged::Node { .. }));
        for _ in 0..120 {
            if !nodes || !self.migration_running().await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        self.stack.sync_root();
        let mut done = Vec::new();
        for c in std::mem::take(&mut self.corruptions) {
            let refused = self.model.lock().refusals[c.errors_before..]
                .iter()
                .any(|e| c.named_by(e));
            self.refused += usize::from(refused);
            // A migration since carried the corrupt bytes to the tree in
            // use, with their version (none ran when they were written).
            self.not_adopted(&c).await;
            let r = repair(
                &self.stack.root,
                &self.stack.clusters,
                &c.damaged,
                &mut self.violations,
            )
            .await;
            done.push(format!("{r}{}", if refused { " (refused)" } else { "" }));
        }
        if done.is_empty() {
            "nothing to repair".to_owned()
        } else {
            done.join("; ")
        }
    }

    /// No running node holds a managed ledger or cursor loaded from the
    /// corrupt bytes: its version would be at or past theirs.
    async fn not_adopted(&mut self, c: &Corruption) {
        let Damaged::Node { path, version, .. } = &c.damaged else {
            return;
        };
        let Some(rest) = path.strip_prefix(&format!("{MANAGED_LEDGERS_ROOT}/")) else {
            return;
        };
        let topic = match c.target {
            CorruptTarget::ManagedLedger => rest,
            CorruptTarget::Cursor => rest.trim_end_matches(&format!("/{CURSOR}")),
            _ => return,
        };
        let nodes: Vec<_> = self
            .stack
            .slots
            .iter()
            .filter_map(|s| s.node.clone().map(|n| (s.id.clone(), n)))
            .collect();
        for (id, node) in nodes {
            let Some(ml) = node.topics().get(topic) else {
                continue;
            };
            let held = if c.target == CorruptTarget::ManagedLedger {
                Some(ml.metadata().1)
            } else {
                match ml.cursor(CURSOR) {
                    Ok(cursor) => tokio::time::timeout(Duration::from_secs(5), cursor.metadata())
                        .await
                        .ok()
                        .map(|m| m.1),
                    Err(_) => None,
                }
            };
            if held.is_some_and(|v| v >= *version) {
                self.violations.push(
                    ViolationKind::CorruptionMishandled,
                    format!(
                        "{id} holds {path} at version {} while it held the corrupt bytes of \
                         version {version}: it was loaded from bytes that do not decode",
                        held.unwrap_or_default()
                    ),
                );
            }
        }
    }
}
