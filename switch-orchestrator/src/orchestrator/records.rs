//! The records of a switch in the metadata store: the switch record
//! `<root>/orchestrator/<switchId>`, one record per ledger under
//! `…/<switchId>/ledgers/<bucket>/<kind>-<ledgerId>` (the bucket is the
//! ledger id divided by [`RECORD_BUCKET`]), the ledgers it created on the
//! target `…/<switchId>/created/<ledgerId>`, and the switch lease
//! `…/<switchId>/lease`. Every write is a compare-and-set
//! ([I3](bkswitch_docs::invariants::I3)) made while holding the lease, so a
//! new coordinator resumes from them ([I6](bkswitch_docs::invariants::I6)).

use std::collections::BTreeMap;
use std::sync::Arc;

use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, GetResult, MetadataStore};
use bkswitch_mledger_spi::Clock;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::config::MAX_FAILURES_LISTED;
use crate::error::{OrchestratorError, Result};
use crate::model::{
    Counts, Failure, SwitchLedgerRecord, SwitchLedgerState, SwitchRecord, SwitchStatus,
};

/// Compare-and-set attempts on one record before giving up.
const RECORD_CAS_ATTEMPTS: usize = 16;

/// Ledger ids per bucket of ledger records. A ZooKeeper reply must fit in
/// `jute.maxbuffer` (1 MiB by default), so one node cannot list more than
/// about 58,000 record names: a switch of more schema and cursor ledgers than
/// that could not list its records in one flat folder. Buckets also are the
/// pages in which records are read (the status counts never hold more than
/// one bucket).
pub(crate) const RECORD_BUCKET: i64 = 1024;

/// The records of one coordinator (cluster-wide, or a canary's) and the
/// leases it takes: the metadata store, where its records live, its identity
/// in leases and the clock it stamps records with. Every phase receives it
/// (`Orchestrator::records`) and reaches the store through it.
pub(crate) struct Records {
    store: Arc<dyn MetadataStore>,
    /// The registry's root (`/admin/bookie-clusters`): the coordinator lease
    /// is under it.
    registry_root: String,
    /// `<registry root>/orchestrator`, or a canary's
    /// `<registry root>/canaries/<hex of the prefix>`.
    root: String,
    /// This coordinator's identity in leases.
    instance: String,
    /// The clock of switch and ledger records.
    clock: Arc<dyn Clock>,
    /// One operation of this coordinator at a time.
    lock: tokio::sync::Mutex<()>,
}

impl Records {
    /// The records of the coordinator of `scope` (a canary's prefix, or
    /// `None`: cluster-wide) under `registry_root`, with the identity
    /// `instance` in leases.
    pub(super) fn new(
        store: Arc<dyn MetadataStore>,
        registry_root: &str,
        scope: Option<&str>,
        instance: String,
        clock: Arc<dyn Clock>,
    ) -> Records {
        let root = match scope {
            None => format!("{registry_root}/orchestrator"),
            Some(prefix) => {
                let hex: String = prefix.bytes().map(|b| format!("{b:02x}")).collect();
                format!("{registry_root}/canaries/{hex}")
            }
        };
        Records {
            store,
            registry_root: registry_root.to_owned(),
            root,
            instance,
            clock,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The same records with another clock (the same identity, a lock of
    /// its own).
    pub(super) fn with_clock(&self, clock: Arc<dyn Clock>) -> Records {
        Records {
            store: self.store.clone(),
            registry_root: self.registry_root.clone(),
            root: self.root.clone(),
            instance: self.instance.clone(),
            clock,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Where the switch records live.
    pub(super) fn root(&self) -> &str {
        &self.root
    }

    /// The clock records are stamped with.
    pub(super) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Now, in milliseconds since the Unix epoch, by the records' clock.
    pub(super) fn now_ms(&self) -> i64 {
        self.clock.now_millis()
    }

    /// `<root>/orchestrator/<switchId>`.
    pub(super) fn switch_path(&self, id: &str) -> String {
        format!("{}/{id}", self.root)
    }

    fn ledgers_path(&self, id: &str) -> String {
        format!("{}/ledgers", self.switch_path(id))
    }

    /// `…/ledgers/<bucket>/<kind>-<ledgerId>`.
    fn record_path(&self, id: &str, rec: &SwitchLedgerRecord) -> String {
        format!(
            "{}/{}/{}",
            self.ledgers_path(id),
            rec.ledger_id.div_euclid(RECORD_BUCKET),
            rec.key()
        )
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
        self.store
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
        match self.store.put_version(path, bytes, expected).await {
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
            rec.updated_at = self.now_ms();
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
        Err(kept_changing(id, "switch record", &path))
    }

    /// Every recorded switch id, by ascending epoch.
    pub(super) async fn recorded_switch_ids(&self) -> Result<Vec<String>> {
        let root = &self.root;
        let mut ids: Vec<(i64, String)> = self
            .store
            .children(root)
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
        // One bucket of records in memory at a time.
        let mut counts = Counts::default();
        let mut failures = Vec::new();
        self.for_each_record_page(id, |page| tally(&mut counts, &mut failures, &page))
            .await?;
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
    pub(super) async fn list_ledgers(
        &self,
        id: &str,
    ) -> Result<BTreeMap<String, SwitchLedgerRecord>> {
        let mut out = BTreeMap::new();
        self.for_each_record_page(id, |page| out.extend(page))
            .await?;
        Ok(out)
    }

    /// Reads the ledger records of a switch one bucket at a time and hands
    /// each bucket's records (by key) to `page`; memory holds one bucket.
    pub(super) async fn for_each_record_page(
        &self,
        id: &str,
        mut page: impl FnMut(BTreeMap<String, SwitchLedgerRecord>),
    ) -> Result<()> {
        for dir in self.record_dirs(id).await? {
            page(self.read_record_dir(&dir).await?);
        }
        Ok(())
    }

    /// The folders holding a switch's ledger records: one per bucket, and
    /// `…/ledgers` itself when it holds records written flat by an earlier
    /// version. Small: one name per 1,024 ledger ids in use.
    pub(super) async fn record_dirs(&self, id: &str) -> Result<Vec<String>> {
        let base = self.ledgers_path(id);
        let children = self.list(&base).await?;
        let mut out = Vec::new();
        if children.iter().any(|c| !is_bucket(c)) {
            out.push(base.clone());
        }
        out.extend(
            children
                .iter()
                .filter(|c| is_bucket(c))
                .map(|c| format!("{base}/{c}")),
        );
        Ok(out)
    }

    /// The ledger records in one of [`record_dirs`](Self::record_dirs), by key.
    pub(super) async fn read_record_dir(
        &self,
        dir: &str,
    ) -> Result<BTreeMap<String, SwitchLedgerRecord>> {
        let names: Vec<String> = self
            .list(dir)
            .await?
            .into_iter()
            .filter(|c| !is_bucket(c))
            .collect();
        self.read_records(dir, names).await
    }

    /// Whether a record names `kind`-`ledger_id` (one read).
    pub(super) async fn has_ledger_record(
        &self,
        id: &str,
        kind: crate::model::LedgerKind,
        ledger_id: i64,
    ) -> Result<bool> {
        let key = crate::model::record_key(kind, ledger_id);
        let base = self.ledgers_path(id);
        for path in [
            format!("{base}/{}/{key}", ledger_id.div_euclid(RECORD_BUCKET)),
            format!("{base}/{key}"),
        ] {
            let found = self
                .store
                .exists(&path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?;
            if found.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The record of `kind`-`ledger_id`, if this switch has one.
    pub(super) async fn read_ledger_record(
        &self,
        id: &str,
        kind: crate::model::LedgerKind,
        ledger_id: i64,
    ) -> Result<Option<SwitchLedgerRecord>> {
        let key = crate::model::record_key(kind, ledger_id);
        let base = self.ledgers_path(id);
        for path in [
            format!("{base}/{}/{key}", ledger_id.div_euclid(RECORD_BUCKET)),
            format!("{base}/{key}"),
        ] {
            if let Some(r) = self.read_node(&path).await? {
                return Ok(Some(decode_json(&path, &r.value)?));
            }
        }
        Ok(None)
    }

    async fn list(&self, path: &str) -> Result<Vec<String>> {
        self.store
            .children(path)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("listing `{path}`"), e))
    }

    async fn read_records(
        &self,
        dir: &str,
        names: Vec<String>,
    ) -> Result<BTreeMap<String, SwitchLedgerRecord>> {
        let mut out = BTreeMap::new();
        for name in names {
            let path = format!("{dir}/{name}");
            let Some(r) = self.read_node(&path).await? else {
                continue;
            };
            out.insert(name, decode_json(&path, &r.value)?);
        }
        Ok(out)
    }

    /// Writes a ledger record with a compare-and-set against the version read.
    pub(super) async fn put_ledger(&self, id: &str, rec: &mut SwitchLedgerRecord) -> Result<()> {
        rec.updated_at = self.now_ms();
        self.check_lease(id).await?;
        fail_point!("orchestrator::ledger_record");
        // A record an earlier version wrote flat is updated where it is.
        let flat = format!("{}/{}", self.ledgers_path(id), rec.key());
        let path = match self.store.exists(&flat).await {
            Ok(Some(_)) => flat,
            Ok(None) => self.record_path(id, rec),
            Err(e) => return Err(OrchestratorError::metadata(format!("reading `{flat}`"), e)),
        };
        let bytes = encode_json(&path, &*rec)?;
        for _ in 0..RECORD_CAS_ATTEMPTS {
            let expected = match self
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
        rec: &mut SwitchLedgerRecord,
        state: SwitchLedgerState,
        reason: Option<String>,
    ) -> Result<()> {
        rec.state = state;
        match state {
            SwitchLedgerState::Promoted => rec.was_promoted = true,
            SwitchLedgerState::RolledBack => rec.was_promoted = false,
            _ => {}
        }
        if reason.is_some() {
            rec.reason = reason;
        }
        self.put_ledger(id, rec).await
    }

    // -------------------------------------------------------------- the lease

    /// `<registry root>/orchestrator/coordinator-lease`: the one exclusion of all
    /// coordinator work on the clusters of this registry.
    pub(super) fn work_lease_path(&self) -> String {
        format!("{}/orchestrator/coordinator-lease", self.registry_root)
    }

    /// Runs `body` as the only coordinator work on these clusters: one
    /// operation of this instance at a time (its mutex, taken before the
    /// lease, so two operations of one instance never share a lease), and
    /// the coordinator lease, an ephemeral node naming this instance that
    /// every coordinator (cluster-wide switch, canary, rollback, cleanup,
    /// automatic cleanup; any node) must hold. It disappears with the
    /// holder's metadata session (a crashed node), and is released when
    /// `body` returns or is dropped.
    pub(super) async fn exclusive<T>(
        self: &Arc<Self>,
        what: &str,
        body: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let _one_at_a_time = self.lock.lock().await;
        // The lease's parent (`<root>/orchestrator`) does not exist before
        // the first switch; creating the lease creates it. A start refused
        // before anything was recorded must leave the store as it was, so
        // the parent goes again when it is still empty.
        let parent = format!("{}/orchestrator", self.registry_root);
        let fresh = self
            .store
            .exists(&parent)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("reading `{parent}`"), e))?
            .is_none();
        let acquired = self.acquire_work_lease(what).await;
        let result = match acquired {
            Ok(()) => {
                let mut guard = LeaseGuard {
                    records: Some(self.clone()),
                    id: None,
                };
                let result = body.await;
                guard.records = None;
                self.release_work_lease().await;
                result
            }
            Err(e) => Err(e),
        };
        if fresh {
            self.remove_if_empty(&parent).await;
        }
        result
    }

    /// Deletes `path` when it has no children (a node given children
    /// meanwhile is kept: the store refuses to delete it).
    async fn remove_if_empty(&self, path: &str) {
        let store = &self.store;
        if let (Ok(children), Ok(Some(stat))) =
            (store.children(path).await, store.exists(path).await)
        {
            if children.is_empty() {
                let _ = store
                    .delete(path, ExpectedVersion::Exactly(stat.version))
                    .await;
            }
        }
    }

    /// Runs `body` holding the coordinator lease (see
    /// [`exclusive`](Self::exclusive)) and the switch's own lease, so that
    /// two coordinators never work on one switch at once (e.g. a leader
    /// whose session expired mid-BUILD and the leader elected after it).
    pub(super) async fn leased<T>(
        self: &Arc<Self>,
        id: &str,
        body: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.exclusive(&format!("switch `{id}`"), async {
            self.acquire_lease(id).await?;
            // Released in the background if this future is dropped mid-way
            // (the caller was cancelled): otherwise the lease would last as
            // long as the metadata session.
            let mut guard = LeaseGuard {
                records: Some(self.clone()),
                id: Some(id.to_owned()),
            };
            let result = body.await;
            guard.records = None;
            self.release_lease(id).await;
            result
        })
        .await
    }

    async fn acquire_work_lease(&self, what: &str) -> Result<()> {
        let path = self.work_lease_path();
        let me = self.instance.as_bytes();
        match self.store.create(&path, me, CreateMode::EPHEMERAL).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => match self.read_node(&path).await? {
                // Left by an operation of this instance that was dropped
                // (its release is under way): this instance's mutex is held.
                Some(r) if r.value == me => Ok(()),
                Some(r) => Err(OrchestratorError::Locked {
                    switch_id: what.to_owned(),
                    holder: format!(
                        "`{}` (coordinator lease `{path}`: one coordinator works on these \
                         clusters at a time)",
                        String::from_utf8_lossy(&r.value)
                    ),
                }),
                None => Err(OrchestratorError::Locked {
                    switch_id: what.to_owned(),
                    holder: "nobody any more (released meanwhile)".to_owned(),
                }),
            },
            Err(e) => Err(OrchestratorError::metadata(format!("creating `{path}`"), e)),
        }
    }

    async fn release_work_lease(&self) {
        let path = self.work_lease_path();
        self.release_node(&path).await;
    }

    async fn acquire_lease(&self, id: &str) -> Result<()> {
        // The switch must exist (its record is the lease's parent).
        self.load(id).await?;
        let path = self.lease_path(id);
        let me = self.instance.as_bytes();
        match self.store.create(&path, me, CreateMode::EPHEMERAL).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => match self.read_node(&path).await? {
                Some(r) if r.value == me => Ok(()),
                Some(r) => Err(locked(
                    id,
                    format!("`{}`", String::from_utf8_lossy(&r.value)),
                )),
                // Released meanwhile: let the caller retry.
                None => Err(locked(id, "nobody any more (released)".to_owned())),
            },
            Err(e) => Err(OrchestratorError::metadata(format!("creating `{path}`"), e)),
        }
    }

    async fn release_lease(&self, id: &str) {
        self.release_node(&self.lease_path(id)).await;
    }

    /// Deletes a lease node if this instance holds it.
    async fn release_node(&self, path: &str) {
        if let Ok(Some(r)) = self.store.get(path).await {
            if r.value == self.instance.as_bytes() {
                let _ = self
                    .store
                    .delete(path, ExpectedVersion::Exactly(r.stat.version))
                    .await;
            }
        }
    }

    /// Fails when this coordinator no longer holds the switch's lease (its
    /// session expired and another coordinator may have taken over).
    async fn check_lease(&self, id: &str) -> Result<()> {
        match self.read_node(&self.lease_path(id)).await? {
            Some(r) if r.value == self.instance.as_bytes() => Ok(()),
            Some(r) => Err(locked(
                id,
                format!("`{}`", String::from_utf8_lossy(&r.value)),
            )),
            None => Err(locked(
                id,
                "nobody (this coordinator lost its lease)".to_owned(),
            )),
        }
    }

    /// Right before every deletion of a ledger: this coordinator still holds
    /// the switch's lease and the coordinator lease, read now. Both are
    /// ephemeral nodes of its metadata session, so a session that expired
    /// since they were taken (or a store it cannot reach) stops the deletion:
    /// nothing is deleted while the session is lost, and the work resumes on
    /// the next call once a session is back (as Pulsar pauses on
    /// `metadataServiceAvailable`).
    pub(super) async fn check_may_delete(&self, id: &str) -> Result<()> {
        self.check_lease(id).await?;
        let path = self.work_lease_path();
        match self.read_node(&path).await? {
            Some(r) if r.value == self.instance.as_bytes() => Ok(()),
            _ => Err(locked(
                id,
                format!(
                    "nobody (this coordinator lost `{path}`, its metadata session ended; \
                     nothing deleted)"
                ),
            )),
        }
    }
}

/// Releases the leases of an operation dropped before it ends.
struct LeaseGuard {
    records: Option<Arc<Records>>,
    /// The switch whose lease is held; `None`: the coordinator lease.
    id: Option<String>,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(o) = self.records.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let id = self.id.take();
            rt.spawn(async move {
                match id {
                    Some(id) => o.release_lease(&id).await,
                    None => o.release_work_lease().await,
                }
            });
        }
    }
}

fn locked(id: &str, holder: String) -> OrchestratorError {
    OrchestratorError::Locked {
        switch_id: format!("switch `{id}`"),
        holder,
    }
}

fn kept_changing(id: &str, what: &'static str, path: &str) -> OrchestratorError {
    OrchestratorError::Contended {
        switch_id: id.to_owned(),
        what,
        path: path.to_owned(),
    }
}

fn decode_json<T: DeserializeOwned>(path: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| OrchestratorError::corrupt_record(path, e))
}

fn encode_json<T: Serialize + ?Sized>(path: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| OrchestratorError::corrupt_record(path, e))
}

/// The counts and the first [`MAX_FAILURES_LISTED`] failures of a switch's
/// ledger records.
pub(super) fn summarize(records: &BTreeMap<String, SwitchLedgerRecord>) -> (Counts, Vec<Failure>) {
    let mut c = Counts::default();
    let mut failures = Vec::new();
    tally(&mut c, &mut failures, records);
    (c, failures)
}

/// Whether a child of `…/ledgers` is a bucket (a number) rather than a
/// record (`<kind>-<ledgerId>`).
fn is_bucket(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

/// Adds `records` to the counts and the listed failures.
pub(super) fn tally(
    c: &mut Counts,
    failures: &mut Vec<Failure>,
    records: &BTreeMap<String, SwitchLedgerRecord>,
) {
    for r in records.values() {
        c.to_build += 1;
        // Built = copied to the target; a ledger found obsolete before its copy
        // (rolled over or deleted since the scan) never was.
        let never_copied = r.state == SwitchLedgerState::Obsolete && !r.target_copy;
        if r.state != SwitchLedgerState::Failed && !never_copied {
            c.built += 1;
        }
        match r.state {
            SwitchLedgerState::Failed => {
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
            SwitchLedgerState::Obsolete => c.obsolete += 1,
            SwitchLedgerState::RolledBack => c.rolled_back += 1,
            SwitchLedgerState::Deleted => c.deleted += 1,
            SwitchLedgerState::Built
            | SwitchLedgerState::Promoted
            | SwitchLedgerState::RolledOver => {}
        }
        if r.was_promoted
            && matches!(
                r.state,
                SwitchLedgerState::Promoted | SwitchLedgerState::Deleted
            )
        {
            c.promoted += 1;
        }
        if r.rollover_ledger_id.is_some()
            && matches!(
                r.state,
                SwitchLedgerState::RolledOver | SwitchLedgerState::Deleted
            )
        {
            c.rollover_fallback += 1;
        }
    }
}
