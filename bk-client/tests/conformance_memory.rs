//! The conformance suite on `MemoryBookKeeper` used directly (the client type is
//! `MemoryBookKeeper`, not a trait object).

use bkswitch_bk_client::testkit::{run_all, MemoryTestEnv};

bkswitch_bk_client::bk_conformance_tests!(MemoryTestEnv::new());

#[tokio::test]
async fn run_all_passes() {
    if let Err(report) = run_all(&MemoryTestEnv::new()).await {
        panic!("{report}");
    }
}
