//! PROMOTE: the forward flip of every BUILT ledger, and what it records.
//! Schema locators are flipped centrally ([I14](bkswitch_docs::invariants::I14)),
//! cursors by their owners or the coordinator (see `flip.rs`).

use std::collections::BTreeMap;

use super::flip::{CursorFlip, Direction};
use super::{Ctx, Orchestrator};
use crate::error::Result;
use crate::model::{LedgerKind, Phase, SwitchLedgerRecord, SwitchLedgerState};

impl Orchestrator {
    /// One PROMOTE pass, one bucket of records at a time: flips every BUILT
    /// ledger (when `act`) and returns how many were BUILT when read. Memory
    /// holds one bucket.
    pub(super) async fn promote_pages(
        &self,
        ctx: &Ctx,
        phase: &mut Phase,
        act: bool,
    ) -> Result<usize> {
        let mut built = 0;
        for dir in self.records().record_dirs(&ctx.id).await? {
            let records = self.records().read_record_dir(&dir).await?;
            let n = records
                .values()
                .filter(|r| r.state == SwitchLedgerState::Built)
                .count();
            built += n;
            if n > 0 && act {
                if *phase != Phase::Promote {
                    *phase = Phase::Promote;
                    self.records()
                        .update_switch(&ctx.id, |r| r.phase = Phase::Promote)
                        .await?;
                }
                self.promote(ctx, records).await?;
            }
        }
        Ok(built)
    }

    /// Flips every BUILT ledger of `records` to the target: the schema and
    /// the cursor stage at once. A locator whose ledgers sit in several
    /// buckets is flipped once per bucket, each flip a compare-and-set of
    /// the positions it names (both copies exist, so either stamp reads).
    async fn promote(
        &self,
        ctx: &Ctx,
        records: BTreeMap<String, SwitchLedgerRecord>,
    ) -> Result<()> {
        let mut by_locator: BTreeMap<String, Vec<SwitchLedgerRecord>> = BTreeMap::new();
        let mut cursors = Vec::new();
        for r in records
            .into_values()
            .filter(|r| r.state == SwitchLedgerState::Built)
        {
            match r.kind {
                LedgerKind::Schema => by_locator.entry(r.owner_path.clone()).or_default().push(r),
                LedgerKind::Cursor => cursors.push(r),
            }
        }
        let (a, b) = futures::join!(
            self.stage(by_locator, |(path, recs)| self
                .promote_schema(ctx, path, recs)),
            self.stage(cursors, |r| self.promote_cursor(ctx, r)),
        );
        a.and(b)
    }

    /// Schema PROMOTE of one locator, centrally
    /// ([I10](bkswitch_docs::invariants::I10), [I14](bkswitch_docs::invariants::I14)).
    async fn promote_schema(
        &self,
        ctx: &Ctx,
        path: String,
        mut recs: Vec<SwitchLedgerRecord>,
    ) -> Result<()> {
        let Some(on_target) = self
            .flip_locator(ctx, Direction::Promote, &path, &recs)
            .await?
        else {
            return Ok(());
        };
        for rec in &mut recs {
            if on_target.contains(&rec.ledger_id) {
                self.records()
                    .set_state(&ctx.id, rec, SwitchLedgerState::Promoted, None)
                    .await?;
            } else {
                self.obsolete(ctx, rec, "the schema version was deleted before PROMOTE")
                    .await?;
            }
        }
        Ok(())
    }

    /// Cursor PROMOTE: on the owner ([I13](bkswitch_docs::invariants::I13)),
    /// or by the coordinator when no node owns the topic.
    async fn promote_cursor(&self, ctx: &Ctx, mut rec: SwitchLedgerRecord) -> Result<()> {
        let rec = &mut rec;
        match self.flip_cursor(ctx, Direction::Promote, rec).await? {
            CursorFlip::Done => {
                self.records()
                    .set_state(&ctx.id, rec, SwitchLedgerState::Promoted, None)
                    .await
            }
            CursorFlip::RolledOverByOwner(new_id) | CursorFlip::MovedOn(new_id) => {
                self.rolled_over(ctx, rec, new_id).await
            }
            CursorFlip::Gone => {
                self.obsolete(ctx, rec, "the cursor was deleted before PROMOTE")
                    .await
            }
            CursorFlip::Elsewhere(stamp) => {
                let reason = format!(
                    "the cursor ledger is stamped to {stamp:?}, neither `{}` nor `{}`",
                    ctx.source, ctx.target
                );
                self.records()
                    .set_state(&ctx.id, rec, SwitchLedgerState::Failed, Some(reason))
                    .await
            }
            CursorFlip::Refused(e) => {
                let ml = rec.managed_ledger.clone().unwrap_or_default();
                let reason = format!("the owner of `{ml}` refused: {e}");
                self.records()
                    .set_state(&ctx.id, rec, SwitchLedgerState::Failed, Some(reason))
                    .await
            }
            CursorFlip::Failed(reason) => {
                self.records()
                    .set_state(&ctx.id, rec, SwitchLedgerState::Failed, Some(reason))
                    .await
            }
            CursorFlip::Waiting => Ok(()),
        }
    }

    /// The cursor moved on to `new_id` (on the target): the copy is not
    /// referenced any more (`promotedViaRolloverFallback`).
    async fn rolled_over(
        &self,
        ctx: &Ctx,
        rec: &mut SwitchLedgerRecord,
        new_id: i64,
    ) -> Result<()> {
        self.delete_target_copy(ctx, rec).await?;
        rec.rollover_ledger_id = Some(new_id);
        self.records()
            .set_state(
                &ctx.id,
                rec,
                SwitchLedgerState::RolledOver,
                Some(format!(
                    "promotedViaRolloverFallback: the cursor moved on to ledger {new_id}"
                )),
            )
            .await
    }

    /// The metadata that named the ledger went away before PROMOTE: its copy
    /// is not needed.
    async fn obsolete(&self, ctx: &Ctx, rec: &mut SwitchLedgerRecord, reason: &str) -> Result<()> {
        self.delete_target_copy(ctx, rec).await?;
        self.records()
            .set_state(
                &ctx.id,
                rec,
                SwitchLedgerState::Obsolete,
                Some(reason.to_owned()),
            )
            .await
    }
}
