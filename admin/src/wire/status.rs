//! The status documents: a switch's progress ([`SwitchStatusDoc`]), its copy
//! progress ([`CopyProgressDoc`]) and one node's view ([`NodeStatus`], the
//! answer of `GET /status`).

use bkswitch_bk_router::{AppliedDirective, ReadMode};
use bkswitch_registry::SwitchDirective;
use bkswitch_switch_orchestrator::{Counts, Phase};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::json::{array, i64_field, present, str_field, u64_field};

/// A switch's progress (`SwitchStatus` of the API): the orchestrator's
/// [`SwitchStatusDoc`](bkswitch_switch_orchestrator::SwitchStatus) as a JSON
/// document, answered by `POST /switch` and `POST /rollback` and embedded in
/// [`NodeStatus`].
///
/// The server makes it with [`From`]; the client reads it through the
/// accessors, which tolerate missing fields and unknown phases (see the
/// [module docs](super)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SwitchStatusDoc(pub Value);

impl From<bkswitch_switch_orchestrator::SwitchStatus> for SwitchStatusDoc {
    fn from(status: bkswitch_switch_orchestrator::SwitchStatus) -> SwitchStatusDoc {
        // Serializing the record (plain fields, string keys) cannot fail.
        SwitchStatusDoc(serde_json::to_value(status).unwrap_or_default())
    }
}

impl SwitchStatusDoc {
    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// The switch id.
    pub fn switch_id(&self) -> Option<&str> {
        str_field(&self.0, "switchId")
    }

    /// The directive epoch the switch runs under.
    pub fn epoch(&self) -> Option<i64> {
        i64_field(&self.0, "epoch")
    }

    /// The cluster ledgers are copied from.
    pub fn source(&self) -> Option<&str> {
        str_field(&self.0, "source")
    }

    /// The cluster ledgers are copied to.
    pub fn target(&self) -> Option<&str> {
        str_field(&self.0, "target")
    }

    /// The phase name as sent (also for phases this client does not know).
    pub fn phase_name(&self) -> Option<&str> {
        str_field(&self.0, "phase")
    }

    /// The phase, read as the orchestrator's [`Phase`]. A phase this client
    /// does not know (sent by a newer server) falls back to `None` instead of
    /// failing the answer; [`phase_name`](Self::phase_name) still gives it.
    pub fn phase(&self) -> Option<Phase> {
        self.0.get("phase").and_then(|v| Phase::deserialize(v).ok())
    }

    /// Whether the switch needs no more watching: traffic has moved
    /// (`SWITCHED`) or the switch has ended (`DONE`, `DONE_WITH_FAILURES`,
    /// `ROLLED_BACK`). A phase this client does not know is not settled.
    pub fn is_settled(&self) -> bool {
        matches!(
            self.phase(),
            Some(Phase::Switched | Phase::Done | Phase::DoneWithFailures | Phase::RolledBack)
        )
    }

    /// The counters; missing ones read as 0.
    pub fn counts(&self) -> Counts {
        let c = self.0.get("counts").unwrap_or(&Value::Null);
        Counts {
            to_build: u64_field(c, "toBuild"),
            built: u64_field(c, "built"),
            failed: u64_field(c, "failed"),
            promoted: u64_field(c, "promoted"),
            rollover_fallback: u64_field(c, "rolloverFallback"),
            deleted: u64_field(c, "deleted"),
            rolled_back: u64_field(c, "rolledBack"),
            obsolete: u64_field(c, "obsolete"),
        }
    }

    /// When the switch was created (as sent: milliseconds since the Unix epoch).
    pub fn created_at(&self) -> Option<&Value> {
        present(&self.0, "createdAt")
    }

    /// When the record last changed.
    pub fn updated_at(&self) -> Option<&Value> {
        present(&self.0, "updatedAt")
    }

    /// Until when a rollback is possible.
    pub fn rollback_deadline(&self) -> Option<&Value> {
        present(&self.0, "rollbackDeadline")
    }

    /// The recorded failures.
    pub fn failures(&self) -> Vec<SwitchFailure> {
        array(&self.0, "failures", |f| SwitchFailure {
            kind: str_field(f, "kind").map(str::to_owned),
            ledger_id: i64_field(f, "ledgerId"),
            path: str_field(f, "path")
                .or_else(|| str_field(f, "ownerPath"))
                .map(str::to_owned),
            reason: str_field(f, "reason").map(str::to_owned),
        })
    }
}

/// One failure recorded by a switch, as the client reads it: every field is
/// optional, so a failure of any shape is still shown. The server sends the
/// orchestrator's [`Failure`](bkswitch_switch_orchestrator::Failure).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SwitchFailure {
    /// What failed (`schema`, `cursor`, …).
    pub kind: Option<String>,
    /// The ledger concerned.
    pub ledger_id: Option<i64>,
    /// The metadata path concerned (the field `path`; servers before this
    /// version sent it as `ownerPath`, which is read too).
    pub path: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// The copy progress of a switch (`CopyProgressDoc` of the API, `copyProgress`
/// in [`NodeStatus`]): the orchestrator's
/// [`BuildProgress`](bkswitch_switch_orchestrator::BuildProgress) as a JSON
/// document, read through tolerant accessors (missing counters read as 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CopyProgressDoc(pub Value);

impl From<&bkswitch_switch_orchestrator::BuildProgress> for CopyProgressDoc {
    fn from(p: &bkswitch_switch_orchestrator::BuildProgress) -> CopyProgressDoc {
        // Plain fields and string keys: serializing cannot fail.
        CopyProgressDoc(serde_json::to_value(p).unwrap_or_default())
    }
}

impl CopyProgressDoc {
    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// Whether the answering node is copying (its live progress), rather
    /// than reading the ledger records (finished ledgers only).
    pub fn live(&self) -> bool {
        self.0.get("live").and_then(Value::as_bool).unwrap_or(false)
    }

    /// `(done, total)` ledgers (done: copied, found present or failed).
    pub fn ledgers(&self) -> (u64, u64) {
        (
            u64_field(&self.0, "ledgersDone"),
            u64_field(&self.0, "ledgersTotal"),
        )
    }

    /// Ledgers whose copy failed.
    pub fn ledgers_failed(&self) -> u64 {
        u64_field(&self.0, "ledgersFailed")
    }

    /// `(copied, total)` entries.
    pub fn entries(&self) -> (u64, u64) {
        (
            u64_field(&self.0, "entriesCopied"),
            u64_field(&self.0, "entriesTotal"),
        )
    }

    /// `(copied, total)` payload bytes.
    pub fn bytes(&self) -> (u64, u64) {
        (
            u64_field(&self.0, "bytesCopied"),
            u64_field(&self.0, "bytesTotal"),
        )
    }

    /// When the answering coordinator started copying (ms since the Unix
    /// epoch), if it is.
    pub fn started_at(&self) -> Option<i64> {
        i64_field(&self.0, "startedAt")
    }

    /// The copies in flight.
    pub fn copying(&self) -> Vec<LedgerCopyDoc> {
        array(&self.0, "copying", |l| LedgerCopyDoc {
            kind: str_field(l, "kind").map(str::to_owned),
            ledger_id: i64_field(l, "ledgerId"),
            source: str_field(l, "source").map(str::to_owned),
            target: str_field(l, "target").map(str::to_owned),
            entries_copied: u64_field(l, "entriesCopied"),
            entries_total: u64_field(l, "entriesTotal"),
            bytes_copied: u64_field(l, "bytesCopied"),
            bytes_total: u64_field(l, "bytesTotal"),
        })
    }
}

/// One copy in flight, as the client reads it (see
/// [`LedgerProgress`](bkswitch_switch_orchestrator::LedgerProgress)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LedgerCopyDoc {
    /// `schema` or `cursor`.
    pub kind: Option<String>,
    /// The ledger.
    pub ledger_id: Option<i64>,
    /// The cluster it is copied from.
    pub source: Option<String>,
    /// The cluster it is copied to.
    pub target: Option<String>,
    /// Entries copied so far.
    pub entries_copied: u64,
    /// Entries of the source snapshot (0 until the copy has opened it).
    pub entries_total: u64,
    /// Payload bytes copied so far.
    pub bytes_copied: u64,
    /// Payload bytes of the source snapshot.
    pub bytes_total: u64,
}

/// One node's view (`NodeStatus` of the API, the answer of `GET /status`):
/// `{"nodeId","activeCluster","bootstrapCluster","readMode","epoch","directive","switch","applied","copyProgress"}`.
///
/// The server makes it with [`NodeStatus::new`]; the client reads it through
/// the accessors, which tolerate missing fields (see the [module docs](super)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeStatus(pub Value);

impl NodeStatus {
    /// The view of node `node_id`: where it creates new ledgers, its legacy
    /// fallback cluster, its read mode, the last directive epoch it applied,
    /// the current directive and the latest switch's progress.
    pub fn new(
        node_id: &str,
        active_cluster: Option<String>,
        bootstrap_cluster: Option<String>,
        read_mode: ReadMode,
        epoch: i64,
        directive: Option<SwitchDirective>,
        switch: Option<bkswitch_switch_orchestrator::SwitchStatus>,
    ) -> NodeStatus {
        NodeStatus(json!({
            "nodeId": node_id,
            "activeCluster": active_cluster,
            "bootstrapCluster": bootstrap_cluster,
            "readMode": read_mode.as_str(),
            "epoch": epoch,
            "directive": directive,
            "switch": switch.map(|s| SwitchStatusDoc::from(s).0),
        }))
    }

    /// Adds when this node applied which directive: `applied` =
    /// `{"epoch","target","writtenAt","appliedAt","visibleAfterMs"}` (instants
    /// in milliseconds since the Unix epoch), or `null` before the first one.
    #[must_use]
    pub fn with_applied(mut self, applied: Option<&AppliedDirective>) -> NodeStatus {
        if let Value::Object(map) = &mut self.0 {
            map.insert(
                "applied".to_owned(),
                applied.map_or(Value::Null, |a| {
                    json!({
                        "epoch": a.epoch,
                        "target": a.target,
                        "writtenAt": a.written_at_ms,
                        "appliedAt": a.applied_at_ms,
                        "visibleAfterMs": a.visible_after_ms(),
                    })
                }),
            );
        }
        self
    }

    /// Adds the latest switch's copy progress: `copyProgress` =
    /// [`CopyProgressDoc`], or `null` when there is none to tell.
    #[must_use]
    pub fn with_copy_progress(
        mut self,
        progress: Option<&bkswitch_switch_orchestrator::BuildProgress>,
    ) -> NodeStatus {
        if let Value::Object(map) = &mut self.0 {
            map.insert(
                "copyProgress".to_owned(),
                progress.map_or(Value::Null, |p| CopyProgressDoc::from(p).0),
            );
        }
        self
    }

    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// The latest switch's copy progress (`copyProgress`), if the server
    /// sent one.
    pub fn copy_progress(&self) -> Option<CopyProgressDoc> {
        self.0
            .get("copyProgress")
            .filter(|v| v.is_object())
            .cloned()
            .map(CopyProgressDoc)
    }

    /// The node answering.
    pub fn node_id(&self) -> Option<&str> {
        str_field(&self.0, "nodeId")
    }

    /// The cluster new ledgers are created on.
    pub fn active_cluster(&self) -> Option<&str> {
        str_field(&self.0, "activeCluster")
    }

    /// The legacy fallback cluster ([I17](bkswitch_docs::invariants::I17)).
    pub fn bootstrap_cluster(&self) -> Option<&str> {
        str_field(&self.0, "bootstrapCluster")
    }

    /// The read mode in force, as sent.
    pub fn read_mode(&self) -> Option<&str> {
        str_field(&self.0, "readMode")
    }

    /// The epoch of the directive this node applied.
    pub fn epoch(&self) -> Option<i64> {
        i64_field(&self.0, "epoch")
    }

    /// The switch directive (`{"target","origin","epoch","ts"}`), if any.
    pub fn directive(&self) -> Option<&Value> {
        self.0.get("directive").filter(|v| v.is_object())
    }

    /// When this node applied which directive (`applied`); `None` before the
    /// first one, or when a field is missing (a server of an earlier version).
    pub fn applied(&self) -> Option<AppliedDirective> {
        let a = self.0.get("applied").filter(|v| v.is_object())?;
        Some(AppliedDirective {
            epoch: a.get("epoch")?.as_i64()?,
            target: str_field(a, "target")?.to_owned(),
            written_at_ms: a.get("writtenAt")?.as_i64()?,
            applied_at_ms: a.get("appliedAt")?.as_i64()?,
        })
    }

    /// The switch this node knows of, if any.
    pub fn switch(&self) -> Option<SwitchStatusDoc> {
        self.0
            .get("switch")
            .filter(|v| v.is_object())
            .cloned()
            .map(SwitchStatusDoc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The progress reaches the client; a server of an earlier version
    /// (no `copyProgress`) reads as `None`, missing counters as 0.
    #[test]
    fn copy_progress_reaches_the_client() {
        use bkswitch_switch_orchestrator::{BuildProgress, LedgerKind, LedgerProgress};
        let p = BuildProgress {
            switch_id: "3".into(),
            source: "old".into(),
            target: "new".into(),
            live: true,
            ledgers_total: 4,
            ledgers_done: 1,
            ledgers_failed: 0,
            entries_copied: 70,
            entries_total: 160,
            bytes_copied: 700,
            bytes_total: 1600,
            started_at: Some(1_000),
            copying: vec![LedgerProgress {
                kind: LedgerKind::Cursor,
                ledger_id: 9,
                source: "old".into(),
                target: "new".into(),
                entries_copied: 30,
                entries_total: 40,
                bytes_copied: 300,
                bytes_total: 400,
            }],
        };
        let sent = NodeStatus::new("n1", None, None, ReadMode::DualRead, 0, None, None)
            .with_copy_progress(Some(&p));
        assert_eq!(sent.raw()["copyProgress"]["entriesTotal"], 160);
        let got = NodeStatus(serde_json::from_str(&sent.raw().to_string()).unwrap())
            .copy_progress()
            .unwrap();
        assert!(got.live());
        assert_eq!(got.ledgers(), (1, 4));
        assert_eq!(got.entries(), (70, 160));
        assert_eq!(got.bytes(), (700, 1600));
        assert_eq!(got.started_at(), Some(1_000));
        let l = &got.copying()[0];
        assert_eq!((l.kind.as_deref(), l.ledger_id), (Some("cursor"), Some(9)));
        assert_eq!((l.entries_copied, l.entries_total), (30, 40));
        let none = NodeStatus::new("n1", None, None, ReadMode::DualRead, 0, None, None)
            .with_copy_progress(None);
        assert!(none.raw()["copyProgress"].is_null());
        assert_eq!(none.copy_progress(), None);
        assert_eq!(NodeStatus(json!({ "nodeId": "n1" })).copy_progress(), None);
        let partial = CopyProgressDoc(json!({ "entriesCopied": 5 }));
        assert_eq!((partial.entries(), partial.live()), ((5, 0), false));
    }
    use bkswitch_switch_orchestrator::{Failure, LedgerKind};
    use serde_json::json;

    /// When a node applied which directive reaches the client; a status
    /// without it (none applied yet, or an earlier server) reads as `None`.
    #[test]
    fn applied_directive_reaches_the_client() {
        let status = |applied: Option<&AppliedDirective>| {
            NodeStatus::new("n1", None, None, ReadMode::DualRead, 0, None, None)
                .with_applied(applied)
        };
        assert_eq!(status(None).applied(), None);
        assert!(status(None).raw()["applied"].is_null());
        let a = AppliedDirective {
            epoch: 3,
            target: "new".into(),
            written_at_ms: 1_000,
            applied_at_ms: 1_004,
        };
        let sent = status(Some(&a));
        assert_eq!(sent.raw()["applied"]["visibleAfterMs"], 4);
        let got = NodeStatus(serde_json::from_str(&sent.raw().to_string()).unwrap());
        assert_eq!(got.applied(), Some(a));
        assert_eq!(NodeStatus(json!({ "nodeId": "n1" })).applied(), None);
        assert_eq!(
            NodeStatus(json!({ "applied": { "epoch": 3, "target": "new" } })).applied(),
            None
        );
    }

    /// A failure's metadata path reaches the client as `path` (API.md), and a
    /// server of an earlier version that sent `ownerPath` is still understood.
    #[test]
    fn failure_paths_reach_the_client() {
        let failure = Failure {
            kind: LedgerKind::Cursor,
            ledger_id: 7,
            owner_path: "/managed-ledgers/t/ns/persistent/a".into(),
            reason: "copy differs".into(),
        };
        let sent =
            json!({ "switchId": "3", "failures": [serde_json::to_value(&failure).unwrap()] });
        assert_eq!(
            sent["failures"][0]["path"],
            "/managed-ledgers/t/ns/persistent/a"
        );
        let got = SwitchStatusDoc(sent).failures();
        assert_eq!(
            got[0].path.as_deref(),
            Some("/managed-ledgers/t/ns/persistent/a")
        );
        assert_eq!(got[0].ledger_id, Some(7));
        let old = SwitchStatusDoc(
            json!({ "failures": [{ "kind": "cursor", "ledgerId": 7, "ownerPath": "/x", "reason": "r" }] }),
        );
        assert_eq!(old.failures()[0].path.as_deref(), Some("/x"));
        // Records written by earlier versions decode.
        let stored: Failure = serde_json::from_value(
            json!({ "kind": "cursor", "ledgerId": 7, "ownerPath": "/x", "reason": "r" }),
        )
        .unwrap();
        assert_eq!(stored.owner_path, "/x");
    }
}
