//! The `/metrics` exposition: every metric of a node in the Prometheus text
//! (OpenMetrics) format through `prometheus-client`, or in the classic
//! Prometheus text format 0.0.4 for every other client.
//!
//! The long-lived instruments ([`NodeMetrics`](crate::metrics::NodeMetrics))
//! are recorded where things happen; everything else is read at scrape time
//! from what already counts it: the registry sync ([`RouterMetrics`]), the
//! storage (active cluster, read mode, fail-fast reads), the coordinator (the
//! current switch's phase and counts, copies made, entries and bytes copied,
//! the live copy progress of the switch it copies), the ledger copy (the
//! proposal's `migration_ledger_id_conflict_total`) and the leader election
//! (whether this node leads, whether any leader is known). Names follow
//! Prometheus conventions: a `bkswitch_` prefix (besides the proposal's own
//! name), `_total` on counters, seconds for durations.
//!
//! [`RouterMetrics`]: bkswitch_bk_router::RouterMetrics

use bkswitch_switch_orchestrator::Phase;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use crate::node::Node;

/// Turns [`render`]'s OpenMetrics text into the classic Prometheus text
/// format 0.0.4 (`bkswitch-metrics-text`).
pub use bkswitch_metrics_text::to_prometheus_text;
/// The content type of [`render`]'s text (OpenMetrics), what Prometheus asks
/// for.
pub use bkswitch_metrics_text::OPENMETRICS_CONTENT_TYPE as CONTENT_TYPE;
/// The content type of [`to_prometheus_text`]'s text (the classic Prometheus
/// text format), for every other client (`curl`, `promtool check metrics`).
pub use bkswitch_metrics_text::TEXT_CONTENT_TYPE;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ModeLabels {
    mode: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    phase: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// How long a scrape reuses the latest switch's status: reading it costs one
/// metadata read per ledger record (a page at a time), too much to repeat on
/// every scrape of a large switch.
pub const STATUS_CACHE: std::time::Duration = std::time::Duration::from_secs(5);

/// Every metric of `node`, in the Prometheus text (OpenMetrics) format.
/// Values read from the metadata (the current switch) are left out when the
/// store cannot be read, rather than failing the scrape, and are at most
/// [`STATUS_CACHE`] old.
pub async fn render(node: &Node) -> String {
    let mut reg = Registry::default();
    let m = node.metrics();
    reg.register(
        "bkswitch_ledger_op_duration_seconds",
        "Duration of ledger operations per bookie cluster (open, create, read, add)",
        m.op_seconds.clone(),
    );
    reg.register(
        "bkswitch_ledger_op_errors",
        "Ledger operations per bookie cluster that failed",
        m.op_errors.clone(),
    );
    reg.register(
        "bkswitch_switch_events",
        "Switches started, succeeded, failed and rolled back on this node",
        m.switches.clone(),
    );
    reg.register(
        "migration_ledger_id_conflict",
        "Copies that found an identical ledger already under the same id on the target \
         and adopted it (AlreadyPresent; PIP-477's migration_ledger_id_conflict_total); a \
         different ledger there fails the copy and is not counted",
        ConstCounter::new(bkswitch_ledger_copy::migration_ledger_id_conflict_total()),
    );

    let r = node.sync().metrics().snapshot();
    let counters = [
        (
            "bkswitch_directives_applied",
            "Switch directives this node applied",
            r.directives_applied,
        ),
        (
            "bkswitch_directive_failures",
            "Attempts to apply a switch directive that failed (retried)",
            r.directive_failures,
        ),
        (
            "bkswitch_unstamped_after_bootstrap",
            "Unstamped ledgers found above a ledger stamped on the bootstrap cluster (I17)",
            r.unstamped_after_bootstrap,
        ),
        (
            "bkswitch_coordinator_duties",
            "Switch coordinator duties this node took",
            r.coordinator_duties,
        ),
        (
            "bkswitch_coordinator_takeovers",
            "Duties taken over as the leader (no origin, or the origin left)",
            r.coordinator_takeovers,
        ),
        (
            "bkswitch_registry_resyncs",
            "Times the registry was read again after a reconnection or a new session",
            r.registry_resyncs,
        ),
    ];
    for (name, help, value) in counters {
        reg.register(name, help, ConstCounter::new(value));
    }
    reg.register(
        "bkswitch_epoch",
        "Epoch of the last switch directive this node applied",
        ConstGauge::new(r.last_applied_epoch),
    );
    let sync = node.sync();
    reg.register(
        "bkswitch_coordinator_leader",
        "1 while this node is the elected leader of the switch coordinators, 0 otherwise",
        ConstGauge::new(i64::from(sync.is_leader())),
    );
    reg.register(
        "bkswitch_coordinator_leader_known",
        "1 while this node knows an elected leader (itself or another node), \
         0 while the election has none (origin-less switches then wait)",
        ConstGauge::new(i64::from(sync.leader().is_some())),
    );

    let storage = node.storage();
    let active = storage.active_cluster();
    let clusters: Family<ClusterLabels, Gauge> = Family::default();
    let fail_fast: Family<ClusterLabels, Counter> = Family::default();
    for (name, n) in storage.fail_fast_reads() {
        let labels = ClusterLabels {
            cluster: name.clone(),
        };
        clusters
            .get_or_create(&labels)
            .set(i64::from(active.as_deref() == Some(name.as_str())));
        fail_fast.get_or_create(&labels).inc_by(n);
    }
    reg.register(
        "bkswitch_active_cluster",
        "1 for the bookie cluster new ledgers are created on, 0 for the others",
        clusters,
    );
    reg.register(
        "bkswitch_fail_fast_reads",
        "Operations on a non-active cluster that failed fast (timed out after \
         oldLedgerReadTimeoutMs, or found it unreachable)",
        fail_fast,
    );
    let mode: Family<ModeLabels, Gauge> = Family::default();
    mode.get_or_create(&ModeLabels {
        mode: storage.read_mode().to_string(),
    })
    .set(1);
    reg.register(
        "bkswitch_read_mode",
        "The read mode (1 for the current one)",
        mode,
    );

    let orch = node.orchestrator();
    let copies = orch.copy_stats();
    reg.register(
        "bkswitch_ledgers_copied",
        "Ledgers this node's coordinator copied",
        ConstCounter::new(copies.copied),
    );
    let written = orch.copy_counters();
    reg.register(
        "bkswitch_copied_entries",
        "Entries this node's coordinator copied to target clusters (every switch; \
         a copy started again counts again)",
        ConstCounter::new(written.entries),
    );
    reg.register(
        "bkswitch_copied_bytes",
        "Payload bytes of those entries",
        ConstCounter::new(written.bytes),
    );
    let cached = m
        .status
        .lock()
        .as_ref()
        .filter(|(at, _)| at.elapsed() < STATUS_CACHE)
        .map(|(_, st)| st.clone());
    let current = match cached {
        Some(st) => Some(st),
        None => match orch.current_status().await {
            Ok(Some(st)) => {
                *m.status.lock() = Some((std::time::Instant::now(), st.clone()));
                Some(st)
            }
            _ => None,
        },
    };
    if let Some(st) = current {
        let phase: Family<PhaseLabels, Gauge> = Family::default();
        for p in PHASES {
            phase
                .get_or_create(&PhaseLabels {
                    phase: p.as_str().to_owned(),
                })
                .set(i64::from(st.phase == p));
        }
        reg.register(
            "bkswitch_switch_phase",
            "The phase of the latest switch (1 for the current one)",
            phase,
        );
        let c = &st.counts;
        let ledgers: Family<StateLabels, Gauge> = Family::default();
        for (state, n) in [
            ("to_build", c.to_build),
            ("built", c.built),
            ("failed", c.failed),
            ("promoted", c.promoted),
            ("rollover_fallback", c.rollover_fallback),
            ("deleted", c.deleted),
            ("rolled_back", c.rolled_back),
            ("obsolete", c.obsolete),
        ] {
            ledgers
                .get_or_create(&StateLabels {
                    state: state.to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        reg.register(
            "bkswitch_switch_ledgers",
            "Schema and cursor ledgers of the latest switch, by state",
            ledgers,
        );
        reg.register(
            "bkswitch_switch_epoch",
            "Epoch (id) of the latest switch",
            ConstGauge::new(st.epoch),
        );
        if let Some(p) = orch.live_copy_progress(&st.switch_id) {
            register_copy_progress(&mut reg, &p);
        }
        reg.register(
            "bkswitch_switch_updated_timestamp_seconds",
            "When the latest switch's record last changed (phase or ledger \
             states), Unix time in seconds",
            ConstGauge::new(ms_to_seconds(st.updated_at)),
        );
        if let Some(deadline) = st.rollback_deadline {
            reg.register(
                "bkswitch_switch_rollback_deadline_seconds",
                "End of the latest switch's rollback window (set once it reached \
                 SWITCHED), Unix time in seconds",
                ConstGauge::new(ms_to_seconds(deadline)),
            );
        }
    }
    reg.register(
        "bkswitch_topic_loads",
        "Topic loads from the metadata by this node (one per topic unless a topic was \
         unloaded, fenced or reloaded)",
        ConstGauge::new(i64::try_from(node.topic_loads()).unwrap_or(i64::MAX)),
    );
    reg.register(
        "bkswitch_topics_fenced",
        "Topics open on this node that are fenced",
        ConstGauge::new(i64::try_from(node.fenced_topics()).unwrap_or(i64::MAX)),
    );
    if let Ok(Some(rec)) = node.metadata_migration().await {
        register_migration(&mut reg, &rec);
    }
    if let Some(h) = node.migration() {
        reg.register(
            "bkswitch_metadata_writes_paused",
            "1 while this node's metadata writes are paused by a metadata migration",
            ConstGauge::new(i64::from(h.participant().is_paused())),
        );
    }
    if let Ok(Some(rec)) = node.topic_switcher().status().await {
        register_topic_switch(&mut reg, &rec);
    }
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &reg) {
        tracing::warn!(error = %e, "encoding the metrics");
    }
    out
}

/// The latest switch's live copy progress, on the node that copies it.
fn register_copy_progress(reg: &mut Registry, p: &bkswitch_switch_orchestrator::BuildProgress) {
    let gauge = |n: u64| ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
    for (name, help, value) in [
        (
            "bkswitch_switch_copied_entries",
            "Entries of the latest switch's schema and cursor ledgers copied so far \
             (on the node that copies them)",
            p.entries_copied,
        ),
        (
            "bkswitch_switch_expected_entries",
            "Entries of the latest switch's ledgers whose copy started or ended \
             (grows while ledgers wait to start)",
            p.entries_total,
        ),
        (
            "bkswitch_switch_copied_bytes",
            "Payload bytes of the latest switch's ledgers copied so far",
            p.bytes_copied,
        ),
        (
            "bkswitch_switch_expected_bytes",
            "Payload bytes of the latest switch's ledgers whose copy started or ended",
            p.bytes_total,
        ),
    ] {
        reg.register(name, help, gauge(value));
    }
    let ledgers: Family<StateLabels, Gauge> = Family::default();
    for (state, n) in [
        ("total", p.ledgers_total),
        ("done", p.ledgers_done),
        ("failed", p.ledgers_failed),
        ("copying", p.copying.len() as u64),
    ] {
        ledgers
            .get_or_create(&StateLabels {
                state: state.to_owned(),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    reg.register(
        "bkswitch_switch_copy_ledgers",
        "The latest switch's ledger copies: found so far (total), ended (done), \
         failed, in flight (copying)",
        ledgers,
    );
}

/// The current (or last seen) metadata migration.
fn register_migration(reg: &mut Registry, rec: &bkswitch_metadata_migration::MigrationRecord) {
    use bkswitch_metadata_migration::Phase as M;
    let phase: Family<PhaseLabels, Gauge> = Family::default();
    for p in [
        M::Preparation,
        M::Copying,
        M::CatchUp,
        M::Paused,
        M::Completed,
        M::Failed,
        M::Aborted,
    ] {
        let name = serde_json::to_value(p)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        phase
            .get_or_create(&PhaseLabels { phase: name })
            .set(i64::from(rec.phase == p));
    }
    reg.register(
        "bkswitch_metadata_migration_phase",
        "The phase of the current (or last seen) metadata migration (1 for the current one)",
        phase,
    );
    let gauge = |n: u64| ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
    reg.register(
        "bkswitch_metadata_migration_nodes_copied",
        "Metadata nodes the migration's copy copied (or found equal)",
        gauge(rec.copied),
    );
    reg.register(
        "bkswitch_metadata_migration_changes_caught_up",
        "Changed metadata paths the migration copied again (catch-up rounds and the pause)",
        gauge(rec.caught_up),
    );
    reg.register(
        "bkswitch_metadata_migration_pause_seconds",
        "Length of the last metadata migration's write pause, in seconds (set at COMPLETED)",
        ConstGauge::new(rec.pause_ms as f64 / 1000.0),
    );
}

/// Milliseconds since the epoch as seconds (a float: Prometheus compares
/// them with `time()`).
fn ms_to_seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

const PHASES: [Phase; 8] = [
    Phase::Build,
    Phase::Promote,
    Phase::Switched,
    Phase::Cleanup,
    Phase::Done,
    Phase::DoneWithFailures,
    Phase::RollingBack,
    Phase::RolledBack,
];

/// The topic move between Pulsar clusters, read from its record at scrape
/// time (any node reports it: the record is shared).
fn register_topic_switch(reg: &mut Registry, rec: &bkswitch_topic_switch::SwitchRecord) {
    let state: Family<StateLabels, Gauge> = Family::default();
    state
        .get_or_create(&StateLabels {
            state: serde_json::to_value(rec.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
        })
        .set(1);
    reg.register(
        "bkswitch_topic_switch_state",
        "The state of the latest topic move between Pulsar clusters (1 for the current one)",
        state,
    );
    let phases: Family<PhaseLabels, Gauge> = Family::default();
    for b in &rec.batches {
        phases
            .get_or_create(&PhaseLabels {
                phase: serde_json::to_value(b.phase)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            })
            .inc();
    }
    reg.register(
        "bkswitch_topic_switch_batches",
        "Batches of the latest topic move, by phase",
        phases,
    );
    reg.register(
        "bkswitch_topic_switch_updated_timestamp_seconds",
        "When the latest topic move's record was last written (Unix seconds)",
        ConstGauge::new(rec.updated_at_ms / 1000),
    );
}
