//! The records of a switch in the metadata store: the switch record
//! `<root>/orchestrator/<switchId>`, one record per ledger under
//! `…/<switchId>/ledgers/<kind>-<ledgerId>`, the ledgers it created on the
//! target `…/<switchId>/created/<ledgerId>`, and the switch lease
//! `…/<switchId>/lease`. Every write is a compare-and-set
//! ([I3](bkswitch_docs::invariants::I3)) made while holding the lease, so a
//! new coordinator resumes from them ([I6](bkswitch_docs::invariants::I6)).

use std::collections::BTreeMap;

use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, GetResult};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{now_ms, Orchestrator, MAX_FAILURES_LISTED};
use crate::error::{OrchestratorError, Result};
use crate::model::{Counts, Failure, LedgerRecord, LedgerState, SwitchRecord, SwitchStatus};

/// Compare-and-set attempts on one record before giving up.
const RECORD_CAS_ATTEMPTS: usize = 16;

impl Orchestrator {
    /// `<root>/orchestrator/<switchId>`.
    pub(super) fn switch_path(&self, id: &str) -> String {
        format!("{}/{id}", self.records_root())
    }

    fn ledgers_path(&self, id: &str) -> String {
        format!("{}/ledgers", self.switch_path(id))
    }

    /// `…/<switchId>/created`: one child per ledger this switch created on
    /// the target (see `copy` in `build.rs`).
    pub(super) fn created_path(&self, id: &str) -> String {
        format!("{}/created", self.switch_path(id))
    }

    fn lease_path(&self, id: &str) -> String {
        format!("{}/lease", self.switch_path(id))
    }

    // ------------------------------------------------------------ the store

    /// Reads a node (`None` when it does not exist).
    pub(super) async fn read_node(&self, path: &str) -> Result<Option<GetResult>> {
        self.inner
            .store
            .get(path)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))
    }

    /// Writes a node if its version still is `expected`: `false` when another
    /// writer got there first (nothing written).
    pub(super) async fn try_put(
        &self,
        path: &str,
        bytes: &[u8],
        expected: ExpectedVersion,
    ) -> Result<bool> {
        match self.inner.store.put(path, bytes, expected).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_conflict() => Ok(false),
            Err(e) => Err(OrchestratorError::metadata(format!("writing `{path}`"), e)),
        }
    }

    // ----------------------------------------------------- the switch record

    /// The switch record and its version.
    pub(super) async fn load(&self, id: &str) -> Result<(SwitchRecord, i64)> {
        let path = self.switch_path(id);
        let r = self
            .read_node(&path)
            .await?
            .ok_or_else(|| OrchestratorError::NoSuchSwitch {
                switch_id: id.to_owned(),
            })?;
        Ok((decode_json(&path, &r.value)?, r.stat.version))
    }

    /// Creates the switch record (a record already there, written by a start
    /// of the same switch on another node, is kept).
    pub(super) async fn create_switch(&self, rec: &SwitchRecord) -> Result<()> {
        fail_point!("orchestrator::switch_record");
        let path = self.switch_path(&rec.switch_id);
        let bytes = encode_json(&path, rec)?;
        match self
            .inner
            .store
            .put(&path, &bytes, ExpectedVersion::NotExists)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(OrchestratorError::metadata(format!("creating `{path}`"), e)),
        }
    }

    /// CAS-writes the switch record after `f` changed it (re-read on conflict).
    pub(super) async fn update_switch(
        &self,
        id: &str,
        mut f: impl FnMut(&mut SwitchRecord),
    ) -> Result<SwitchRecord> {
        let path = self.switch_path(id);
        for _ in 0..RECORD_CAS_ATTEMPTS {
            let (mut rec, v) = self.load(id).await?;
            f(&mut rec);
            rec.updated_at = now_ms();
            self.check_lease(id).await?;
            fail_point!("orchestrator::switch_record");
            let bytes = encode_json(&path, &rec)?;
            if self
                .try_put(&path, &bytes, ExpectedVersion::Exactly(v))
                .await?
            {
                return Ok(rec);
            }
        }
        Err(kept_changing(id, "record update", &path))
    }

    /// Every recorded switch id, by ascending epoch.
    pub(super) async fn recorded_switch_ids(&self) -> Result<Vec<String>> {
        let root = self.records_root();
        let mut ids: Vec<(i64, String)> = self
            .inner
            .store
            .children(&root)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("listing `{root}`"), e))?
            .into_iter()
            .filter_map(|c| c.parse::<i64>().ok().map(|e| (e, c)))
            .collect();
        ids.sort();
        Ok(ids.into_iter().map(|(_, c)| c).collect())
    }

    /// The status of a switch, with counts computed from its ledger records.
    pub(super) async fn read_status(&self, id: &str) -> Result<SwitchStatus> {
        let (rec, _) = self.load(id).await?;
        let ledgers = self.list_ledgers(id).await?;
        let (counts, failures) = summarize(&ledgers);
        Ok(SwitchStatus {
            switch_id: rec.switch_id,
            epoch: rec.epoch,
            source: rec.source,
            target: rec.target,
            phase: rec.phase,
            counts,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
            switched_at: rec.switched_at,
            rollback_deadline: rec.rollback_deadline,
            finished_at: rec.finished_at,
            failures,
        })
    }

    // ---------------------------------------------------- the ledger records

    /// Every ledger record of a switch, by key.
    pub(super) async fn list_ledgers(&self, id: &str) -> Result<BTreeMap<String, LedgerRecord>> {
        let base = self.ledgers_path(id);
        let names = self
            .inner
            .store
            .children(&base)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("listing `{base}`"), e))?;
        let mut out = BTreeMap::new();
        for name in names {
            let path = format!("{base}/{name}");
            let Some(r) = self.read_node(&path).await? else {
                continue;
            };
            out.insert(name, decode_json(&path, &r.value)?);
        }
        Ok(out)
    }

    /// Writes a ledger record with a compare-and-set against the version read.
    pub(super) async fn put_ledger(&self, id: &str, rec: &mut LedgerRecord) -> Result<()> {
        rec.updated_at = now_ms();
        self.check_lease(id).await?;
        fail_point!("orchestrator::ledger_record");
        let path = format!("{}/{}", self.ledgers_path(id), rec.key());
        let bytes = encode_json(&path, &*rec)?;
        for _ in 0..RECORD_CAS_ATTEMPTS {
            let expected = match self
                .inner
                .store
                .exists(&path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            {
                Some(s) => ExpectedVersion::Exactly(s.version),
                None => ExpectedVersion::NotExists,
            };
            if self.try_put(&path, &bytes, expected).await? {
                return Ok(());
            }
        }
        Err(kept_changing(id, "ledger record", &path))
    }

    /// Records a ledger's new `state` (and why, when `reason` is given).
    pub(super) async fn set_state(
        &self,
        id: &str,
        rec: &mut LedgerRecord,
        state: LedgerState,
        reason: Option<String>,
    ) -> Result<()> {
        rec.state = state;
        match state {
            LedgerState::Promoted => rec.was_promoted = true,
            LedgerState::RolledBack => rec.was_promoted = false,
            _ => {}
        }
        if reason.is_some() {
            rec.reason = reason;
        }
        self.put_ledger(id, rec).await
    }

    // -------------------------------------------------------------- the lease

    /// Runs `body` holding the switch's lease: an ephemeral node naming this
    /// coordinator, so that two coordinators never work on one switch at once
    /// (e.g. a leader whose session expired mid-BUILD and the leader elected
    /// after it). The lease disappears with the holder's metadata session; it
    /// is released when `body` returns.
    pub(super) async fn leased<T>(
        &self,
        id: &str,
        body: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.acquire_lease(id).await?;
        // Released in the background if this future is dropped mid-way (the
        // caller was cancelled): otherwise the lease would last as long as the
        // metadata session.
        let mut guard = LeaseGuard {
            orchestrator: Some(self.clone()),
            id: id.to_owned(),
        };
        let result = body.await;
        guard.orchestrator = None;
        self.release_lease(id).await;
        result
    }

    async fn acquire_lease(&self, id: &str) -> Result<()> {
        // The switch must exist (its record is the lease's parent).
        self.load(id).await?;
        let path = self.lease_path(id);
        let me = self.inner.instance.as_bytes();
        match self
            .inner
            .store
            .create(&path, me, CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => match self.read_node(&path).await? {
                Some(r) if r.value == me => Ok(()),
                Some(r) => Err(locked(id, String::from_utf8_lossy(&r.value).into_owned())),
                // Released meanwhile: let the caller retry.
                None => Err(locked(id, "(released)".to_owned())),
            },
            Err(e) => Err(OrchestratorError::metadata(format!("creating `{path}`"), e)),
        }
    }

    async fn release_lease(&self, id: &str) {
        let path = self.lease_path(id);
        if let Ok(Some(r)) = self.inner.store.get(&path).await {
            if r.value == self.inner.instance.as_bytes() {
                let _ = self
                    .inner
                    .store
                    .delete(&path, ExpectedVersion::Exactly(r.stat.version))
                    .await;
            }
        }
    }

    /// Fails when this coordinator no longer holds the switch's lease (its
    /// session expired and another coordinator may have taken over).
    async fn check_lease(&self, id: &str) -> Result<()> {
        match self.read_node(&self.lease_path(id)).await? {
            Some(r) if r.value == self.inner.instance.as_bytes() => Ok(()),
            Some(r) => Err(locked(id, String::from_utf8_lossy(&r.value).into_owned())),
            None => Err(locked(
                id,
                "(none: this coordinator lost its lease)".to_owned(),
            )),
        }
    }
}

/// Releases a switch lease when a leased operation is dropped before it ends.
struct LeaseGuard {
    orchestrator: Option<Orchestrator>,
    id: String,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(o) = self.orchestrator.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let id = std::mem::take(&mut self.id);
            rt.spawn(async move { o.release_lease(&id).await });
        }
    }
}

fn locked(id: &str, holder: String) -> OrchestratorError {
    OrchestratorError::Locked {
        switch_id: id.to_owned(),
        holder,
    }
}

fn kept_changing(id: &str, what: &str, path: &str) -> OrchestratorError {
    OrchestratorError::NotConverged {
        switch_id: id.to_owned(),
        phase: what.to_owned(),
        reason: format!("`{path}` kept changing concurrently"),
    }
}

fn decode_json<T: DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| OrchestratorError::corrupt(path, e))
}

fn encode_json<T: Serialize + ?Sized>(path: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| OrchestratorError::corrupt(path, e))
}

/// The counts and the first [`MAX_FAILURES_LISTED`] failures of a switch's
/// ledger records.
pub(super) fn summarize(records: &BTreeMap<String, LedgerRecord>) -> (Counts, Vec<Failure>) {
    let mut c = Counts::default();
    let mut failures = Vec::new();
    for r in records.values() {
        c.to_build += 1;
        // Built = copied to the target; a ledger found obsolete before its copy
        // (rolled over or deleted since the scan) never was.
        let never_copied = r.state == LedgerState::Obsolete && !r.target_copy;
        if r.state != LedgerState::Failed && !never_copied {
            c.built += 1;
        }
        match r.state {
            LedgerState::Failed => {
                c.failed += 1;
                if failures.len() < MAX_FAILURES_LISTED {
                    failures.push(Failure {
                        kind: r.kind,
                        ledger_id: r.ledger_id,
                        owner_path: r.owner_path.clone(),
                        reason: r.reason.clone().unwrap_or_default(),
                    });
                }
            }
            LedgerState::Obsolete => c.obsolete += 1,
            LedgerState::RolledBack => c.rolled_back += 1,
            LedgerState::Deleted => c.deleted += 1,
            LedgerState::Built | LedgerState::Promoted | LedgerState::RolledOver => {}
        }
        if r.was_promoted && matches!(r.state, LedgerState::Promoted | LedgerState::Deleted) {
            c.promoted += 1;
        }
        if r.rollover_ledger_id.is_some()
            && matches!(r.state, LedgerState::RolledOver | LedgerState::Deleted)
        {
            c.rollover_fallback += 1;
        }
    }
    (c, failures)
}
