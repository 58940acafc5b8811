//! [`LedgerWriter`]: the handle `create_ledger` and `create_ledger_adv` return.

use super::*;

/// A handle from `create_ledger` or `create_ledger_adv`.
pub(crate) struct LedgerWriter {
    shared: Arc<WriterShared>,
}

impl std::fmt::Debug for LedgerWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.state.lock();
        f.debug_struct("LedgerWriter")
            .field("ledger_id", &self.shared.ctx.ledger_id)
            .field("mode", &self.shared.mode)
            .field("lac", &st.lac)
            .field("pending", &st.pending.len())
            .finish()
    }
}

impl LedgerWriter {
    pub(crate) fn new(
        ctx: Arc<LedgerCtx>,
        adv: bool,
        record: LedgerRecord,
        version: i64,
    ) -> LedgerWriter {
        let mode = if adv { Mode::Adv } else { Mode::Normal };
        LedgerWriter {
            shared: WriterShared::new(ctx, mode, record, version, -1, 0),
        }
    }
}

#[async_trait::async_trait]
impl ReadHandle for LedgerWriter {
    fn id(&self) -> bkswitch_bk_client::LedgerId {
        self.shared.ctx.ledger_id
    }

    fn metadata(&self) -> LedgerMetadata {
        self.shared.metadata()
    }

    async fn read_entries(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> bkswitch_bk_client::Result<Vec<LedgerEntry>> {
        let (record, lac) = {
            let st = self.shared.state.lock();
            (st.record.clone(), st.lac)
        };
        check_range(&self.shared.ctx, first, last, Some(lac))?;
        read_range(&self.shared.ctx, &record, first, last).await
    }

    async fn read_unconfirmed(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> bkswitch_bk_client::Result<Vec<LedgerEntry>> {
        let record = self.shared.state.lock().record.clone();
        check_range(&self.shared.ctx, first, last, None)?;
        read_range(&self.shared.ctx, &record, first, last).await
    }

    fn last_add_confirmed(&self) -> EntryId {
        self.shared.state.lock().lac
    }

    async fn read_last_add_confirmed(&self) -> bkswitch_bk_client::Result<EntryId> {
        self.shared.ctx.check_open()?;
        Ok(self.shared.state.lock().lac)
    }

    fn length(&self) -> u64 {
        self.shared.state.lock().length
    }

    fn is_closed(&self) -> bool {
        let st = self.shared.state.lock();
        !matches!(st.status, Status::Open) || st.record.state == LedgerState::Closed
    }

    async fn close(&self) -> bkswitch_bk_client::Result<()> {
        self.shared.close().await
    }
}

impl WriteHandle for LedgerWriter {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, bkswitch_bk_client::Result<EntryId>> {
        self.shared.add(None, data)
    }

    fn add_entry_at(
        &self,
        entry_id: EntryId,
        data: Bytes,
    ) -> BoxFuture<'static, bkswitch_bk_client::Result<EntryId>> {
        self.shared.add(Some(entry_id), data)
    }
}
