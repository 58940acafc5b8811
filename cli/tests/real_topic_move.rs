//! Topic moves between two real, geo-replicated Pulsar 4.2.4 clusters,
//! through real `bookie-switch lookup-proxy` processes, with real Java and
//! Python (C++) clients whose service URL is the proxy: every acknowledged
//! message must arrive (0 lost), duplicates and the worst blocked send are
//! measured. The routing table lives on real ZooKeeper. Each run prints a
//! `MOVE-FIGURES` line per client (what `bench/RESULTS.md` records).
//!
//! One broker pair for the binary; the scenarios run one at a time.
//!
//! These moves lost a message now and then before a move set the two
//! clusters' message ids apart (`docs/DESIGN.md` §7.3): both clusters'
//! topic sat in ledger 9, and Pulsar's clients keep message ids across a
//! move.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bkswitch_pulsar_harness::{
    pulsar_available, python_client_available, Admin, ClientKind, GeoPair, Traffic, TrafficOptions,
    TrafficReport, CLUSTER_A, CLUSTER_B, GEO_NAMESPACE,
};
use serde_json::Value;
use tokio::sync::OnceCell;

const BIN: &str = env!("CARGO_BIN_EXE_bookie-switch");
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn pair() -> &'static GeoPair {
    static PAIR: OnceCell<Result<GeoPair, String>> = OnceCell::const_new();
    match PAIR
        .get_or_init(|| async { GeoPair::start().await.map_err(|e| e.to_string()) })
        .await
    {
        Ok(p) => p,
        Err(e) => panic!("the GeoPair did not start: {e}"),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn fresh(name: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("persistent://{GEO_NAMESPACE}/{name}-{}", &id[..8])
}

/// A routing table of its own on the shared ZooKeeper, and the proxies
/// that follow it.
struct Routing {
    zk: String,
    root: String,
    proxies: Vec<Proxy>,
}

struct Proxy {
    child: Child,
    port: u16,
    http_port: u16,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Routing {
    fn new() -> Routing {
        bkswitch_zk_harness::require_zk();
        let id = uuid::Uuid::new_v4().simple().to_string();
        Routing {
            zk: format!("zk://{}", bkswitch_zk_harness::shared().connect_string()),
            root: format!("/pulsar-routes-{}", &id[..8]),
            proxies: Vec::new(),
        }
    }

    /// `bookie-switch pulsar … <args>`: exit code, stdout, stderr.
    fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(BIN)
            .args([
                "pulsar",
                "--metadata-url",
                &self.zk,
                "--routes-root",
                &self.root,
            ])
            .args(["--session-timeout", "4s", "--json"])
            .args(args)
            .output()
            .expect("bookie-switch pulsar");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 0, "pulsar {args:?}: {out}\n{err}");
        out
    }

    /// A coordinator process running `args` in the background.
    fn spawn(&self, args: &[&str], log: &str) -> Child {
        Command::new(BIN)
            .args([
                "pulsar",
                "--metadata-url",
                &self.zk,
                "--routes-root",
                &self.root,
            ])
            .args(["--session-timeout", "4s", "--json"])
            .args(args)
            .stdout(Stdio::from(
                std::fs::File::create(format!("{log}.out")).unwrap(),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(format!("{log}.err")).unwrap(),
            ))
            .spawn()
            .expect("bookie-switch pulsar")
    }

    fn register(&self, pair: &GeoPair) {
        for b in pair.brokers() {
            self.ok(&[
                "clusters",
                "create",
                b.name(),
                "--service-url",
                &b.broker_url(),
                "--web-service-url",
                &b.http_url(),
            ]);
        }
        self.ok(&[
            "routes",
            "set",
            &format!("namespace:{GEO_NAMESPACE}"),
            CLUSTER_A,
        ]);
    }

    /// Starts proxy `id`; returns once it answers on both listeners.
    async fn proxy(&mut self, id: &str) -> usize {
        let (port, http_port) = (free_port(), free_port());
        let log = std::env::temp_dir().join(format!("bkswitch-{}-{id}.log", &self.root[1..]));
        let child = Command::new(BIN)
            .args([
                "lookup-proxy",
                "--metadata-url",
                &self.zk,
                "--routes-root",
                &self.root,
            ])
            .args([
                "--id",
                id,
                "--session-timeout",
                "4s",
                "--home-cluster",
                CLUSTER_A,
            ])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--http-listen", &format!("127.0.0.1:{http_port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .expect("bookie-switch lookup-proxy");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", http_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "proxy {id} did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.proxies.push(Proxy {
            child,
            port,
            http_port,
        });
        self.proxies.len() - 1
    }

    fn binary_url(&self, which: &[usize]) -> String {
        let hosts: Vec<String> = which
            .iter()
            .map(|i| format!("127.0.0.1:{}", self.proxies[*i].port))
            .collect();
        format!("pulsar://{}", hosts.join(","))
    }

    fn http_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.proxies[i].http_port)
    }

    fn status(&self) -> Value {
        serde_json::from_str(&self.ok(&["topic-switch", "status"])).unwrap()
    }
}

/// The non-replicator producers and the consumers of `topic` on `admin`.
async fn clients(admin: &Admin, topic: &str, partitions: u32) -> (usize, usize) {
    let stats = if partitions > 0 {
        match admin.partitioned_stats(topic).await {
            Ok(p) => p.total,
            Err(_) => return (0, 0),
        }
    } else {
        match admin.topic_stats(topic).await {
            Ok(s) => s,
            Err(_) => return (0, 0),
        }
    };
    let consumers = stats.subscriptions.values().map(|s| s.consumers).sum();
    (stats.publishers.len(), consumers)
}

/// Waits until `topic`'s producer and consumer are on `on` and gone from
/// the other cluster.
async fn attached(pair: &GeoPair, topic: &str, partitions: u32, on: &str) {
    let other = if on == CLUSTER_A {
        CLUSTER_B
    } else {
        CLUSTER_A
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let here = clients(&pair.broker(on).unwrap().admin(), topic, partitions).await;
        let there = clients(&pair.broker(other).unwrap().admin(), topic, partitions).await;
        if here.0 > 0 && here.1 > 0 && there == (0, 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: clients on {on} {here:?}, on {other} {there:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What each cluster holds of `topic` (non-partitioned): its ledgers and
/// the cursors of `sub` and of the replicators, one line per cluster, for
/// the report of a run that lost a message.
async fn internals(pair: &GeoPair, topic: &str) -> String {
    let path = format!("/admin/v2/{}/internalStats", topic.replacen("://", "/", 1));
    let mut out = Vec::new();
    for b in pair.brokers() {
        let line = match b.admin().get(&path).await {
            Ok(v) => {
                let ledgers: Vec<Value> = v["ledgers"]
                    .as_array()
                    .map(|ls| {
                        ls.iter()
                            .map(|l| serde_json::json!([l["ledgerId"], l["entries"]]))
                            .collect()
                    })
                    .unwrap_or_default();
                let cursors: serde_json::Map<String, Value> = v["cursors"]
                    .as_object()
                    .map(|cs| {
                        cs.iter()
                            .map(|(name, c)| {
                                (
                                    name.clone(),
                                    serde_json::json!({
                                        "markDelete": c["markDeletePosition"],
                                        "read": c["readPosition"],
                                        "individuallyDeleted": c["individuallyDeletedMessages"],
                                    }),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::json!({
                    "lastConfirmed": v["lastConfirmedEntry"],
                    "ledgers": ledgers,
                    "cursors": cursors,
                })
                .to_string()
            }
            Err(e) => format!("internal stats: {e}"),
        };
        out.push(format!("{}: {line}", b.name()));
    }
    out.join("\n")
}

/// Creates `topic` on both clusters with its replicated subscription `sub`.
async fn prepare(pair: &GeoPair, topic: &str, partitions: u32) {
    for b in pair.brokers() {
        let admin = b.admin();
        if partitions > 0 {
            let _ = admin.create_partitioned_topic(topic, partitions).await;
        } else {
            let _ = admin.create_topic(topic).await;
        }
        admin
            .create_subscription(topic, "sub", true)
            .await
            .or_else(|e| {
                if e.status() == Some(409) {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .unwrap_or_else(|e| panic!("subscription on {}: {e}", b.name()));
    }
}

async fn traffic(kind: ClientKind, url: &str, topic: &str, partitioned: bool) -> Traffic {
    let t = Traffic::start(
        kind,
        &TrafficOptions::new(url, topic, "sub")
            .rate(50.0)
            .partitioned(partitioned)
            .drain(Duration::from_secs(8)),
    )
    .await
    .unwrap_or_else(|e| panic!("{kind:?} traffic on {topic}: {e}"));
    t.wait_for(Duration::from_secs(30), |p| p.acked >= 20)
        .await
        .unwrap_or_else(|e| panic!("{kind:?} traffic on {topic}: {e}"));
    t
}

/// 0 lost, 0 send errors; prints the figures.
fn judge(scenario: &str, what: &str, r: &TrafficReport) {
    println!(
        "MOVE-FIGURES {}",
        serde_json::json!({
            "scenario": scenario, "client": what, "acked": r.acked, "missing": r.missing,
            "sendErrors": r.send_errors, "duplicates": r.duplicates, "reordered": r.reordered,
            "worstBlockedSendMs": r.worst_blocked_send_ms,
        })
    );
    assert_eq!(
        r.missing, 0,
        "{scenario} {what}: acknowledged, never received: {r:?}"
    );
    assert_eq!(r.send_errors, 0, "{scenario} {what}: {r:?}");
    assert!(r.acked > 0, "{scenario} {what}: {r:?}");
    assert!(
        r.worst_blocked_send_ms < 10_000.0,
        "{scenario} {what}: a send blocked {} ms",
        r.worst_blocked_send_ms
    );
}

fn state(v: &Value) -> &str {
    v["state"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_move_under_java_and_python_traffic_and_back() {
    if !pulsar_available() || !python_client_available() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let pair = pair().await;
    let mut r = Routing::new();
    r.register(pair);
    r.proxy("p1").await;
    r.proxy("p2").await;
    let (tj, tp, th) = (fresh("java"), fresh("python"), fresh("http3"));
    prepare(pair, &tj, 0).await;
    prepare(pair, &tp, 0).await;
    prepare(pair, &th, 3).await;
    let url = r.binary_url(&[0, 1]);
    let java = traffic(ClientKind::Java, &url, &tj, false).await;
    let python = traffic(ClientKind::Python, &url, &tp, false).await;
    let http = traffic(ClientKind::Python, &r.http_url(1), &th, true).await;
    attached(pair, &tj, 0, CLUSTER_A).await;
    attached(pair, &tp, 0, CLUSTER_A).await;
    attached(pair, &th, 3, CLUSTER_A).await;

    let batch = format!("topic:{tj},topic:{tp},topic:{th}");
    let started = Instant::now();
    let out = r.ok(&[
        "topic-switch",
        "start",
        "--to",
        CLUSTER_B,
        "--batch",
        &batch,
        "--id",
        "m1",
    ]);
    let rec: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(state(&rec), "DONE", "{rec:#}");
    println!(
        "MOVE-FIGURES {{\"scenario\":\"switch\",\"moveSeconds\":{:.1}}}",
        started.elapsed().as_secs_f64()
    );
    attached(pair, &tj, 0, CLUSTER_B).await;
    attached(pair, &tp, 0, CLUSTER_B).await;
    attached(pair, &th, 3, CLUSTER_B).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let out = r.ok(&["topic-switch", "rollback"]);
    let rec: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(state(&rec), "ROLLED_BACK", "{rec:#}");
    attached(pair, &tj, 0, CLUSTER_A).await;
    attached(pair, &tp, 0, CLUSTER_A).await;
    attached(pair, &th, 3, CLUSTER_A).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    judge("switch+rollback", "java", &java.stop().await.unwrap());
    judge("switch+rollback", "python", &python.stop().await.unwrap());
    judge(
        "switch+rollback",
        "python-http-3-partitions",
        &http.stop().await.unwrap(),
    );
}

/// A losing run prints both clusters' ledgers and cursors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_clients_bypass_the_proxy_rolls_back_by_itself() {
    if !pulsar_available() || !python_client_available() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let pair = pair().await;
    let mut r = Routing::new();
    r.register(pair);
    r.proxy("p1").await;
    let (t1, t2) = (fresh("plan1"), fresh("plan2"));
    prepare(pair, &t1, 0).await;
    prepare(pair, &t2, 0).await;
    let through = traffic(ClientKind::Java, &r.binary_url(&[0]), &t1, false).await;
    // This client was given cluster A's own URL: an unload sends it back there.
    let bypass = traffic(ClientKind::Python, &pair.a().broker_url(), &t2, false).await;
    attached(pair, &t1, 0, CLUSTER_A).await;
    let (code, out, err) = r.cli(&[
        "topic-switch",
        "start",
        "--to",
        CLUSTER_B,
        "--id",
        "plan",
        "--batch",
        &format!("topic:{t1}"),
        "--batch",
        &format!("topic:{t2}"),
        "--soak",
        "2s",
        "--evict-timeout",
        "8s",
    ]);
    assert_ne!(code, 0, "{out}\n{err}");
    let rec: Value = serde_json::from_str(&out).unwrap_or_else(|_| r.status());
    assert_eq!(state(&rec), "FAILED", "{rec:#}");
    assert_eq!(rec["batches"][0]["phase"], "DONE", "{rec:#}");
    assert_eq!(rec["batches"][1]["phase"], "ROLLED_BACK", "{rec:#}");
    let error = rec["batches"][1]["error"].as_str().unwrap();
    assert!(
        error.contains("clients still attached") && error.contains(&t2),
        "{error}"
    );
    attached(pair, &t1, 0, CLUSTER_B).await;
    // The operator rolls the plan back: the first batch returns too.
    let rec: Value = serde_json::from_str(&r.ok(&["topic-switch", "rollback"])).unwrap();
    assert_eq!(state(&rec), "ROLLED_BACK", "{rec:#}");
    attached(pair, &t1, 0, CLUSTER_A).await;
    let java = through.stop().await.unwrap();
    if java.missing > 0 {
        // Where the lost messages could have gone: each cluster's ledgers
        // and cursors of the topic, for the report.
        println!("{t1} after the run:\n{}", internals(pair, &t1).await);
    }
    judge("plan-auto-rollback", "java", &java);
    judge(
        "plan-auto-rollback",
        "python-bypassing",
        &bypass.stop().await.unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_and_the_coordinator_killed_mid_move_and_the_move_completes() {
    if !pulsar_available() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let pair = pair().await;
    let mut r = Routing::new();
    r.register(pair);
    r.proxy("p1").await;
    r.proxy("p2").await;
    let t = fresh("kills");
    prepare(pair, &t, 0).await;
    let java = traffic(ClientKind::Java, &r.binary_url(&[0, 1]), &t, false).await;
    attached(pair, &t, 0, CLUSTER_A).await;
    let log = std::env::temp_dir().join(format!("bkswitch-coordinator-{}", &r.root[1..]));
    let log = log.to_string_lossy().into_owned();
    let mut coordinator = r.spawn(
        &[
            "topic-switch",
            "start",
            "--to",
            CLUSTER_B,
            "--batch",
            &format!("topic:{t}"),
            "--soak",
            "15s",
            "--id",
            "kills",
        ],
        &log,
    );
    // A proxy dies right away: the barrier waits until its session ends.
    let p2 = r.proxies.remove(1);
    drop(p2);
    // The coordinator's own limits bound the wait: the barrier (30 s), the
    // eviction (60 s) and the replication drain (120 s) each fail the batch
    // when exceeded, and a failed batch is reported at once below. On two
    // loaded cores the drain alone has taken most of a minute.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let (code, out, err) = r.cli(&["topic-switch", "status"]);
        if code == 0 {
            let v: Value = serde_json::from_str(&out).unwrap();
            let phase = v["batches"][0]["phase"].as_str().unwrap_or_default();
            if phase == "SOAK" {
                break;
            }
            assert!(
                !matches!(phase, "DONE" | "ROLLED_BACK" | "ABORTED")
                    && !phase.starts_with("ROLLBACK")
                    && v["batches"][0]["error"].is_null(),
                "the batch ended or failed before its soak: {v:#}\ncoordinator: {}{}",
                std::fs::read_to_string(format!("{log}.out")).unwrap_or_default(),
                std::fs::read_to_string(format!("{log}.err")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "never soaking; last status: {out}{err}\ncoordinator: {}{}",
            std::fs::read_to_string(format!("{log}.out")).unwrap_or_default(),
            std::fs::read_to_string(format!("{log}.err")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    attached(pair, &t, 0, CLUSTER_B).await;
    // The coordinator dies mid-soak; another takes over once its lease ended.
    let _ = coordinator.kill();
    let _ = coordinator.wait();
    let deadline = Instant::now() + Duration::from_secs(120);
    let rec = loop {
        let (code, out, err) = r.cli(&["topic-switch", "resume"]);
        if code == 0 {
            break serde_json::from_str::<Value>(&out).unwrap();
        }
        assert!(err.contains("driven by"), "{out}\n{err}");
        assert!(Instant::now() < deadline, "no takeover: {err}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(state(&rec), "DONE", "{rec:#}");
    assert_eq!(rec["owner"], "cli");
    attached(pair, &t, 0, CLUSTER_B).await;
    judge(
        "proxy+coordinator-killed",
        "java",
        &java.stop().await.unwrap(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_a_cluster_that_is_down_is_refused_and_nothing_is_written() {
    if !pulsar_available() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let pair = pair().await;
    let r = Routing::new();
    r.register(pair);
    let dead = free_port();
    r.ok(&[
        "clusters",
        "create",
        "cluster-c",
        "--service-url",
        &format!("pulsar://127.0.0.1:{dead}"),
        "--web-service-url",
        &format!("http://127.0.0.1:{dead}"),
    ]);
    let t = fresh("down");
    prepare(pair, &t, 0).await;
    let routes = r.ok(&["routes", "list"]);
    let (code, out, err) = r.cli(&[
        "topic-switch",
        "start",
        "--to",
        "cluster-c",
        "--batch",
        &format!("topic:{t}"),
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("not reachable") || out.contains("not reachable"),
        "{out}\n{err}"
    );
    assert_eq!(
        r.ok(&["routes", "list"]),
        routes,
        "a refused move changed the routes"
    );
    let (code, _, err) = r.cli(&["topic-switch", "status"]);
    assert_ne!(code, 0);
    assert!(err.contains("no topic move"), "{err}");
}

/// The anchor, side by side: the same traffic (Java and Python clients
/// through the proxy, routed to cluster A) moved by Pulsar's own PIP-188
/// cluster migration (`POST /admin/v2/clusters/cluster-a/migrate` with the
/// brokers' migration check every second). On a pair of its own (a migrated
/// cluster stays migrated). Prints `MOVE-FIGURES` lines; run by hand:
/// `cargo test -p bkswitch-cli --test real_topic_move -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the anchor's figures for bench/RESULTS.md; run by hand"]
async fn pip188_moves_the_same_traffic() {
    use bkswitch_pulsar_harness::StandaloneOptions;
    if !pulsar_available() || !python_client_available() {
        return;
    }
    let _serial = SERIAL.lock().await;
    let opts =
        |c: &str| StandaloneOptions::new(c).conf("clusterMigrationCheckDurationSeconds", "1");
    let pair = GeoPair::start_with(opts(CLUSTER_A), opts(CLUSTER_B))
        .await
        .expect("a pair with migration checks");
    let mut r = Routing::new();
    r.register(&pair);
    r.proxy("p1").await;
    let (tj, tp) = (fresh("pip188-java"), fresh("pip188-python"));
    prepare(&pair, &tj, 0).await;
    prepare(&pair, &tp, 0).await;
    let url = r.binary_url(&[0]);
    let java = traffic(ClientKind::Java, &url, &tj, false).await;
    let python = traffic(ClientKind::Python, &url, &tp, false).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Instant::now();
    pair.a()
        .admin()
        .cluster_migrate(CLUSTER_A, &pair.b().http_url(), &pair.b().broker_url())
        .await
        .expect("PIP-188 migrate");
    tokio::time::sleep(Duration::from_secs(30)).await;
    for (what, t) in [("java", &tj), ("python", &tp)] {
        let a = clients(&pair.a().admin(), t, 0).await;
        let b = clients(&pair.b().admin(), t, 0).await;
        println!(
            "MOVE-FIGURES {}",
            serde_json::json!({"scenario": "pip188", "client": what, "onA": [a.0, a.1], "onB": [b.0, b.1],
                "secondsAfterMigrate": started.elapsed().as_secs()})
        );
    }
    for (what, t) in [("java", java), ("python", python)] {
        let rep = t.stop().await.unwrap();
        println!(
            "MOVE-FIGURES {}",
            serde_json::json!({
                "scenario": "pip188", "client": what, "sent": rep.sent, "acked": rep.acked,
                "missing": rep.missing, "sendErrors": rep.send_errors,
                "firstSendError": rep.first_send_error, "duplicates": rep.duplicates,
                "reordered": rep.reordered, "worstBlockedSendMs": rep.worst_blocked_send_ms,
            })
        );
    }
}
