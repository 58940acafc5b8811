//! Switch visibility: how long a switch directive takes from its write in the
//! registry (ZooKeeper) until the last node has swapped its active cluster, on
//! three `bookie-switch serve` processes sharing a real ZooKeeper (a table, not
//! criterion: each sample is one operator switch or rollback).
//!
//! Run with:
//! `cargo bench -p bkswitch-bench --bench switch_visibility`
//! (`BENCH_SWITCHES=N` changes the number of switches, and of rollbacks, default
//! 20; `BKSWITCH_BIN=path` runs that `bookie-switch` instead of building it;
//! `BENCH_LOG_DIR=dir` keeps the nodes' logs there, `node-<i>.log`).
//!
//! The bench builds `bookie-switch` with the bench's own profile (a nested
//! `cargo build`, nothing to do when it is fresh), starts a ZooKeeper through
//! `bkswitch-zk-harness` and three nodes on a fresh chroot of it, each with the
//! in-memory clusters `old` (active, the bootstrap cluster) and `new`, registers
//! `new`, then alternates a switch to `new` (waited for until `SWITCHED`) and a
//! rollback to `old` (waited for until `ROLLED_BACK`). The nodes run with
//! `--skip-idgen-precheck`: the switches would pass the precheck, the
//! rollbacks would not (nothing can advance `old`'s in-process id generator),
//! and the precheck comes before the directive's write anyway. The REST call goes to
//! each node in turn, so every node is the directive's origin (and
//! coordinator) in turn.
//!
//! Measured per directive, from the nodes' own records (`applied` of
//! `GET /status`): the directive's `ts` (the writer's wall clock, taken just
//! before its compare-and-set) and each node's `appliedAt` (its wall clock when
//! its active cluster became the target). All processes run on one machine, so
//! the clocks agree; both are milliseconds, so every figure is ±1 ms. The
//! bench's status polling does not enter the figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bkswitch_admin::wire::NodeStatus;
use bkswitch_admin::AdminClient;
use bkswitch_bk_router::AppliedDirective;
use bkswitch_zk_harness::{GuardedIo, GuardedProcess};

const ADMIN_TOKEN: &str = "bench-admin";
const INTERNAL_TOKEN: &str = "bench-internal";
const NODES: usize = 3;
/// Bound of every wait (a node starting, a phase reached, a swap seen).
const WAIT: Duration = Duration::from_secs(60);
/// Pause between two status polls while waiting.
const POLL: Duration = Duration::from_millis(10);

/// One node process; killed when dropped.
struct ServeNode {
    id: String,
    client: AdminClient,
    log: PathBuf,
    process: GuardedProcess,
}

impl ServeNode {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The nodes and their folder; the processes go first, then the folder.
struct Stack {
    nodes: Vec<ServeNode>,
    _dir: tempfile::TempDir,
}

/// One measured directive.
struct Sample {
    kind: &'static str,
    epoch: i64,
    /// From the REST call's start to the directive's `ts`: what the switch or
    /// rollback call does before it writes the directive.
    call_to_write_ms: i64,
    /// Each node's `appliedAt - ts`, in node order.
    per_node_ms: Vec<i64>,
    /// From the REST call's start until its origin reported `SWITCHED` or
    /// `ROLLED_BACK` (polled every 10 ms).
    settled_ms: i64,
}

impl Sample {
    fn last_node_ms(&self) -> i64 {
        self.per_node_ms.iter().copied().max().unwrap_or(0)
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `bookie-switch`, built with the profile this bench was built with.
fn bookie_switch() -> PathBuf {
    if let Some(path) = std::env::var_os("BKSWITCH_BIN") {
        return PathBuf::from(path);
    }
    // `<target>/<profile dir>/deps/<bench>`: `release` for `cargo bench`.
    let exe = std::env::current_exe().expect("the bench's own path");
    let profile = match exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
    {
        Some("debug") => "dev",
        _ => "bench",
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building bookie-switch (profile {profile})…");
    let out = Command::new(cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--profile", profile, "-p", "bkswitch-cli"])
        .args(["--bin", "bookie-switch", "--message-format", "json"])
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo build of bookie-switch starts");
    assert!(out.status.success(), "cargo build of bookie-switch failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "bookie-switch")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported the bookie-switch executable")
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    l.local_addr().expect("its address").port()
}

fn spawn_node(bin: &Path, dir: &Path, log_dir: &Path, metadata_store: &str, i: usize) -> ServeNode {
    let id = format!("node-{i}");
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.arg("serve")
        .args(["--node-id", &id])
        .args(["--metadata-store", metadata_store])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--bookkeeper-uri", "memory://old", "--cluster-name", "old"])
        .args(["--memory-clusters", "old,new"])
        // Switches to `new` pass the precheck (its ids start at 10^9), but a
        // rollback to `old` would need old's generator advanced beyond new's,
        // which no operator can do to clusters inside a process.
        .arg("--skip-idgen-precheck")
        .env("BKSWITCH_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("BKSWITCH_INTERNAL_TOKEN", INTERNAL_TOKEN);
    let state = dir.join(&id);
    std::fs::create_dir_all(&state).expect("the node's folder");
    let log = log_dir.join(format!("{id}.log"));
    let process = GuardedProcess::spawn(&cmd, &state, &log, GuardedIo::Log, false)
        .expect("bookie-switch serve starts");
    let client = AdminClient::new(&format!("http://127.0.0.1:{port}"), ADMIN_TOKEN)
        .expect("a loopback URL")
        .with_timeout(Duration::from_secs(10));
    ServeNode {
        id,
        client,
        log,
        process,
    }
}

async fn wait_ready(node: &mut ServeNode) {
    let deadline = Instant::now() + WAIT;
    loop {
        if node.client.status().await.is_ok() {
            return;
        }
        assert!(
            node.process.is_running() && Instant::now() < deadline,
            "{} did not answer GET /status; its log:\n{}",
            node.id,
            node.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `node` until `done` holds for its status.
async fn wait_status(
    node: &ServeNode,
    what: &str,
    mut done: impl FnMut(&NodeStatus) -> bool,
) -> NodeStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(st) = node.client.status().await {
            if done(&st) {
                return st;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: {what} not seen within {WAIT:?}; its log:\n{}",
            node.id,
            node.log_tail()
        );
        tokio::time::sleep(POLL).await;
    }
}

async fn start_stack(zk_connect: &str) -> Stack {
    let bin = bookie_switch();
    let dir = tempfile::tempdir().expect("a temporary folder");
    let chroot = bkswitch_zk_harness::unique_chroot();
    let metadata_store = format!("zk://{zk_connect}{chroot}");
    let log_dir =
        std::env::var_os("BENCH_LOG_DIR").map_or_else(|| dir.path().to_owned(), PathBuf::from);
    std::fs::create_dir_all(&log_dir).expect("the log folder");
    // The first node registers `old` ACTIVE and the bootstrap marker; the
    // others find them.
    let mut nodes = vec![spawn_node(&bin, dir.path(), &log_dir, &metadata_store, 1)];
    wait_ready(&mut nodes[0]).await;
    for i in 2..=NODES {
        nodes.push(spawn_node(&bin, dir.path(), &log_dir, &metadata_store, i));
    }
    for node in &mut nodes {
        wait_ready(node).await;
    }
    Stack { nodes, _dir: dir }
}

/// Waits for every node to apply a directive to `target` newer than `after`;
/// returns each node's record of it (all of the same directive).
async fn applied_everywhere(stack: &Stack, target: &str, after: i64) -> Vec<AppliedDirective> {
    let mut out = Vec::new();
    for node in &stack.nodes {
        let st = wait_status(node, &format!("a swap to `{target}`"), |st| {
            st.applied()
                .is_some_and(|a| a.epoch > after && a.target == target)
        })
        .await;
        out.push(st.applied().expect("checked above"));
    }
    let epochs: Vec<i64> = out.iter().map(|a| a.epoch).collect();
    assert!(
        epochs.windows(2).all(|w| w[0] == w[1]),
        "the nodes applied different directives: {epochs:?}"
    );
    out
}

fn sample(kind: &'static str, call_started_ms: i64, applied: &[AppliedDirective]) -> Sample {
    let written = applied[0].written_at_ms;
    Sample {
        kind,
        epoch: applied[0].epoch,
        call_to_write_ms: written - call_started_ms,
        per_node_ms: applied
            .iter()
            .map(|a| a.applied_at_ms - a.written_at_ms)
            .collect(),
        settled_ms: 0,
    }
}

async fn run(stack: &Stack, rounds: usize) -> Vec<Sample> {
    let first = &stack.nodes[0].client;
    first
        .register("new", "memory://new", None)
        .await
        .expect("registering `new`");
    let mut samples = Vec::new();
    let mut epoch = 0;
    for round in 0..rounds {
        let origin = &stack.nodes[round % NODES];
        let started = now_ms();
        let sw = origin.client.switch("new").await.expect("POST /switch");
        assert!(sw.epoch().is_some_and(|e| e > epoch), "{:?}", sw.raw());
        let applied = applied_everywhere(stack, "new", epoch).await;
        let mut s = sample("switch", started, &applied);
        epoch = s.epoch;
        wait_status(origin, "phase SWITCHED", |st| {
            st.switch()
                .is_some_and(|s| s.phase_name() == Some("SWITCHED"))
        })
        .await;
        s.settled_ms = now_ms() - started;
        samples.push(s);

        let started = now_ms();
        origin.client.rollback().await.expect("POST /rollback");
        let applied = applied_everywhere(stack, "old", epoch).await;
        let mut s = sample("rollback", started, &applied);
        epoch = s.epoch;
        wait_status(origin, "phase ROLLED_BACK", |st| {
            st.switch()
                .is_some_and(|s| s.phase_name() == Some("ROLLED_BACK"))
        })
        .await;
        s.settled_ms = now_ms() - started;
        samples.push(s);
        eprint!(".");
    }
    eprintln!();
    samples
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[i64], p: f64) -> i64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn row(label: &str, mut values: Vec<i64>) -> String {
    values.sort_unstable();
    if values.is_empty() {
        return format!("| {label} | 0 | | | | |");
    }
    let mean = values.iter().sum::<i64>() as f64 / values.len() as f64;
    format!(
        "| {label} | {} | {} ms | {} ms | {} ms | {mean:.1} ms |",
        values.len(),
        percentile(&values, 0.50),
        percentile(&values, 0.99),
        values[values.len() - 1],
    )
}

fn report(samples: &[Sample], nodes: &[ServeNode]) {
    let last = |kind: Option<&str>| -> Vec<i64> {
        samples
            .iter()
            .filter(|s| kind.is_none_or(|k| s.kind == k))
            .map(Sample::last_node_ms)
            .collect()
    };
    println!();
    println!("directive write → last node's swap ({} nodes)", nodes.len());
    println!();
    println!("| directives | n | p50 | p99 | max | mean |");
    println!("|---|---|---|---|---|---|");
    println!("{}", row("switches", last(Some("switch"))));
    println!("{}", row("rollbacks", last(Some("rollback"))));
    println!("{}", row("all", last(None)));
    let after_first: Vec<i64> = samples.iter().skip(1).map(Sample::last_node_ms).collect();
    println!("{}", row("all but the first switch", after_first));
    println!();
    println!("directive write → each node's swap");
    println!();
    println!("| node | n | p50 | p99 | max | mean |");
    println!("|---|---|---|---|---|---|");
    for (i, node) in nodes.iter().enumerate() {
        let values = samples.iter().map(|s| s.per_node_ms[i]).collect();
        println!("{}", row(&node.id, values));
    }
    println!();
    println!("REST call start → directive write (what the call does first)");
    println!();
    println!("| call | n | p50 | p99 | max | mean |");
    println!("|---|---|---|---|---|---|");
    for kind in ["switch", "rollback"] {
        let values = samples
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.call_to_write_ms)
            .collect();
        println!("{}", row(&format!("`POST /{kind}`"), values));
    }
    println!();
    println!("REST call start → the origin reports SWITCHED / ROLLED_BACK (polled)");
    println!();
    println!("| call | n | p50 | p99 | max | mean |");
    println!("|---|---|---|---|---|---|");
    for kind in ["switch", "rollback"] {
        let values = samples
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.settled_ms)
            .collect();
        println!("{}", row(&format!("`POST /{kind}`"), values));
    }
    println!();
    let mut by_kind: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for s in samples {
        by_kind
            .entry(s.kind)
            .or_default()
            .push(format!("{}:{:?}", s.epoch, s.per_node_ms));
    }
    for (kind, list) in by_kind {
        println!("{kind} (epoch:[ms per node]): {}", list.join(" "));
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a.starts_with("--format")) {
        // `cargo bench -- --list` and friends: nothing to list.
        return;
    }
    bkswitch_zk_harness::require_zk();
    let rounds: usize = std::env::var("BENCH_SWITCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let zk = bkswitch_zk_harness::shared();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    runtime.block_on(async {
        let stack = start_stack(&zk.connect_string()).await;
        let samples = run(&stack, rounds).await;
        report(&samples, &stack.nodes);
    });
}
