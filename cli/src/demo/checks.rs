//! The invariants the demo can observe, checked at the end of a run: traffic
//! lost nothing, every node applied the switch, the registry and every stamp
//! are consistent, a rollback restored the stamps, and cursors recover their
//! last acknowledged position.

use std::collections::BTreeMap;
use std::fmt::Debug;

use bkswitch_managed_ledger::Position;
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::ClusterStatus;

use super::bookies::Bookies;
use super::error::{step_err, DemoError};
use super::phases::{ms, Timings};
use super::report::InvariantCheck;
use crate::traffic::TrafficReport;
use bkswitch_admin::Node;

/// The checks made so far, in order.
#[derive(Debug, Default)]
pub(super) struct Checks(Vec<InvariantCheck>);

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: String) {
        self.0.push(InvariantCheck {
            name: name.to_owned(),
            ok,
            detail,
        });
    }

    /// Holds when `problems` is empty; the detail is `fine` then, else the
    /// problems.
    fn check_none(&mut self, name: &str, problems: Vec<String>, fine: String) {
        let ok = problems.is_empty();
        self.check(name, ok, if ok { fine } else { problems.join("; ") });
    }

    /// Every check, in the order made.
    pub(super) fn into_vec(self) -> Vec<InvariantCheck> {
        self.0
    }

    /// Publishes never failed, and consumers saw every acknowledged entry.
    pub(super) fn traffic(&mut self, report: &TrafficReport) {
        self.check(
            "publishes never failed",
            report.publish_failures == 0,
            format!("{} failed attempts", report.publish_failures),
        );
        self.check(
            "no acknowledged entry lost (consumer gaps)",
            report.consumer_gaps == 0 && report.consumed == report.published,
            format!(
                "{} published, {} consumed, {} gaps",
                report.published, report.consumed, report.consumer_gaps
            ),
        );
    }

    /// Every node applied the switch, and a schema version could be written
    /// while it ran.
    pub(super) fn switch_applied<T: Debug>(
        &mut self,
        timings: &Timings,
        late_schema: &Result<T, DemoError>,
    ) {
        self.check(
            "every node applied the switch",
            timings.switch_visible.is_some(),
            format!("{} ms", ms(timings.switch_visible)),
        );
        self.check(
            "late schema version written during the switch",
            late_schema.is_ok(),
            format!("{late_schema:?}"),
        );
    }

    /// Exactly one ACTIVE cluster, `expected_active`
    /// ([I12](bkswitch_docs::invariants::I12)), and the bootstrap marker names
    /// `old` ([I17](bkswitch_docs::invariants::I17)).
    pub(super) async fn registry(
        &mut self,
        node: &Node,
        expected_active: &str,
    ) -> Result<(), DemoError> {
        let records = node
            .registry()
            .list()
            .await
            .map_err(step_err("listing clusters"))?;
        let actives: Vec<_> = records
            .iter()
            .filter(|r| r.status == ClusterStatus::Active)
            .map(|r| r.name.clone())
            .collect();
        self.check(
            "I12 exactly one ACTIVE cluster",
            actives == [expected_active],
            format!("ACTIVE: {actives:?}"),
        );
        let bootstrap = node.registry().bootstrap().await.ok().flatten();
        self.check(
            "I17 bootstrap marker written once, names 'old'",
            bootstrap
                .as_ref()
                .map(|b| b.bootstrap_cluster_name.as_str())
                == Some("old"),
            format!("{:?}", bootstrap.map(|b| b.bootstrap_cluster_name)),
        );
        Ok(())
    }

    /// Every ledger is on the cluster its stamp names
    /// ([I2](bkswitch_docs::invariants::I2), [I8](bkswitch_docs::invariants::I8)).
    pub(super) async fn placement(&mut self, store: &dyn MetadataStore, bookies: &Bookies) {
        let ledgers = stamped_ledgers(&snapshot_tree(store).await);
        self.check_none(
            "I2/I8 every ledger is on the cluster its stamp names",
            bookies.missing(ledgers).await,
            "all stamps resolve to a cluster holding the ledger".into(),
        );
    }

    /// After a rollback, every schema entry that existed `before` the switch
    /// names `old` again.
    pub(super) async fn rollback_restored(
        &mut self,
        before: &BTreeMap<String, Vec<u8>>,
        store: &dyn MetadataStore,
    ) {
        self.check_none(
            "rollback restored schema stamps to 'old'",
            rollback_diffs(before, &snapshot_tree(store).await),
            "every schema entry that existed before names 'old' again".into(),
        );
    }

    /// Reopened on `verifier`, every topic's cursor recovers exactly the last
    /// position its consumer acknowledged.
    pub(super) async fn cursor_recovery(
        &mut self,
        verifier: &Node,
        acked: &BTreeMap<String, Position>,
    ) {
        let mut mismatches = Vec::new();
        for (name, pos) in acked {
            match verifier.open_topic(name).await {
                Ok(ml) => match ml.cursor("sub") {
                    Ok(c) if c.mark_delete_position() == *pos => {}
                    Ok(c) => mismatches.push(format!(
                        "{name}: recovered {} but acknowledged {pos}",
                        c.mark_delete_position()
                    )),
                    Err(e) => mismatches.push(format!("{name}: {e}")),
                },
                Err(e) => mismatches.push(format!("{name}: {e}")),
            }
        }
        self.check_none(
            "cursors recover exactly the last acknowledged position after reopen",
            mismatches,
            format!("{} cursors checked", acked.len()),
        );
    }
}

/// Every node of the metadata tree with its value, sorted by path.
pub(super) async fn snapshot_tree(store: &dyn MetadataStore) -> BTreeMap<String, Vec<u8>> {
    bkswitch_admin::testkit::tree(store)
        .await
        .into_iter()
        .map(|(p, (v, _))| (p, v))
        .collect()
}

/// Whether `path` is below the node `root`.
fn below(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Every ledger (data, cursor, schema) of `tree` as `(kind, id, cluster its
/// stamp names)` (unstamped: `old`, the bootstrap cluster).
fn stamped_ledgers(tree: &BTreeMap<String, Vec<u8>>) -> Vec<(String, i64, String)> {
    let mut out = Vec::new();
    let mut add = |what: &str, id: i64, stamp: Option<&str>| {
        out.push((what.to_owned(), id, stamp.unwrap_or("old").to_owned()));
    };
    for (path, value) in tree {
        if below(path, MANAGED_LEDGERS_ROOT) {
            if let Ok(info) = decode_managed_ledger_info(value) {
                if !info.ledger_info.is_empty() {
                    for l in &info.ledger_info {
                        add("data", l.ledger_id, l.cluster_stamp().ok().flatten());
                    }
                    continue;
                }
            }
            if let Ok(info) = decode_managed_cursor_info(value) {
                if info.cursors_ledger_id >= 0 {
                    add(
                        "cursor",
                        info.cursors_ledger_id,
                        info.cluster_stamp().ok().flatten(),
                    );
                }
            }
        } else if below(path, SCHEMAS_ROOT) {
            if let Ok(loc) = SchemaLocator::decode(value.as_slice()) {
                for e in &loc.index {
                    add(
                        "schema",
                        e.position.ledger_id,
                        e.position.cluster_stamp().ok().flatten(),
                    );
                }
            }
        }
    }
    out
}

/// The schema entries of `before` whose stamp names another cluster than
/// `old` in `after`.
fn rollback_diffs(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, value) in before {
        if !below(path, SCHEMAS_ROOT) {
            continue;
        }
        let (Ok(b), Some(Ok(a))) = (
            SchemaLocator::decode(value.as_slice()),
            after.get(path).map(|v| SchemaLocator::decode(v.as_slice())),
        ) else {
            continue;
        };
        for e in &b.index {
            if let Some(now) = a.index.iter().find(|x| x.version == e.version) {
                let s = now.position.cluster_stamp().ok().flatten();
                if s.is_some_and(|s| s != "old") {
                    out.push(format!("{path} version {} names {s:?}", e.version));
                }
            }
        }
    }
    out
}
