//! The metrics, judged by Prometheus itself: Debian's `prometheus` server
//! scrapes a `bookie-switch serve` process on loopback every 200 ms while a
//! switch runs (after the node's metadata was moved from memory to a real
//! ZooKeeper, so the metadata migration's series are there too), and its
//! HTTP API then finds the switch's counters, the
//! ledger operations per cluster and the active-cluster change; `promtool
//! check metrics` accepts the exposition; every query of the Grafana
//! dashboard (`ops/grafana/bkswitch.json`) returns data, and Prometheus loads
//! the alert rules (`ops/prometheus/bkswitch-alerts.yml`), which `promtool
//! check rules` and `promtool test rules` accept. `scripts/test.sh` installs
//! the package when it is missing.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_registry::ClusterStatus;
use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
use common::procs::{free_port, launch, terminate};
use common::*;

/// The repository's `ops/` directory (dashboard and alert rules).
fn ops_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("ops")
}

/// Every PromQL query of the Grafana dashboard's panels, with its panel's
/// title; the `$instance` variable becomes "every node".
fn dashboard_queries() -> Vec<(String, String)> {
    let path = ops_dir().join("grafana").join("bkswitch.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            out.push((title.to_owned(), expr.replace("$instance", ".+")));
        }
    }
    out
}

/// Runs `promtool` with `args` in `dir` and asserts it succeeds.
fn promtool(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (scripts/test.sh installs Debian's `prometheus`)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

/// How many alerts `bkswitch-alerts.yml` defines.
fn alert_count() -> usize {
    std::fs::read_to_string(ops_dir().join("prometheus").join("bkswitch-alerts.yml"))
        .unwrap()
        .lines()
        .filter(|l| l.trim().starts_with("- alert: "))
        .count()
}

/// The alert rules are valid, and each fires on the series of its unit test
/// (`promtool test rules` fails when an expected alert does not fire, or an
/// unexpected one does).
#[test]
fn alert_rules_pass_promtool() {
    let dir = ops_dir().join("prometheus");
    let checked = promtool(&dir, &["check", "rules", "bkswitch-alerts.yml"]);
    let count = alert_count();
    assert!(
        checked.contains(&format!("SUCCESS: {count} rules found")),
        "{checked}"
    );
    let tested = promtool(&dir, &["test", "rules", "bkswitch-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert has a unit test that expects it to fire.
    let rules = std::fs::read_to_string(dir.join("bkswitch-alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("bkswitch-alerts.test.yml")).unwrap();
    for line in rules.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(
                tests.contains(&format!(
                    "alertname: {name}\n        exp_alerts:\n          - exp_labels:"
                )),
                "no unit test fires {name}"
            );
        }
    }
}

/// The first sample's value of an instant query, if any.
async fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let url = format!(
        "{prometheus}/api/v1/query?query={}",
        promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    );
    let (code, body) = raw("GET", &url, None, None).await;
    assert_eq!(code, 200, "{promql}: {body}");
    let v = body["data"]["result"].get(0)?["value"][1].as_str()?;
    v.parse().ok()
}

/// Waits until `promql` has a first sample satisfying `ok`.
async fn until(prometheus: &str, promql: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = query(prometheus, promql).await {
            if ok(v) {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never answered `{promql}` as expected (last: {:?})",
            query(prometheus, promql).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_a_switch() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let node_url = format!("http://127.0.0.1:{port}");
    let args: Vec<String> = [
        "--cluster-name",
        "old",
        "--topics",
        "tenant/ns/persistent/m1,tenant/ns/persistent/m2",
        "--rate",
        "20",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let serve = launch(
        "serve",
        port,
        &args,
        ADMIN,
        INTERNAL,
        &dir.path().join("serve.log"),
    )
    .await;

    // The node's metadata moves from its in-memory store to a real
    // ZooKeeper first (PIP-454), so that the migration's series are there.
    bkswitch_zk_harness::require_zk();
    let zk = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let admin = AdminClient::new(&node_url, ADMIN).unwrap();
    admin.start_migration(&zk, None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = admin.migration_status().await.unwrap();
        if m.phase == "COMPLETED" && m.node_store_url.as_deref() == Some(zk.as_str()) {
            break;
        }
        assert!(!m.is_terminal() || m.phase == "COMPLETED", "{m:?}");
        assert!(Instant::now() < deadline, "{m:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The exposition itself: no token needed, and promtool accepts it (the
    // classic text format, served to clients that do not ask for
    // OpenMetrics; Prometheus asks for OpenMetrics and gets it).
    let (code, text) = raw("GET", &format!("{node_url}/metrics"), None, None).await;
    assert_eq!(code, 200);
    let text = text.as_str().unwrap_or_default().to_owned();
    for name in [
        "bkswitch_active_cluster{cluster=\"old\"} 1",
        "migration_ledger_id_conflict_total 0",
        "bkswitch_ledger_op_duration_seconds_bucket{",
        "bkswitch_directives_applied_total",
        "bkswitch_read_mode{mode=",
        "bkswitch_metadata_migration_phase{phase=\"COMPLETED\"} 1",
        "bkswitch_metadata_migration_phase{phase=\"PAUSED\"} 0",
        "bkswitch_metadata_migration_nodes_copied ",
        "bkswitch_metadata_migration_changes_caught_up ",
        "bkswitch_metadata_migration_pause_seconds ",
        "bkswitch_metadata_writes_paused 0",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (scripts/test.sh installs Debian's `prometheus`)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The real server, scraping every 200 ms.
    let prom_port = free_port();
    let prometheus = format!("http://127.0.0.1:{prom_port}");
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(prom_dir.join("data")).unwrap();
    let config = prom_dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 200ms\n  scrape_timeout: 190ms\n  \
             evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: bkswitch\n    static_configs:\n      \
             - targets: ['127.0.0.1:{port}']\n",
            ops_dir()
                .join("prometheus")
                .join("bkswitch-alerts.yml")
                .display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"));
    let prom_log = prom_dir.join("prometheus.log");
    let mut prom =
        GuardedProcess::spawn(&cmd, &prom_dir, &prom_log, GuardedIo::Log, false).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            prom.is_running(),
            "prometheus exited:\n{}",
            std::fs::read_to_string(&prom_log).unwrap_or_default()
        );
        let listening = tokio::net::TcpStream::connect(("127.0.0.1", prom_port))
            .await
            .is_ok();
        if listening {
            let ready = tokio::time::timeout(
                Duration::from_secs(2),
                raw("GET", &format!("{prometheus}/-/ready"), None, None),
            )
            .await;
            if matches!(ready, Ok((200, _))) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "prometheus not ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    until(&prometheus, "up{job=\"bkswitch\"}", |v| v == 1.0).await;
    until(
        &prometheus,
        "bkswitch_active_cluster{cluster=\"old\"}",
        |v| v == 1.0,
    )
    .await;

    // A switch through REST (now on ZooKeeper).
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    admin.switch("new").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = admin.status().await.unwrap();
        if st.switch().is_some_and(|s| s.is_settled()) {
            break;
        }
        assert!(Instant::now() < deadline, "{:?}", st.raw());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // What Prometheus saw.
    until(
        &prometheus,
        "bkswitch_active_cluster{cluster=\"new\"}",
        |v| v == 1.0,
    )
    .await;
    assert_eq!(
        query(&prometheus, "bkswitch_active_cluster{cluster=\"old\"}").await,
        Some(0.0)
    );
    assert_eq!(
        query(
            &prometheus,
            "max_over_time(bkswitch_active_cluster{cluster=\"old\"}[10m])"
        )
        .await,
        Some(1.0),
        "the change is in the series: `old` was active before"
    );
    for (promql, at_least) in [
        ("bkswitch_switch_events_total{event=\"started\"}", 1.0),
        ("bkswitch_switch_events_total{event=\"succeeded\"}", 1.0),
        ("bkswitch_directives_applied_total", 1.0),
        ("bkswitch_coordinator_duties_total", 1.0),
        ("bkswitch_epoch", 1.0),
        ("bkswitch_switch_phase{phase=\"SWITCHED\"}", 1.0),
        (
            "bkswitch_metadata_migration_phase{phase=\"COMPLETED\"}",
            1.0,
        ),
        ("bkswitch_metadata_migration_nodes_copied", 1.0),
        ("bkswitch_switch_ledgers{state=\"built\"}", 2.0),
        ("bkswitch_ledgers_copied_total", 2.0),
        ("bkswitch_copied_entries_total", 1.0),
        ("bkswitch_copied_bytes_total", 1.0),
        ("bkswitch_switch_copied_entries", 1.0),
        ("bkswitch_switch_expected_entries", 1.0),
        ("bkswitch_switch_copy_ledgers{state=\"done\"}", 2.0),
        (
            "bkswitch_ledger_op_duration_seconds_count{cluster=\"new\",op=\"add\"}",
            1.0,
        ),
        (
            "bkswitch_ledger_op_duration_seconds_count{cluster=\"old\",op=\"add\"}",
            1.0,
        ),
        (
            "bkswitch_ledger_op_duration_seconds_count{cluster=\"new\",op=\"create\"}",
            1.0,
        ),
    ] {
        until(&prometheus, promql, |v| v >= at_least).await;
    }
    assert_eq!(
        query(&prometheus, "migration_ledger_id_conflict_total").await,
        Some(0.0)
    );
    // The leader gauges (a single node leads), and the rollback window's end
    // (a day after SWITCHED, the default window).
    until(&prometheus, "bkswitch_coordinator_leader", |v| v == 1.0).await;
    until(&prometheus, "bkswitch_coordinator_leader_known", |v| {
        v == 1.0
    })
    .await;
    let left = until(
        &prometheus,
        "bkswitch_switch_rollback_deadline_seconds - time()",
        |v| v > 0.0,
    )
    .await;
    assert!(left <= 24.0 * 3600.0 + 60.0, "window ends in {left} s");
    until(
        &prometheus,
        "time() - bkswitch_switch_updated_timestamp_seconds",
        |v| (-60.0..600.0).contains(&v),
    )
    .await;

    // Every query of the dashboard returns data.
    let queries = dashboard_queries();
    assert!(queries.len() >= 15, "{queries:?}");
    for (panel, promql) in &queries {
        let deadline = Instant::now() + Duration::from_secs(60);
        while query(&prometheus, promql).await.is_none() {
            assert!(
                Instant::now() < deadline,
                "panel `{panel}`: `{promql}` returned no data"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Prometheus loaded every alert rule, evaluates them without error, and
    // none fires on a healthy switch.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, rules) = raw("GET", &format!("{prometheus}/api/v1/rules"), None, None).await;
        assert_eq!(code, 200, "{rules}");
        let loaded: Vec<&serde_json::Value> = rules["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        assert_eq!(loaded.len(), alert_count(), "{rules}");
        if loaded.iter().all(|r| r["health"] == "ok") {
            for rule in &loaded {
                assert_eq!(rule["state"], "inactive", "{rule}");
            }
            break;
        }
        assert!(Instant::now() < deadline, "rules not evaluated: {rules}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        query(
            &prometheus,
            "bkswitch_switch_events_total{event=\"failed\"}"
        )
        .await,
        None,
        "nothing failed"
    );
    prom.close();
    terminate(serve);
}
