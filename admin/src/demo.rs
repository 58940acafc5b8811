//! The end-to-end switch demo (`bookie-switch demo`): several nodes, live
//! traffic, schemas, and an operator switching the bookie cluster mid-traffic
//! through the REST API, then cleaning up (or rolling back), with every
//! invariant the demo can observe checked at the end.
//!
//! Embedded default: one in-memory metadata store (each node has its own
//! session) and two in-memory BookKeeper clusters, `old` and `new`.
//! `--zk` puts the metadata on a real ZooKeeper instead (under a fresh chroot).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::{ClusterStatus, MemoryIdgenSource};
use bkswitch_switch_orchestrator::{LedgerKind, LedgerState, OrchestratorConfig};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::client::{AdminClient, CleanupRequest, SwitchPhase};
use crate::node::{Node, NodeConfig};
use crate::traffic::{Phase, TopicHandle, Traffic, TrafficReport};

const ADMIN_TOKEN: &str = "demo-admin-token";
const INTERNAL_TOKEN: &str = "demo-internal-token";
/// First ledger id of the `new` cluster: the operator advanced its id
/// generator beyond the old cluster's ids, which the precheck (I11) verifies.
const NEW_CLUSTER_FIRST_ID: i64 = 1_000_000;

/// Settings of a demo run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Topics (each with one producer and one acknowledging consumer).
    pub topics: usize,
    /// Publishes per second per topic.
    pub rate: u32,
    /// Total traffic time: a third before the switch, the rest during and after.
    pub duration: Duration,
    /// Nodes (each owns a share of the topics).
    pub nodes: usize,
    /// Schema versions written per topic before the switch (one more is
    /// written while the switch runs).
    pub schema_versions: usize,
    /// Roll back inside the window instead of cleaning up.
    pub rollback: bool,
    /// Roll every topic over right after the switch (SPEC §5.2).
    pub forced_rollover: bool,
    /// `zk://host:port[/chroot]`: metadata on ZooKeeper instead of in memory.
    pub zk: Option<String>,
    /// Draw progress bars (on a terminal).
    pub progress: bool,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            topics: 8,
            rate: 50,
            duration: Duration::from_secs(12),
            nodes: 3,
            schema_versions: 3,
            rollback: false,
            forced_rollover: true,
            zk: None,
            progress: false,
        }
    }
}

/// One checked invariant.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvariantCheck {
    /// What was checked (with the invariant's number when it has one).
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// What was observed.
    pub detail: String,
}

/// What a demo run observed (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoReport {
    /// Topics under traffic.
    pub topics: usize,
    /// Nodes.
    pub nodes: usize,
    /// Where the metadata lived (`memory` or the ZooKeeper URL).
    pub metadata_store: String,
    /// Acknowledged publishes.
    pub published: u64,
    /// Entries consumed (first deliveries).
    pub consumed: u64,
    /// Failed publish attempts.
    pub publish_failures: u64,
    /// Sequence numbers consumers never saw.
    pub consumer_gaps: u64,
    /// Redeliveries (at-least-once).
    pub consumer_duplicates: u64,
    /// Schema ledgers promoted to `new`.
    pub schemas_promoted: u64,
    /// Cursor ledgers promoted to `new` (stamp flip).
    pub cursors_promoted: u64,
    /// Ledgers that failed to move.
    pub failed_ledgers: u64,
    /// Live cursors moved by rollover instead of a stamp flip.
    pub rollover_fallbacks: u64,
    /// Ledgers copied to `new` (same id, same entry ids).
    pub ledgers_copied: u64,
    /// From `POST /switch` until every node created new ledgers on `new`.
    pub switch_visible_ms: u64,
    /// From `POST /switch` until every topic's current ledger was on `new`.
    pub all_writes_moved_ms: u64,
    /// From `POST /switch` until the switch reached SWITCHED.
    pub build_promote_ms: u64,
    /// `DONE`, `DONE_WITH_FAILURES` or `ROLLED_BACK`.
    pub outcome: String,
    /// Publish statistics before, during and after the switch.
    pub traffic: TrafficReport,
    /// Every invariant checked.
    pub invariants: Vec<InvariantCheck>,
    /// Whether every invariant held.
    pub invariants_ok: bool,
}

/// A demo failure (a step that could not run, not a broken invariant).
#[derive(Debug, thiserror::Error)]
#[error("demo step '{step}' failed: {reason}")]
pub struct DemoError {
    /// The step.
    pub step: String,
    /// What went wrong.
    pub reason: String,
}

fn step_err<E: std::fmt::Display>(step: &str) -> impl FnOnce(E) -> DemoError + '_ {
    move |e| DemoError {
        step: step.to_owned(),
        reason: e.to_string(),
    }
}

/// Something that prints the demo's progress lines (stderr in the binary).
pub type Say<'a> = &'a (dyn Fn(&str) + Send + Sync);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn open_store(
    zk: Option<&str>,
    chroot: &str,
    shared: &MemoryStore,
) -> Result<Arc<dyn MetadataStore>, DemoError> {
    match zk {
        None => Ok(Arc::new(shared.new_session())),
        Some(url) => {
            let url = format!("{}{chroot}", url.trim_end_matches('/'));
            let store = ZkStore::connect(&url, ZkStoreOptions::default())
                .await
                .map_err(step_err("connecting to ZooKeeper"))?;
            Ok(Arc::new(store))
        }
    }
}

/// Runs the demo; `say` receives human progress lines.
///
/// # Errors
///
/// [`DemoError`] when a step cannot run at all (a broken invariant is
/// reported in [`DemoReport::invariants`], not as an error).
pub async fn run_demo(opts: &DemoOptions, say: Say<'_>) -> Result<DemoReport, DemoError> {
    if opts.topics == 0 || opts.nodes == 0 || opts.rate == 0 {
        return Err(DemoError {
            step: "options".into(),
            reason: "--topics, --nodes and --rate must be at least 1".into(),
        });
    }
    let shared = MemoryStore::new();
    let chroot = format!("/bkswitch-demo-{}", now_ms());
    let clusters = MemoryClusters::new();
    clusters.get_or_create("old");
    let new = clusters.get_or_create("new");
    new.advance_ledger_id_to(NEW_CLUSTER_FIRST_ID)
        .map_err(step_err("preparing the new cluster"))?;
    let factory = Arc::new(MemoryClientFactory::with_clusters(clusters.clone()));
    let ledger_config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
        .with_max_entries_per_ledger(5_000)
        .with_cursor_rollover(10_000, Duration::from_secs(3600));

    say(&format!(
        "starting {} nodes on {} metadata, bookie clusters 'old' (active) and 'new'",
        opts.nodes,
        if opts.zk.is_some() {
            "ZooKeeper"
        } else {
            "in-memory"
        }
    ));
    let mut nodes = Vec::new();
    for i in 0..opts.nodes {
        let store = open_store(opts.zk.as_deref(), &chroot, &shared).await?;
        let mut cfg = NodeConfig::new(
            &format!("node-{}", i + 1),
            store,
            factory.clone(),
            "memory://old",
            ADMIN_TOKEN,
            INTERNAL_TOKEN,
        );
        cfg.cluster_name = Some("old".into());
        cfg.idgen = Some(Arc::new(MemoryIdgenSource {
            clusters: clusters.clone(),
        }));
        cfg.ledger_config = ledger_config.clone();
        cfg.forced_rollover_rate = opts.forced_rollover.then_some(200);
        cfg.orchestrator = OrchestratorConfig::default();
        nodes.push(
            Node::start(cfg)
                .await
                .map_err(step_err("starting a node"))?,
        );
    }

    // Topics, consumers and schemas.
    let mut handles = Vec::new();
    let mut owner_of = BTreeMap::new();
    for t in 0..opts.topics {
        let name = format!("public/default/persistent/demo-{t:03}");
        let node = &nodes[t % nodes.len()];
        let ledger = node
            .open_topic(&name)
            .await
            .map_err(step_err("opening a topic"))?;
        let cursor = ledger
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .map_err(step_err("opening a cursor"))?;
        for v in 0..opts.schema_versions {
            let data = format!("{{\"type\":\"record\",\"name\":\"Demo{t}\",\"v\":{v}}}");
            node.schemas()
                .put(
                    &schema_id(t),
                    data.as_bytes(),
                    format!("hash-{t}-{v}").as_bytes(),
                )
                .await
                .map_err(step_err("writing a schema"))?;
        }
        owner_of.insert(name, node.node_id().to_owned());
        handles.push(TopicHandle { ledger, cursor });
    }
    let metadata_before = snapshot_tree(nodes[0].registry().store().as_ref()).await;

    say(&format!(
        "traffic: {} topics x {} msg/s for {:.0} s",
        opts.topics,
        opts.rate,
        opts.duration.as_secs_f64()
    ));
    let traffic = Traffic::start(&handles, opts.rate, 256);
    let third = opts.duration / 3;
    tokio::time::sleep(third).await;

    // The operator, through the REST API of node-1.
    let admin = AdminClient::new(nodes[0].url(), ADMIN_TOKEN).map_err(step_err("REST client"))?;
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .map_err(step_err("POST /new (register)"))?;
    let pre = admin
        .precheck("new")
        .await
        .map_err(step_err("GET /precheck/new"))?;
    say(&format!(
        "precheck: ready={} (target next ledger id {} > highest copied id {:?})",
        pre.ready, pre.target_next_ledger_id, pre.source_max_ledger_id
    ));
    traffic.set_phase(Phase::During);
    let t0 = Instant::now();
    let started = admin
        .switch("new")
        .await
        .map_err(step_err("POST /switch"))?;
    say(&format!(
        "switch to 'new' requested (epoch {})",
        started.epoch().unwrap_or_default()
    ));

    // A schema version written while the switch runs (must land on `new`).
    let late_schema = nodes[0]
        .schemas()
        .put(&schema_id(0), b"{\"late\":true}", b"hash-late")
        .await
        .map_err(step_err("writing a schema during the switch"));

    let mut switch_visible = None;
    let mut writes_moved = None;
    let mut switched = None;
    let bars = Bars::new(opts.progress);
    let deadline = Instant::now() + Duration::from_secs(60);
    while switched.is_none() || switch_visible.is_none() || writes_moved.is_none() {
        if switch_visible.is_none()
            && nodes
                .iter()
                .all(|n| n.storage().active_cluster().as_deref() == Some("new"))
        {
            switch_visible = Some(t0.elapsed());
        }
        if writes_moved.is_none() && handles.iter().all(|h| current_ledger_on(h, "new")) {
            writes_moved = Some(t0.elapsed());
        }
        if switched.is_none() {
            if let Ok(st) = admin.status().await {
                if let Some(sw) = st.switch() {
                    bars.update(&sw);
                    if sw.phase().is_some_and(SwitchPhase::is_settled) {
                        switched = Some(t0.elapsed());
                    }
                }
            }
        }
        if Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bars.finish();
    traffic.set_phase(Phase::After);
    say(&format!(
        "switch visible on every node after {} ms; every topic writing to 'new' after {} ms; \
         BUILD+PROMOTE done after {} ms",
        ms(switch_visible),
        ms(writes_moved),
        ms(switched)
    ));
    let sw_status = nodes[0]
        .orchestrator()
        .current_status()
        .await
        .map_err(step_err("reading the switch status"))?
        .ok_or_else(|| DemoError {
            step: "reading the switch status".into(),
            reason: "no switch recorded".into(),
        })?;
    let records = nodes[0]
        .orchestrator()
        .ledger_records(&sw_status.switch_id)
        .await
        .map_err(step_err("reading the switch records"))?;
    let count = |kind: LedgerKind, states: &[LedgerState]| {
        records
            .iter()
            .filter(|r| r.kind == kind && states.contains(&r.state))
            .count() as u64
    };
    let schemas_promoted = count(LedgerKind::Schema, &[LedgerState::Promoted]);
    let cursors_promoted = count(LedgerKind::Cursor, &[LedgerState::Promoted]);
    let rollover_fallbacks = count(LedgerKind::Cursor, &[LedgerState::RolledOver]);
    let failed = records
        .iter()
        .filter(|r| r.state == LedgerState::Failed)
        .count() as u64;
    let copied = records
        .iter()
        .filter(|r| r.state != LedgerState::Failed && r.state != LedgerState::Obsolete)
        .count() as u64;

    tokio::time::sleep(opts.duration.saturating_sub(third * 2)).await;

    // Cleanup (inside the window: forced, as an operator does once satisfied)
    // or rollback.
    let outcome = if opts.rollback {
        say("rolling back to 'old'");
        let st = match admin.rollback().await {
            Ok(st) => st,
            Err(crate::client::ClientError::Api {
                status: 409,
                message,
                ..
            }) if message.contains("idgen") => {
                // Ledgers created on `new` since the switch have ids above
                // old's generator: going back needs it advanced (I11), as an
                // operator does with BookKeeper's tooling.
                say(&format!("rollback refused: {message}"));
                let next = new.next_ledger_id();
                clusters
                    .get_or_create("old")
                    .advance_ledger_id_to(next + NEW_CLUSTER_FIRST_ID)
                    .map_err(step_err("advancing old's ledger id generator"))?;
                say(&format!(
                    "advanced old's ledger id generator to {}; rolling back again",
                    next + NEW_CLUSTER_FIRST_ID
                ));
                admin.rollback().await.map_err(step_err("POST /rollback"))?
            }
            Err(e) => return Err(step_err("POST /rollback")(e)),
        };
        st.phase_name().unwrap_or("?").to_owned()
    } else {
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
        report.outcome().unwrap_or("?").to_owned()
    };
    tokio::time::sleep(third.min(Duration::from_secs(2))).await;
    let report = traffic.stop(Duration::from_secs(10)).await;
    let acked = report.acknowledged.clone();

    // Invariants.
    let mut checks = Vec::new();
    let mut check = |name: &str, ok: bool, detail: String| {
        checks.push(InvariantCheck {
            name: name.to_owned(),
            ok,
            detail,
        })
    };
    check(
        "publishes never failed",
        report.publish_failures == 0,
        format!("{} failed attempts", report.publish_failures),
    );
    check(
        "no acknowledged entry lost (consumer gaps)",
        report.consumer_gaps == 0 && report.consumed == report.published,
        format!(
            "{} published, {} consumed, {} gaps",
            report.published, report.consumed, report.consumer_gaps
        ),
    );
    check(
        "every node applied the switch",
        switch_visible.is_some(),
        format!("{} ms", ms(switch_visible)),
    );
    check(
        "late schema version written during the switch",
        late_schema.is_ok(),
        format!("{late_schema:?}"),
    );
    let expected_active = if opts.rollback { "old" } else { "new" };
    let recs = nodes[0]
        .registry()
        .list()
        .await
        .map_err(step_err("listing clusters"))?;
    let actives: Vec<_> = recs
        .iter()
        .filter(|r| r.status == ClusterStatus::Active)
        .map(|r| r.name.clone())
        .collect();
    check(
        "I12 exactly one ACTIVE cluster",
        actives == [expected_active],
        format!("ACTIVE: {actives:?}"),
    );
    let bootstrap = nodes[0].registry().bootstrap().await.ok().flatten();
    check(
        "I17 bootstrap marker written once, names 'old'",
        bootstrap
            .as_ref()
            .map(|b| b.bootstrap_cluster_name.as_str())
            == Some("old"),
        format!("{:?}", bootstrap.map(|b| b.bootstrap_cluster_name)),
    );
    let store = nodes[0].registry().store().clone();
    let placement = check_placement(store.as_ref(), &clusters).await;
    check(
        "I2/I8 every ledger is on the cluster its stamp names",
        placement.is_empty(),
        if placement.is_empty() {
            "all stamps resolve to a cluster holding the ledger".into()
        } else {
            placement.join("; ")
        },
    );
    if opts.rollback {
        let after = snapshot_tree(store.as_ref()).await;
        let diffs = rollback_diffs(&metadata_before, &after);
        check(
            "rollback restored schema stamps to 'old'",
            diffs.is_empty(),
            if diffs.is_empty() {
                "every schema entry that existed before names 'old' again".into()
            } else {
                diffs.join("; ")
            },
        );
    }

    // Crash and reopen every topic on a fresh node: cursors recover exactly the
    // last acknowledged position.
    for n in &nodes {
        n.stop().await;
    }
    let verifier_store = open_store(opts.zk.as_deref(), &chroot, &shared).await?;
    let mut cfg = NodeConfig::new(
        "verifier",
        verifier_store,
        factory.clone(),
        "memory://old",
        ADMIN_TOKEN,
        INTERNAL_TOKEN,
    );
    cfg.ledger_config = ledger_config;
    cfg.forced_rollover_rate = None;
    let verifier = Node::start(cfg)
        .await
        .map_err(step_err("starting the verifier"))?;
    let mut mismatches = Vec::new();
    for (name, pos) in &acked {
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
    check(
        "cursors recover exactly the last acknowledged position after reopen",
        mismatches.is_empty(),
        if mismatches.is_empty() {
            format!("{} cursors checked", acked.len())
        } else {
            mismatches.join("; ")
        },
    );
    verifier.stop().await;

    let invariants_ok = checks.iter().all(|c| c.ok);
    Ok(DemoReport {
        topics: opts.topics,
        nodes: opts.nodes,
        metadata_store: opts.zk.clone().unwrap_or_else(|| "memory".into()),
        published: report.published,
        consumed: report.consumed,
        publish_failures: report.publish_failures,
        consumer_gaps: report.consumer_gaps,
        consumer_duplicates: report.consumer_duplicates,
        schemas_promoted,
        cursors_promoted,
        failed_ledgers: failed,
        rollover_fallbacks,
        ledgers_copied: copied,
        switch_visible_ms: ms(switch_visible),
        all_writes_moved_ms: ms(writes_moved),
        build_promote_ms: ms(switched),
        outcome,
        traffic: report,
        invariants: checks,
        invariants_ok,
    })
}

fn schema_id(t: usize) -> String {
    format!("public/default/demo-{t:03}")
}

fn ms(d: Option<Duration>) -> u64 {
    d.map(|d| d.as_millis() as u64).unwrap_or(u64::MAX)
}

fn current_ledger_on(h: &TopicHandle, cluster: &str) -> bool {
    let (info, _) = h.ledger.metadata();
    info.ledger_info
        .last()
        .and_then(|l| l.cluster_stamp().ok().flatten())
        == Some(cluster)
}

/// Every node of the metadata tree with its value, sorted by path.
async fn snapshot_tree(store: &dyn MetadataStore) -> BTreeMap<String, Vec<u8>> {
    crate::testing::tree(store)
        .await
        .into_iter()
        .map(|(p, (v, _))| (p, v))
        .collect()
}

/// Checks that every stamped ledger (data, cursor, schema) is held by the
/// cluster its stamp names (unstamped: `old`, the bootstrap cluster).
async fn check_placement(store: &dyn MetadataStore, clusters: &MemoryClusters) -> Vec<String> {
    let mut problems = Vec::new();
    let tree = snapshot_tree(store).await;
    let mut check = |what: &str, id: i64, stamp: Option<&str>| {
        let name = stamp.unwrap_or("old");
        if !clusters.get(name).is_some_and(|c| c.contains_ledger(id)) {
            problems.push(format!("{what} ledger {id} stamped '{name}' is not on it"));
        }
    };
    for (path, value) in &tree {
        if path.starts_with("/managed-ledgers/") {
            if let Ok(info) = decode_managed_ledger_info(value) {
                if !info.ledger_info.is_empty() {
                    for l in &info.ledger_info {
                        check("data", l.ledger_id, l.cluster_stamp().ok().flatten());
                    }
                    continue;
                }
            }
            if let Ok(info) = decode_managed_cursor_info(value) {
                if info.cursors_ledger_id >= 0 {
                    check(
                        "cursor",
                        info.cursors_ledger_id,
                        info.cluster_stamp().ok().flatten(),
                    );
                }
            }
        } else if path.starts_with("/schemas/") {
            if let Ok(loc) = SchemaLocator::decode(value.as_slice()) {
                for e in &loc.index {
                    check(
                        "schema",
                        e.position.ledger_id,
                        e.position.cluster_stamp().ok().flatten(),
                    );
                }
            }
        }
    }
    problems
}

/// After a rollback, every schema entry that existed before the switch must
/// name `old` (or carry no stamp) again.
fn rollback_diffs(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, value) in before {
        if !path.starts_with("/schemas/") {
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

/// BUILD and PROMOTE progress bars.
struct Bars {
    multi: Option<MultiProgress>,
    build: ProgressBar,
    promote: ProgressBar,
}

impl Bars {
    fn new(enabled: bool) -> Bars {
        let style = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        if !enabled {
            return Bars {
                multi: None,
                build: ProgressBar::hidden(),
                promote: ProgressBar::hidden(),
            };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let build = multi.add(
            ProgressBar::new(0)
                .with_style(style.clone())
                .with_prefix("BUILD"),
        );
        let promote = multi.add(ProgressBar::new(0).with_style(style).with_prefix("PROMOTE"));
        Bars {
            multi: Some(multi),
            build,
            promote,
        }
    }

    fn update(&self, sw: &crate::client::SwitchStatus) {
        if self.multi.is_none() {
            return;
        }
        let c = sw.counts();
        self.build.set_length(c.to_build);
        self.build.set_position(c.built + c.failed);
        self.promote.set_length(c.built);
        self.promote.set_position(c.promoted + c.rollover_fallback);
        self.promote
            .set_message(sw.phase_name().unwrap_or_default().to_owned());
    }

    fn finish(&self) {
        self.build.finish();
        self.promote.finish();
    }
}

/// Renders a report for humans.
pub fn render(report: &DemoReport) -> String {
    let mut s = String::new();
    let p = |name: &str| report.traffic.phases.get(name).cloned().unwrap_or_default();
    s.push_str("\n=== bookie cluster switch: report ===\n");
    s.push_str(&format!(
        "topology        {} nodes, {} topics, metadata on {}\n",
        report.nodes, report.topics, report.metadata_store
    ));
    s.push_str("publish         phase     msgs/s    p50 ms   p99 ms   count\n");
    for name in ["before", "during", "after"] {
        let ph = p(name);
        s.push_str(&format!(
            "                {:<8} {:>8.0} {:>9.2} {:>8.2} {:>7}\n",
            name,
            ph.throughput_per_sec,
            ph.p50_us as f64 / 1000.0,
            ph.p99_us as f64 / 1000.0,
            ph.published
        ));
    }
    s.push_str(&format!(
        "traffic         {} published, {} consumed, {} publish failures, {} gaps, {} redeliveries\n",
        report.published,
        report.consumed,
        report.publish_failures,
        report.consumer_gaps,
        report.consumer_duplicates
    ));
    s.push_str(&format!(
        "switch          visible on all nodes {} ms, all writes on 'new' {} ms, BUILD+PROMOTE {} ms\n",
        report.switch_visible_ms, report.all_writes_moved_ms, report.build_promote_ms
    ));
    s.push_str(&format!(
        "ledgers         {} copied, {} schema + {} cursor promoted, {} rollover fallbacks, {} failed\n",
        report.ledgers_copied,
        report.schemas_promoted,
        report.cursors_promoted,
        report.rollover_fallbacks,
        report.failed_ledgers
    ));
    s.push_str(&format!("outcome         {}\n", report.outcome));
    s.push_str("invariants\n");
    for c in &report.invariants {
        s.push_str(&format!(
            "  [{}] {} — {}\n",
            if c.ok { "ok" } else { "FAILED" },
            c.name,
            c.detail
        ));
    }
    s.push_str(&format!(
        "result          {}\n",
        if report.invariants_ok {
            "every invariant held"
        } else {
            "SOME INVARIANTS FAILED"
        }
    ));
    s
}
