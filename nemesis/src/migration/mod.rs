//! Migration histories: the nemesis for moving the metadata store
//! (`bkswitch-metadata-migration`, PIP-454) on the embedded (in-memory)
//! backends.
//!
//! Two in-memory stores, `memory://a` and `memory://b`; three writers, each
//! a participant ([`MigratingStore`]) that writes its own keys
//! *conditionally*, holding the version of its last acknowledged write (as a
//! managed ledger holds the version of its metadata), across migrations
//! back and forth. A [`MigrationPlan`] drawn from a seed interleaves
//! operations and faults:
//!
//! | operations | faults |
//! |---|---|
//! | start (to the other store, with or without wiping it, or aimed at the source or a protected root: refused), coordinator steps, abort, resume by a new coordinator (two coordinators at once when the old one was not stopped) | coordinator crash between steps and in the middle of a step (its future dropped), a participant stalled (registered, never answering: the ack timeout), a participant lost (its process gone, its session with it), a participant's session expired, a participant restarted, a store error on a participant's next write (its control nodes, clean or applied-then-failed; its keys, clean) |
//!
//! After the operations every fault heals, the unfinished migration (if
//! any) is run to its end by a new coordinator, every writer is started
//! again and writes a while, and the checker (`check`) asserts:
//!
//! - no acknowledged write is lost: every key holds the value and version of
//!   its last acknowledged write;
//! - versions never go back: every acknowledged write has a higher version
//!   than the one before, across every migration;
//! - no conditional write with the version of the last acknowledged write
//!   is refused (no managed ledger would be fenced by a migration);
//! - nothing is stuck: the migration ends, every participant ends on the
//!   same store with writes open.
//!
//! The plan is a function of the seed; the run uses real time (the
//! coordinator's acknowledgement deadline is wall-clock time), so the
//! interleaving of a replay may differ.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_migration::{
    abort, Coordinator, CoordinatorOptions, MigratingStore, MigrationRequest, NamedMemoryStores,
    ParticipantOptions, Phase, ProtectedRoot, StoreOpener, MIGRATION_ROOT, PARTICIPANTS_PATH,
};
use bkswitch_metadata_store::testkit::{InjectedFailure, RecordingStore};
use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MemoryStore, MetadataStore};
use io::*;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

mod io;
mod plan;

pub use plan::{MigrationOp, MigrationPlan, Overlap};

/// The two stores histories move between.
pub const STORES: [&str; 2] = ["memory://a", "memory://b"];
/// Writers (participants) of a history.
pub const WRITERS: usize = 3;
pub use io::KEYS;
/// Operations of a plan.
pub const OPS: usize = 32;

/// Seeds whose histories lost acknowledged writes before the fixes they led
/// to (`docs/RELIABILITY.md`, the migration nemesis): a coordinator that lost
/// its record copied the source over newer target writes; a participant whose
/// session ended was not waited for in the pause and wrote through an open
/// gate; a start wiped a store that a lagging participant still used. 1035
/// (with store faults): a participant whose joined marker failed to write
/// tracked without it and, lost later, took unpublished writes with it.
/// 1092 and 1375: lost writes with M1 (a failed publication of dirty paths
/// dropped them) put back.
pub const MIGRATION_REGRESSION_SEEDS: [u64; 8] = [1007, 1008, 1035, 1037, 1092, 1128, 1137, 1375];

/// What a migration history found.
#[derive(Debug, Clone, Default)]
pub struct MigrationOutcome {
    /// The seed.
    pub seed: u64,
    /// What happened, one line per operation and per ending migration.
    pub trace: Vec<String>,
    /// Violations of the invariants (empty: passed).
    pub violations: Vec<String>,
    /// Acknowledged writes.
    pub acked: usize,
    /// Migrations that ended COMPLETED, FAILED, ABORTED.
    pub ended: [usize; 3],
    /// Starts refused (a migration running, a dirty target).
    pub refused: usize,
}

impl MigrationOutcome {
    /// Whether no invariant was violated.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for MigrationOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "migration history {}: {} acknowledged writes, {} completed, {} failed, {} \
             aborted, {} starts refused, {} violations",
            self.seed,
            self.acked,
            self.ended[0],
            self.ended[1],
            self.ended[2],
            self.refused,
            self.violations.len()
        )?;
        if !self.passed() {
            writeln!(
                f,
                "  replay: cargo run -p bkswitch-nemesis --bin nemesis -- migration \
                 --histories 1 --seed {} --trace",
                self.seed
            )?;
            for v in &self.violations {
                writeln!(f, "  violation: {v}")?;
            }
        }
        Ok(())
    }
}

struct Writer {
    store: MigratingStore,
    session: MemoryStore,
    /// The stores this writer's participant opened, each behind a
    /// fault-injecting wrapper; the last one is the one in use.
    faults: Arc<FaultyOpener>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

fn coordinator_options() -> CoordinatorOptions {
    CoordinatorOptions {
        ack_timeout: Duration::from_millis(300),
        page_size: 20,
        pause_threshold: 4,
        max_catch_up_rounds: 4,
        poll_interval: Duration::from_millis(5),
    }
}

fn name_of(url: &str) -> &str {
    url.strip_prefix("memory://").unwrap_or(url)
}

struct Run {
    plan: MigrationPlan,
    stores: NamedMemoryStores,
    opener: Arc<dyn StoreOpener>,
    model: Arc<Mutex<Model>>,
    /// The store the participants use (the operator's configuration).
    current: String,
    coordinators: Vec<Coordinator>,
    writers: Vec<Option<Writer>>,
    incarnations: [u32; WRITERS],
    stalled: Vec<MemoryStore>,
    out: MigrationOutcome,
}

/// Runs the migration history of `plan` (on a current-thread runtime of its
/// own) and checks it.
pub fn run_migration_history(plan: &MigrationPlan) -> MigrationOutcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let stores = NamedMemoryStores::new();
        let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
        let mut run = Run {
            plan: plan.clone(),
            stores,
            opener,
            model: Arc::default(),
            current: STORES[0].to_owned(),
            coordinators: Vec::new(),
            writers: Vec::new(),
            incarnations: [0; WRITERS],
            stalled: Vec::new(),
            out: MigrationOutcome {
                seed: plan.seed,
                ..MigrationOutcome::default()
            },
        };
        run.populate().await;
        for w in 0..WRITERS {
            let writer = run.start_writer(w).await;
            run.writers.push(writer);
        }
        for (i, op) in plan.ops.iter().enumerate() {
            run.out.trace.push(format!("{i}: {op:?}"));
            run.apply(*op).await;
            tokio::task::yield_now().await;
        }
        run.heal_and_check().await;
        run.out
    })
}

impl Run {
    fn session(&self, url: &str) -> Arc<dyn MetadataStore> {
        Arc::new(self.stores.session(name_of(url)))
    }

    fn other(&self) -> &'static str {
        if self.current == STORES[0] {
            STORES[1]
        } else {
            STORES[0]
        }
    }

    fn violation(&mut self, v: String) {
        self.out.violations.push(v);
    }

    async fn populate(&self) {
        let s = self.stores.session("a");
        for i in 0..self.plan.nodes {
            let path = format!("/data/d{}/n{i:04}", i % 7);
            for _ in 0..=(i % 3) {
                s.put(&path, format!("v{i}").as_bytes(), ExpectedVersion::Any)
                    .await
                    .expect("populate");
            }
        }
    }

    /// A writer's participant on the store in use, and its writing task.
    async fn start_writer(&mut self, w: usize) -> Option<Writer> {
        self.incarnations[w] += 1;
        let name = format!("writer-{w}-{}", self.incarnations[w]);
        let session = self.stores.session(name_of(&self.current));
        let faults = Arc::new(FaultyOpener {
            stores: self.stores.clone(),
            last: Mutex::new(Arc::new(RecordingStore::new(Arc::new(session.clone())))),
        });
        let first = faults.last.lock().clone();
        let store = match MigratingStore::wrap(
            first,
            &self.current,
            faults.clone(),
            ParticipantOptions {
                name: name.clone(),
                dirty_limit: self.plan.dirty_limit,
                poll_interval: Duration::from_millis(10),
                ..ParticipantOptions::default()
            },
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                self.out
                    .trace
                    .push(format!("   writer {w} does not start: {e}"));
                return None;
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(write_loop(
            w,
            store.clone(),
            self.model.clone(),
            stop.clone(),
        ));
        Some(Writer {
            store,
            session,
            faults,
            stop,
            task,
        })
    }

    async fn apply(&mut self, op: MigrationOp) {
        match op {
            MigrationOp::Start { wipe, overlap } => self.start(wipe, overlap).await,
            MigrationOp::Step { steps } => {
                for _ in 0..steps {
                    if !self.step_newest(None).await {
                        break;
                    }
                }
            }
            MigrationOp::CrashMidStep { after_us } => {
                self.step_newest(Some(Duration::from_micros(u64::from(after_us))))
                    .await;
            }
            MigrationOp::Crash => {
                if !self.coordinators.is_empty() {
                    self.coordinators.remove(0);
                }
            }
            MigrationOp::Resume => {
                match Coordinator::resume(
                    self.session(&self.current),
                    self.opener.as_ref(),
                    coordinator_options(),
                )
                .await
                {
                    Ok(Some(c)) => {
                        if self.coordinators.len() >= 2 {
                            self.coordinators.remove(0);
                        }
                        self.coordinators.push(c);
                    }
                    Ok(None) => {}
                    Err(e) => self.out.trace.push(format!("   resume: {e}")),
                }
            }
            MigrationOp::Abort => {
                match abort(self.session(&self.current).as_ref(), "nemesis").await {
                    Ok(rec) => {
                        self.out.ended[2] += 1;
                        self.out.trace.push(format!("   aborted {}", rec.id));
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::InvalidArgument | ErrorKind::BadVersion
                        ) => {}
                    Err(e) => self.violation(format!("abort answered {e}")),
                }
            }
            MigrationOp::Stall => {
                let s = self.stores.session(name_of(&self.current));
                let path = format!("{PARTICIPANTS_PATH}/stalled-{}", self.stalled.len());
                if s.create(&path, b"{}", CreateMode::EPHEMERAL).await.is_ok() {
                    self.stalled.push(s);
                }
            }
            MigrationOp::Unstall => {
                for s in self.stalled.drain(..) {
                    let _ = s.close().await;
                }
            }
            MigrationOp::Lose { writer } => self.lose(usize::from(writer)).await,
            MigrationOp::Restart { writer } => {
                let w = usize::from(writer);
                if self.writers[w].is_none() {
                    self.writers[w] = self.start_writer(w).await;
                }
            }
            MigrationOp::ExpireSession { writer } => {
                if let Some(wr) = &self.writers[usize::from(writer)] {
                    let _ = wr.session.expire_session();
                }
            }
            MigrationOp::StoreFault {
                writer,
                control,
                applied,
            } => {
                if let Some(wr) = &self.writers[usize::from(writer)] {
                    let (pattern, failure) = match (control, applied) {
                        (true, true) => (MIGRATION_ROOT, InjectedFailure::AppliedThenUnavailable),
                        (true, false) => (MIGRATION_ROOT, InjectedFailure::Unavailable),
                        (false, _) => ("/managed-ledgers/", InjectedFailure::Unavailable),
                    };
                    wr.faults
                        .last
                        .lock()
                        .fail_writes_matching(pattern, 1, failure);
                }
            }
            MigrationOp::Wait { ms } => {
                tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
            }
        }
    }

    async fn start(&mut self, wipe: bool, overlap: Overlap) {
        let other = self.other();
        let source_url = self.current.clone();
        let target_url = match overlap {
            Overlap::Source => source_url
                .to_ascii_uppercase()
                .replace("MEMORY://", "memory://"),
            _ => other.to_owned(),
        };
        let protected = match overlap {
            Overlap::Protected => vec![ProtectedRoot {
                url: other.to_owned(),
                owner: "bookie cluster `nemesis`".to_owned(),
            }],
            _ => Vec::new(),
        };
        let request = MigrationRequest {
            id: None,
            source_url: source_url.clone(),
            target_url: target_url.clone(),
            wipe_target: wipe.then(|| "/".to_owned()),
            protected,
        };
        let target = other;
        // What a refused start must leave untouched: both stores.
        let before_target = snapshot(self.session(target).as_ref()).await;
        // The source's migration record and pointer (writers go on writing
        // their keys meanwhile).
        let before_source = records(self.session(&source_url).as_ref()).await;
        match Coordinator::start(
            self.session(&source_url),
            self.opener.as_ref(),
            request,
            coordinator_options(),
        )
        .await
        {
            Ok(c) if overlap != Overlap::None => {
                self.violation(format!(
                    "a start to {target_url} ({overlap:?}) was accepted: {}",
                    c.record().id
                ));
                self.coordinators.push(c);
            }
            Ok(c) => {
                self.out
                    .trace
                    .push(format!("   started {} to {target}", c.record().id));
                if self.coordinators.len() >= 2 {
                    self.coordinators.remove(0);
                }
                self.coordinators.push(c);
            }
            Err(e) if e.kind() == ErrorKind::InvalidArgument => {
                self.out.refused += 1;
                self.out.trace.push(format!("   refused: {e}"));
                let after = snapshot(self.session(target).as_ref()).await;
                if after != before_target {
                    self.violation(format!("a refused start changed the target {target}: {e}"));
                }
                let after = records(self.session(&source_url).as_ref()).await;
                if after != before_source {
                    self.violation(format!(
                        "a refused start changed the source {source_url}: {e}"
                    ));
                }
            }
            Err(e) => self.violation(format!("start answered {e}")),
        }
    }

    /// Steps the newest coordinator once (cut after `budget` when given: a
    /// crash in the middle of the step). `false` when none is left.
    async fn step_newest(&mut self, budget: Option<Duration>) -> bool {
        let Some(mut c) = self.coordinators.pop() else {
            return false;
        };
        let r = match budget {
            Some(b) => match tokio::time::timeout(b, c.step()).await {
                Ok(r) => r,
                Err(_) => {
                    self.out
                        .trace
                        .push("   coordinator crashed mid-step".into());
                    return true;
                }
            },
            None => c.step().await,
        };
        match r {
            Ok(phase) if phase.is_terminal() => self.ended(&c),
            Ok(_) => self.coordinators.push(c),
            // Aborted, or another coordinator moved the record: it stops.
            Err(e) if e.kind() == ErrorKind::BadVersion => {
                self.out.trace.push("   a stale coordinator stops".into());
            }
            Err(e) => {
                self.out
                    .trace
                    .push(format!("   coordinator error, it stops: {e}"));
            }
        }
        true
    }

    fn ended(&mut self, c: &Coordinator) {
        let rec = c.record();
        self.out.trace.push(format!(
            "   {} {:?} ({} → {}){}",
            rec.id,
            rec.phase,
            rec.source_url,
            rec.target_url,
            rec.error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
        match rec.phase {
            Phase::Completed => {
                self.out.ended[0] += 1;
                self.current = rec.target_url.clone();
            }
            Phase::Failed => self.out.ended[1] += 1,
            _ => self.out.ended[2] += 1,
        }
    }

    async fn lose(&mut self, w: usize) {
        let Some(wr) = self.writers[w].take() else {
            return;
        };
        wr.task.abort();
        let _ = wr.task.await;
        // The process is gone: the write it had in flight may or may not
        // have been applied (recorded by the write loop).
        drop(wr.store);
        let _ = wr.session.close().await;
    }

    async fn heal_and_check(&mut self) {
        for s in self.stalled.drain(..) {
            let _ = s.close().await;
        }
        // The unfinished migration, if any, is run to its end.
        self.coordinators.clear();
        match Coordinator::resume(
            self.session(&self.current),
            self.opener.as_ref(),
            coordinator_options(),
        )
        .await
        {
            Ok(Some(mut c)) => {
                let mut ended = false;
                for _ in 0..10_000 {
                    match c.step().await {
                        Ok(p) if p.is_terminal() => {
                            ended = true;
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.violation(format!("the healed migration errs: {e}"));
                            break;
                        }
                    }
                }
                if ended {
                    self.ended(&c);
                } else {
                    self.violation(format!("stuck: {:?}", c.record()));
                }
            }
            Ok(None) => {}
            Err(e) => self.violation(format!("resume after healing: {e}")),
        }
        for w in 0..WRITERS {
            if self.writers[w].is_none() {
                self.writers[w] = self.start_writer(w).await;
                if self.writers[w].is_none() {
                    self.violation(format!("writer {w} cannot start after healing"));
                }
            }
        }
        // Every participant on the store in use, writes open.
        let mut settled = false;
        for _ in 0..500 {
            if self
                .writers
                .iter()
                .flatten()
                .all(|w| w.store.url() == self.current && !w.store.is_paused())
            {
                settled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !settled {
            let seen: Vec<(String, bool)> = self
                .writers
                .iter()
                .flatten()
                .map(|w| (w.store.url(), w.store.is_paused()))
                .collect();
            self.violation(format!(
                "participants did not settle on {} with writes open: {seen:?}",
                self.current
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for w in self.writers.iter().flatten() {
            w.stop.store(true, Ordering::Release);
        }
        for w in self.writers.iter_mut().filter_map(Option::take) {
            let _ = w.task.await;
            let _ = w.store.close().await;
        }
        let acked = self.model.lock().acked.clone();
        let violations = check(&acked, self.session(&self.current).as_ref()).await;
        let model = self.model.lock();
        self.out.acked = model.writes;
        let mut all = model.violations.clone();
        drop(model);
        all.extend(violations);
        self.out.violations.extend(all);
    }
}

/// Runs `count` migration histories from seed `first`; calls `each` after
/// every one.
pub fn run_migration_histories(
    first: u64,
    count: u64,
    mut each: impl FnMut(&MigrationOutcome),
) -> Vec<MigrationOutcome> {
    let mut failed = Vec::new();
    for seed in first..first + count {
        let o = run_migration_history(&MigrationPlan::generate(seed));
        each(&o);
        if !o.passed() {
            failed.push(o);
        }
    }
    failed
}
