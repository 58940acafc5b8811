//! The BookKeeper conformance suite (`bkswitch_bk_client::testkit`) against real
//! bookies: a 3-bookie cluster started by `bkswitch-bk-harness`, a new client
//! per call, ledgers of ensemble 3, write quorum 2, ack quorum 2.

use bkswitch_bk_client::testkit::{async_trait, BookKeeperTestEnv};
use bkswitch_bk_client::{DeleteMissing, LedgerConfig};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};

struct RealBookies;

#[async_trait]
impl BookKeeperTestEnv for RealBookies {
    type Client = BookKeeperClient;
    async fn client(&self) -> BookKeeperClient {
        // Panics naming what is missing (Java, the jars) when real bookies
        // cannot be started.
        bkswitch_bk_harness::require_bk();
        let uri = bkswitch_bk_harness::shared().metadata_service_uri();
        BookKeeperClient::connect(&uri, ClientConfig::default())
            .await
            .expect("client of the test cluster")
    }
    // BookKeeper's ZooKeeper driver (since 4.10) deletes missing ledgers successfully.
    fn delete_missing(&self) -> DeleteMissing {
        DeleteMissing::Succeed
    }
    fn ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default().with_quorums(3, 2, 2)
    }
}

bkswitch_bk_client::bk_conformance_tests!(RealBookies);
