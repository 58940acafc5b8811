//! `bookie-switch serve` processes for the metadata-migration process tests:
//! started, watched through the `bookie-clusters` binary, killed, stopped
//! with their traffic summaries checked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_bookie-switch");
pub const CLI: &str = env!("CARGO_BIN_EXE_bookie-clusters");
pub const ADMIN: &str = "migration-admin-token";
pub const PARTICIPANTS: &str = "/admin/metadata-migration/participants";

/// One test at a time: each starts three processes next to real servers
/// (an async mutex: a failed test does not poison it).
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How the processes of a test binary serve their REST API when it is not
/// plain HTTP with static tokens: over TLS, with JWTs. Set once per test
/// binary ([`use_https`]); every helper here then speaks HTTPS.
pub struct Https {
    /// The CA the CLI and the clients trust.
    pub trust: PathBuf,
    /// The admin's token (a JWT of a superuser role).
    pub admin_token: String,
    /// Flags every `serve` gets (`--config` with the TLS and token
    /// settings, `--internal-token-file`).
    pub serve_args: Vec<String>,
}

static HTTPS: std::sync::OnceLock<Https> = std::sync::OnceLock::new();

/// Makes every process of this test binary serve over HTTPS with `https`.
pub fn use_https(https: Https) {
    assert!(HTTPS.set(https).is_ok(), "use_https is set once per binary");
}

/// The scheme processes serve on.
fn scheme() -> &'static str {
    if HTTPS.get().is_some() {
        "https"
    } else {
        "http"
    }
}

/// An admin client of `url`, over TLS when [`use_https`] was called.
pub fn admin_client(url: &str) -> AdminClient {
    match HTTPS.get() {
        Some(h) => AdminClient::with_tls(
            url,
            &h.admin_token,
            Some(bkswitch_admin::tls::client_config(Some(&h.trust), None).expect("trust")),
        )
        .expect("client"),
        None => AdminClient::new(url, ADMIN).expect("client"),
    }
}

pub fn zk_url() -> String {
    bkswitch_zk_harness::require_zk();
    format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    )
}

/// A started `serve` process.
pub struct Proc {
    pub child: Child,
    pub url: String,
    pub log: PathBuf,
    pub port: u16,
}

impl Proc {
    /// The process id (to freeze it with `SIGSTOP`, or signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A failed test leaves no process behind.
impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `bookie-switch serve` as `node-<node>` on `metadata`, with traffic
/// on `topic`, `extra` flags, its stderr into `log`; returns once its REST
/// API answers.
pub async fn serve(node: usize, topic: &str, metadata: &str, log: &Path, extra: &[&str]) -> Proc {
    serve_on(free_port(), node, topic, metadata, log, extra).await
}

/// [`serve`] on a given port (a node restarted where it listened).
pub async fn serve_on(
    port: u16,
    node: usize,
    topic: &str,
    metadata: &str,
    log: &Path,
    extra: &[&str],
) -> Proc {
    let mut args: Vec<String> = [
        "--node-id",
        &format!("node-{node}"),
        "--metadata-store",
        metadata,
        "--bookkeeper-uri",
        "memory://old",
        "--cluster-name",
        "old",
        "--topics",
        topic,
        "--rate",
        "40",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    launch("serve", port, &args, ADMIN, "migration-internal-token", log).await
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("address")
        .port()
}

/// The one way these tests start a `bookie-switch` process (`serve`,
/// `coordinator`): `command` listening on `port` with `args`, the admin and
/// internal tokens in its environment, its stderr into `log`; returns once
/// its REST API answers (panics with its log when it exits first).
pub async fn launch(
    command: &str,
    port: u16,
    args: &[String],
    admin: &str,
    internal: &str,
    log: &Path,
) -> Proc {
    launch_in(None, command, port, args, admin, internal, log).await
}

/// [`launch`], the process inside `cut`'s cgroup when one is given (so that
/// a test can cut it off ports, such as its bookies').
pub async fn launch_in(
    cut: Option<&bkswitch_zk_harness::NetCut>,
    command: &str,
    port: u16,
    args: &[String],
    admin: &str,
    internal: &str,
    log: &Path,
) -> Proc {
    let mut cmd = match cut {
        Some(cut) => cut.command(BIN),
        None => Command::new(BIN),
    };
    cmd.args([command, "--listen", &format!("127.0.0.1:{port}")])
        .args(args);
    if let Some(h) = HTTPS.get() {
        cmd.args(&h.serve_args)
            .env_remove("BKSWITCH_ADMIN_TOKEN")
            .env_remove("BKSWITCH_INTERNAL_TOKEN");
    }
    let mut child = cmd
        .envs(
            HTTPS
                .get()
                .is_none()
                .then_some([
                    ("BKSWITCH_ADMIN_TOKEN", admin),
                    ("BKSWITCH_INTERNAL_TOKEN", internal),
                ])
                .into_iter()
                .flatten(),
        )
        .stderr(Stdio::from(std::fs::File::create(log).expect("log file")))
        .spawn()
        .expect("start bookie-switch");
    let url = format!("{}://127.0.0.1:{port}", scheme());
    let client = match HTTPS.get() {
        Some(_) => admin_client(&url),
        None => AdminClient::new(&url, admin).expect("client"),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.status().await.is_err() {
        if let Some(code) = child.try_wait().expect("wait") {
            panic!(
                "{command} exited {code}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{command} did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Proc {
        child,
        url,
        log: log.to_owned(),
        port,
    }
}

/// Stops `p` with SIGTERM (as a service manager does), checks it exited
/// cleanly within 30 s and returns its log.
pub fn terminate(mut p: Proc) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let code = loop {
        if let Some(code) = p.child.try_wait().expect("wait") {
            break code;
        }
        assert!(
            Instant::now() < deadline,
            "bookie-switch did not stop on SIGTERM:\n{}",
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = p.log_text();
    assert!(code.success(), "bookie-switch exited {code}: {text}");
    text
}

/// Three nodes, `topic(i)` each.
pub async fn three(
    dir: &Path,
    tag: &str,
    metadata: &str,
    topic: impl Fn(usize) -> String,
    extra: &[&str],
) -> Vec<Proc> {
    let mut nodes = Vec::new();
    for i in 0..3 {
        let log = dir.join(format!("{tag}-serve-{i}.log"));
        nodes.push(serve(i, &topic(i), metadata, &log, extra).await);
    }
    nodes
}

pub fn logs(nodes: &[Proc]) -> String {
    nodes
        .iter()
        .map(|p| std::fs::read_to_string(&p.log).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n----\n")
}

/// Stops `p` with SIGTERM and checks its summaries: traffic published with
/// 0 publish failures and 0 gaps, its one topic loaded once and not fenced.
pub fn stop_clean(mut p: Proc) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let code = p.child.wait().expect("wait");
    let text = std::fs::read_to_string(&p.log).unwrap_or_default();
    assert!(code.success(), "serve exited {code}: {text}");
    let (published, failures, gaps) = traffic(&text);
    assert!(published > 0, "{text}");
    assert_eq!((failures, gaps), (0, 0), "{text}");
    assert!(
        text.lines().any(|l| l == "topics: 1 loaded, 0 fenced"),
        "a topic was fenced or reloaded:\n{text}"
    );
    text
}

pub fn kill(mut p: Proc) {
    p.child.kill().unwrap();
    p.child.wait().unwrap();
}

/// `(published, failures, gaps)` of the `traffic: …` line of `log`.
pub fn traffic(log: &str) -> (u64, u64, u64) {
    let line = log
        .lines()
        .find(|l| l.starts_with("traffic: "))
        .unwrap_or_else(|| panic!("no traffic summary:\n{log}"));
    let n = |word: &str| -> u64 {
        line.split(word)
            .next()
            .unwrap()
            .split_whitespace()
            .last()
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap()
    };
    (n(" published"), n(" publish failures"), n(" gaps"))
}

/// Runs `bookie-clusters` (the binary): exit code, stdout, stderr.
pub fn clusters(url: &str, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(CLI);
    match HTTPS.get() {
        Some(h) => cmd
            .args(["--url", url, "--tls-trust"])
            .arg(&h.trust)
            .env("BOOKIE_CLUSTERS_TOKEN", &h.admin_token),
        None => cmd.args(["--url", url, "--token", ADMIN]),
    };
    let out = cmd.args(args).output().expect("run bookie-clusters");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn start(url: &str, target: &str, wipe: bool) -> Result<String, String> {
    let mut args = vec!["metadata-migration", "start", "--target-url", target];
    // A wipe is confirmed by naming the target's root.
    let root = bkswitch_metadata_migration::StoreLocation::parse(target)
        .map(|l| l.root)
        .unwrap_or_default();
    if wipe {
        args.extend(["--wipe-target", root.as_str()]);
    }
    let (code, out, err) = clusters(url, &args);
    if code == 0 {
        Ok(out)
    } else {
        Err(format!("exit {code}: {err}"))
    }
}

/// The status document of the migration, as `--json … status` prints it.
pub fn status(url: &str) -> Value {
    let (code, out, err) = clusters(url, &["--json", "metadata-migration", "status"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// Waits until the migration (as `url` sees it) ends; returns its status.
pub async fn until_ended(url: &str, nodes: &[Proc], secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let doc = status(url);
        if matches!(
            doc["phase"].as_str().unwrap(),
            "COMPLETED" | "FAILED" | "ABORTED"
        ) {
            return doc;
        }
        assert!(Instant::now() < deadline, "{doc}\n{}", logs(nodes));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until every node in `nodes` uses `store_url`, with writes open.
pub async fn all_on(nodes: &[Proc], store_url: &str) {
    for p in nodes {
        let admin = admin_client(&p.url);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let doc = admin.migration_status().await.unwrap();
            if doc.node_store_url.as_deref() == Some(store_url) && !doc.writes_paused {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} uses {:?} (paused: {})\n{}",
                p.url,
                doc.node_store_url,
                doc.writes_paused,
                logs(nodes)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A gauge of the node's `/metrics`.
pub async fn gauge(url: &str, name: &str) -> Option<f64> {
    let (status, body) = super::raw("GET", &format!("{url}/metrics"), None, None).await;
    assert_eq!(status, 200);
    body.as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .map(|v| v.parse().unwrap())
}

pub async fn leader(nodes: &[Proc]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for (i, p) in nodes.iter().enumerate() {
            if gauge(&p.url, "bkswitch_coordinator_leader").await == Some(1.0) {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no leader\n{}", logs(nodes));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Seeds `n` children `c000000…` under `parent` (32 writers at once).
pub async fn seed(store: &Arc<dyn MetadataStore>, parent: &str, n: usize) {
    let mut set = tokio::task::JoinSet::new();
    for w in 0..32 {
        let store = store.clone();
        let parent = parent.to_owned();
        set.spawn(async move {
            for i in (w..n).step_by(32) {
                store
                    .put(
                        &format!("{parent}/c{i:06}"),
                        format!("value-{i}").as_bytes(),
                        ExpectedVersion::Any,
                    )
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

/// `(path, value, version)` of every child of `parent`, sorted.
pub async fn snapshot(store: &dyn MetadataStore, parent: &str) -> Vec<(String, Vec<u8>, i64)> {
    let mut names = store.children(parent).await.unwrap();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = format!("{parent}/{name}");
        let r = store.get(&path).await.unwrap().unwrap();
        out.push((path, r.value, r.stat.version));
    }
    out
}
