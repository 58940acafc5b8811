//! [`Coordinator`]: drives one migration over the source and target stores.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_metadata_store::{
    ErrorKind, ExpectedVersion, MetadataError, MetadataStore, MetadataStoreExt, Operation, Result,
};

use crate::dirty::DirtyPage;
use crate::fence::{Fence, FencedTarget, TrackedSource};
use crate::opener::StoreOpener;
use crate::record::{
    corrupt, dirty_path, joined_path, read_current, record_path, write_record, MigrationRecord,
    ParticipantAck, Phase, CURRENT_PATH, PARTICIPANTS_PATH,
};
use crate::sync::{
    compare_node, skipped, sync_batch, sync_paths, sync_tree, verify_tree, versions_by_writes,
    Walk, BATCH,
};
use crate::target::{refused, ProtectedRoot};

/// What to migrate.
#[derive(Debug, Clone)]
pub struct MigrationRequest {
    /// Migration id (a path segment); default: a random UUID.
    pub id: Option<String>,
    /// URL of the source store (recorded; participants use it to recognise
    /// their store).
    pub source_url: String,
    /// URL of the target store.
    pub target_url: String,
    /// Confirms a wipe of a non-empty target: the target's root as the
    /// store names it (`/`, `/pulsar`), equal to
    /// [`TargetPlan::root`](crate::TargetPlan::root). `None`: a non-empty
    /// target is refused. A wipe never deletes what the migration does not
    /// own (see [`TargetPlan::check_wipe`](crate::TargetPlan::check_wipe)).
    pub wipe_target: Option<String>,
    /// Roots that belong to others (the metadata roots of the registered
    /// bookie clusters): a target that is, holds or lies inside one is
    /// refused.
    pub protected: Vec<ProtectedRoot>,
}

/// Settings of the [`Coordinator`].
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// How long every participant has to acknowledge a request (tracking,
    /// a catch-up round, the pause); one that does not fails the migration
    /// and writes resume on the source. Default 10 s.
    pub ack_timeout: Duration,
    /// Nodes copied per [`Coordinator::step`] in COPYING (the record's cursor
    /// is written after each page). Default 1,000.
    pub page_size: usize,
    /// The pause starts once a catch-up round found at most this many dirty
    /// paths. Default 1,000.
    pub pause_threshold: usize,
    /// The pause starts after this many catch-up rounds whatever their size.
    /// Default 10.
    pub max_catch_up_rounds: u64,
    /// How often acknowledgements are polled. Default 20 ms.
    pub poll_interval: Duration,
}

impl Default for CoordinatorOptions {
    fn default() -> Self {
        CoordinatorOptions {
            ack_timeout: Duration::from_secs(10),
            page_size: 1_000,
            pause_threshold: 1_000,
            max_catch_up_rounds: 10,
            poll_interval: Duration::from_millis(20),
        }
    }
}

/// Drives one migration: PREPARATION → COPYING → CATCH_UP → PAUSED →
/// COMPLETED (or FAILED / ABORTED). All its state is the record in the
/// source store: a coordinator that stops (crash, drop) is replaced by
/// [`Coordinator::resume`], which continues where the record says.
#[derive(Debug)]
pub struct Coordinator {
    /// The source, each call remembered by the fence ([`TrackedSource`]).
    source: Arc<dyn MetadataStore>,
    /// The target, written only while this coordinator holds the fencing
    /// token ([`FencedTarget`]).
    target: Arc<dyn MetadataStore>,
    record: MigrationRecord,
    version: i64,
    options: CoordinatorOptions,
    walk: Option<Walk>,
    /// Differences found by the verification, to be explained by the next
    /// round's dirty paths.
    suspects: Option<Vec<(String, String)>>,
    pause_started: Option<Instant>,
    peak_walk: usize,
}

impl Coordinator {
    /// The coordinator of a migration just recorded (see
    /// [`StartPlan::start`](crate::StartPlan::start)).
    pub(crate) async fn begin(
        source: Arc<dyn MetadataStore>,
        target: Arc<dyn MetadataStore>,
        record: MigrationRecord,
        version: i64,
        options: CoordinatorOptions,
    ) -> Result<Coordinator> {
        let (source, target) = fenced(source, target, &record.id).await?;
        Ok(Coordinator {
            source,
            target,
            record,
            version,
            options,
            walk: None,
            suspects: None,
            pause_started: None,
            peak_walk: 0,
        })
    }

    /// Takes over the current migration from its record (after the previous
    /// coordinator stopped); `None` when no migration is running.
    ///
    /// # Errors
    ///
    /// Errors of the stores and the opener.
    pub async fn resume(
        source: Arc<dyn MetadataStore>,
        opener: &dyn StoreOpener,
        options: CoordinatorOptions,
    ) -> Result<Option<Coordinator>> {
        let Some((record, version)) = read_current(source.as_ref()).await? else {
            return Ok(None);
        };
        if record.phase.is_terminal() {
            return Ok(None);
        }
        let target = opener.open(&record.target_url).await?;
        let (source, target) = fenced(source, target, &record.id).await?;
        let mut c = Coordinator {
            source,
            target,
            record,
            version,
            options,
            walk: None,
            suspects: None,
            pause_started: None,
            peak_walk: 0,
        };
        // What was verified before the stop cannot be trusted to the round
        // that would have explained its differences: verify again.
        if c.record.verified && c.record.phase == Phase::CatchUp {
            c.record.verified = false;
        }
        if c.record.phase == Phase::Paused {
            c.pause_started = Some(Instant::now());
        }
        Ok(Some(c))
    }

    fn by_writes(&self) -> bool {
        versions_by_writes(&self.record.target_url)
    }

    /// The record as last written.
    pub fn record(&self) -> &MigrationRecord {
        &self.record
    }

    /// Most children names the copy's walk held at once (its memory).
    pub fn peak_walk_names(&self) -> usize {
        self.peak_walk
    }

    async fn save(&mut self) -> Result<()> {
        let stat = write_record(self.source.as_ref(), &mut self.record, self.version)
            .await
            .map_err(|e| {
                if e.kind() == ErrorKind::BadVersion {
                    MetadataError::BadVersion {
                        op: Operation::Put,
                        path: format!(
                            "{} (the migration record was changed by someone else: aborted, \
                             or another coordinator took over; this one stops)",
                            record_path(&self.record.id)
                        ),
                        expected: self.version,
                    }
                } else {
                    e
                }
            })?;
        self.version = stat.version;
        Ok(())
    }

    /// Refuses to go on when the record changed since this coordinator
    /// wrote or read it (aborted, or another coordinator took over and
    /// maybe flipped): checked before every step writes anything to the
    /// target (and the writes within a step are fenced, [`FencedTarget`]),
    /// so that a coordinator that lost the record never copies an old value
    /// of the source over a newer one written in the target after the
    /// flip.
    async fn check_record(&self) -> Result<()> {
        let path = record_path(&self.record.id);
        match self.source.get(&path).await? {
            Some(r) if r.stat.version == self.version => Ok(()),
            _ => Err(MetadataError::BadVersion {
                op: Operation::Get,
                path: format!(
                    "{path} (the migration record was changed by someone else: aborted, or \
                     another coordinator took over; this one stops before writing)"
                ),
                expected: self.version,
            }),
        }
    }

    async fn fail(&mut self, reason: String) -> Result<Phase> {
        tracing::warn!("metadata migration {} failed: {reason}", self.record.id);
        self.record.phase = Phase::Failed;
        self.record.error = Some(reason);
        self.save().await?;
        self.cleanup().await;
        Ok(Phase::Failed)
    }

    async fn cleanup(&self) {
        Fence::remove(self.source.as_ref(), &self.record.id).await;
        let _ = self
            .source
            .delete_recursive(&dirty_path(&self.record.id))
            .await;
        let _ = self
            .source
            .delete_recursive(&joined_path(&self.record.id))
            .await;
    }

    /// Runs [`step`](Self::step) until the migration ends; returns the final
    /// record.
    ///
    /// # Errors
    ///
    /// Errors of the stores (the record keeps the phase reached: resume it).
    pub async fn run(&mut self) -> Result<MigrationRecord> {
        while !self.step().await?.is_terminal() {}
        Ok(self.record.clone())
    }

    /// Does one bounded unit of work (wait for acknowledgements, copy one
    /// page, one catch-up round, the pause and flip), writes the record and
    /// returns the phase reached.
    ///
    /// # Errors
    ///
    /// Errors of the stores; `BadVersion` when the record was changed by
    /// someone else (aborted, or another coordinator).
    pub async fn step(&mut self) -> Result<Phase> {
        if !self.record.phase.is_terminal() {
            self.check_record().await?;
        }
        match self.record.phase {
            Phase::Preparation => {
                if let Err(lagging) = self.wait_acks(false).await? {
                    return self
                        .fail(format!(
                            "participants {lagging} did not acknowledge tracking within {:?}; \
                             writes were never paused. Check those nodes (or raise the ack \
                             timeout) and start again",
                            self.options.ack_timeout
                        ))
                        .await;
                }
                self.record.phase = Phase::Copying;
                self.save().await?;
            }
            Phase::Copying => self.copy_page().await?,
            Phase::CatchUp => return self.catch_up().await,
            Phase::Paused => return self.pause().await,
            _ => {}
        }
        Ok(self.record.phase)
    }

    async fn copy_page(&mut self) -> Result<()> {
        if self.walk.is_none() {
            self.walk = Some(
                Walk::new(
                    self.source.as_ref(),
                    self.target.as_ref(),
                    "/",
                    self.record.copy_cursor.as_deref(),
                )
                .await?,
            );
        }
        let by_writes = self.by_writes();
        let mut walk = self.walk.take().expect("walk");
        let mut done = 0;
        let mut finished = false;
        let start = self.record.copy_cursor.clone();
        // A page ends once it copied its size and moved the cursor: a
        // coordinator that dies after every page still makes progress.
        while done < self.options.page_size || self.record.copy_cursor == start {
            let max = BATCH.min(self.options.page_size.saturating_sub(done).max(1));
            let batch = walk
                .next_siblings(self.source.as_ref(), self.target.as_ref(), max)
                .await?;
            if batch.is_empty() {
                finished = true;
                break;
            }
            if done > 0 {
                // The step checked the record before the first batch; the
                // others check it too, so that a coordinator that lost the
                // lead stops within one batch (an error drops the walk: the
                // next step rebuilds it from the cursor).
                self.check_record().await?;
            }
            let parents = sync_batch(
                &mut walk,
                self.source.as_ref(),
                self.target.as_ref(),
                &batch,
                by_writes,
            )
            .await?;
            self.peak_walk = self.peak_walk.max(walk.held());
            // The cursor says "everything up to here is copied": it moves to
            // the last of the batch only when no node of the batch has a
            // subtree still to walk, else to the node before the first that
            // has one (a resumed walk copies the rest of the batch again,
            // which changes nothing).
            match parents.iter().position(|p| *p) {
                None => self.record.copy_cursor = batch.last().cloned(),
                Some(0) => {}
                Some(i) => self.record.copy_cursor = Some(batch[i - 1].clone()),
            }
            done += batch.len();
        }
        if !finished {
            self.walk = Some(walk);
        }
        self.record.copied += done as u64;
        if finished {
            self.record.phase = Phase::CatchUp;
            self.record.round += 1;
        }
        self.save().await
    }

    /// Waits until every live participant acknowledged the current request.
    /// `Err(names)` when some did not in time.
    ///
    /// Not waited for: a participant whose registration is gone (its
    /// session ended: it refuses writes until it registered again, and is
    /// waited for from then on), and one superseded by a later registration
    /// of the same node (a restarted process: the old one is gone). Both
    /// are covered by one re-scan instead (see [`collect`](Self::collect)).
    /// In the pause (`paused`) an acknowledgement must also say PAUSED.
    async fn wait_acks(&self, paused: bool) -> Result<std::result::Result<(), String>> {
        let deadline = Instant::now() + self.options.ack_timeout;
        loop {
            let mut lagging = Vec::new();
            for p in self.live_participants().await? {
                if p.superseded {
                    continue;
                }
                let ok = p.ack.migration.as_deref() == Some(self.record.id.as_str())
                    && p.ack.round >= self.record.round
                    && (!paused || p.ack.phase == Some(Phase::Paused));
                if !ok {
                    lagging.push(p.name);
                }
            }
            if lagging.is_empty() {
                return Ok(Ok(()));
            }
            if Instant::now() >= deadline {
                return Ok(Err(lagging.join(", ")));
            }
            tokio::time::sleep(self.options.poll_interval).await;
        }
    }

    /// The registered participants, with what they acknowledged and whether
    /// a later registration of the same node supersedes them.
    async fn live_participants(&self) -> Result<Vec<LiveParticipant>> {
        let mut live = Vec::new();
        for name in self.source.children(PARTICIPANTS_PATH).await? {
            let path = format!("{PARTICIPANTS_PATH}/{name}");
            let Some(r) = self.source.get(&path).await? else {
                continue;
            };
            // A node that is not an acknowledgement (yet) counts as not
            // acknowledged.
            let ack: ParticipantAck = serde_json::from_slice(&r.value).unwrap_or_default();
            live.push(LiveParticipant {
                name,
                ack,
                created_ms: r.stat.created_ms,
                superseded: false,
            });
        }
        let latest: Vec<(String, i64)> = live
            .iter()
            .filter_map(|p| p.ack.node.clone().map(|n| (n, p.created_ms)))
            .collect();
        for p in &mut live {
            if let Some(node) = &p.ack.node {
                p.superseded = latest
                    .iter()
                    .any(|(n, created)| n == node && *created > p.created_ms);
            }
        }
        Ok(live)
    }

    /// Reads the published dirty pages; `true` in the second field when a
    /// re-scan is needed (overflow, or a participant that joined and is not
    /// registered or was superseded: it left without publishing, or its
    /// session ended, or its process was restarted). The pages are deleted
    /// by [`Collected::done`] once handled, so a coordinator that stops
    /// before that finds them again; so are the joined markers of the
    /// participants that caused the re-scan (one re-scan after they left
    /// covers every write they made; one that registers again joins again).
    async fn collect(&self) -> Result<(BTreeSet<String>, bool, Collected)> {
        let id = &self.record.id;
        let mut rescan = false;
        // Markers first, then the live participants (see the crate docs).
        let joined_base = joined_path(id);
        let joined = self.source.children(&joined_base).await?;
        let live: Vec<LiveParticipant> = self.live_participants().await?;
        let base = dirty_path(id);
        let mut dirty = BTreeSet::new();
        let mut handled = Collected::default();
        for page in self.source.children(&base).await? {
            let path = format!("{base}/{page}");
            let Some(r) = self.source.get(&path).await? else {
                continue;
            };
            let page: DirtyPage = serde_json::from_slice(&r.value)
                .map_err(|e| corrupt(&path, "page of dirty paths", e))?;
            rescan |= page.overflow;
            dirty.extend(page.paths);
            handled.nodes.push((path, None));
        }
        for name in joined {
            let gone = match live.iter().find(|p| p.name == name) {
                None => {
                    "is not registered (left without publishing its changes, or its \
                         session ended)"
                }
                Some(p) if p.superseded => {
                    "was superseded by a later registration of its node (restarted)"
                }
                Some(_) => continue,
            };
            tracing::warn!(
                "metadata migration {id}: participant {name} joined and {gone}; re-scanning \
                 the whole tree once"
            );
            rescan = true;
            let marker = format!("{joined_base}/{name}");
            if let Some(stat) = self.source.exists(&marker).await? {
                handled.nodes.push((marker, Some(stat.version)));
            }
        }
        Ok((dirty, rescan, handled))
    }

    async fn catch_up(&mut self) -> Result<Phase> {
        if let Err(lagging) = self.wait_acks(false).await? {
            return self
                .fail(format!(
                    "participants {lagging} did not publish their changes of round {} \
                     within {:?}; writes were never paused",
                    self.record.round, self.options.ack_timeout
                ))
                .await;
        }
        let (dirty, rescan, handled) = self.collect().await?;
        tracing::info!(
            "metadata migration {}: round {} acknowledged, {} dirty paths",
            self.record.id,
            self.record.round,
            dirty.len()
        );
        let (src, tgt) = (self.source.as_ref(), self.target.as_ref());
        let by_writes = self.by_writes();
        if rescan {
            sync_tree(src, tgt, by_writes).await?;
            self.record.rescans += 1;
            self.record.verified = false;
            self.suspects = None;
        }
        let paths: Vec<String> = dirty.iter().cloned().collect();
        self.record.caught_up += sync_paths(src, tgt, &paths, by_writes).await?;
        handled.done(src).await?;
        if let Some(suspects) = self.suspects.take() {
            let unexplained: Vec<_> = suspects
                .into_iter()
                .filter(|(p, _)| !dirty.contains(p))
                .collect();
            if !unexplained.is_empty() {
                let list: Vec<String> = unexplained
                    .iter()
                    .take(10)
                    .map(|(p, r)| format!("{p}: {r}"))
                    .collect();
                return self
                    .fail(format!(
                        "verification found nodes that differ between the source and the \
                         target although nobody wrote them: {}; the target was not used \
                         and writes go on in the source",
                        list.join("; ")
                    ))
                    .await;
            }
            self.record.verified = true;
        } else if !self.record.verified {
            // Compare everything; what differs must be explained by the next
            // round (a write meanwhile), or the flip is refused.
            let (diffs, _) = verify_tree(src, tgt, 10_000).await?;
            let paths: Vec<String> = diffs.iter().map(|(p, _)| p.clone()).collect();
            sync_paths(src, tgt, &paths, by_writes).await?;
            if diffs.is_empty() {
                self.record.verified = true;
            } else {
                self.suspects = Some(diffs);
            }
        }
        tracing::info!(
            "metadata migration {}: round {} copied {} dirty paths again (re-scan: {rescan}, \
             verified: {})",
            self.record.id,
            self.record.round,
            dirty.len(),
            self.record.verified
        );
        let rounds_done = self.record.round;
        if self.record.verified
            && (dirty.len() <= self.options.pause_threshold
                || rounds_done >= self.options.max_catch_up_rounds)
        {
            self.record.phase = Phase::Paused;
            self.pause_started = Some(Instant::now());
        }
        self.record.round += 1;
        self.save().await?;
        Ok(self.record.phase)
    }

    async fn pause(&mut self) -> Result<Phase> {
        let started = *self.pause_started.get_or_insert_with(Instant::now);
        if let Err(lagging) = self.wait_acks(true).await? {
            return self
                .fail(format!(
                    "participants {lagging} did not close their write gate within {:?}; \
                     writes resume on the source",
                    self.options.ack_timeout
                ))
                .await;
        }
        let (dirty, rescan, collected) = self.collect().await?;
        let (src, tgt) = (self.source.as_ref(), self.target.as_ref());
        let by_writes = self.by_writes();
        let mut handled = 0;
        if rescan {
            tracing::warn!(
                "metadata migration {}: a full re-scan in the pause (a participant \
                 overflowed or left); the pause grows with the tree this time",
                self.record.id
            );
            handled += sync_tree(src, tgt, by_writes).await?;
            self.record.rescans += 1;
            let (diffs, compared) = verify_tree(src, tgt, 10).await?;
            handled += compared;
            if !diffs.is_empty() {
                return self.refuse_flip(diffs).await;
            }
        }
        let paths: Vec<String> = dirty.iter().filter(|p| !skipped(p)).cloned().collect();
        handled += sync_paths(src, tgt, &paths, by_writes).await?;
        let mut diffs = Vec::new();
        for path in &paths {
            if let Some(reason) = compare_node(src, tgt, path).await? {
                diffs.push((path.clone(), reason));
            }
        }
        if !diffs.is_empty() {
            return self.refuse_flip(diffs).await;
        }
        collected.done(src).await?;
        // The target may hold the pointer of an earlier migration away from
        // it (kept by the wipe, so that a node started with the target's
        // URL meanwhile followed it here): gone before the flip, so that
        // nobody follows it back once the target is the store in use.
        match tgt.delete(CURRENT_PATH, ExpectedVersion::Any).await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.record.pause_nodes = handled;
        self.record.caught_up += handled;
        self.record.pause_ms = started.elapsed().as_millis() as u64;
        self.record.phase = Phase::Completed;
        self.save().await?;
        self.cleanup().await;
        tracing::info!(
            "metadata migration {} completed: {} → {}, pause {} ms over {} nodes",
            self.record.id,
            self.record.source_url,
            self.record.target_url,
            self.record.pause_ms,
            handled
        );
        Ok(Phase::Completed)
    }

    async fn refuse_flip(&mut self, diffs: Vec<(String, String)>) -> Result<Phase> {
        let list: Vec<String> = diffs
            .iter()
            .take(10)
            .map(|(p, r)| format!("{p}: {r}"))
            .collect();
        self.fail(format!(
            "verification in the pause found differences, the flip is refused: {}; writes \
             resume on the source",
            list.join("; ")
        ))
        .await
    }
}

/// `source` and `target` as a coordinator of migration `id` uses them,
/// with a fencing token claimed (see [`crate::fence`]).
async fn fenced(
    source: Arc<dyn MetadataStore>,
    target: Arc<dyn MetadataStore>,
    id: &str,
) -> Result<(Arc<dyn MetadataStore>, Arc<dyn MetadataStore>)> {
    let fence = Fence::claim(source.clone(), id).await?;
    Ok((
        Arc::new(TrackedSource::new(source, fence.clone())),
        Arc::new(FencedTarget::new(target, fence)),
    ))
}

/// A registered participant as the coordinator reads it.
#[derive(Debug)]
struct LiveParticipant {
    name: String,
    ack: ParticipantAck,
    created_ms: i64,
    /// A later registration of the same node exists.
    superseded: bool,
}

/// Control nodes read by a collection, deleted once their paths are copied
/// (a joined marker only at the version read: one written again meanwhile
/// belongs to a participant that came back).
#[derive(Debug, Default)]
struct Collected {
    nodes: Vec<(String, Option<i64>)>,
}

impl Collected {
    async fn done(self, source: &dyn MetadataStore) -> Result<()> {
        for (path, version) in self.nodes {
            let expected = version.map_or(ExpectedVersion::Any, ExpectedVersion::Exactly);
            match source.delete(&path, expected).await {
                Ok(()) => {}
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::BadVersion) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Aborts the current migration (any phase before COMPLETED): writes resume
/// on the source. Returns the aborted record.
///
/// # Errors
///
/// `InvalidArgument` when no migration is running or it has already ended;
/// errors of the store (a `BadVersion` means the record changed meanwhile:
/// read it and retry).
pub async fn abort(source: &dyn MetadataStore, reason: &str) -> Result<MigrationRecord> {
    let Some((mut rec, version)) = read_current(source).await? else {
        return Err(refused(
            CURRENT_PATH,
            "no metadata migration to abort".to_owned(),
        ));
    };
    if rec.phase.is_terminal() {
        return Err(refused(
            &record_path(&rec.id),
            format!(
                "migration {} has already ended ({:?}); nothing to abort",
                rec.id, rec.phase
            ),
        ));
    }
    rec.phase = Phase::Aborted;
    rec.error = Some(format!("aborted: {reason}"));
    write_record(source, &mut rec, version).await?;
    Ok(rec)
}
