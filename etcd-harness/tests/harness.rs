//! The harness starts real etcd servers, finds the leader, and survives the loss
//! of a member.

use std::time::Duration;

use bkswitch_etcd_harness::{shared, unique_prefix, EtcdCluster};

#[test]
fn shared_server_is_healthy_and_prefixes_are_unique() {
    let cluster = shared();
    assert_eq!(cluster.size(), 1);
    cluster
        .wait_healthy(Duration::from_secs(5))
        .expect("healthy");
    assert_eq!(cluster.leader(), Some(0));
    assert!(cluster.url("/x").starts_with("etcd://127.0.0.1:"));
    assert_ne!(unique_prefix(), unique_prefix());
}

#[test]
fn three_members_survive_the_leader_kill_and_restart() {
    let cluster = EtcdCluster::start(3);
    assert_eq!(cluster.endpoints().split(',').count(), 3);
    let leader = cluster.kill_leader();
    assert!(!cluster.is_running(leader));
    // The two others elect a new leader.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(new) = cluster.leader() {
            assert_ne!(new, leader);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no new leader");
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.start_again(leader);
    assert!(cluster.is_running(leader));
    cluster
        .wait_healthy(Duration::from_secs(30))
        .expect("healthy after restart");
}

const HELPER_ENV: &str = "BKSWITCH_ETCD_HARNESS_HELPER";

/// Not a test on its own: the body of the child process spawned by
/// `the_shared_cluster_leaves_nothing_when_its_process_exits`. Does nothing
/// unless the helper variable is set.
#[test]
fn helper_process() {
    if std::env::var(HELPER_ENV).is_err() {
        return;
    }
    let cluster = shared();
    println!(
        "DIR {} ENDPOINT {}",
        cluster.dir().display(),
        cluster.endpoint(0)
    );
    use std::io::Write;
    std::io::stdout().flush().expect("flush");
    std::process::exit(0);
}

/// The shared cluster lives in a `static`, never dropped: its etcd process
/// must still end and its folder (two 64 MB write-ahead files) be removed
/// when the test process exits, or every test binary leaves one behind.
#[test]
fn the_shared_cluster_leaves_nothing_when_its_process_exits() {
    use std::io::{BufRead, BufReader};
    let out = bkswitch_zk_harness::helper_test_command("helper_process", HELPER_ENV, "1")
        .output()
        .expect("run helper");
    let (dir, endpoint) = BufReader::new(&out.stdout[..])
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            let (_, rest) = line.split_once("DIR ")?;
            let (dir, endpoint) = rest.split_once(" ENDPOINT ")?;
            Some((std::path::PathBuf::from(dir), endpoint.to_owned()))
        })
        .expect("the helper printed its cluster");
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while dir.exists() || std::net::TcpStream::connect(&endpoint).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} or etcd at {endpoint} outlived its test process",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
