//! The operator's side of the demo, through the REST API of `node-1`: the
//! switch requested mid-traffic and watched until it converged, the ledgers it
//! moved, then cleanup (or rollback).

use std::time::{Duration, Instant};

use bkswitch_managed_ledger::schema::SchemaVersion;
use bkswitch_proto::Stamped;
use bkswitch_switch_orchestrator::{LedgerKind, SwitchLedgerState};

use super::error::{step_err, DemoError};
use super::options::Say;
use super::setup::{schema_id, Stack};
use crate::progress::SwitchBars;
use crate::traffic::TopicHandle;
use bkswitch_admin::wire::{CleanupRequest, ClusterStatus};
use bkswitch_admin::Node;
use bkswitch_admin::{AdminClient, ClientError};

/// How long the switch takes to show, measured from `POST /switch`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Timings {
    /// Until every node created new ledgers on `new` (seen by polling).
    pub(super) switch_visible: Option<Duration>,
    /// From the directive's write until the last node's swap, as the nodes
    /// recorded them (no polling in it).
    pub(super) directive_visible: Option<Duration>,
    /// Until every topic's current ledger was on `new`.
    pub(super) writes_moved: Option<Duration>,
    /// Until the switch reached SWITCHED.
    pub(super) switched: Option<Duration>,
}

impl Timings {
    fn complete(&self) -> bool {
        self.switch_visible.is_some() && self.writes_moved.is_some() && self.switched.is_some()
    }
}

/// Milliseconds of `d`; `u64::MAX` when it never happened.
pub(super) fn ms(d: Option<Duration>) -> u64 {
    d.map(|d| d.as_millis() as u64).unwrap_or(u64::MAX)
}

/// Registers `new`, runs the precheck and asks for the switch; returns when
/// it was asked.
pub(super) async fn request_switch(
    admin: &AdminClient,
    stack: &Stack,
    before_switch: impl FnOnce(),
    say: Say<'_>,
) -> Result<Instant, DemoError> {
    let new_uri = stack.bookies.uri("new");
    admin
        .register("new", &new_uri, Some(ClusterStatus::Standby))
        .await
        .map_err(step_err("POST /new (register)"))?;
    say(&format!("registered 'new' at {new_uri}"));
    let mut pre = admin
        .precheck("new")
        .await
        .map_err(step_err("GET /precheck/new"))?;
    if !pre.ready {
        // The operator's step (I11): the new cluster's generator must hand
        // out ids above every id the old one handed out.
        // Plus the idgen safety margin: nodes keep creating ledgers on
        // `old` until they applied the switch.
        let above = pre
            .source_next_ledger_id
            .unwrap_or(0)
            .max(pre.source_max_ledger_id.unwrap_or(0) + 1)
            + bkswitch_switch_orchestrator::DEFAULT_IDGEN_SAFETY_MARGIN;
        say(&format!(
            "precheck: not ready (new's next ledger id {} <= old's next {:?}); advancing \
             new's ledger id generator beyond {above}, as `bookie-switch idgen \
             --advance-beyond` does",
            pre.target_next_ledger_id, pre.source_next_ledger_id
        ));
        stack.bookies.advance_ledger_ids("new", above).await?;
        pre = admin
            .precheck("new")
            .await
            .map_err(step_err("GET /precheck/new"))?;
    }
    say(&format!(
        "precheck: ready={} (target next ledger id {} > highest copied id {:?})",
        pre.ready, pre.target_next_ledger_id, pre.source_max_ledger_id
    ));
    before_switch();
    let t0 = Instant::now();
    let started = admin
        .switch("new")
        .await
        .map_err(step_err("POST /switch"))?;
    say(&format!(
        "switch to 'new' requested (epoch {})",
        started.epoch().unwrap_or_default()
    ));
    Ok(t0)
}

/// Writes a schema version while the switch runs (it must land on `new`).
pub(super) async fn write_late_schema(node: &Node) -> Result<SchemaVersion, DemoError> {
    node.schemas()
        .put(&schema_id(0), b"{\"late\":true}", b"hash-late")
        .await
        .map_err(step_err("writing a schema during the switch"))
}

/// Polls until every node applied the switch, every topic writes to `new` and
/// the switch settled (at most 60 s), drawing bars when `progress`.
pub(super) async fn await_switch(
    stack: &Stack,
    admin: &AdminClient,
    t0: Instant,
    progress: bool,
) -> Timings {
    let mut t = Timings::default();
    let mut bars = progress.then(SwitchBars::stderr);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !t.complete() {
        if t.switch_visible.is_none() && every_node_on(&stack.nodes, "new") {
            t.switch_visible = Some(t0.elapsed());
        }
        if t.writes_moved.is_none() && stack.topics.iter().all(|h| current_ledger_on(h, "new")) {
            t.writes_moved = Some(t0.elapsed());
        }
        if t.switched.is_none() {
            let status = admin.status().await.ok();
            if let Some(b) = &mut bars {
                if let Some(c) = status.as_ref().and_then(|st| st.copy_progress()) {
                    b.update_copy(&c);
                }
            }
            if let Some(sw) = status.and_then(|st| st.switch()) {
                if let Some(b) = &bars {
                    b.update(&sw);
                }
                if sw.is_settled() {
                    t.switched = Some(t0.elapsed());
                }
            }
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if let Some(b) = bars {
        b.finish();
    }
    // Read once every node's record is surely there (a node swaps, then
    // records when).
    t.directive_visible = write_to_last_swap(&stack.nodes, "new");
    t
}

/// From the write of the directive the nodes last applied (to `cluster`)
/// until the last of them applied it, from their own records.
fn write_to_last_swap(nodes: &[Node], cluster: &str) -> Option<Duration> {
    let applied: Vec<_> = nodes
        .iter()
        .map(|n| n.sync().last_applied().filter(|a| a.target == cluster))
        .collect::<Option<_>>()?;
    let first = applied.first()?;
    if applied.iter().any(|a| a.epoch != first.epoch) {
        return None;
    }
    let last = applied.iter().map(|a| a.applied_at_ms).max()?;
    Some(Duration::from_millis(
        last.saturating_sub(first.written_at_ms).max(0) as u64,
    ))
}

fn every_node_on(nodes: &[Node], cluster: &str) -> bool {
    nodes
        .iter()
        .all(|n| n.storage().active_cluster().as_deref() == Some(cluster))
}

fn current_ledger_on(h: &TopicHandle, cluster: &str) -> bool {
    let (info, _) = h.ledger.metadata();
    info.ledger_info
        .last()
        .and_then(|l| l.cluster_stamp().ok().flatten())
        == Some(cluster)
}

/// What the switch did with the ledgers it recorded.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LedgerCounts {
    /// Schema ledgers promoted.
    pub(super) schemas_promoted: u64,
    /// Cursor ledgers promoted (stamp flip).
    pub(super) cursors_promoted: u64,
    /// Live cursors moved by rollover instead.
    pub(super) rollover_fallbacks: u64,
    /// Ledgers that failed to move.
    pub(super) failed: u64,
    /// Ledgers copied (neither failed nor obsolete).
    pub(super) copied: u64,
}

/// Counts the ledger records of the switch `node`'s orchestrator recorded last.
pub(super) async fn ledger_counts(node: &Node) -> Result<LedgerCounts, DemoError> {
    let status = node
        .orchestrator()
        .current_status()
        .await
        .map_err(step_err("reading the switch status"))?
        .ok_or_else(|| DemoError::new("reading the switch status", "no switch recorded"))?;
    let records = node
        .orchestrator()
        .ledger_records(&status.switch_id)
        .await
        .map_err(step_err("reading the switch records"))?;
    let count = |kind: LedgerKind, state: SwitchLedgerState| {
        records
            .iter()
            .filter(|r| r.kind == kind && r.state == state)
            .count() as u64
    };
    Ok(LedgerCounts {
        schemas_promoted: count(LedgerKind::Schema, SwitchLedgerState::Promoted),
        cursors_promoted: count(LedgerKind::Cursor, SwitchLedgerState::Promoted),
        rollover_fallbacks: count(LedgerKind::Cursor, SwitchLedgerState::RolledOver),
        failed: records
            .iter()
            .filter(|r| r.state == SwitchLedgerState::Failed)
            .count() as u64,
        copied: records
            .iter()
            .filter(|r| {
                r.state != SwitchLedgerState::Failed && r.state != SwitchLedgerState::Obsolete
            })
            .count() as u64,
    })
}

/// Cleans up inside the window (forced, as an operator does once satisfied),
/// after a dry run; returns the outcome.
pub(super) async fn clean_up(admin: &AdminClient, say: Say<'_>) -> Result<String, DemoError> {
    let dry = admin
        .cleanup(&CleanupRequest::default())
        .await
        .map_err(step_err("POST /cleanup (dry run)"))?;
    say(&format!(
        "cleanup dry run: {} old-cluster copies would be deleted",
        dry.targets().len()
    ));
    let report = admin
        .cleanup(&CleanupRequest {
            dry_run: false,
            force: true,
            ..CleanupRequest::default()
        })
        .await
        .map_err(step_err("POST /cleanup"))?;
    say(&format!(
        "cleanup: {} deleted, outcome {}",
        report.deleted(),
        report.outcome().unwrap_or("?")
    ));
    Ok(report.outcome().unwrap_or("?").to_owned())
}

/// Rolls back to `old`, advancing old's ledger id generator first when the
/// rollback's precheck asks for it; returns the phase reached.
pub(super) async fn roll_back(
    admin: &AdminClient,
    stack: &Stack,
    say: Say<'_>,
) -> Result<String, DemoError> {
    say("rolling back to 'old'");
    let st = match admin.rollback().await {
        Ok(st) => st,
        Err(ClientError::Api {
            status: 409,
            message,
            ..
        }) if message.contains("idgen") => {
            // Ledgers created on `new` since the switch have ids above old's
            // generator: going back needs it advanced (I11 in
            // docs/INVARIANTS.md), as an operator does with BookKeeper's
            // tooling.
            say(&format!("rollback refused: {message}"));
            let above = stack.bookies.next_ledger_id("new").await?
                + bkswitch_switch_orchestrator::DEFAULT_IDGEN_SAFETY_MARGIN;
            let next = stack.bookies.advance_ledger_ids("old", above).await?;
            say(&format!(
                "advanced old's ledger id generator beyond {above} (next id {next}); rolling \
                 back again"
            ));
            admin.rollback().await.map_err(step_err("POST /rollback"))?
        }
        Err(e) => return Err(step_err("POST /rollback")(e)),
    };
    Ok(st.phase_name().unwrap_or("?").to_owned())
}
