//! The conformance suite through `Arc<dyn BookKeeper>` (clients from the
//! `memory://` client factory), exercising the blanket `BookKeeper for Arc<T>` impl.

use std::sync::Arc;

use bkswitch_bk_client::testkit::{async_trait, run_all, BookKeeperTestEnv};
use bkswitch_bk_client::{
    BookKeeper, ClientFactory, DeleteMissing, LedgerConfig, MemoryClientFactory,
};

struct FactoryEnv {
    factory: MemoryClientFactory,
    uri: &'static str,
}

impl FactoryEnv {
    fn new() -> FactoryEnv {
        FactoryEnv {
            factory: MemoryClientFactory::new(),
            uri: "memory://dyn-conformance",
        }
    }
}

#[async_trait]
impl BookKeeperTestEnv for FactoryEnv {
    type Client = Arc<dyn BookKeeper>;

    async fn client(&self) -> Arc<dyn BookKeeper> {
        self.factory
            .create(self.uri)
            .await
            .expect("memory:// client")
    }

    fn delete_missing(&self) -> DeleteMissing {
        DeleteMissing::Succeed
    }

    fn ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default()
    }
}

bkswitch_bk_client::bk_conformance_tests!(FactoryEnv::new());

#[tokio::test]
async fn run_all_passes_through_dyn() {
    if let Err(report) = run_all(&FactoryEnv::new()).await {
        panic!("{report}");
    }
}
