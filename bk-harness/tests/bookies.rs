//! Tests of the BookKeeper harness itself, on real bookies: start and
//! registration, the cluster layout, the Java client session, bookie faults,
//! two clusters on one ZooKeeper, and the guarantee that no JVM outlives the
//! test process.
//!
//! The 3-bookie [`shared`] cluster and one Java session on it serve every test
//! that injects no fault; tests that start their own JVMs take `HEAVY` so that
//! at most one of them runs at a time (the machines have few cores).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bkswitch_bk_harness::{
    bk_available, codes, deterministic_payload, java_binary, lib_dir, shared, BenchAddOptions,
    BkCluster, CreateOptions, DigestType, JavaClient, JAVA_17_FLAGS, LAYOUT,
};

const HELPER_ENV: &str = "BKSWITCH_BK_HARNESS_HELPER";

fn heavy() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

/// One Java session on the shared cluster.
fn java() -> &'static JavaClient {
    static JAVA: OnceLock<JavaClient> = OnceLock::new();
    JAVA.get_or_init(|| shared().java_client())
}

fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300)).is_ok()
}

fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && text.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

#[test]
fn shared_cluster_registers_three_bookies_with_the_initnewcluster_layout() {
    if !bk_available() {
        return;
    }
    let cluster = shared();
    let zk = bkswitch_zk_harness::shared();
    let root = cluster.ledgers_root().to_owned();
    assert_eq!(cluster.zk_connect(), zk.connect_string());
    assert_eq!(
        cluster.metadata_service_uri(),
        format!("zk+hierarchical://{}{root}", zk.connect_string())
    );
    assert_eq!(cluster.bookie_count(), 3);

    let ids = cluster.bookie_ids();
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(*id, format!("127.0.0.1:{}", cluster.bookie_port(i)));
        assert!(cluster.is_running(i));
        assert!(cluster.is_registered(i));
        assert!(
            port_open(cluster.bookie_port(i)),
            "bookie {i} does not listen"
        );
        // The registration carries a BookieServiceInfoFormat; the cookie is kept
        // in ZooKeeper too.
        let info = cluster
            .zk_get(&format!("{root}/available/{id}"))
            .expect("registration");
        assert!(!info.is_empty(), "empty BookieServiceInfo for {id}");
        assert!(cluster.zk_get(&format!("{root}/cookies/{id}")).is_some());
    }
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(cluster.writable_bookies(), sorted);
    assert!(cluster.readonly_bookies().is_empty());

    assert_eq!(
        cluster.zk_get(&format!("{root}/LAYOUT")).as_deref(),
        Some(LAYOUT)
    );
    let instance = cluster
        .zk_get(&format!("{root}/INSTANCEID"))
        .expect("INSTANCEID");
    assert!(is_uuid(&String::from_utf8(instance).unwrap()));
    assert!(!cluster.log_tail(0, 20).is_empty());
}

#[test]
fn java_session_writes_reads_and_describes_a_ledger() {
    if !bk_available() {
        return;
    }
    let cluster = shared();
    let java = java();
    let options = CreateOptions::new(3, 2, 2)
        .digest(DigestType::Crc32c)
        .password("secret")
        .custom("component", b"managed-ledger".to_vec())
        .custom("binary", vec![0u8, 1, 2, 255]);
    let id = java.create(&options).expect("create");

    let mut payloads: Vec<Vec<u8>> = vec![Vec::new(), b"x".to_vec(), vec![7u8; 1000]];
    payloads.push((0..65_536u32).map(|i| (i % 251) as u8).collect());
    for (n, payload) in payloads.iter().enumerate() {
        assert_eq!(java.add(id, payload).expect("add"), n as i64);
    }
    let more: Vec<Vec<u8>> = (0..20).map(|n| format!("more-{n}").into_bytes()).collect();
    let last = java.add_payloads(id, &more).expect("add many payloads");
    payloads.extend(more);
    assert_eq!(last, payloads.len() as i64 - 1);
    // The bookies' LAC lags: each entry carries the LAC known when it was sent,
    // and pipelined adds were sent before their predecessors were confirmed.
    let lac = java.lac(id).expect("lac");
    assert!((0..=last).contains(&lac), "lac {lac}, last {last}");

    // Metadata of the open ledger.
    let md = java.metadata(id).expect("metadata");
    assert_eq!(md.state, "OPEN");
    assert_eq!(md.last_entry_id, -1);
    assert_ne!(md.c_token, 0, "a created ledger carries a creation token");

    java.close(id).expect("close");
    let length: i64 = payloads.iter().map(|p| p.len() as i64).sum();
    let md = java.metadata(id).expect("metadata");
    assert_eq!(md.ledger_id, id);
    assert_eq!(
        (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size),
        (3, 2, 2)
    );
    assert_eq!(md.digest_type, DigestType::Crc32c);
    assert!(md.has_password);
    assert_eq!(md.password, b"secret");
    let expected: BTreeMap<String, Vec<u8>> = options.custom_metadata.clone();
    assert_eq!(md.custom_metadata, expected);
    assert_eq!(md.state, "CLOSED");
    assert!(md.closed);
    assert_eq!(md.last_entry_id, last);
    assert_eq!(md.length, length);
    assert_eq!(md.metadata_format_version, 3);
    // The Java client rewrites the metadata without the creation token when it
    // closes the ledger.
    assert_eq!(md.c_token, 0);
    // No ctime field is stored by default: it is the znode's creation time.
    assert!(md.ctime > 0);
    assert_eq!(md.ensembles.len(), 1);
    assert_eq!(md.ensembles[0].first_entry_id, 0);
    assert_eq!(md.ensembles[0].bookies.len(), 3);
    let ids = cluster.bookie_ids();
    assert!(md.ensembles[0].bookies.iter().all(|b| ids.contains(b)));

    // Reopen (recovery of a closed ledger changes nothing) and read it all.
    let opened = java
        .open(id, true, DigestType::Crc32c, b"secret")
        .expect("open");
    assert_eq!(opened.lac, last);
    assert!(opened.closed);
    assert_eq!(opened.length, length);
    assert_eq!(opened.last_entry_id, last);
    let entries = java.read(id, 0, last).expect("read");
    assert_eq!(entries.len(), payloads.len());
    for (entry, payload) in entries.iter().zip(&payloads) {
        assert_eq!(entry.data, *payload, "entry {}", entry.entry_id);
    }
    assert_eq!(entries.last().unwrap().entry_id, last);

    // A wrong password is refused; an unknown ledger is unknown.
    let err = java
        .open(id, false, DigestType::Crc32c, b"wrong")
        .unwrap_err();
    assert_eq!(err.code, codes::UNAUTHORIZED_ACCESS, "{err}");
    let err = java
        .open(id + 1_000_000, false, DigestType::Crc32c, b"")
        .unwrap_err();
    assert_eq!(
        err.code,
        codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER,
        "{err}"
    );

    // Deterministic payloads, pipelined.
    let id2 = java.create(&CreateOptions::new(2, 2, 1)).expect("create");
    assert_eq!(java.add_many(id2, 200, Some(512)).expect("add_many"), 199);
    java.close(id2).expect("close");
    java.open(id2, false, DigestType::Crc32c, b"")
        .expect("open");
    let entries = java.read(id2, 190, 199).expect("read");
    for entry in entries {
        assert_eq!(
            entry.data,
            deterministic_payload(entry.entry_id as u64, Some(512))
        );
    }

    // Delete, then the ledger is unknown.
    java.delete(id2).expect("delete");
    assert_eq!(
        java.metadata(id2).unwrap_err().code,
        codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER
    );
}

#[test]
fn java_session_creates_adv_ledgers_at_chosen_ids() {
    if !bk_available() {
        return;
    }
    let java = java();
    let id = (1i64 << 40) + i64::from(std::process::id());
    let options = CreateOptions::new(3, 3, 2)
        .digest(DigestType::Mac)
        .password("pw")
        .ledger_id(id);
    assert_eq!(java.create(&options).expect("createAdv"), id);
    for entry in 0..3 {
        assert_eq!(
            java.add_at(id, entry, format!("adv-{entry}").as_bytes())
                .expect("add"),
            entry
        );
    }
    java.close(id).expect("close");
    let err = java.create(&options).unwrap_err();
    assert_eq!(err.code, codes::LEDGER_EXIST, "{err}");
    let md = java.metadata(id).expect("metadata");
    assert_eq!(md.digest_type, DigestType::Mac);
    assert_eq!(md.last_entry_id, 2);
    java.open(id, false, DigestType::Mac, b"pw").expect("open");
    let entries = java.read(id, 0, 2).expect("read");
    assert_eq!(entries[2].data, b"adv-2");

    // The generic call reports helper errors with their own code.
    let err = java
        .call(serde_json::json!({ "cmd": "read", "ledgerId": -5, "first": 0, "last": 0 }))
        .unwrap_err();
    assert_eq!(err.code, bkswitch_bk_harness::JavaError::HELPER, "{err}");
    let pong = java
        .call(serde_json::json!({ "cmd": "ping" }))
        .expect("ping");
    assert_eq!(pong["ok"], true);
}

#[test]
fn a_recovering_reader_fences_the_open_writer() {
    if !bk_available() {
        return;
    }
    let cluster = shared();
    let writer = java();
    let id = writer
        .create(&CreateOptions::new(3, 2, 2).password("pw"))
        .expect("create");
    for n in 0..5 {
        writer.add(id, format!("w-{n}").as_bytes()).expect("add");
    }
    // The reader is another client, on the v3 protocol.
    let reader = JavaClient::builder(&cluster.metadata_service_uri())
        .v3(true)
        .start();
    assert!(reader.is_v3());
    let opened = reader
        .open(id, true, DigestType::Crc32c, b"pw")
        .expect("recovery open");
    assert!(opened.closed);
    assert_eq!(opened.lac, 4);
    let err = writer.add(id, b"too late").unwrap_err();
    assert_eq!(err.code, codes::LEDGER_FENCED, "{err}");
    let md = reader.metadata(id).expect("metadata");
    assert_eq!(md.state, "CLOSED");
    assert_eq!(md.last_entry_id, 4);
    let entries = reader.read(id, 0, 4).expect("read");
    assert_eq!(entries[4].data, b"w-4");
    reader.quit();
}

#[test]
fn java_benchmarks_run() {
    if !bk_available() {
        return;
    }
    let java = java();
    let add = java
        .bench_add(&BenchAddOptions {
            entries: 500,
            size: 1024,
            inflight: 50,
            ensemble: 3,
            write_quorum: 2,
            ack_quorum: 2,
        })
        .expect("benchAdd");
    assert_eq!(add.entries, 500);
    assert!(add.seconds > 0.0 && add.entries_per_sec > 0.0 && add.mib_per_sec > 0.0);
    assert!(add.p50_micros > 0.0 && add.p99_micros >= add.p50_micros);
    // Timed from the window's release, an add waits at least as long as from
    // its call; on average at most the window is in flight, and some are.
    assert!(
        add.window_p99_micros >= add.p99_micros,
        "p99 from the window {} < p99 from the call {}",
        add.window_p99_micros,
        add.p99_micros
    );
    assert!(
        add.in_flight > 0.0 && add.in_flight <= 50.0,
        "in flight on average: {}",
        add.in_flight
    );
    let read = java.bench_read(add.ledger_id, 100).expect("benchRead");
    assert_eq!(read.entries, 500);
    assert!(read.entries_per_sec > 0.0);
}

#[test]
fn killed_bookie_unregisters_and_restarts_with_its_cookie() {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let cluster = BkCluster::on_shared_zk(1);
    let id = cluster.bookie_id(0);
    let port = cluster.bookie_port(0);

    let killed = Instant::now();
    cluster.kill(0);
    assert!(!cluster.is_running(0));
    assert!(!port_open(port));
    cluster.wait_unregistered(0, Duration::from_secs(20));
    let gone_after = killed.elapsed();
    assert!(
        gone_after >= Duration::from_secs(1),
        "the registration vanished after {gone_after:?}: not a crash but a clean shutdown?"
    );

    cluster.restart(0);
    assert!(cluster.is_running(0));
    assert!(cluster.is_registered(0));
    assert_eq!(cluster.bookie_id(0), id);
    assert_eq!(cluster.bookie_port(0), port);
    assert!(cluster.log_tail(0, 400).contains(&port.to_string()));

    // A spare, stopped cleanly: it unregisters at once.
    let spare = cluster.add_bookie();
    assert_eq!(spare, 1);
    assert_eq!(cluster.writable_bookies().len(), 2);
    let stopped = Instant::now();
    cluster.stop(spare);
    assert!(!cluster.is_running(spare));
    cluster.wait_unregistered(spare, Duration::from_secs(3));
    assert!(stopped.elapsed() < Duration::from_secs(30));
    cluster.restart(spare);
    assert!(cluster.is_registered(spare));

    // A ledger on the restarted pair.
    let java = cluster.java_client();
    let ledger = java.create(&CreateOptions::new(2, 2, 2)).expect("create");
    java.add(ledger, b"after restart").expect("add");
    java.close(ledger).expect("close");
}

#[test]
fn readonly_and_custom_id_bookies() {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let zk = bkswitch_zk_harness::shared();
    let cluster = BkCluster::builder(
        &zk.connect_string(),
        &bkswitch_bk_harness::unique_ledgers_root(),
    )
    .bookies(2)
    .bookie_conf(0, "bookieId=bk-custom-0")
    .bookie_conf(1, "forceReadOnlyBookie=true")
    .start();
    assert_eq!(cluster.bookie_id(0), "bk-custom-0");
    assert_eq!(cluster.writable_bookies(), ["bk-custom-0"]);
    assert_eq!(cluster.readonly_bookies(), [cluster.bookie_id(1)]);
    let java = cluster.java_client();
    let ledger = java.create(&CreateOptions::new(1, 1, 1)).expect("create");
    java.add(ledger, b"on the custom id").expect("add");
    java.close(ledger).expect("close");
    let md = java.metadata(ledger).expect("metadata");
    assert_eq!(md.ensembles[0].bookies, ["bk-custom-0"]);
    assert_eq!(
        java.create(&CreateOptions::new(2, 2, 2)).unwrap_err().code,
        codes::NOT_ENOUGH_BOOKIES
    );
}

#[test]
fn a_bookie_that_cannot_start_fails_the_start_with_its_log() {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let zk = bkswitch_zk_harness::shared();
    let started = Instant::now();
    let err = BkCluster::builder(
        &zk.connect_string(),
        &bkswitch_bk_harness::unique_ledgers_root(),
    )
    .bookies(1)
    .conf("ledgerStorageClass=org.example.NoSuchStorage")
    .try_start()
    .unwrap_err()
    .to_string();
    assert!(err.contains("exited during start"), "{err}");
    assert!(err.contains("org.example.NoSuchStorage"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn two_clusters_share_one_zookeeper_without_crosstalk() {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let zk = bkswitch_zk_harness::shared().connect_string();
    let a = BkCluster::start(&zk, "/ledgers-a", 1);
    let b = BkCluster::start(&zk, "/ledgers-b", 1);
    assert_eq!(
        a.metadata_service_uri(),
        format!("zk+hierarchical://{zk}/ledgers-a")
    );
    assert_eq!(
        b.metadata_service_uri(),
        format!("zk+hierarchical://{zk}/ledgers-b")
    );
    assert_ne!(a.bookie_ids(), b.bookie_ids());
    assert_eq!(a.writable_bookies(), a.bookie_ids());
    assert_eq!(b.writable_bookies(), b.bookie_ids());

    let ja = a.java_client();
    let jb = b.java_client();
    let in_a = ja
        .create(&CreateOptions::new(1, 1, 1))
        .expect("create in a");
    ja.add(in_a, b"only in a").expect("add");
    ja.close(in_a).expect("close");
    let err = jb.open(in_a, false, DigestType::Crc32c, b"").unwrap_err();
    assert_eq!(
        err.code,
        codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER,
        "{err}"
    );
    let err = jb.metadata(in_a).unwrap_err();
    assert_eq!(err.code, codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER);

    // b has its own id generator and its own bookies.
    let in_b = jb
        .create(&CreateOptions::new(1, 1, 1))
        .expect("create in b");
    jb.add(in_b, b"only in b").expect("add");
    jb.close(in_b).expect("close");
    assert_eq!(
        jb.metadata(in_b).unwrap().ensembles[0].bookies,
        b.bookie_ids()
    );
    assert_eq!(
        ja.metadata(in_a).unwrap().ensembles[0].bookies,
        a.bookie_ids()
    );
}

#[test]
fn layout_matches_what_initnewcluster_writes() {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let zk = bkswitch_zk_harness::shared().connect_string();
    let base = bkswitch_zk_harness::unique_chroot();
    let shell_root = format!("{base}/shell");
    // A cluster with no bookie only lays the root out.
    let ours = BkCluster::start(&zk, &format!("{base}/harness"), 0);

    // The parent must exist for the shell.
    ours.zk_get(&base).expect("parent created with the layout");
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("shell.conf");
    std::fs::write(
        &conf,
        format!("metadataServiceUri=zk+hierarchical://{zk}{shell_root}\nzkTimeout=4000\n"),
    )
    .expect("conf");
    let output = Command::new(java_binary())
        .args(JAVA_17_FLAGS)
        .arg("-cp")
        .arg(format!("{}/*", lib_dir().display()))
        .arg("org.apache.bookkeeper.bookie.BookieShell")
        .arg("-conf")
        .arg(&conf)
        .arg("initnewcluster")
        .stdin(Stdio::null())
        .output()
        .expect("run BookieShell");
    assert!(
        output.status.success(),
        "initnewcluster failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let harness_root = ours.ledgers_root().to_owned();
    for suffix in ["", "/available", "/available/readonly", "/LAYOUT"] {
        let theirs = ours.zk_get(&format!("{shell_root}{suffix}"));
        let mine = ours.zk_get(&format!("{harness_root}{suffix}"));
        assert!(theirs.is_some(), "initnewcluster did not create {suffix}");
        assert_eq!(mine, theirs, "{suffix} differs from initnewcluster's");
    }
    let theirs = ours.zk_get(&format!("{shell_root}/INSTANCEID")).unwrap();
    let mine = ours.zk_get(&format!("{harness_root}/INSTANCEID")).unwrap();
    assert!(is_uuid(std::str::from_utf8(&theirs).unwrap()));
    assert!(is_uuid(std::str::from_utf8(&mine).unwrap()));
    assert_eq!(mine.len(), theirs.len());
}

/// Not a test on its own: the body of the child process spawned by
/// `no_jvm_outlives_the_test_process`. Does nothing unless the helper variable
/// is set.
#[test]
fn helper_process() {
    if std::env::var(HELPER_ENV).is_err() || !bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(1);
    let java = cluster.java_client();
    println!(
        "BOOKIE {} DIR {} SESSION {}",
        cluster.bookie_port(0),
        cluster.bookie_dir(0).display(),
        java.log_path().parent().unwrap().display()
    );
    std::io::stdout().flush().expect("flush");
    std::mem::forget(java);
    std::mem::forget(cluster);
    std::thread::sleep(Duration::from_secs(300));
}

/// Processes whose working folder is (or was) `dir` (the Java session runs
/// there).
fn processes_in(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            // A removed folder reads as "<path> (deleted)".
            if cwd.to_string_lossy().starts_with(&*dir.to_string_lossy()) {
                found.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    found
}

#[test]
fn no_jvm_outlives_the_test_process() {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let mut child = bkswitch_zk_harness::helper_test_command("helper_process", HELPER_ENV, "1")
        .spawn()
        .expect("spawn helper");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (port, dir, session): (u16, PathBuf, PathBuf) = loop {
        let line = lines
            .next()
            .expect("the helper printed its cluster")
            .expect("read helper output");
        if let Some((_, rest)) = line.split_once("BOOKIE ") {
            let (port, rest) = rest.split_once(" DIR ").expect("BOOKIE .. DIR ..");
            let (dir, session) = rest.split_once(" SESSION ").expect("DIR .. SESSION ..");
            break (port.parse().expect("port"), dir.into(), session.into());
        }
    };
    std::thread::spawn(move || for _ in lines {});
    assert!(port_open(port));
    assert!(!processes_in(&session).is_empty(), "no Java session found");

    child.kill().expect("SIGKILL the helper");
    child.wait().expect("helper exits");
    assert!(
        wait_until(Duration::from_secs(20), || !port_open(port)),
        "the bookie on port {port} survived its test process"
    );
    assert!(
        wait_until(Duration::from_secs(20), || !dir.exists()),
        "{} left behind",
        dir.display()
    );
    assert!(
        wait_until(Duration::from_secs(20), || processes_in(&session)
            .is_empty()
            && !session.exists()),
        "the Java session in {} survived its test process",
        session.display()
    );
}

/// The Java copier (`copyFrom`, the Java way of the id-preserving copy):
/// ledgers of the shared cluster copied into another cluster keep their ids,
/// quorums, custom metadata, entries and length; an id already taken on the
/// target fails the copy with the Java client's "ledger exists".
#[test]
fn java_copier_keeps_ids_metadata_and_entries() {
    java_copier_case(false);
}

/// The same for the pipelined Java copier (`copyPipelined`), with reads of 7
/// entries so that several reads are in flight within a window of 16.
#[test]
fn pipelined_java_copier_keeps_ids_metadata_and_entries() {
    java_copier_case(true);
}

fn java_copier_case(pipelined: bool) {
    if !bk_available() {
        return;
    }
    let _heavy = heavy();
    let source = java();
    let mut ids = Vec::new();
    for (i, count) in [(0u8, 40u64), (1, 1), (2, 130)] {
        let options = CreateOptions::new(3, 2, 2)
            .custom("application", "pulsar")
            .custom("copy-test", vec![i]);
        let id = source.create(&options).expect("create");
        source.add_many(id, count, Some(100)).expect("adds");
        source.close(id).expect("close");
        ids.push(id);
    }
    // Bookies start slowly on a loaded machine: a generous bound.
    let target = BkCluster::builder(
        &bkswitch_zk_harness::shared().connect_string(),
        &bkswitch_bk_harness::unique_ledgers_root(),
    )
    .bookies(3)
    .start_timeout(Duration::from_secs(240))
    .start();
    let java_target = target.java_client();
    let copy = |ids: &[i64], copies| {
        if pipelined {
            java_target.copy_pipelined(&shared().metadata_service_uri(), ids, copies, 16, 7)
        } else {
            java_target.copy_from(&shared().metadata_service_uri(), ids, copies, 16)
        }
    };
    let copied = copy(&ids, 2).expect("copy");
    assert_eq!((copied.ledgers, copied.entries), (3, 171));
    assert_eq!(copied.bytes, 171 * 100);
    for &id in &ids {
        let from = source.metadata(id).expect("source metadata");
        let to = java_target.metadata(id).expect("target metadata");
        assert_eq!(
            (to.ensemble_size, to.write_quorum_size, to.ack_quorum_size),
            (3, 2, 2)
        );
        assert_eq!(to.custom_metadata, from.custom_metadata);
        assert!(to.closed);
        assert_eq!(
            (to.last_entry_id, to.length),
            (from.last_entry_id, from.length)
        );
        java_target
            .open(id, false, DigestType::Crc32c, b"")
            .expect("open the copy");
        source
            .open(id, false, DigestType::Crc32c, b"")
            .expect("open the source");
        let last = from.last_entry_id;
        assert_eq!(
            java_target.read(id, 0, last).expect("read the copy"),
            source.read(id, 0, last).expect("read the source")
        );
    }
    let err = copy(&ids[..1], 1).unwrap_err();
    assert_eq!(err.code, codes::LEDGER_EXIST, "{err}");
    java_target.quit();
}
