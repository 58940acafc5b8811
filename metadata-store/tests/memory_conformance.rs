//! The conformance suite on the in-memory backend, directly and through
//! `Arc<dyn MetadataStore>`.

use bkswitch_metadata_store::testkit::{self, MemoryTestEnv, ViaArc};

mod memory {
    use bkswitch_metadata_store::testkit::MemoryTestEnv;
    bkswitch_metadata_store::metadata_store_conformance_tests!(MemoryTestEnv);
}

mod memory_via_arc {
    use bkswitch_metadata_store::testkit::{MemoryTestEnv, ViaArc};
    bkswitch_metadata_store::metadata_store_conformance_tests!(ViaArc(MemoryTestEnv));
}

#[tokio::test]
async fn run_all_on_a_current_thread_runtime() {
    if let Err(report) = testkit::run_all(&MemoryTestEnv).await {
        panic!("{report}");
    }
    if let Err(report) = testkit::run_all(&ViaArc(MemoryTestEnv)).await {
        panic!("{report}");
    }
}
