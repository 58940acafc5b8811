//! Running a [`Plan`] on the embedded stack: the operations in order while
//! traffic runs, then healing, restarting every node, settling the switches,
//! the [checker](crate::checker), a final cleanup and the checker again.
//!
//! Every history runs on its own current-thread Tokio runtime with paused
//! time: nothing runs in parallel, every sleep and timeout is virtual (the
//! runtime jumps to the next timer when all tasks wait), and every random
//! choice comes from the seed, so a seed replays the same history.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::http::Method;
use serde_json::{json, Value};

use std::sync::Arc;

use parking_lot::Mutex;

use crate::checker::{check, leftovers, ViolationKind, Violations};
use crate::corrupt::Corruption;
use crate::plan::{fault_kind, Op, Plan, CLUSTERS, PREFIXES};
use crate::stack::{Answer, SessionCounts, Stack};
use crate::traffic::Model;
use crate::traffic::Traffic;
use bkswitch_switch_orchestrator::Phase;

mod below;
mod checks;
mod ops;

/// Counts of one history.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Figures {
    /// Operations run.
    pub ops: usize,
    /// Faults injected.
    pub faults: usize,
    /// Operator calls through the REST API (settling and the final cleanup
    /// included).
    pub operator_calls: usize,
    /// Acknowledged publishes.
    pub published: usize,
    /// Acknowledged schema versions.
    pub schema_versions: usize,
    /// Messages read back more than once (not a violation).
    pub duplicates: u64,
    /// Ledgers the metadata references at the end.
    pub references: usize,
    /// Ledgers no metadata references after the final cleanup, by cluster
    /// (not a violation; reported).
    pub leftovers: BTreeMap<String, usize>,
    /// Metadata sessions lost, and the trims and rollovers the managed
    /// ledgers put off meanwhile: the pause of issue #20 (item 6) at work.
    pub sessions: SessionCounts,
    /// Metadata calls buggify failed (reads and writes, clean and after
    /// applying), over every node.
    pub buggified: u64,
    /// Metadata-store migrations the nodes were seen to complete.
    pub moves: u64,
    /// Faults injected, by kind.
    pub fault_kinds: BTreeMap<&'static str, usize>,
    /// Bookie copies lost (never an entry's last).
    pub copies_lost: u64,
    /// Metadata corrupted (nodes and ledgers' BookKeeper metadata).
    pub corruptions: usize,
    /// Corruptions the traffic ran into and was refused over with an error
    /// naming the damaged object.
    pub corruptions_refused: usize,
    /// Reads answered with an older state than the leader's (stale reads).
    pub stale_reads: u64,
}

/// What a history did and found.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Which operations of the seed's plan ran (all, unless shrunk).
    pub kept: Option<Vec<usize>>,
    /// One line per operation and per step of the end phase: what ran and
    /// what it answered (status codes and error codes, no timestamps or ids).
    pub trace: Vec<String>,
    /// What the checker found.
    pub violations: Violations,
    /// Counts.
    pub figures: Figures,
}

impl Outcome {
    /// Whether the history passed (zero violations).
    pub fn passed(&self) -> bool {
        self.violations.0.is_empty()
    }

    /// The kinds of violation found.
    pub fn kinds(&self) -> BTreeSet<ViolationKind> {
        self.violations.0.iter().map(|v| v.kind).collect()
    }

    /// The one-line command that replays this history.
    pub fn replay_command(&self) -> String {
        replay_command(self.seed, self.kept.as_deref())
    }

    /// A report: the seed, the replay command, every violation.
    pub fn report(&self) -> String {
        let mut s = format!(
            "history seed {} {}: {} violation(s)\n  replay: {}\n",
            self.seed,
            if self.passed() { "passed" } else { "FAILED" },
            self.violations.0.len(),
            self.replay_command()
        );
        for v in &self.violations.0 {
            s.push_str(&format!("  - {v}\n"));
        }
        s
    }
}

/// The one-line command that replays `seed` (only the operations `kept`,
/// when shrunk).
pub fn replay_command(seed: u64, kept: Option<&[usize]>) -> String {
    let mut cmd = format!("cargo run -p bkswitch-nemesis --bin nemesis -- replay --seed {seed}");
    if let Some(k) = kept {
        let list: Vec<String> = k.iter().map(usize::to_string).collect();
        cmd.push_str(&format!(" --keep {}", list.join(",")));
    }
    cmd
}

/// Runs `plan` on a fresh embedded stack, on a current-thread runtime with
/// paused time.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn run_embedded(plan: &Plan) -> Outcome {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a runtime: {e}"),
    };
    rt.block_on(run_plan(plan))
}

/// The plan of `seed` restricted to the operations `kept` (all when `None`).
pub fn plan_of(seed: u64, kept: Option<&[usize]>) -> Plan {
    let mut plan = Plan::generate(seed);
    if let Some(k) = kept {
        plan.ops = k.iter().filter_map(|i| plan.ops.get(*i).cloned()).collect();
    }
    plan
}

struct Run {
    stack: Stack,
    trace: Vec<String>,
    violations: Violations,
    calls: usize,
    /// Nodes a duplicate started beside while they ran.
    shared_ids: Vec<usize>,
    /// The traffic's model as it is recorded.
    model: Arc<Mutex<Model>>,
    /// Corruptions not repaired yet.
    corruptions: Vec<Corruption>,
    /// Figures of the faults below the metadata.
    copies_lost: u64,
    corrupted: usize,
    refused: usize,
}

/// Runs `plan` on a fresh embedded stack in the current runtime.
pub async fn run_plan(plan: &Plan) -> Outcome {
    let stack = Stack::start_seeded(plan.settings.clone(), plan.seed).await;
    let mut run = Run {
        stack,
        trace: vec![format!("settings {:?}", plan.settings)],
        violations: Violations::default(),
        calls: 0,
        shared_ids: Vec::new(),
        model: Arc::default(),
        corruptions: Vec::new(),
        copies_lost: 0,
        corrupted: 0,
        refused: 0,
    };
    let traffic = Traffic::start(run.stack.directory.clone());
    run.model = traffic.shared_model();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (i, op) in plan.ops.iter().enumerate() {
        let result = run.op(op).await;
        run.trace.push(format!("#{i} {op} -> {result}"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let model = traffic.stop().await;
    run.trace.push(format!(
        "traffic: {} published, {} schema versions, failures {:?}",
        model.published(),
        model.schemas.len(),
        model.failures
    ));

    let injected: Vec<usize> = run
        .stack
        .slots
        .iter()
        .map(|s| {
            s.store
                .recorder
                .writes()
                .iter()
                .filter(|w| w.injected)
                .count()
        })
        .collect();
    run.trace
        .push(format!("injected write failures per node: {injected:?}"));

    // Heal (every corruption repaired, as from a backup), restart every
    // node, let the switches settle.
    if !run.corruptions.is_empty() {
        let r = run.repair_all().await;
        run.trace.push(format!("repair at healing -> {r}"));
    }
    if plan.settings.stale_reads {
        run.trace.push(format!(
            "stale reads: {} answered older than the leader",
            run.stack.stale_reads()
        ));
    }
    run.stack.heal();
    let buggified = run.stack.buggified();
    if plan.settings.buggify_per_mille > 0 {
        run.trace.push(format!(
            "buggify at {}‰: {buggified} metadata calls failed",
            plan.settings.buggify_per_mille
        ));
    }
    run.check_fail_stops().await;
    for n in std::mem::take(&mut run.stack.duplicates) {
        let _ = tokio::time::timeout(Duration::from_secs(60), n.stop()).await;
    }
    for i in 0..run.stack.slots.len() {
        run.stack.stop_node(i).await;
        if let Err(e) = run.stack.start_node(i).await {
            run.violations.push(
                ViolationKind::Stuck,
                format!("node-{i} does not start after every fault healed: {e}"),
            );
        }
    }
    run.settle().await;
    // Read the tree the nodes use (a migration may have moved it).
    run.stack.sync_root();

    let mut figures = Figures {
        ops: plan.ops.len(),
        faults: plan.faults(),
        published: model.published(),
        schema_versions: model.schemas.len(),
        ..Figures::default()
    };
    if let Some(node) = run.stack.any_node().cloned() {
        let mut found = Violations::default();
        let f = check(&run.stack, &node, &model, &mut found).await;
        figures.duplicates = f.duplicates;
        for v in found.0 {
            run.violations
                .push(v.kind, format!("after healing: {}", v.message));
        }
        run.final_cleanup().await;
        let mut found = Violations::default();
        let f = check(&run.stack, &node, &model, &mut found).await;
        figures.references = f.references;
        for v in found.0 {
            run.violations
                .push(v.kind, format!("after the final cleanup: {}", v.message));
        }
        figures.leftovers = leftovers(&run.stack).await;
        run.trace.push(format!("leftovers {:?}", figures.leftovers));
    } else {
        run.violations
            .push(ViolationKind::Stuck, "no node runs after healing");
    }
    figures.operator_calls = run.calls;
    figures.buggified = buggified;
    figures.moves = run.stack.moves;
    figures.copies_lost = run.copies_lost;
    figures.corruptions = run.corrupted;
    figures.corruptions_refused = run.refused;
    figures.stale_reads = run.stack.stale_reads();
    for kind in plan.ops.iter().filter_map(fault_kind) {
        *figures.fault_kinds.entry(kind).or_default() += 1;
    }
    figures.sessions = run.stack.session_counts();
    run.stack.shutdown().await;
    // The same finding seen by both passes of a check is reported once.
    let mut seen = BTreeSet::new();
    run.violations.0.retain(|v| seen.insert(v.message.clone()));
    for v in &run.violations.0 {
        run.trace.push(format!("violation {v}"));
    }
    Outcome {
        seed: plan.seed,
        kept: None,
        trace: run.trace,
        violations: run.violations,
        figures,
    }
}

/// Text of an answer for the trace.
fn short(a: &Option<Answer>) -> String {
    match a {
        None => "node down".to_owned(),
        Some(a) if a.ok() => format!("{}", a.status),
        Some(a) => format!("{} {}", a.status, a.code()),
    }
}

/// The REST request of an operator operation: node, method, path, body.
fn request_of(op: &Op) -> Option<(usize, Method, String, Option<Value>)> {
    Some(match *op {
        Op::Switch { node, cluster } => (
            node,
            Method::POST,
            "/switch".to_owned(),
            Some(json!({ "target": CLUSTERS[cluster] })),
        ),
        Op::Rollback { node } => (node, Method::POST, "/rollback".to_owned(), Some(json!({}))),
        Op::Cleanup {
            node,
            dry_run,
            force,
        } => (
            node,
            Method::POST,
            "/cleanup".to_owned(),
            Some(json!({ "dryRun": dry_run, "force": force })),
        ),
        Op::SetOverride {
            node,
            prefix,
            cluster,
        } => (
            node,
            Method::POST,
            "/overrides".to_owned(),
            Some(json!({ "prefix": PREFIXES[prefix], "cluster": CLUSTERS[cluster] })),
        ),
        Op::RemoveOverride { node, prefix } => (
            node,
            Method::POST,
            "/overrides/remove".to_owned(),
            Some(json!({ "prefix": PREFIXES[prefix] })),
        ),
        _ => return None,
    })
}

/// Phases in which nothing runs by itself any more.
fn settled(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Switched | Phase::Done | Phase::DoneWithFailures | Phase::RolledBack
    )
}

/// The first 80 characters of `s`.
fn first_words(s: &str) -> String {
    s.chars().take(80).collect()
}
