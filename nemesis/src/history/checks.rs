//! What a history checks while it settles and at its end: schemas,
//! switch records, mutual exclusion, the final cleanup.

use crate::checker::ViolationKind;
use crate::plan::{CLUSTERS, SCHEMAS};
use crate::stack::Answer;
use axum::http::Method;
use bkswitch_proto::Stamped;
use bkswitch_switch_orchestrator::{Phase, SwitchStatus};
use serde_json::json;
use std::time::Duration;

use super::*;

impl Run {
    /// Puts a version of `SCHEMAS[schema]` and checks the cluster its stamp
    /// names.
    pub(super) async fn expect_schema_on(&mut self, schema: usize, cluster: usize) -> String {
        let (id, want) = (SCHEMAS[schema], CLUSTERS[cluster]);
        let Some(node) = self.stack.any_node().cloned() else {
            return "no node".to_owned();
        };
        self.stack.sync_reads();
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
    pub(super) async fn record(&mut self, name: &str) -> Option<Option<String>> {
        self.stack.sync_root();
        self.stack.sync_reads();
        let node = self.stack.any_node()?;
        let r = node.registry().get(name).await.ok()?;
        Some(r.map(|r| format!("{}:{}:{:?}", r.name, r.metadata_service_uri, r.status)))
    }

    /// A register (`registers`) or unregister call did what it answered:
    /// 2xx → the record is there (gone); 4xx → the record is unchanged.
    pub(super) async fn check_record_call(
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

    pub(super) async fn latest_switch(&self) -> Option<SwitchStatus> {
        self.read_latest_switch().await.ok().flatten()
    }

    /// The latest switch as the first running node that can read it sees it;
    /// `Err` when no node could (every connection lost or no node running).
    /// A failed read is not "no switch": the checker must not compare it
    /// with a successful one (seed 106720 did, and reported a refused call
    /// as a recorded switch).
    pub(super) async fn read_latest_switch(&self) -> Result<Option<SwitchStatus>, String> {
        self.stack.sync_reads();
        let mut last = "no node runs".to_owned();
        for node in self.stack.nodes_current_first() {
            match node.orchestrator().current_status().await {
                Ok(st) => return Ok(st),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// A canary of `prefix` was just started: no other coordinator may have
    /// been working on the same ledgers (issue #20, 5.1).
    pub(super) fn check_exclusion(
        &mut self,
        prefix: &str,
        before: &[(String, Option<String>, SwitchStatus)],
    ) {
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
    pub(super) async fn in_progress_all(&self) -> Vec<(String, Option<String>, SwitchStatus)> {
        self.stack.sync_reads();
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
    pub(super) async fn in_progress(&self) -> Vec<(String, Option<String>, SwitchStatus)> {
        let mut out = self.in_progress_all().await;
        out.retain(|(_, _, st)| !settled(st.phase));
        out
    }

    /// Lets the switches and canaries reach a final state, using the
    /// documented calls (rollback, forced cleanup) when they do not by
    /// themselves; what still does not is a violation.
    pub(super) async fn settle(&mut self) {
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
    pub(super) async fn final_cleanup(&mut self) {
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
