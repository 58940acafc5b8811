//! The conformance suite on a real etcd (one server for the whole test binary,
//! a fresh key prefix per rule), directly and through `Arc<dyn MetadataStore>`.

use bkswitch_etcd_harness::shared;
use bkswitch_metadata_store::testkit::EtcdTestEnv;

fn env() -> EtcdTestEnv {
    EtcdTestEnv::new(shared().endpoints())
}

mod etcd {
    bkswitch_metadata_store::metadata_store_conformance_tests!(super::env());
}

mod etcd_via_arc {
    use bkswitch_metadata_store::testkit::ViaArc;
    bkswitch_metadata_store::metadata_store_conformance_tests!(ViaArc(super::env()));
}
