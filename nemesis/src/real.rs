//! Histories on real ZooKeeper and real bookies: three `bookie-switch serve`
//! processes (each with its own producers and consumers, `--topics --rate`)
//! on a harness ZooKeeper, two real BookKeeper clusters of three bookies, and
//! a seeded list of operations: REST calls (register, switch, rollback,
//! cleanup), the operator's idgen step through BookKeeper's own id
//! generator, SIGKILL and restart of `serve` processes, a bookie killed and
//! restarted. Then every process and bookie runs again, the switch settles
//! (rolled back when it does not), every process stops with `SIGTERM` and
//! reports its traffic, and the checker reads the metadata in ZooKeeper.
//!
//! Real time, real sockets and JVMs: not deterministic; a failing history
//! prints its seed and trace for a human to follow.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::testkit::{ADMIN, INTERNAL};
use bkswitch_admin::wire::CleanupRequest;
use bkswitch_admin::AdminClient;
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::{
    advance_ledger_id_generator, next_ledger_id, ClientConfig, LedgerManagerKind,
};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_registry::{ClusterStatus, Registry};
use bkswitch_zk_harness::{GuardedIo, GuardedProcess};

use crate::checker::{references, ViolationKind, Violations};
use crate::plan::TOPICS;
use crate::Totals;

/// One step of a real history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealOp {
    /// Register `new` through node 0.
    Register,
    /// Advance `new`'s (or, for a rollback, `old`'s) id generator beyond the
    /// other's next id.
    AdvanceIdgen {
        /// Advance `old` rather than `new`.
        old: bool,
    },
    /// `POST /switch` to `new` (`old` when `back`).
    Switch {
        /// Switch back to `old`.
        back: bool,
    },
    /// `POST /rollback`.
    Rollback,
    /// `POST /cleanup`.
    Cleanup {
        /// A dry run.
        dry_run: bool,
    },
    /// SIGKILL of a serve process.
    KillServe(usize),
    /// Start a killed serve process again.
    RestartServe(usize),
    /// Kill bookie `bookie` of `old` (`new` when `on_new`) and restart it
    /// after `millis`.
    BounceBookie {
        /// On `new` rather than `old`.
        on_new: bool,
        /// Which bookie.
        bookie: usize,
        /// Down for this long.
        millis: u64,
    },
    /// Let time pass.
    Wait(u64),
}

/// The operations of real history `seed` (10 of them, the operator's path
/// first).
pub fn real_plan(seed: u64) -> Vec<RealOp> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut ops = vec![RealOp::Register, RealOp::AdvanceIdgen { old: false }];
    while ops.len() < 10 {
        ops.push(match rng.u32(0..100) {
            0..=19 => RealOp::Switch {
                back: rng.u8(0..4) == 0,
            },
            20..=29 => RealOp::Rollback,
            30..=37 => RealOp::Cleanup {
                dry_run: rng.bool(),
            },
            38..=41 => RealOp::AdvanceIdgen { old: rng.bool() },
            42..=55 => RealOp::KillServe(rng.usize(0..3)),
            56..=65 => RealOp::RestartServe(rng.usize(0..3)),
            66..=75 => RealOp::BounceBookie {
                on_new: rng.bool(),
                bookie: rng.usize(0..3),
                millis: rng.u64(500..5_000),
            },
            _ => RealOp::Wait(rng.u64(500..4_000)),
        });
    }
    ops
}

/// The `bookie-switch` binary: next to this executable (`target/<profile>/`
/// holds it after `cargo test --workspace`), else built with cargo.
///
/// # Errors
///
/// When it can be neither found nor built.
pub fn bookie_switch_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut candidates = Vec::new();
    for dir in exe.ancestors().skip(1).take(2) {
        candidates.push(dir.join("bookie-switch"));
    }
    if let Some(found) = candidates.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "bkswitch-cli", "--bin", "bookie-switch"])
        .status()
        .map_err(|e| format!("cannot run cargo to build bookie-switch: {e}"))?;
    if !status.success() {
        return Err("building bookie-switch failed".into());
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| "bookie-switch was built but is not next to this executable".into())
}

struct Serve {
    process: Option<GuardedProcess>,
    started: Instant,
    log: PathBuf,
    url: String,
    port: u16,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Topics of serve process `i`.
fn topics_of(i: usize) -> Vec<&'static str> {
    match i {
        0 => vec![TOPICS[0], TOPICS[1]],
        1 => vec![TOPICS[2]],
        _ => vec![TOPICS[3]],
    }
}

struct RealStack {
    bin: PathBuf,
    dir: PathBuf,
    metadata: String,
    old_uri: String,
    nodes: Vec<Serve>,
    trace: Vec<String>,
    violations: Violations,
    /// Processes started again in this history.
    restarted: std::collections::BTreeSet<usize>,
    /// When each process was last killed.
    killed_at: std::collections::BTreeMap<usize, Instant>,
}

/// The metadata session timeout of the `serve` processes.
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);

impl RealStack {
    /// Starts process `i` once the session of its killed incarnation has
    /// expired: until then its topics are owned by that session, and `serve`
    /// refuses to start on a topic another session owns (as it should).
    async fn respawn(&mut self, i: usize) -> Result<(), String> {
        if let Some(at) = self.killed_at.get(&i) {
            let ready = *at + SESSION_TIMEOUT + Duration::from_secs(2);
            if let Some(wait) = ready.checked_duration_since(Instant::now()) {
                tokio::time::sleep(wait).await;
            }
        }
        self.spawn(i)
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let port = if self.nodes.len() > i {
            self.nodes[i].port
        } else {
            free_port()
        };
        let state = self.dir.join(format!("node-{i}-{}", self.trace.len()));
        std::fs::create_dir_all(&state).map_err(|e| e.to_string())?;
        let log = state.join("serve.log");
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "serve",
            "--node-id",
            &format!("node-{i}"),
            "--metadata-store",
            &self.metadata,
            "--metadata-store-session-timeout-ms",
            &SESSION_TIMEOUT.as_millis().to_string(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--bookkeeper-uri",
            &self.old_uri,
            "--cluster-name",
            "old",
            "--topics",
            &topics_of(i).join(","),
            "--rate",
            "20",
            "--old-ledger-read-timeout-ms",
            "2000",
        ])
        .env("BKSWITCH_ADMIN_TOKEN", ADMIN)
        .env("BKSWITCH_INTERNAL_TOKEN", INTERNAL);
        let process = GuardedProcess::spawn(&cmd, &state, &log, GuardedIo::Log, false)
            .map_err(|e| format!("spawning serve: {e}"))?;
        if self.nodes.len() > i {
            self.restarted.insert(i);
        }
        let serve = Serve {
            process: Some(process),
            started: Instant::now(),
            log,
            url: format!("http://127.0.0.1:{port}"),
            port,
        };
        if self.nodes.len() > i {
            self.nodes[i] = serve;
        } else {
            self.nodes.push(serve);
        }
        Ok(())
    }

    async fn wait_serving(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let log = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
            if log.contains("cannot open topic") {
                return Err(format!("serve node-{i} could not open its topics:\n{log}"));
            }
            // Serving, and its topics opened (traffic started or no error
            // within a moment).
            if log.contains(" serving http://") && log.lines().count() > 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let log = std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default();
                if log.contains("cannot open topic") {
                    return Err(format!("serve node-{i} could not open its topics:\n{log}"));
                }
                return Ok(());
            }
            let running = self.nodes[i]
                .process
                .as_mut()
                .is_some_and(GuardedProcess::is_running);
            if !running || Instant::now() > deadline {
                return Err(format!("serve node-{i} did not start:\n{log}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn admin(&self, i: usize) -> Option<AdminClient> {
        AdminClient::new(&self.nodes.get(i)?.url, ADMIN).ok()
    }

    fn live(&mut self) -> Option<usize> {
        (0..self.nodes.len()).find(|i| {
            self.nodes[*i]
                .process
                .as_mut()
                .is_some_and(GuardedProcess::is_running)
        })
    }
}

/// Runs `count` real histories with seeds `first..first + count`.
///
/// # Errors
///
/// When Java or the BookKeeper jars are missing, or the bookies or the
/// `bookie-switch` binary cannot be had.
pub fn run_real(first: u64, count: u64) -> Result<Totals, String> {
    if !bkswitch_bk_harness::bk_available() {
        return Err("Java or the BookKeeper jars are missing".into());
    }
    let bin = bookie_switch_binary()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let old = BkCluster::on_shared_zk(3);
    let new = BkCluster::on_shared_zk(3);
    let mut totals = Totals::default();
    for seed in first..first + count {
        let outcome = rt.block_on(run_one(seed, &bin, &old, &new))?;
        // Real histories are few and not replayable: every trace is printed.
        println!(
            "real history seed {seed} {}: {} violation(s); run it again with: cargo run -p \
             bkswitch-nemesis --bin nemesis -- run --stack real --histories 1 --seed {seed}",
            if outcome.passed() { "passed" } else { "FAILED" },
            outcome.violations.0.len()
        );
        for v in &outcome.violations.0 {
            println!("  - {v}");
        }
        for l in &outcome.trace {
            println!("    {l}");
        }
        totals.add(&outcome);
    }
    Ok(totals)
}

async fn run_one(
    seed: u64,
    bin: &Path,
    old: &BkCluster,
    new: &BkCluster,
) -> Result<crate::Outcome, String> {
    let ops = real_plan(seed);
    let zk = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let dir = std::env::temp_dir().join(format!(
        "bkswitch-nemesis-real-{}{}",
        std::process::id(),
        chroot.replace('/', "-")
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut s = RealStack {
        bin: bin.to_owned(),
        dir,
        metadata: format!("zk://{zk}{chroot}"),
        old_uri: old.metadata_service_uri(),
        nodes: Vec::new(),
        trace: Vec::new(),
        violations: Violations::default(),
        restarted: Default::default(),
        killed_at: Default::default(),
    };
    for i in 0..3 {
        s.spawn(i)?;
    }
    for i in 0..3 {
        s.wait_serving(i).await?;
    }
    let cfg = ClientConfig::default();
    let uri = |use_new: bool| {
        if use_new {
            new.metadata_service_uri()
        } else {
            old.metadata_service_uri()
        }
    };
    let mut calls = 0;
    for (n, op) in ops.iter().enumerate() {
        let node = s.live();
        let admin = node.and_then(|i| s.admin(i));
        let result = match (*op, admin) {
            (RealOp::Register, Some(a)) => {
                calls += 1;
                format!(
                    "{:?}",
                    a.register("new", &uri(true), Some(ClusterStatus::Standby))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                        .err()
                )
            }
            (RealOp::AdvanceIdgen { old: to_old }, _) => {
                // `to_old`: old is the target, new the source.
                let src = next_ledger_id(&uri(to_old), &cfg)
                    .await
                    .map_err(|e| e.to_string())?;
                match advance_ledger_id_generator(&uri(!to_old), src + 1_000, &cfg).await {
                    Ok(_) => "advanced".into(),
                    Err(e) => format!("idgen: {e}"),
                }
            }
            (RealOp::Switch { back }, Some(a)) => {
                calls += 1;
                let target = if back { "old" } else { "new" };
                a.switch(target)
                    .await
                    .map(|st| format!("{:?}", st.phase()))
                    .unwrap_or_else(|e| short(&e.to_string()))
            }
            (RealOp::Rollback, Some(a)) => {
                calls += 1;
                a.rollback()
                    .await
                    .map(|st| format!("{:?}", st.phase()))
                    .unwrap_or_else(|e| short(&e.to_string()))
            }
            (RealOp::Cleanup { dry_run }, Some(a)) => {
                calls += 1;
                let req = CleanupRequest {
                    dry_run,
                    force: true,
                    ..CleanupRequest::default()
                };
                a.cleanup(&req)
                    .await
                    .map(|r| format!("{:?}", r.outcome()))
                    .unwrap_or_else(|e| short(&e.to_string()))
            }
            (RealOp::KillServe(i), _) => match s.nodes[i].process.take() {
                Some(p) => {
                    p.kill();
                    s.killed_at.insert(i, Instant::now());
                    "SIGKILL".into()
                }
                None => "not running".into(),
            },
            (RealOp::RestartServe(i), _) => {
                if s.nodes[i].process.is_some() {
                    "running".into()
                } else {
                    s.respawn(i).await?;
                    match s.wait_serving(i).await {
                        Ok(()) => "started".into(),
                        Err(e) => {
                            s.violations.push(ViolationKind::Stuck, e);
                            "did not start".into()
                        }
                    }
                }
            }
            (
                RealOp::BounceBookie {
                    on_new,
                    bookie,
                    millis,
                },
                _,
            ) => {
                let c = if on_new { new } else { old };
                c.kill(bookie);
                tokio::time::sleep(Duration::from_millis(millis)).await;
                c.restart(bookie);
                "bounced".into()
            }
            (RealOp::Wait(ms), _) => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                "waited".into()
            }
            (_, None) => "no node running".into(),
        };
        s.trace.push(format!("#{n} {op:?} -> {result}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Heal: every process runs again; wait for the switch to settle.
    for i in 0..3 {
        if s.nodes[i].process.is_none() {
            s.respawn(i).await?;
            if let Err(e) = s.wait_serving(i).await {
                s.violations.push(ViolationKind::Stuck, e);
            }
        }
    }
    let admin = s.admin(0).ok_or("no admin client")?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rolled = false;
    loop {
        let settled = match admin.status().await {
            Ok(st) => st.switch().is_none_or(|sw| sw.is_settled()),
            Err(_) => false,
        };
        if settled {
            break;
        }
        if Instant::now() > deadline {
            s.violations.push(
                ViolationKind::Stuck,
                "the switch did not settle within 120 s after healing",
            );
            break;
        }
        if !rolled && Instant::now() + Duration::from_secs(60) > deadline {
            rolled = true;
            let _ = advance_ledger_id_generator(
                &uri(false),
                next_ledger_id(&uri(true), &cfg).await.unwrap_or(0) + 1_000,
                &cfg,
            )
            .await;
            let r = admin.rollback().await;
            s.trace.push(format!(
                "settle: rollback -> {:?}",
                r.map(|st| format!("{:?}", st.phase()))
                    .map_err(|e| short(&e.to_string()))
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Traffic after healing, then stop every process with SIGTERM: each
    // reports its traffic.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut published = 0usize;
    for i in 0..3 {
        let Some(mut p) = s.nodes[i].process.take() else {
            continue;
        };
        p.terminate();
        let stopped = p.wait_timeout(Duration::from_secs(60));
        p.close();
        let log = std::fs::read_to_string(&s.nodes[i].log).unwrap_or_default();
        match log.lines().rev().find(|l| l.starts_with("traffic: ")) {
            Some(line) => {
                let (p, gaps) = traffic(line);
                published += p as usize;
                // A process started again after SIGKILL begins its consumer's
                // sequence at 1 while the durable cursor resumes after the
                // killed producer's messages: its gaps are not losses.
                if gaps > 0 && !s.restarted.contains(&i) {
                    s.violations.push(
                        ViolationKind::MessageLost,
                        format!("node-{i} reports {gaps} gaps: {line}"),
                    );
                }
                s.trace.push(format!("node-{i} {line}"));
            }
            // `serve` handles SIGTERM once its topics are open; a process
            // still opening them (waiting for a fenced ledger's recovery, for
            // a client to start) dies of the signal without a report.
            None if s.nodes[i].started.elapsed() < Duration::from_secs(30)
                && !log.contains("cannot open topic") =>
            {
                s.trace.push(format!(
                    "node-{i} stopped by SIGTERM while still opening its topics (up {:?}): no \
                     traffic report",
                    s.nodes[i].started.elapsed()
                ));
            }
            None => {
                let tail: Vec<&str> = log.lines().rev().take(6).collect();
                s.violations.push(
                    ViolationKind::Stuck,
                    format!(
                        "node-{i} did not report its traffic on SIGTERM (exit: {stopped:?}); its \
                         log ends: {tail:?}"
                    ),
                );
            }
        }
    }

    // The checker on the metadata.
    let store: Arc<dyn MetadataStore> = Arc::new(
        ZkStore::connect(&format!("zk://{zk}{chroot}"), ZkStoreOptions::default())
            .await
            .map_err(|e| e.to_string())?,
    );
    let registry = Registry::with_root(store.clone(), bkswitch_registry::DEFAULT_ROOT)
        .map_err(|e| e.to_string())?;
    if let Ok(records) = registry.list().await {
        let active = records
            .iter()
            .filter(|r| r.status == ClusterStatus::Active)
            .count();
        if active != 1 {
            s.violations.push(
                ViolationKind::Registry,
                format!("{active} ACTIVE clusters: {records:?}"),
            );
        }
    }
    let refs = references(store.as_ref(), &mut s.violations).await;
    for r in &refs {
        let c = match r.cluster.as_str() {
            "old" => old,
            "new" => new,
            other => {
                s.violations.push(
                    ViolationKind::Registry,
                    format!(
                        "{} ledger {} of {} is stamped `{other}`",
                        r.kind, r.ledger_id, r.path
                    ),
                );
                continue;
            }
        };
        let path = LedgerManagerKind::Hierarchical.ledger_path(c.ledgers_root(), r.ledger_id);
        if c.zk_get(&path).is_none() {
            s.violations.push(
                ViolationKind::LedgerMissing,
                format!("{} ledger {} referenced by {} is stamped `{}` but that cluster does not hold it", r.kind, r.ledger_id, r.path, r.cluster),
            );
        }
    }
    let _ = store.close().await;
    s.trace
        .push(format!("{} referenced ledgers checked", refs.len()));
    let _ = std::fs::remove_dir_all(&s.dir);
    Ok(crate::Outcome {
        seed,
        kept: None,
        trace: s.trace,
        violations: s.violations,
        figures: crate::Figures {
            ops: ops.len(),
            faults: ops
                .iter()
                .filter(|o| matches!(o, RealOp::KillServe(_) | RealOp::BounceBookie { .. }))
                .count(),
            operator_calls: calls,
            published,
            references: refs.len(),
            ..crate::Figures::default()
        },
    })
}

fn short(s: &str) -> String {
    s.chars().take(100).collect()
}

/// `(published, gaps)` of a serve process's `traffic: …` line.
fn traffic(line: &str) -> (u64, u64) {
    let n = |word: &str| -> u64 {
        line.split(word)
            .next()
            .and_then(|before| before.split_whitespace().last())
            .and_then(|w| w.trim_end_matches(',').parse().ok())
            .unwrap_or(0)
    };
    (n(" published"), n(" gaps"))
}
