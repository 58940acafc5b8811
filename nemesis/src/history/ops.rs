//! The operations of a history: each [`Op`] of a plan carried out on the
//! stack, and the checks made around each.

use crate::checker::ViolationKind;
use crate::plan::{Op, CLUSTERS, PREFIXES};
use crate::stack::Answer;
use axum::http::Method;
use bkswitch_bk_client::UnavailableMode;
use bkswitch_switch_orchestrator::Phase;
use serde_json::{json, Value};
use std::time::Duration;

use super::*;

impl Run {
    /// After healing, of every node that a duplicate started beside while
    /// it ran, one of the two must have stopped by itself (the one that lost
    /// its session, finding its id taken): two nodes with one id both claim
    /// topics and coordinator duties (N20).
    pub(super) async fn check_fail_stops(&mut self) {
        for node in std::mem::take(&mut self.shared_ids) {
            let id = self.stack.slots[node].id.clone();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            let both_run = loop {
                let original = self.stack.node(node).filter(|n| n.fail_stopped().is_none());
                let duplicate = self
                    .stack
                    .duplicates
                    .iter()
                    .find(|n| n.node_id() == id && n.fail_stopped().is_none());
                if original.is_none() || duplicate.is_none() {
                    break false;
                }
                if tokio::time::Instant::now() >= deadline {
                    break true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            if both_run {
                self.violations.push(
                    ViolationKind::DuplicateNode,
                    format!(
                        "a second node with id {id} started while {id} ran, and after \
                         healing both still run: both can claim topics and coordinator duties"
                    ),
                );
            } else {
                self.trace
                    .push(format!("{id}: one of the two fail-stopped"));
            }
        }
    }

    /// Moves the metadata store to the other tree through node `node`: a
    /// dry run first, then the start, wiping the target's leftovers of an
    /// earlier move by naming the root the dry run reported.
    pub(super) async fn migrate(&mut self, node: usize) -> String {
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
    pub(super) fn clear_answer(&mut self, path: &str, node: usize, a: &Answer) {
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
    pub(super) async fn race(&mut self, first: &Op, second: &Op) -> String {
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

    pub(super) async fn call(
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

    pub(super) async fn op(&mut self, op: &Op) -> String {
        match *op {
            Op::LoseCopies {
                cluster,
                bookie,
                ledger,
            } => self.lose_copies(cluster, bookie, ledger),
            Op::Corrupt { target, pick } => self.corrupt(target, pick).await,
            Op::RepairMetadata => self.repair_all().await,
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
                        // Legitimate only when node-{node} lost its session
                        // (its registration went with it): it must then
                        // fail-stop once it finds its id taken (N20).
                        self.shared_ids.push(node);
                        "started (duplicate: the first must fail-stop)".to_owned()
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
}
