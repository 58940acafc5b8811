//! The stack of a real history: two real bookie clusters (shared by the
//! histories of one test process), a metadata store (the process's ZooKeeper
//! or etcd server, a fresh chroot or prefix per history), one
//! [`FaultProxy`] per `serve` process on its metadata link, a [`NetCut`]
//! per process for its bookie links, and the three `serve` processes with
//! traffic and ack logs, started through `common::procs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::{advance_ledger_id_generator, ClientConfig};
use bkswitch_registry::ClusterStatus;
use bkswitch_zk_harness::{FaultProxy, LinkMode, NetCut};
use tokio::task::JoinSet;

use crate::common::procs::{kill, launch_in, Proc, ADMIN};
use crate::plan::{Backend, Bookies, Call, Cut, Step, NODES, SESSION};

/// The node-to-node token of the histories.
const INTERNAL: &str = "real-nemesis-internal-token";

/// Publishes per second per topic.
pub(crate) const RATE: u32 = 20;

/// The two bookie clusters of a test process.
pub(crate) struct Clusters {
    /// `old`, where the nodes start.
    pub(crate) old: BkCluster,
    /// `new`, registered by each history.
    pub(crate) new: BkCluster,
}

impl Clusters {
    /// The metadata-service URI of `name` (`old` or `new`).
    pub(crate) fn uri(&self, name: &str) -> String {
        match name {
            "new" => self.new.metadata_service_uri(),
            _ => self.old.metadata_service_uri(),
        }
    }
}

/// The topic of node `i`.
pub(crate) fn topic_of(i: usize) -> String {
    format!("tenant/ns/persistent/real-{i}")
}

/// One running history.
pub(crate) struct Stack<'a> {
    /// The bookies.
    pub(crate) clusters: &'a Clusters,
    /// ZooKeeper or etcd.
    pub(crate) backend: Backend,
    /// The store's URL without a proxy (for the checker).
    pub(crate) direct_url: String,
    /// Where logs and ack logs go.
    pub(crate) dir: PathBuf,
    /// One per node, on its metadata link.
    pub(crate) proxies: Vec<FaultProxy>,
    /// One per node, for its bookie links (`None` where network cuts cannot
    /// be made: not root, no iptables; bookie cuts are then skipped, unless
    /// `BKSWITCH_REQUIRE_NETCUT` is set).
    pub(crate) cuts: Option<Vec<NetCut>>,
    /// The running processes (`None`: killed, not yet started again).
    pub(crate) nodes: Vec<Option<Proc>>,
    /// Each node's REST port (kept across restarts).
    pub(crate) ports: Vec<u16>,
    /// Each node's starts so far.
    pub(crate) starts: Vec<usize>,
    /// What happened, in order.
    pub(crate) trace: Vec<String>,
    /// Operator calls running in the background.
    pub(crate) calls: JoinSet<String>,
    /// When the history began.
    pub(crate) began: Instant,
    root: String,
}

impl<'a> Stack<'a> {
    /// Proxies to `backend`'s server for a fresh chroot or prefix, and the
    /// three nodes started on `old` with `new` registered STANDBY.
    pub(crate) async fn start(clusters: &'a Clusters, backend: Backend, dir: &Path) -> Stack<'a> {
        let (server, root) = match backend {
            Backend::ZooKeeper => {
                bkswitch_zk_harness::require_zk();
                (
                    bkswitch_zk_harness::shared().connect_string(),
                    bkswitch_zk_harness::unique_chroot(),
                )
            }
            Backend::Etcd => (
                bkswitch_etcd_harness::shared().endpoint(0),
                bkswitch_etcd_harness::unique_prefix(),
            ),
        };
        let proxies = (0..NODES)
            .map(|_| FaultProxy::start(&server).expect("a proxy"))
            .collect();
        let cuts = match NetCut::available() {
            Ok(()) => Some(
                (0..NODES)
                    .map(|i| NetCut::new(&format!("node-{i}")).expect("a network cut"))
                    .collect(),
            ),
            Err(why) => {
                assert!(
                    std::env::var_os("BKSWITCH_REQUIRE_NETCUT").is_none(),
                    "bookie cuts are required here (BKSWITCH_REQUIRE_NETCUT): {why}"
                );
                eprintln!("bookie cuts are skipped: {why}");
                None
            }
        };
        let mut stack = Stack {
            clusters,
            backend,
            direct_url: url_of(backend, &server, &root),
            dir: dir.to_owned(),
            proxies,
            cuts,
            nodes: (0..NODES).map(|_| None).collect(),
            ports: (0..NODES).map(|_| stable_port()).collect(),
            starts: vec![0; NODES],
            trace: Vec::new(),
            calls: JoinSet::new(),
            began: Instant::now(),
            root,
        };
        for i in 0..NODES {
            stack.spawn(i).await;
        }
        let admin = stack.admin(0);
        let uri = clusters.uri("new");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match admin
                .register("new", &uri, Some(ClusterStatus::Standby))
                .await
            {
                Ok(_) => break,
                Err(e) => assert!(Instant::now() < deadline, "cannot register `new`: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        stack.note("registered `new` STANDBY");
        stack
    }

    /// Appends `line` to the trace, with the time since the start.
    pub(crate) fn note(&mut self, line: impl AsRef<str>) {
        let at = self.began.elapsed().as_secs_f64();
        self.trace.push(format!("{at:7.1}s {}", line.as_ref()));
    }

    /// Node `i`'s ack log.
    pub(crate) fn ack_log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("acks-node-{i}.log"))
    }

    /// Starts node `i` (again) on its port, through its proxy.
    pub(crate) async fn spawn(&mut self, i: usize) {
        self.starts[i] += 1;
        let metadata = url_of(self.backend, &self.proxies[i].host_port(), &self.root);
        let log = self.dir.join(format!("node-{i}-{}.log", self.starts[i]));
        let mut args: Vec<String> = [
            "--node-id",
            &format!("node-{i}"),
            "--metadata-store",
            &metadata,
            "--metadata-store-session-timeout-ms",
            &SESSION.as_millis().to_string(),
            "--bookkeeper-uri",
            &self.clusters.uri("old"),
            "--cluster-name",
            "old",
            "--topics",
            &topic_of(i),
            "--rate",
            &RATE.to_string(),
            "--ack-log",
            &self.ack_log(i).display().to_string(),
            "--old-ledger-read-timeout-ms",
            "2000",
            // A data ledger every ~5 s and a cursor ledger every few
            // seconds: rollovers and trims (metadata writes) run while links
            // are cut.
            "--max-entries-per-ledger",
            "100",
            "--cursor-max-entries-per-ledger",
            "20",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        // Nodes 0 and 1 trim what they consumed (the checker then accepts a
        // trimmed entry only behind the cursor); node 2 keeps every ledger,
        // so each of its acknowledged messages is read back.
        if i != 2 {
            args.push("--trim-consumed-ledgers".to_owned());
        }
        let cut = self.cuts.as_ref().map(|c| &c[i]);
        let mut p = launch_in(cut, "serve", self.ports[i], &args, ADMIN, INTERNAL, &log).await;
        // The API that answered must be this process's (not another
        // process's that took the port meanwhile).
        let id = self
            .admin(i)
            .status()
            .await
            .ok()
            .and_then(|st| st.node_id().map(str::to_owned));
        assert!(
            p.is_running() && id.as_deref() == Some(format!("node-{i}").as_str()),
            "node-{i} did not start on port {} (answered by {id:?}):\n{}",
            self.ports[i],
            p.log_text()
        );
        self.nodes[i] = Some(p);
    }

    /// An admin client of node `i`.
    pub(crate) fn admin(&self, i: usize) -> AdminClient {
        AdminClient::new(&format!("http://127.0.0.1:{}", self.ports[i]), ADMIN)
            .expect("client")
            .with_timeout(Duration::from_secs(30))
    }

    /// Runs `step`.
    pub(crate) async fn run(&mut self, n: usize, step: Step) {
        match step {
            Step::Partition { node, cut, ms } => {
                let mode = match cut {
                    Cut::Blackhole => LinkMode::Blackhole,
                    Cut::Reset => LinkMode::Reset,
                };
                self.note(format!(
                    "#{n} node-{node}'s metadata link {mode:?} for {ms} ms"
                ));
                self.proxies[node].set(mode);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.proxies[node].heal();
                self.note(format!("#{n} node-{node}'s metadata link healed"));
            }
            Step::BookieCut {
                node,
                bookies,
                cut,
                ms,
            } => {
                let Some(cuts) = &self.cuts else {
                    self.note(format!("#{n} bookie cut skipped (no network cuts here)"));
                    return;
                };
                let all = self.bookie_ports();
                let ports = match bookies {
                    Bookies::All => all,
                    Bookies::One(b) => vec![all[b % all.len()]],
                };
                let mode = match cut {
                    Cut::Blackhole => LinkMode::Blackhole,
                    Cut::Reset => LinkMode::Reset,
                };
                cuts[node].cut(&ports, mode).expect("cut the bookie links");
                self.note(format!(
                    "#{n} node-{node}'s links to bookies {ports:?} {mode:?} for {ms} ms"
                ));
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let cuts = self.cuts.as_ref().expect("cuts");
                cuts[node].heal().expect("heal the bookie links");
                self.note(format!("#{n} node-{node}'s bookie links healed"));
            }
            Step::Kill { node } => {
                let Some(p) = self.nodes[node].take() else {
                    self.note(format!("#{n} node-{node} is not running"));
                    return;
                };
                kill(p);
                self.note(format!("#{n} node-{node} SIGKILLed"));
                // Its session must expire before its topic can be owned
                // again (a start before that refuses the topic).
                tokio::time::sleep(SESSION + Duration::from_millis(1_500)).await;
                self.spawn(node).await;
                self.note(format!("#{n} node-{node} started again"));
            }
            Step::Freeze { node, ms } => {
                let Some(pid) = self.nodes[node].as_ref().map(Proc::pid) else {
                    self.note(format!("#{n} node-{node} is not running"));
                    return;
                };
                signal(pid, "STOP");
                self.note(format!("#{n} node-{node} SIGSTOPped for {ms} ms"));
                tokio::time::sleep(Duration::from_millis(ms)).await;
                signal(pid, "CONT");
                self.note(format!("#{n} node-{node} SIGCONTed"));
            }
            Step::Operator { node, call } => {
                self.note(format!(
                    "#{n} operator: {call:?} on node-{node} (background)"
                ));
                let admin = self.admin(node);
                let old = self.clusters.uri("old");
                let new = self.clusters.uri("new");
                self.calls.spawn(async move {
                    let outcome = operator(&admin, call, &old, &new).await;
                    format!("#{n} operator {call:?} on node-{node}: {outcome}")
                });
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Step::Wait { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }

    /// Heals every link, lets every frozen process run, starts the killed
    /// ones, waits for the operator calls and for the switch to settle.
    /// Returns what did not settle, if anything.
    pub(crate) async fn heal(&mut self) -> Option<String> {
        for p in &self.proxies {
            p.heal();
        }
        for c in self.cuts.iter().flatten() {
            c.heal().expect("heal the bookie links");
        }
        for i in 0..NODES {
            if let Some(pid) = self.nodes[i].as_ref().map(Proc::pid) {
                signal(pid, "CONT");
            }
        }
        while let Some(done) = self.calls.join_next().await {
            let line = done.unwrap_or_else(|e| format!("operator call panicked: {e}"));
            self.note(line);
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut settled = true;
            let mut seen = String::new();
            for i in 0..NODES {
                match self.admin(i).status().await {
                    Ok(st) => {
                        let sw = st.switch();
                        settled &= sw.as_ref().is_none_or(|s| s.is_settled());
                        seen = format!(
                            "{seen} node-{i}: active {:?}, switch {:?};",
                            st.active_cluster(),
                            sw.as_ref().and_then(|s| s.phase_name().map(str::to_owned))
                        );
                    }
                    Err(e) => {
                        settled = false;
                        seen = format!("{seen} node-{i}: {e};");
                    }
                }
            }
            if settled {
                self.note(format!("settled:{seen}"));
                return None;
            }
            if Instant::now() > deadline {
                return Some(format!("not settled 120 s after healing:{seen}"));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The ports of every bookie: `old`'s, then `new`'s.
    fn bookie_ports(&self) -> Vec<u16> {
        [&self.clusters.old, &self.clusters.new]
            .iter()
            .flat_map(|c| (0..c.bookie_count()).map(|b| c.bookie_port(b)))
            .collect()
    }

    /// Node `i`'s process, if it runs.
    pub(crate) fn running(&mut self, i: usize) -> bool {
        self.nodes[i].as_mut().is_some_and(Proc::is_running)
    }
}

/// A free loopback port below the kernel's ephemeral range (32768 and up
/// by default), so that no outgoing connection of a parallel history takes
/// it between two starts of a node that is restarted on it.
fn stable_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    loop {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos());
        let port = 20_000 + (h.finish() % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The store URL of `backend` at `host_port` with `root`.
fn url_of(backend: Backend, host_port: &str, root: &str) -> String {
    match backend {
        Backend::ZooKeeper => format!("zk://{host_port}{root}"),
        Backend::Etcd => format!("etcd://{host_port}{root}"),
    }
}

/// Sends `SIG<name>` to `pid`.
pub(crate) fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
}

/// The operator's way: the precheck of the call's target, the idgen step
/// when it is not ready (`bookie-switch idgen --advance-beyond N`, here the
/// library call), then the call.
async fn operator(admin: &AdminClient, call: Call, old: &str, new: &str) -> String {
    let target = match call {
        Call::SwitchToNew => "new".to_owned(),
        Call::SwitchToOld => "old".to_owned(),
        Call::Rollback => match admin.status().await {
            Ok(st) => match st.switch().and_then(|s| s.source().map(str::to_owned)) {
                Some(source) => source,
                None => return "no switch to roll back".into(),
            },
            Err(e) => return format!("status: {e}"),
        },
    };
    match admin.precheck(&target).await {
        Ok(pre) if !pre.ready => {
            if let Some(n) = pre.advance_beyond {
                let uri = if target == "new" { new } else { old };
                if let Err(e) = advance_ledger_id_generator(uri, n, &ClientConfig::default()).await
                {
                    return format!("idgen step on `{target}`: {e}");
                }
            }
        }
        Ok(_) => {}
        Err(e) => return format!("precheck of `{target}`: {e}"),
    }
    let answer = match call {
        Call::Rollback => admin.rollback().await,
        _ => admin.switch(&target).await,
    };
    match answer {
        Ok(st) => format!("{:?}", st.phase_name()),
        Err(e) => e.to_string().chars().take(160).collect(),
    }
}
