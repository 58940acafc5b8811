//! The coordinator of topic moves: starts a plan (precheck first, nothing
//! written when refused), drives its batches phase by phase under a lease,
//! resumes after a crash, rolls back and aborts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
use bkswitch_topic_routes::{Change, PulsarCluster, RouteKey, TopicRoutes};

use crate::admin::{HttpAdmin, PulsarAdmin};
use crate::error::{Result, SwitchError};
use crate::precheck::{precheck, route_changes, PrecheckReport};
use crate::record::{now_ms, Batch, Evidence, Phase, Request, State, SwitchOptions, SwitchRecord};

mod ids;
mod phases;

pub use ids::{ids_clash, Clash};

/// Makes the admin client of a cluster.
pub trait AdminFactory: Send + Sync + std::fmt::Debug {
    /// The admin API of `cluster`.
    fn admin(&self, cluster: &PulsarCluster) -> Arc<dyn PulsarAdmin>;
}

/// [`HttpAdmin`] on each cluster's `adminUrl`.
#[derive(Debug, Clone)]
pub struct HttpAdmins {
    /// Timeout of each call.
    pub timeout: Duration,
}

impl AdminFactory for HttpAdmins {
    fn admin(&self, cluster: &PulsarCluster) -> Arc<dyn PulsarAdmin> {
        Arc::new(HttpAdmin::new(
            &cluster.name,
            &cluster.admin_url,
            self.timeout,
        ))
    }
}

/// Watches a batch while it soaks on its new cluster; a breach rolls it
/// back (with `autoRollback`).
#[async_trait]
pub trait SloProbe: Send + Sync + std::fmt::Debug {
    /// `Err(why)` when the batch breaches its objective.
    async fn check(
        &self,
        batch: &Batch,
        target: &dyn PulsarAdmin,
    ) -> std::result::Result<(), String>;
}

/// The default objective: every topic's clients came back on the new
/// cluster — a producer if it had producers, a consumer on every
/// subscription that had consumers.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientsReturned;

#[async_trait]
impl SloProbe for ClientsReturned {
    async fn check(
        &self,
        batch: &Batch,
        target: &dyn PulsarAdmin,
    ) -> std::result::Result<(), String> {
        for (topic, m) in &batch.topics {
            let Some(before) = &m.before else { continue };
            let now = target
                .stats(topic, m.partitions)
                .await
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            if before.producers > 0 && now.producers == 0 {
                return Err(format!(
                    "`{topic}` had producers and has none on the new cluster"
                ));
            }
            for (sub, _) in before.subscriptions.iter().filter(|(_, s)| s.consumers > 0) {
                if now.subscriptions.get(sub).is_none_or(|n| n.consumers == 0) {
                    return Err(format!(
                        "subscription `{sub}` of `{topic}` had consumers and has none on the new cluster"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A plan: batches of routes (topics, prefixes, namespaces), all moving to
/// one cluster, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The target cluster.
    pub to: String,
    /// The batches, each a list of route selectors.
    pub batches: Vec<Vec<String>>,
}

/// Drives topic moves on one routing table.
#[derive(Debug, Clone)]
pub struct TopicSwitcher {
    store: Arc<dyn MetadataStore>,
    routes: TopicRoutes,
    admins: Arc<dyn AdminFactory>,
    slo: Arc<dyn SloProbe>,
    owner: String,
    poll: Duration,
}

/// How often phases poll the clusters.
const POLL: Duration = Duration::from_millis(250);
/// How often a topic that still has clients on its old cluster is unloaded again.
const UNLOAD_AGAIN: Duration = Duration::from_secs(2);
/// How long a soak objective may stay breached before the batch fails
/// (clients reconnect after a back-off that can outlast the settle).
const SOAK_GRACE: Duration = Duration::from_secs(5);
/// The error of a batch the operator aborted.
const ABORTED: &str = "aborted by the operator";

enum Step {
    Next,
    Failed(String),
}

impl TopicSwitcher {
    /// A coordinator `owner` (its lease name) of the routes in `routes`,
    /// reaching the clusters' admin APIs over HTTP.
    pub fn new(store: Arc<dyn MetadataStore>, routes: TopicRoutes, owner: &str) -> TopicSwitcher {
        TopicSwitcher {
            store,
            routes,
            admins: Arc::new(HttpAdmins {
                timeout: Duration::from_secs(10),
            }),
            slo: Arc::new(ClientsReturned),
            owner: owner.to_owned(),
            poll: POLL,
        }
    }

    /// Uses `admins` to reach the clusters.
    pub fn with_admins(mut self, admins: Arc<dyn AdminFactory>) -> TopicSwitcher {
        self.admins = admins;
        self
    }

    /// Watches soaking batches with `slo`.
    pub fn with_slo(mut self, slo: Arc<dyn SloProbe>) -> TopicSwitcher {
        self.slo = slo;
        self
    }

    fn record_path(&self) -> String {
        format!("{}/switch", self.routes.root())
    }

    fn lease_path(&self) -> String {
        format!("{}/switch-lease", self.routes.root())
    }

    /// The plan and its node version, if one was ever started.
    ///
    /// # Errors
    /// [`SwitchError::Corrupt`], [`SwitchError::Metadata`].
    pub async fn read(&self) -> Result<Option<(SwitchRecord, i64)>> {
        let path = self.record_path();
        let Some(r) = self.store.get(&path).await? else {
            return Ok(None);
        };
        let rec = serde_json::from_slice(&r.value).map_err(|e| SwitchError::Corrupt {
            path,
            reason: e.to_string(),
        })?;
        Ok(Some((rec, r.stat.version)))
    }

    /// The plan, if one was ever started.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn status(&self) -> Result<Option<SwitchRecord>> {
        Ok(self.read().await?.map(|(r, _)| r))
    }

    async fn write(&self, rec: &mut SwitchRecord, version: Option<i64>) -> Result<i64> {
        rec.updated_at_ms = now_ms();
        let bytes = serde_json::to_vec(rec).map_err(|e| SwitchError::Corrupt {
            path: self.record_path(),
            reason: e.to_string(),
        })?;
        let expected = version.map_or(ExpectedVersion::NotExists, ExpectedVersion::Exactly);
        match self
            .store
            .put_version(&self.record_path(), &bytes, expected)
            .await
        {
            Ok(v) => Ok(v),
            Err(e) if e.is_conflict() => Err(SwitchError::LostOwnership { id: rec.id.clone() }),
            Err(e) => Err(e.into()),
        }
    }

    /// Checks every batch of `plan` against the clusters as they are now.
    ///
    /// # Errors
    /// [`SwitchError::Routes`], [`SwitchError::Metadata`].
    pub async fn precheck(
        &self,
        plan: &Plan,
        options: &SwitchOptions,
    ) -> Result<Vec<PrecheckReport>> {
        let table = self.routes.table().await?;
        let mut out = Vec::new();
        for batch in &plan.batches {
            out.push(
                precheck(
                    &table,
                    batch,
                    &plan.to,
                    options.max_replication_backlog,
                    &*self.admins,
                )
                .await,
            );
        }
        Ok(out)
    }

    /// Starts `plan` (it runs once [`run`](Self::run) is called): refused,
    /// with nothing written, while another plan runs or when any batch's
    /// precheck finds a problem.
    ///
    /// # Errors
    /// [`SwitchError::Invalid`], [`SwitchError::AlreadyRunning`],
    /// [`SwitchError::Refused`] with the reports, [`SwitchError::Metadata`].
    pub async fn start(
        &self,
        id: &str,
        plan: Plan,
        options: SwitchOptions,
    ) -> Result<SwitchRecord> {
        if id.is_empty() || id.contains('/') {
            return Err(SwitchError::Invalid(format!(
                "switch id `{id}`: give a non-empty id without `/`"
            )));
        }
        if plan.batches.is_empty() || plan.batches.iter().any(Vec::is_empty) {
            return Err(SwitchError::Invalid(
                "a plan needs at least one batch, and every batch at least one route".to_owned(),
            ));
        }
        for batch in &plan.batches {
            route_changes(batch, &plan.to).map_err(SwitchError::Invalid)?;
        }
        let existing = self.read().await?;
        if let Some((rec, _)) = &existing {
            if !rec.state.is_final() {
                return Err(SwitchError::AlreadyRunning {
                    id: rec.id.clone(),
                    state: rec.state,
                });
            }
        }
        let reports = self.precheck(&plan, &options).await?;
        if reports.iter().any(|r| !r.passed()) {
            return Err(SwitchError::Refused { reports });
        }
        let now = now_ms();
        let mut rec = SwitchRecord {
            id: id.to_owned(),
            to: plan.to,
            state: State::Running,
            batches: plan.batches.into_iter().map(Batch::new).collect(),
            options,
            request: None,
            rollback_requested: false,
            owner: None,
            created_at_ms: now,
            updated_at_ms: now,
        };
        self.write(&mut rec, existing.map(|(_, v)| v))
            .await
            .map_err(|e| match e {
                SwitchError::LostOwnership { .. } => SwitchError::AlreadyRunning {
                    id: "(started concurrently)".to_owned(),
                    state: State::Running,
                },
                e => e,
            })?;
        Ok(rec)
    }

    async fn request(&self, request: Request) -> Result<SwitchRecord> {
        loop {
            let Some((mut rec, version)) = self.read().await? else {
                return Err(SwitchError::NoSwitch);
            };
            match request {
                Request::Abort if rec.state.is_final() => {
                    return Err(SwitchError::Invalid(format!(
                        "switch `{}` is {:?}: there is nothing to abort",
                        rec.id, rec.state
                    )))
                }
                Request::Abort if rec.batches.iter().any(|b| b.phase.clients_moved()) => {
                    return Err(SwitchError::AbortRefused { id: rec.id })
                }
                Request::Rollback if matches!(rec.state, State::RolledBack | State::Aborted) => {
                    return Err(SwitchError::Invalid(format!(
                        "switch `{}` is {:?} already",
                        rec.id, rec.state
                    )))
                }
                _ => {}
            }
            rec.request = Some(request);
            // A finished plan runs again, backwards.
            if rec.state.is_final() {
                rec.state = State::Running;
            }
            match self.write(&mut rec, Some(version)).await {
                Ok(_) => return Ok(rec),
                Err(SwitchError::LostOwnership { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Asks for a rollback of every batch that moved (the running
    /// coordinator does it between two steps; after a finished or failed
    /// plan, the next [`run`](Self::run)).
    ///
    /// # Errors
    /// [`SwitchError::NoSwitch`], [`SwitchError::Invalid`] when already
    /// rolled back or aborted, [`SwitchError::Metadata`].
    pub async fn rollback(&self) -> Result<SwitchRecord> {
        self.request(Request::Rollback).await
    }

    /// Asks for an abort: refused once any client may have moved.
    ///
    /// # Errors
    /// [`SwitchError::AbortRefused`], [`SwitchError::NoSwitch`],
    /// [`SwitchError::Invalid`], [`SwitchError::Metadata`].
    pub async fn abort(&self) -> Result<SwitchRecord> {
        self.request(Request::Abort).await
    }

    /// Takes the lease and drives the plan until it is final (done, rolled
    /// back, aborted, failed). Run it again (here or in another process)
    /// to resume after a crash: every phase checks what is already done.
    ///
    /// # Errors
    /// [`SwitchError::LeaseHeld`] while another coordinator drives it,
    /// [`SwitchError::NoSwitch`], [`SwitchError::LostOwnership`],
    /// [`SwitchError::Metadata`], [`SwitchError::Routes`].
    pub async fn run(&self) -> Result<SwitchRecord> {
        let lease = serde_json::json!({ "owner": self.owner, "since": now_ms() }).to_string();
        match self
            .store
            .create(&self.lease_path(), lease.as_bytes(), CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let owner = self
                    .store
                    .get(&self.lease_path())
                    .await?
                    .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r.value).ok())
                    .and_then(|v| v["owner"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                return Err(SwitchError::LeaseHeld { owner });
            }
            Err(e) => return Err(e.into()),
        }
        let result = self.drive().await;
        let _ = self
            .store
            .delete(&self.lease_path(), ExpectedVersion::Any)
            .await;
        result
    }

    async fn drive(&self) -> Result<SwitchRecord> {
        loop {
            let (mut rec, version) = self.read().await?.ok_or(SwitchError::NoSwitch)?;
            if rec.state.is_final() {
                return Ok(rec);
            }
            if rec.owner.as_deref() != Some(self.owner.as_str()) {
                rec.owner = Some(self.owner.clone());
                self.write(&mut rec, Some(version)).await?;
                continue;
            }
            if self.apply_request(&mut rec) {
                self.write(&mut rec, Some(version)).await?;
                continue;
            }
            let rolling_back = rec.batches.iter().any(|b| is_rollback(b.phase));
            // A batch that failed and was rolled back by itself stops the
            // plan: the batches after it do not start.
            let auto_rolled_back = rec
                .batches
                .iter()
                .any(|b| b.phase == Phase::RolledBack && b.error.is_some());
            if !rolling_back && auto_rolled_back && rec.current().is_some() {
                rec.state = State::Failed;
                self.write(&mut rec, Some(version)).await?;
                return Ok(rec);
            }
            let index = if rolling_back {
                rec.batches.iter().rposition(|b| is_rollback(b.phase))
            } else {
                rec.current()
            };
            let Some(i) = index else {
                rec.state = final_state(&rec);
                self.write(&mut rec, Some(version)).await?;
                return Ok(rec);
            };
            let phase = rec.batches[i].phase;
            let step = self.step(&mut rec, i).await?;
            if let Step::Failed(why) = step {
                tracing::warn!(switch = %rec.id, batch = i, ?phase, %why, "batch failed");
                let batch = &mut rec.batches[i];
                batch.error = Some(why.clone());
                let recovering = is_rollback(phase) || phase == Phase::Pending;
                if rec.options.auto_rollback && !recovering {
                    batch.phase = Phase::RollbackRedirect;
                    evidence(batch, phase, format!("failed, rolling back: {why}"));
                } else {
                    rec.state = State::Failed;
                }
            }
            self.write(&mut rec, Some(version)).await?;
        }
    }

    /// Turns a pending operator request into phases; `true` when it changed
    /// the record.
    fn apply_request(&self, rec: &mut SwitchRecord) -> bool {
        match rec.request.take() {
            None => false,
            Some(Request::Abort) => {
                if rec.batches.iter().any(|b| b.phase.clients_moved()) {
                    // Too late: clients moved between the request and now.
                    rec.batches.iter_mut().for_each(|b| {
                        if b.phase.clients_moved() && !b.phase.is_final() {
                            evidence(
                                b,
                                b.phase,
                                "abort refused: clients had moved; roll back instead".to_owned(),
                            );
                        }
                    });
                } else {
                    for b in &mut rec.batches {
                        // Routes already changed go back through the
                        // rollback's first phase, which ends in Aborted.
                        b.phase = if b.phase == Phase::Redirect {
                            Phase::RollbackRedirect
                        } else {
                            Phase::Aborted
                        };
                        b.error.get_or_insert_with(|| ABORTED.to_owned());
                    }
                }
                true
            }
            Some(Request::Rollback) => {
                rec.rollback_requested = true;
                for b in &mut rec.batches {
                    b.phase = match b.phase {
                        Phase::Pending => Phase::RolledBack,
                        Phase::Redirect
                        | Phase::Evict
                        | Phase::Settle
                        | Phase::Soak
                        | Phase::Done => Phase::RollbackRedirect,
                        p => p,
                    };
                }
                true
            }
        }
    }

    async fn step(&self, rec: &mut SwitchRecord, i: usize) -> Result<Step> {
        let to = rec.to.clone();
        let options = rec.options.clone();
        let aborting = rec.batches[i].error.as_deref() == Some(ABORTED);
        let batch = &mut rec.batches[i];
        let phase = batch.phase;
        match phase {
            Phase::Pending => {
                let table = self.routes.table().await?;
                let report = precheck(
                    &table,
                    &batch.routes,
                    &to,
                    options.max_replication_backlog,
                    &*self.admins,
                )
                .await;
                if !report.passed() {
                    return Ok(Step::Failed(format!(
                        "precheck refused: {}",
                        report.problems.join("; ")
                    )));
                }
                batch.previous = report.previous;
                batch.topics = report.topics;
                batch.started_at_ms = Some(now_ms());
                evidence(
                    batch,
                    phase,
                    format!("precheck passed: {} topics move", batch.topics.len()),
                );
                // Before any route changes: nobody is attached where the
                // clients go, so its ledger can be rolled.
                let deadline = Duration::from_millis(options.evict_timeout_ms);
                if let Err(why) = self.separate_ids(batch, false, &to, deadline).await? {
                    return Ok(Step::Failed(format!("refused before anybody moved: {why}")));
                }
                batch.phase = Phase::Redirect;
            }
            Phase::Redirect | Phase::RollbackRedirect => {
                if phase == Phase::RollbackRedirect {
                    // Before the routes lead back: clients that went carry
                    // the new cluster's message ids (a topic nobody moved
                    // to yet is skipped). Refused, they stay where they are.
                    let deadline = Duration::from_millis(options.evict_timeout_ms);
                    if let Err(why) = self.separate_ids(batch, true, &to, deadline).await? {
                        return Ok(Step::Failed(format!(
                            "the rollback is refused, the clients stay on `{to}`: {why}"
                        )));
                    }
                }
                let changes: Vec<Change> = if phase == Phase::Redirect {
                    route_changes(&batch.routes, &to)
                        .map_err(SwitchError::Invalid)?
                        .into_iter()
                        .map(|(_, c)| c)
                        .collect()
                } else {
                    restore_changes(batch)?
                };
                let table = self.routes.table().await?;
                let needed: Vec<Change> = changes
                    .into_iter()
                    .filter(|c| !already(&table, c))
                    .collect();
                let version = if needed.is_empty() {
                    table.version
                } else {
                    self.routes.apply(&needed).await?.version
                };
                batch.table_version = Some(version);
                let started = Instant::now();
                if let Err(e) = self
                    .routes
                    .wait_acknowledged(version, Duration::from_millis(options.barrier_timeout_ms))
                    .await
                {
                    return Ok(Step::Failed(e.to_string()));
                }
                evidence(
                    batch,
                    phase,
                    format!(
                        "routing table version {version} acknowledged by every live proxy in {} ms",
                        started.elapsed().as_millis()
                    ),
                );
                batch.phase = if phase == Phase::Redirect {
                    Phase::Evict
                } else if aborting {
                    batch.finished_at_ms = Some(now_ms());
                    Phase::Aborted
                } else {
                    Phase::RollbackEvict
                };
            }
            Phase::Evict | Phase::RollbackEvict => {
                let deadline = Duration::from_millis(options.evict_timeout_ms);
                if let Err(why) = self
                    .evict(batch, phase == Phase::RollbackEvict, &to, deadline)
                    .await?
                {
                    return Ok(Step::Failed(why));
                }
                batch.phase = if phase == Phase::Evict {
                    Phase::Settle
                } else {
                    Phase::RollbackSettle
                };
            }
            Phase::Settle | Phase::RollbackSettle => {
                let deadline = Duration::from_millis(options.settle_timeout_ms);
                if let Err(why) = self
                    .settle(batch, phase == Phase::RollbackSettle, &to, deadline)
                    .await?
                {
                    return Ok(Step::Failed(why));
                }
                batch.phase = match phase {
                    Phase::Settle if options.soak_ms > 0 => Phase::Soak,
                    Phase::Settle => Phase::Done,
                    _ => Phase::RolledBack,
                };
                if batch.phase.is_final() {
                    batch.finished_at_ms = Some(now_ms());
                }
            }
            Phase::Soak => {
                let target = self.admin_of(&to).await?;
                let until = Instant::now() + Duration::from_millis(options.soak_ms);
                // A breach counts once it lasted `SOAK_GRACE`: clients come
                // back on the new cluster after their reconnect back-off,
                // which may end after the soak began.
                let mut breach: Option<Instant> = None;
                loop {
                    match self.slo.check(batch, &*target).await {
                        Ok(()) => breach = None,
                        Err(why) => {
                            let since = *breach.get_or_insert_with(Instant::now);
                            if since.elapsed() >= SOAK_GRACE {
                                return Ok(Step::Failed(format!(
                                    "objective breached while soaking: {why}"
                                )));
                            }
                        }
                    }
                    if Instant::now() >= until && breach.is_none() {
                        break;
                    }
                    tokio::time::sleep(self.poll.max(Duration::from_millis(500))).await;
                }
                evidence(
                    batch,
                    phase,
                    format!("soaked {} ms within its objective", options.soak_ms),
                );
                batch.phase = Phase::Done;
                batch.finished_at_ms = Some(now_ms());
            }
            Phase::Done | Phase::RolledBack | Phase::Aborted => {}
        }
        Ok(Step::Next)
    }

    async fn admin_of(&self, cluster: &str) -> Result<Arc<dyn PulsarAdmin>> {
        let table = self.routes.table().await?;
        let c = table.clusters.get(cluster).ok_or_else(|| {
            SwitchError::Invalid(format!("cluster `{cluster}` is no longer registered"))
        })?;
        Ok(self.admins.admin(c))
    }
}

fn is_rollback(p: Phase) -> bool {
    matches!(
        p,
        Phase::RollbackRedirect | Phase::RollbackEvict | Phase::RollbackSettle
    )
}

fn final_state(rec: &SwitchRecord) -> State {
    if rec.batches.iter().all(|b| b.phase == Phase::Aborted) {
        State::Aborted
    } else if rec.batches.iter().all(|b| b.phase == Phase::Done) {
        State::Done
    } else if rec.rollback_requested
        && rec
            .batches
            .iter()
            .all(|b| matches!(b.phase, Phase::RolledBack | Phase::Aborted))
    {
        State::RolledBack
    } else {
        State::Failed
    }
}

/// Each topic of a batch with the cluster its clients leave and the one
/// they go to (`back`: a rollback, from `to` to where they came from), and
/// its partition count.
fn sides(batch: &Batch, back: bool, to: &str) -> Vec<(String, String, String, u32)> {
    batch
        .topics
        .iter()
        .map(|(t, m)| {
            let (leave, go) = if back {
                (to.to_owned(), m.from.clone())
            } else {
                (m.from.clone(), to.to_owned())
            };
            (t.clone(), leave, go, m.partitions)
        })
        .collect()
}

fn evidence(batch: &mut Batch, phase: Phase, note: String) {
    batch.evidence.push(Evidence {
        at_ms: now_ms(),
        phase,
        note,
        data: serde_json::Value::Null,
    });
}

/// The changes that put a batch's routes back as they were.
fn restore_changes(batch: &Batch) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    for route in &batch.routes {
        let key: RouteKey = route.parse()?;
        match batch.previous.get(route).cloned().flatten() {
            Some(cluster) => out.push(Change::SetRoute(key, cluster)),
            None => out.push(Change::RemoveRoute(key)),
        }
    }
    Ok(out)
}

/// Whether `change` would change nothing in `table`.
fn already(table: &bkswitch_topic_routes::RoutingTable, change: &Change) -> bool {
    match change {
        Change::SetRoute(k, c) => table.routes.get(&k.to_string()) == Some(c),
        Change::RemoveRoute(k) => !table.routes.contains_key(&k.to_string()),
        _ => false,
    }
}
