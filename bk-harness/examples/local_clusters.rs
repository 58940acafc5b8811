//! Two real BookKeeper clusters on one ZooKeeper, for trying a switch by
//! hand: `cargo run -p bkswitch-bk-harness --example local_clusters`.
//!
//! Starts Debian's ZooKeeper on a free loopback port and two clusters of
//! three Apache BookKeeper 4.17.2 bookies (`/ledgers-a`, `/ledgers-b`),
//! prints their metadata-service URIs and the bookies' ports, and keeps them
//! running until standard input closes (Ctrl-D) or the process is
//! interrupted; everything it started stops with it. Set `BOOKIES=n` for
//! another number of bookies per cluster.

use std::io::Read;

use bkswitch_bk_harness::BkCluster;
use bkswitch_zk_harness::ZkServer;

fn main() {
    let bookies = std::env::var("BOOKIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let zk = ZkServer::start();
    let a = BkCluster::start(&zk.connect_string(), "/ledgers-a", bookies);
    let b = BkCluster::start(&zk.connect_string(), "/ledgers-b", bookies);
    println!("ZooKeeper       {}", zk.connect_string());
    for (name, c) in [("a", &a), ("b", &b)] {
        println!("cluster {name}       {}", c.metadata_service_uri());
        for i in 0..bookies {
            println!(
                "  bookie {i}      {} (pid {})",
                c.bookie_id(i),
                c.bookie_pid(i)
                    .map_or_else(|| "-".to_owned(), |p| p.to_string())
            );
        }
    }
    println!("running; close standard input (Ctrl-D) to stop");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
