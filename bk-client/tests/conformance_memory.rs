//! The conformance suite on `MemoryBookKeeper` used directly (the client type is
//! `MemoryBookKeeper`, not a trait object).

use bkswitch_bk_client::testkit::{run_all, MemoryBookKeeperTestEnv};

bkswitch_bk_client::bk_conformance_tests!(MemoryBookKeeperTestEnv::new());

#[tokio::test]
async fn run_all_passes() {
    if let Err(report) = run_all(&MemoryBookKeeperTestEnv::new()).await {
        panic!("{report}");
    }
}
