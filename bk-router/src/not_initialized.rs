//! [`NotInitializedClient`]: the S1 answer before any cluster is active.

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, DigestType, LedgerConfig, LedgerId, ReadHandle, Result,
    WriteHandle,
};

/// The client the active-client supplier (S1) returns before the storage is
/// initialized: every operation fails with
/// [`ClientClosed`](BkErrorKind::ClientClosed), saying what to call first.
#[derive(Debug)]
pub(crate) struct NotInitializedClient;

fn not_initialized<T>() -> Result<T> {
    Err(BkError::new(
        BkErrorKind::ClientClosed,
        "the multi-cluster storage is not initialized: call initialize() or switch_active_cluster() first",
    ))
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BookKeeper for NotInitializedClient {
    fn cluster_name(&self) -> &str {
        ""
    }

    async fn create_ledger(&self, _config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        not_initialized()
    }

    async fn advance_ledger_ids_beyond(&self, _above: LedgerId) -> Result<()> {
        not_initialized()
    }

    async fn create_ledger_adv(
        &self,
        _ledger_id: LedgerId,
        _config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        not_initialized()
    }

    async fn open_ledger(
        &self,
        _ledger_id: LedgerId,
        _digest_type: DigestType,
        _password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        not_initialized()
    }

    async fn open_ledger_no_recovery(
        &self,
        _ledger_id: LedgerId,
        _digest_type: DigestType,
        _password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        not_initialized()
    }

    async fn delete_ledger(&self, _ledger_id: LedgerId) -> Result<()> {
        not_initialized()
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }

    fn writable_bookies(&self) -> Option<usize> {
        None
    }
}
