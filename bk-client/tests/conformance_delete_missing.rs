//! The conformance suite once per `DeleteMissing` setting of the in-memory cluster.

use bkswitch_bk_client::testkit::MemoryBookKeeperTestEnv;
use bkswitch_bk_client::{DeleteMissing, MemoryCluster, MemoryClusterConfig};

fn env(behaviour: DeleteMissing) -> MemoryBookKeeperTestEnv {
    MemoryBookKeeperTestEnv::with_cluster(MemoryCluster::with_config(
        "delete-missing",
        MemoryClusterConfig::default().with_delete_missing(behaviour),
    ))
}

mod succeed {
    bkswitch_bk_client::bk_conformance_tests!(super::env(
        bkswitch_bk_client::DeleteMissing::Succeed
    ));
}

mod no_such_ledger {
    bkswitch_bk_client::bk_conformance_tests!(super::env(
        bkswitch_bk_client::DeleteMissing::NoSuchLedger
    ));
}

mod no_such_ledger_on_metadata_server {
    bkswitch_bk_client::bk_conformance_tests!(super::env(
        bkswitch_bk_client::DeleteMissing::NoSuchLedgerOnMetadataServer
    ));
}

#[tokio::test]
async fn declared_behaviour_must_match() {
    // An implementation that declares one behaviour but has another fails the rule.
    use bkswitch_bk_client::testkit::rules::delete_missing_ledger_as_declared;
    use bkswitch_bk_client::testkit::{async_trait, BookKeeperTestEnv};
    use bkswitch_bk_client::{LedgerConfig, MemoryBookKeeper};

    struct Lying(MemoryBookKeeperTestEnv);
    #[async_trait]
    impl BookKeeperTestEnv for Lying {
        type Client = MemoryBookKeeper;
        async fn client(&self) -> MemoryBookKeeper {
            self.0.client().await
        }
        fn delete_missing(&self) -> DeleteMissing {
            DeleteMissing::Succeed
        }
        fn ledger_config(&self) -> LedgerConfig {
            LedgerConfig::default()
        }
    }
    let failure = delete_missing_ledger_as_declared(&Lying(env(DeleteMissing::NoSuchLedger)))
        .await
        .expect_err("a mismatch between declared and actual behaviour must fail");
    assert_eq!(failure.rule, "delete_missing_ledger_as_declared");
    assert!(
        failure.to_string().contains("expected success"),
        "{failure}"
    );
}
