//! Tests of the ZooKeeper test harness itself: start, stop, restart, data
//! handling and the guarantee that no JVM outlives the test process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{helper_test_command, shared, unique_chroot, ZkServer};
use zookeeper_async::{Acl, CreateMode, ZooKeeper};

const HELPER_ENV: &str = "BKSWITCH_ZK_HARNESS_HELPER";

fn four_letter(port: u16, word: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
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

async fn connect(server: &ZkServer) -> ZooKeeper {
    let zk = ZooKeeper::connect_with_retry_time(
        &server.connect_string(),
        Duration::from_secs(5),
        |_| {},
        Duration::from_millis(100),
    )
    .await
    .expect("connect");
    tokio::time::timeout(Duration::from_secs(10), zk.exists("/", false))
        .await
        .expect("session established in time")
        .expect("exists /");
    zk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_stop_restart_keep_or_wipe_data() {
    let server = ZkServer::start();
    assert!(server.is_running());
    let cs = server.connect_string();
    assert_eq!(cs, format!("127.0.0.1:{}", server.port()));
    assert_eq!(four_letter(server.port(), "ruok").as_deref(), Some("imok"));
    let srvr = four_letter(server.port(), "srvr").expect("srvr answer");
    assert!(srvr.contains("Mode: standalone"), "{srvr}");

    let zk = connect(&server).await;
    zk.create(
        "/kept",
        b"v".to_vec(),
        Acl::open_unsafe().clone(),
        CreateMode::Persistent,
    )
    .await
    .expect("create /kept");
    zk.close().await.expect("close");

    server.stop();
    assert!(!server.is_running());
    assert!(
        four_letter(server.port(), "ruok").is_none(),
        "port still answers"
    );
    server.stop(); // idempotent

    server.start_again();
    assert!(server.is_running());
    let zk = connect(&server).await;
    let (data, _) = zk.get_data("/kept", false).await.expect("data kept");
    assert_eq!(data, b"v");
    zk.close().await.expect("close");

    server.restart_fresh();
    assert!(server.is_running());
    let zk = connect(&server).await;
    assert!(zk.exists("/kept", false).await.expect("exists").is_none());
    zk.close().await.expect("close");
}

#[test]
fn shared_server_is_started_once_and_chroots_are_unique() {
    let a = shared();
    let b = shared();
    assert!(std::ptr::eq(a, b));
    assert!(a.is_running());
    assert_eq!(four_letter(a.port(), "ruok").as_deref(), Some("imok"));
    let c1 = unique_chroot();
    let c2 = unique_chroot();
    assert_ne!(c1, c2);
    assert!(c1.starts_with("/t-") && !c1.ends_with('/'));
}

#[test]
fn drop_kills_the_server_and_removes_its_folder() {
    let server = ZkServer::start();
    let port = server.port();
    let dir = server.dir().to_path_buf();
    drop(server);
    assert!(four_letter(port, "ruok").is_none());
    assert!(!dir.exists(), "{} left behind", dir.display());
}

/// Not a test on its own: the body of the child processes spawned by
/// `no_jvm_outlives_the_test_process`. Does nothing unless the helper variable
/// is set.
#[test]
fn helper_process() {
    let Ok(mode) = std::env::var(HELPER_ENV) else {
        return;
    };
    let server = ZkServer::start();
    println!("PORT {} DIR {}", server.port(), server.dir().display());
    std::io::stdout().flush().expect("flush");
    // Never run the destructor, like a `static` server.
    std::mem::forget(server);
    match mode.as_str() {
        "exit" => std::process::exit(0),
        _ => std::thread::sleep(Duration::from_secs(120)),
    }
}

fn spawn_helper(mode: &str) -> (std::process::Child, u16, PathBuf) {
    let mut child = helper_test_command("helper_process", HELPER_ENV, mode)
        .spawn()
        .expect("spawn helper");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let (port, dir) = loop {
        let line = lines
            .next()
            .expect("helper printed its server")
            .expect("read helper output");
        // The test harness prints `test helper_process ... ` on the same line.
        if let Some((_, rest)) = line.split_once("PORT ") {
            let (port, dir) = rest.split_once(" DIR ").expect("PORT .. DIR ..");
            break (port.parse().expect("port"), PathBuf::from(dir));
        }
    };
    // Keep draining the helper's output in the background.
    std::thread::spawn(move || for _ in lines {});
    (child, port, dir)
}

#[test]
fn no_jvm_outlives_the_test_process() {
    for mode in ["exit", "kill"] {
        let (mut child, port, dir) = spawn_helper(mode);
        // The helper printed its port after `ZkServer::start` returned, so the
        // server was serving; in "exit" mode it may already be gone.
        if mode == "kill" {
            assert_eq!(four_letter(port, "ruok").as_deref(), Some("imok"));
            child.kill().expect("SIGKILL the helper");
        }
        child.wait().expect("helper exits");
        assert!(
            wait_until(Duration::from_secs(15), || four_letter(port, "ruok")
                .is_none()),
            "{mode}: ZooKeeper on port {port} survived its test process"
        );
        assert!(
            wait_until(Duration::from_secs(15), || !dir.exists()),
            "{mode}: {} left behind",
            dir.display()
        );
    }
}
