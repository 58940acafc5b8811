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
use bkswitch_bk_client::UnavailableMode;
use bkswitch_switch_orchestrator::{Phase, SwitchStatus};
use serde_json::{json, Value};

use crate::checker::{check, leftovers, ViolationKind, Violations};
use crate::plan::{Op, Plan, CLUSTERS, PREFIXES, SCHEMAS};
use crate::stack::{Answer, SessionCounts, Stack};
use crate::traffic::Traffic;
use bkswitch_proto::Stamped;

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
}

/// Runs `plan` on a fresh embedded stack in the current runtime.
pub async fn run_plan(plan: &Plan) -> Outcome {
    let stack = Stack::start_seeded(plan.settings.clone(), plan.seed).await;
    let mut run = Run {
        stack,
        trace: vec![format!("settings {:?}", plan.settings)],
        violations: Violations::default(),
        calls: 0,
    };
    let traffic = Traffic::start(run.stack.directory.clone());
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

    // Heal, restart every node, let the switches settle.
    run.stack.heal();
    let buggified = run.stack.buggified();
    if plan.settings.buggify_per_mille > 0 {
        run.trace.push(format!(
            "buggify at {}‰: {buggified} metadata calls failed",
            plan.settings.buggify_per_mille
        ));
    }
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

impl Run {
    /// Moves the metadata store to the other tree through node `node`: a
    /// dry run first, then the start, wiping the target's leftovers of an
    /// earlier move by naming the root the dry run reported.
    async fn migrate(&mut self, node: usize) -> String {
        use bkswitch_admin::wire::MIGRATION_PATH;
        self.stack.sync_root();
        let target = if self.stack.tree == "a" {
            "memory://b"
        } else {
            "memory://a"
        };
        let plan = self
            .stack
            .call_at(
                node,
                Method::POST,
                MIGRATION_PATH,
                Some(json!({ "targetUrl": target, "dryRun": true })),
            )
            .await;
        let Some(plan) = plan else {
            return "node down".to_owned();
        };
        self.calls += 1;
        if !plan.ok() {
            self.clear_answer(MIGRATION_PATH, node, &plan);
            return format!("plan: {}", short(&Some(plan)));
        }
        let nodes = plan.body.get("nodes").and_then(Value::as_u64).unwrap_or(0);
        let root = plan.body.get("root").and_then(Value::as_str).unwrap_or("/");
        let body = if nodes > 0 {
            json!({ "targetUrl": target, "wipeTarget": root })
        } else {
            json!({ "targetUrl": target })
        };
        let a = self
            .stack
            .call_at(node, Method::POST, MIGRATION_PATH, Some(body))
            .await;
        if let Some(a) = &a {
            self.calls += 1;
            self.clear_answer(MIGRATION_PATH, node, a);
        }
        format!("{target}: {}", short(&a))
    }

    /// An answer must be a success or a clear error body.
    fn clear_answer(&mut self, path: &str, node: usize, a: &Answer) {
        if a.status == 0 || (!a.ok() && (a.message().is_empty() || a.code().is_empty())) {
            self.violations.push(
                ViolationKind::OperatorCall,
                format!(
                    "{path} on node-{node} answered {} without a clear error body: {}",
                    a.status, a.body
                ),
            );
        }
    }

    /// Two operator calls at the same moment: each must answer clearly, and
    /// two switch starts that both succeed must be the same switch.
    async fn race(&mut self, first: &Op, second: &Op) -> String {
        let (Some(a), Some(b)) = (request_of(first), request_of(second)) else {
            return "not operator calls".to_owned();
        };
        let (ra, rb) = tokio::join!(
            self.stack.call(a.0, a.1.clone(), &a.2, a.3.clone()),
            self.stack.call(b.0, b.1.clone(), &b.2, b.3.clone())
        );
        for (req, ans) in [(&a, &ra), (&b, &rb)] {
            if let Some(ans) = ans {
                self.calls += 1;
                if ans.status == 0
                    || (!ans.ok() && (ans.message().is_empty() || ans.code().is_empty()))
                {
                    self.violations.push(
                        ViolationKind::OperatorCall,
                        format!(
                            "{} on node-{} (racing) answered {} without a clear error body: {}",
                            req.2, req.0, ans.status, ans.body
                        ),
                    );
                }
            }
        }
        if let (Op::Switch { .. }, Op::Switch { .. }, Some(x), Some(y)) = (first, second, &ra, &rb)
        {
            let id = |a: &Answer| a.body.get("switchId").cloned();
            if x.ok() && y.ok() && id(x) != id(y) {
                self.violations.push(
                    ViolationKind::TwoCoordinators,
                    format!(
                        "two racing switch starts both succeeded with different switches: {} and {}",
                        x.body, y.body
                    ),
                );
            }
        }
        format!("{} | {}", short(&ra), short(&rb))
    }

    async fn call(
        &mut self,
        node: usize,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Option<Answer> {
        let a = self.stack.call(node, method, path, body).await;
        if let Some(a) = &a {
            self.calls += 1;
            if a.status == 0 {
                self.violations.push(
                    ViolationKind::OperatorCall,
                    format!("{path} on node-{node} gave no answer: {}", a.body),
                );
            } else if !a.ok() && (a.message().is_empty() || a.code().is_empty()) {
                self.violations.push(
                    ViolationKind::OperatorCall,
                    format!(
                        "{path} on node-{node} answered {} without a clear error body: {}",
                        a.status, a.body
                    ),
                );
            }
        }
        a
    }

    async fn op(&mut self, op: &Op) -> String {
        match *op {
            Op::Migrate { node } => self.migrate(node).await,
            Op::Freeze {
                node,
                millis,
                expire,
            } => {
                let gate = self.stack.slots[node].store.gate.clone();
                let session = self.stack.slots[node].store.session.clone();
                gate.set_frozen(true);
                tokio::time::sleep(Duration::from_millis(millis / 2)).await;
                if expire {
                    let _ = session.expire_session();
                }
                tokio::time::sleep(Duration::from_millis(millis - millis / 2)).await;
                gate.set_frozen(false);
                "resumed".to_owned()
            }
            Op::LateWrites {
                node,
                kind,
                count,
                delay_ms,
            } => {
                self.stack.slots[node].store.gate.late_writes(
                    kind.pattern(),
                    count,
                    Duration::from_millis(delay_ms),
                );
                "armed".to_owned()
            }
            Op::MoveClockHours { hours } => {
                self.stack.clock.advance(Duration::from_secs(hours * 3600));
                "moved".to_owned()
            }
            Op::Racing {
                ref first,
                ref second,
            } => self.race(first, second).await,
            Op::Cancelled { ref call, after_ms } => {
                let Some((node, method, path, body)) = request_of(call) else {
                    return "not an operator call".to_owned();
                };
                let call = self.stack.call(node, method, &path, body);
                match tokio::time::timeout(Duration::from_millis(after_ms), call).await {
                    Ok(a) => format!("answered before the client left: {}", short(&a)),
                    Err(_) => "cancelled".to_owned(),
                }
            }
            Op::Register { node, cluster } => {
                let name = CLUSTERS[cluster];
                let before = self.record(name).await;
                let a = self
                    .call(
                        node,
                        Method::POST,
                        &format!("/{name}"),
                        Some(json!({ "metadataServiceUri": format!("memory://{name}") })),
                    )
                    .await;
                self.check_record_call(&a, "register", name, before, true)
                    .await;
                short(&a)
            }
            Op::Unregister { node, cluster } => {
                let name = CLUSTERS[cluster];
                let before = self.record(name).await;
                let running = self.in_progress_all().await;
                let a = self
                    .call(node, Method::DELETE, &format!("/{name}"), None)
                    .await;
                self.check_record_call(&a, "unregister", name, before, false)
                    .await;
                if a.as_ref().is_some_and(Answer::ok) {
                    for (what, _, st) in running {
                        let side = st.source == name || st.target == name;
                        if side && !st.phase.is_final() && st.phase != Phase::RolledBack {
                            self.violations.push(
                                ViolationKind::Registry,
                                format!(
                                    "unregister {name} answered {} while the {what} ({} -> {}) \
                                     is in {}: its ledgers are still copied or created there",
                                    short(&a),
                                    st.source,
                                    st.target,
                                    st.phase
                                ),
                            );
                        }
                    }
                }
                short(&a)
            }
            Op::Precheck { node, cluster } => {
                let a = self
                    .call(
                        node,
                        Method::GET,
                        &format!("/precheck/{}", CLUSTERS[cluster]),
                        None,
                    )
                    .await;
                match &a {
                    Some(a) if a.ok() => format!("200 ready={}", a.body["ready"]),
                    _ => short(&a),
                }
            }
            Op::AdvanceIdgen { cluster, margin } => {
                let others = CLUSTERS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != cluster)
                    .map(|(_, c)| {
                        let c = self.stack.cluster(c);
                        let max = c.ledger_ids().into_iter().max().unwrap_or(-1) + 1;
                        max.max(c.next_ledger_id())
                    })
                    .max()
                    .unwrap_or(0);
                match self
                    .stack
                    .cluster(CLUSTERS[cluster])
                    .advance_ledger_id_to(others + margin - 1)
                {
                    Ok(()) => "advanced".to_owned(),
                    Err(_) => "already beyond".to_owned(),
                }
            }
            Op::Switch { node, cluster } => {
                let before = self.read_latest_switch().await;
                let a = self
                    .call(
                        node,
                        Method::POST,
                        "/switch",
                        Some(json!({ "target": CLUSTERS[cluster] })),
                    )
                    .await;
                if let Some(a) = &a {
                    let after = self.read_latest_switch().await;
                    // Only two successful reads can be compared.
                    if let (Ok(before), Ok(after)) = (before, after) {
                        let before_id = before.map(|s| s.switch_id);
                        let after_id = after.map(|s| s.switch_id);
                        if (400..500).contains(&a.status) && before_id != after_id {
                            self.violations.push(
                                ViolationKind::OperatorCall,
                                format!(
                                    "switch to {} answered {} {} but a switch was recorded",
                                    CLUSTERS[cluster],
                                    a.status,
                                    a.code()
                                ),
                            );
                        }
                    }
                }
                short(&a)
            }
            Op::Rollback { node } => {
                let a = self
                    .call(node, Method::POST, "/rollback", Some(json!({})))
                    .await;
                if std::env::var_os("NEMESIS_DEBUG").is_some() {
                    eprintln!("rollback answer: {a:?}");
                }
                short(&a)
            }
            Op::Cleanup {
                node,
                dry_run,
                force,
            } => {
                let a = self
                    .call(
                        node,
                        Method::POST,
                        "/cleanup",
                        Some(json!({ "dryRun": dry_run, "force": force })),
                    )
                    .await;
                short(&a)
            }
            Op::SetOverride {
                node,
                prefix,
                cluster,
            } => {
                let before = self.in_progress_all().await;
                let a = self
                    .call(
                        node,
                        Method::POST,
                        "/overrides",
                        Some(json!({ "prefix": PREFIXES[prefix], "cluster": CLUSTERS[cluster] })),
                    )
                    .await;
                if a.as_ref().is_some_and(Answer::ok) {
                    self.check_exclusion(PREFIXES[prefix], &before);
                }
                short(&a)
            }
            Op::RemoveOverride { node, prefix } => {
                let a = self
                    .call(
                        node,
                        Method::POST,
                        "/overrides/remove",
                        Some(json!({ "prefix": PREFIXES[prefix] })),
                    )
                    .await;
                short(&a)
            }
            Op::Crash { node } => {
                if self.stack.node(node).is_none() {
                    return "not running".to_owned();
                }
                self.stack.crash(node).await;
                "crashed".to_owned()
            }
            Op::Restart { node } => {
                if self.stack.node(node).is_some() {
                    return "running".to_owned();
                }
                match self.stack.start_node(node).await {
                    Ok(()) => "started".to_owned(),
                    Err(e) => format!("did not start: {}", first_words(&e)),
                }
            }
            Op::Duplicate { node } => {
                let running = self.stack.node(node).is_some();
                match self.stack.start_duplicate(node).await {
                    Ok(()) if running => {
                        self.violations.push(
                            ViolationKind::DuplicateNode,
                            format!(
                                "a second node with id node-{node} started while node-{node} \
                                 runs: both can claim topics and coordinator duties"
                            ),
                        );
                        "started (duplicate)".to_owned()
                    }
                    Ok(()) => "started".to_owned(),
                    Err(e) => format!("refused: {}", first_words(&e)),
                }
            }
            Op::ExpireSession { node } => {
                let _ = self.stack.slots[node].store.session.expire_session();
                "expired".to_owned()
            }
            Op::LoseConnection { node, millis } => {
                let gate = self.stack.slots[node].store.gate.clone();
                let session = self.stack.slots[node].store.session.clone();
                let Some(running) = self.stack.node(node).cloned() else {
                    return "not running".to_owned();
                };
                // As a ZooKeeper client: calls fail and every watch hears
                // that the connection is lost, then that it is back.
                gate.set_down(true);
                let _ = session.announce_connection(false);
                tokio::time::sleep(Duration::from_millis(1)).await;
                let ml = running.metadata_session();
                let paused = !ml.is_available();
                // A node that never opened a managed ledger has no session
                // to follow (and nothing to pause); a node a migration moved
                // to the other tree does not use the store the fault hit.
                let reached = self.stack.slots[node].faults_reach_node();
                if !paused && reached && !running.topics().list().is_empty() {
                    self.violations.push(
                        ViolationKind::SessionPause,
                        format!(
                            "node-{node} lost its metadata connection but its managed ledgers \
                             still trim and roll over (the session is seen as available)"
                        ),
                    );
                }
                tokio::time::sleep(Duration::from_millis(millis)).await;
                if self.stack.node(node).is_none() {
                    return "crashed while disconnected".to_owned();
                }
                gate.set_down(false);
                let _ = session.announce_connection(true);
                tokio::time::sleep(Duration::from_millis(1)).await;
                // A migration's pause holds the session as lost too (no
                // trim, no rollover while writes are refused).
                let migrating = running
                    .migration()
                    .is_some_and(|h| h.participant().is_paused());
                if paused && !ml.is_available() && !migrating {
                    self.violations.push(
                        ViolationKind::SessionPause,
                        format!(
                            "node-{node} got its metadata connection back but its managed \
                             ledgers stay paused (no trim, no rollover)"
                        ),
                    );
                }
                if paused {
                    "reconnected (paused meanwhile)".to_owned()
                } else {
                    "reconnected".to_owned()
                }
            }
            Op::Ambiguous {
                node,
                kind,
                count,
                outage_ms,
            } => {
                let store = &self.stack.slots[node].store;
                if outage_ms == 0 {
                    store.ambiguous_writes(kind, count);
                } else {
                    store.ambiguous_then_down(kind, count, Duration::from_millis(outage_ms));
                }
                "armed".to_owned()
            }
            Op::ClusterDown { cluster, hang } => {
                let c = self.stack.cluster(CLUSTERS[cluster]);
                if hang {
                    c.set_operation_timeout(Some(Duration::from_secs(2)));
                    c.set_unavailable(UnavailableMode::Hang);
                } else {
                    c.set_unavailable(UnavailableMode::FailFast);
                }
                "down".to_owned()
            }
            Op::ClusterUp { cluster } => {
                let c = self.stack.cluster(CLUSTERS[cluster]);
                c.restore();
                c.set_operation_timeout(None);
                "up".to_owned()
            }
            Op::ClusterSlow { cluster, millis } => {
                self.stack
                    .cluster(CLUSTERS[cluster])
                    .set_latency_all(Duration::from_millis(millis));
                "slow".to_owned()
            }
            Op::Wait { millis } => {
                tokio::time::sleep(Duration::from_millis(millis)).await;
                "waited".to_owned()
            }
            Op::MoveClock { days } => {
                self.stack
                    .clock
                    .advance(Duration::from_secs(days * 24 * 3600));
                "moved".to_owned()
            }
            Op::ExpectSettled { millis } => {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(millis);
                loop {
                    let pending = self.in_progress().await;
                    if pending.is_empty() {
                        return "settled".to_owned();
                    }
                    if tokio::time::Instant::now() >= deadline {
                        for (what, _, st) in pending {
                            self.violations.push(
                                ViolationKind::Stuck,
                                format!(
                                    "{what} ({} -> {}) is still in {} after {millis} ms",
                                    st.source, st.target, st.phase
                                ),
                            );
                        }
                        return "not settled".to_owned();
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            Op::ExpectRolledBack { millis } => {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(millis);
                loop {
                    let st = self.latest_switch().await;
                    if st.as_ref().is_some_and(|s| s.phase == Phase::RolledBack) {
                        return "rolled back".to_owned();
                    }
                    if tokio::time::Instant::now() >= deadline {
                        let phase = st.map(|s| s.phase.to_string());
                        self.violations.push(
                            ViolationKind::Stuck,
                            format!(
                                "the rollback did not converge within {millis} ms: the switch is \
                                 in {phase:?}"
                            ),
                        );
                        return "not rolled back".to_owned();
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
            Op::ExpectSchemaOn { schema, cluster } => self.expect_schema_on(schema, cluster).await,
        }
    }

    /// Puts a version of `SCHEMAS[schema]` and checks the cluster its stamp
    /// names.
    async fn expect_schema_on(&mut self, schema: usize, cluster: usize) -> String {
        let (id, want) = (SCHEMAS[schema], CLUSTERS[cluster]);
        let Some(node) = self.stack.any_node().cloned() else {
            return "no node".to_owned();
        };
        let data = format!("directed version of {id}").into_bytes();
        let v = match node.schemas().put(id, &data, &data).await {
            Ok(v) => v,
            Err(e) => return format!("put failed: {}", first_words(&e.to_string())),
        };
        let stamp = match node.schemas().locator(id).await {
            Ok(Some((l, _))) => std::iter::once(&l.info)
                .chain(l.index.iter())
                .find(|e| e.version == v.0)
                .map(|e| {
                    e.position
                        .cluster_stamp()
                        .ok()
                        .flatten()
                        .unwrap_or(CLUSTERS[0])
                        .to_owned()
                }),
            _ => None,
        };
        if stamp.as_deref() != Some(want) {
            self.violations.push(
                ViolationKind::Routing,
                format!(
                    "schema {id} version {} was stored on {stamp:?}, not on {want} where the \
                     managed ledgers of its topic go",
                    v.0
                ),
            );
        }
        format!("stored on {stamp:?}")
    }

    /// The registry record of `name`, as JSON text (`None`: not registered).
    async fn record(&self, name: &str) -> Option<Option<String>> {
        let node = self.stack.any_node()?;
        let r = node.registry().get(name).await.ok()?;
        Some(r.map(|r| format!("{}:{}:{:?}", r.name, r.metadata_service_uri, r.status)))
    }

    /// A register (`registers`) or unregister call did what it answered:
    /// 2xx → the record is there (gone); 4xx → the record is unchanged.
    async fn check_record_call(
        &mut self,
        a: &Option<Answer>,
        what: &str,
        name: &str,
        before: Option<Option<String>>,
        registers: bool,
    ) {
        let Some(a) = a else { return };
        let after = self.record(name).await;
        let (Some(before), Some(after)) = (before, after) else {
            return;
        };
        if a.ok() && after.is_some() != registers {
            self.violations.push(
                ViolationKind::OperatorCall,
                format!(
                    "{what} {name} answered {} but the record is {after:?}",
                    a.status
                ),
            );
        }
        if (400..500).contains(&a.status) && before != after {
            self.violations.push(
                ViolationKind::OperatorCall,
                format!(
                    "{what} {name} answered {} {} but changed the record from {before:?} to \
                     {after:?}",
                    a.status,
                    a.code()
                ),
            );
        }
    }

    async fn latest_switch(&self) -> Option<SwitchStatus> {
        self.read_latest_switch().await.ok().flatten()
    }

    /// The latest switch as the first running node that can read it sees it;
    /// `Err` when no node could (every connection lost or no node running).
    /// A failed read is not "no switch": the checker must not compare it
    /// with a successful one (seed 106720 did, and reported a refused call
    /// as a recorded switch).
    async fn read_latest_switch(&self) -> Result<Option<SwitchStatus>, String> {
        let mut last = "no node runs".to_owned();
        for slot in &self.stack.slots {
            let Some(node) = slot.node.as_ref() else {
                continue;
            };
            match node.orchestrator().current_status().await {
                Ok(st) => return Ok(st),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// A canary of `prefix` was just started: no other coordinator may have
    /// been working on the same ledgers (issue #20, 5.1).
    fn check_exclusion(&mut self, prefix: &str, before: &[(String, Option<String>, SwitchStatus)]) {
        for (what, other, st) in before {
            let clash = match other {
                // A cluster-wide switch copying, promoting, rolling back or
                // cleaning up works on every ledger.
                None => matches!(
                    st.phase,
                    Phase::Build | Phase::Promote | Phase::Cleanup | Phase::RollingBack
                ),
                // An overlapping canary copying, promoting, rolling back or
                // cleaning up.
                Some(p) => {
                    p != prefix
                        && (p.starts_with(prefix) || prefix.starts_with(p.as_str()))
                        && matches!(
                            st.phase,
                            Phase::Build | Phase::Promote | Phase::Cleanup | Phase::RollingBack
                        )
                }
            };
            if clash {
                self.violations.push(
                    ViolationKind::TwoCoordinators,
                    format!(
                        "the canary of `{prefix}` started while the {what} ({} -> {}) is in {}: two coordinators on the same ledgers",
                        st.source, st.target, st.phase
                    ),
                );
            }
        }
    }

    /// Every switch and canary with its status: `(what, prefix, status)`.
    async fn in_progress_all(&self) -> Vec<(String, Option<String>, SwitchStatus)> {
        let mut out = Vec::new();
        let Some(node) = self.stack.any_node() else {
            return out;
        };
        if let Ok(Some(st)) = node.orchestrator().current_status().await {
            out.push(("switch".to_owned(), None, st));
        }
        if let Ok(list) = node.overrides().await {
            for (prefix, _, st) in list {
                if let Some(st) = st {
                    out.push((format!("canary of `{prefix}`"), Some(prefix), st));
                }
            }
        }
        out
    }

    /// Every switch and canary not settled yet.
    async fn in_progress(&self) -> Vec<(String, Option<String>, SwitchStatus)> {
        let mut out = self.in_progress_all().await;
        out.retain(|(_, _, st)| !settled(st.phase));
        out
    }

    /// Lets the switches and canaries reach a final state, using the
    /// documented calls (rollback, forced cleanup) when they do not by
    /// themselves; what still does not is a violation.
    async fn settle(&mut self) {
        for round in 0..30 {
            let pending = self.in_progress().await;
            if pending.is_empty() {
                return;
            }
            if round >= 6 {
                for (_, prefix, st) in &pending {
                    let a = match (st.phase, prefix) {
                        (Phase::Cleanup, _) => {
                            self.call(
                                0,
                                Method::POST,
                                "/cleanup",
                                Some(json!({ "dryRun": false, "force": true })),
                            )
                            .await
                        }
                        (_, Some(p)) => {
                            self.call(
                                0,
                                Method::POST,
                                "/overrides/remove",
                                Some(json!({ "prefix": p })),
                            )
                            .await
                        }
                        (_, None) => {
                            self.call(0, Method::POST, "/rollback", Some(json!({})))
                                .await
                        }
                    };
                    self.trace.push(format!(
                        "settle round {round}: {} {} -> {}",
                        st.phase,
                        prefix.as_deref().unwrap_or("cluster-wide"),
                        short(&a)
                    ));
                }
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        for (what, _, st) in self.in_progress().await {
            self.violations.push(
                ViolationKind::Stuck,
                format!(
                    "{what} {} ({} -> {}) stays in {} after every fault healed, every node \
                     restarted and the documented calls (rollback, forced cleanup); failures: {:?}",
                    st.switch_id, st.source, st.target, st.phase, st.failures
                ),
            );
        }
    }

    /// A forced cleanup of the latest switch until it is done.
    async fn final_cleanup(&mut self) {
        for _ in 0..5 {
            let st = match self.read_latest_switch().await {
                Ok(Some(st)) => st,
                Ok(None) => return,
                // No node could read it (a connection still lost): wait and
                // read again rather than skip the final cleanup.
                Err(_) => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
            };
            if !matches!(
                st.phase,
                Phase::Switched | Phase::RolledBack | Phase::Cleanup
            ) {
                return;
            }
            let a = self
                .call(
                    0,
                    Method::POST,
                    "/cleanup",
                    Some(json!({ "dryRun": false, "force": true })),
                )
                .await;
            self.trace.push(format!("final cleanup -> {}", short(&a)));
            if !a.as_ref().is_some_and(Answer::ok) {
                return;
            }
        }
    }
}

/// Phases in which nothing runs by itself any more.
fn settled(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Switched | Phase::Done | Phase::DoneWithFailures | Phase::RolledBack
    )
}

fn first_words(s: &str) -> String {
    s.chars().take(80).collect()
}
