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
