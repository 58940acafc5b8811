//! The rules may run concurrently against one shared cluster (as they would against
//! a real cluster with other users): run them all at once on a multi-threaded
//! runtime, several rounds, over a single `MemoryCluster`.

use std::sync::Arc;

use bkswitch_bk_client::testkit::{all_rules, run_rule, MemoryBookKeeperTestEnv, RULE_NAMES};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_rules_concurrently_on_one_cluster() {
    let env = Arc::new(MemoryBookKeeperTestEnv::new());
    for _round in 0..3 {
        let tasks: Vec<_> = (0..RULE_NAMES.len())
            .map(|i| {
                let env = env.clone();
                tokio::spawn(async move {
                    let rules = all_rules::<MemoryBookKeeperTestEnv>();
                    run_rule(&rules[i], &*env).await
                })
            })
            .collect();
        let mut failures = Vec::new();
        for task in tasks {
            if let Err(failure) = task.await.expect("rule task") {
                failures.push(failure.to_string());
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
    }
    // The rules clean up after themselves (best effort).
    let left = env.cluster().ledger_ids();
    assert!(left.len() < 64, "{left:?}");
}
