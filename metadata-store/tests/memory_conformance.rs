//! The conformance suite on the in-memory backend, directly and through
//! `Arc<dyn MetadataStore>`.

use bkswitch_metadata_store::testkit::{self, MemoryFactory, ViaArc};

mod memory {
    bkswitch_metadata_store::metadata_store_conformance!(
        bkswitch_metadata_store::testkit::MemoryFactory
    );
}

mod memory_via_arc {
    bkswitch_metadata_store::metadata_store_conformance!(bkswitch_metadata_store::testkit::ViaArc(
        bkswitch_metadata_store::testkit::MemoryFactory
    ));
}

#[tokio::test]
async fn run_all_on_a_current_thread_runtime() {
    testkit::run_all(&MemoryFactory).await;
    testkit::run_all(&ViaArc(MemoryFactory)).await;
}
