//! `bookie-switch serve --config FILE`, as an operator runs it: a bad value
//! stops the node before it starts (naming the key, the value and what is
//! allowed), an unknown key is a warning naming it, and flags override the
//! file.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_bookie-switch");

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn serve(config: &std::path::Path, extra: &[&str]) -> std::process::Child {
    let config = config.to_str().unwrap();
    serve_args(&[&["--config", config], extra].concat())
}

/// `bookie-switch serve ARGS`, stderr piped, logging off.
fn serve_args(args: &[&str]) -> std::process::Child {
    Command::new(BIN)
        .arg("serve")
        .args(args)
        .env("BKSWITCH_ADMIN_TOKEN", "admin")
        .env("BKSWITCH_INTERNAL_TOKEN", "internal")
        .env("RUST_LOG", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_bad_value_stops_the_node_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.conf");
    let port = free_port();
    std::fs::write(
        &config,
        format!("bkswitchListenAddress=127.0.0.1:{port}\nmigrationConcurrency=0\n"),
    )
    .unwrap();
    let out = serve(&config, &[]).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("migrationConcurrency=0")
            && err.contains("1 to 1024")
            && err.contains("broker.conf:2"),
        "{err}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens"
    );
}

#[test]
fn flags_override_the_file_and_unknown_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("broker.conf");
    let (file_port, flag_port) = (free_port(), free_port());
    std::fs::write(
        &config,
        format!(
            "# broker.conf\nbkswitchListenAddress=127.0.0.1:{file_port}\n\
             bkswitchNodeId=from-file\nzookeeperServers=zk1:2181\n"
        ),
    )
    .unwrap();
    let mut child = serve(&config, &["--listen", &format!("127.0.0.1:{flag_port}")]);
    let mut stderr = child.stderr.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", flag_port)).is_err() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "serve exited: {:?}",
            child.wait_with_output()
        );
        assert!(
            Instant::now() < deadline,
            "serve did not listen on the flag's port"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(std::net::TcpStream::connect(("127.0.0.1", file_port)).is_err());
    child.kill().unwrap();
    child.wait().unwrap();
    let mut err = String::new();
    stderr.read_to_string(&mut err).unwrap();
    assert!(
        err.contains("unknown key `zookeeperServers`") && err.contains("node from-file serving"),
        "{err}"
    );
}

/// Two `serve` processes with the same `--node-id` on one real ZooKeeper:
/// the second exits non-zero before serving, naming the id and asking for a
/// unique one; the first keeps serving.
#[test]
fn a_second_serve_with_the_same_node_id_exits_non_zero() {
    bkswitch_zk_harness::require_zk();
    let metadata = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let spawn = |port: u16| {
        serve_args(&[
            "--node-id",
            "twin",
            "--metadata-store",
            &metadata,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--bookkeeper-uri",
            "memory://old",
            "--cluster-name",
            "old",
        ])
    };
    let first_port = free_port();
    let mut first = spawn(first_port);
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", first_port)).is_err() {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first serve exited"
        );
        assert!(Instant::now() < deadline, "the first serve did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut second = spawn(free_port());
    let deadline = Instant::now() + Duration::from_secs(60);
    while second.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            second.kill().unwrap();
            first.kill().unwrap();
            let _ = first.wait();
            panic!(
                "a second serve with node id `twin` kept running: {:?}",
                second.wait_with_output()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        err.contains("`twin`") && err.contains("unique") && err.contains("--node-id"),
        "{err}"
    );
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first keeps serving"
    );
    first.kill().unwrap();
    first.wait().unwrap();
}
