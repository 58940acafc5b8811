//! BUILD: copying schema and cursor ledgers to the target with their ids
//! ([I8](bkswitch_docs::invariants::I8)), and the copies' later life —
//! refreshed when a cursor ledger grew after its copy, deleted when nothing
//! will route to them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bkswitch_bk_client::{BkErrorKind, BookKeeper, BookKeeperExt};
use bkswitch_ledger_copy::{
    copy_ledger_preserving_ids, CopyError, CopyOptions, CopyOutcome, CopyReport,
};
use bkswitch_metadata_store::ExpectedVersion;
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::Message;

use super::{Ctx, Orchestrator};
use crate::error::Result;
use crate::model::{LedgerKind, SwitchLedgerRecord, SwitchLedgerState};
use crate::scan::{decode_cursor, Found};

/// Copies of one ledger tried in one BUILD when they fail with a retryable
/// error, before the ledger is recorded FAILED (a later switch moves it).
const COPY_ATTEMPTS: u32 = 3;
/// Pause before the second copy; doubled before each further one.
const COPY_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Whether the target's copy of a cursor ledger holds every entry of the
/// sealed source ledger ([`Orchestrator::refresh_copy`]).
pub(super) enum CopyCheck {
    /// It does.
    Current,
    /// It did not and was copied again (the record is updated).
    Replaced,
    /// The source could not be sealed or copied again: why.
    Failed(String),
}

impl Orchestrator {
    /// Copies `found` to the target, schema and cursor ledgers in two stages
    /// at once, and records each ledger (BUILT, FAILED or OBSOLETE).
    pub(super) async fn build(&self, ctx: &Ctx, found: Vec<Found>) -> Result<()> {
        let (schemas, cursors): (Vec<Found>, Vec<Found>) = found
            .into_iter()
            .partition(|f| f.kind == LedgerKind::Schema);
        self.switch_progress(ctx)
            .await?
            .expect(schemas.len() + cursors.len());
        let (a, b) = futures::join!(
            self.stage(schemas, |f| self.build_one(ctx, f)),
            self.stage(cursors, |f| self.build_one(ctx, f)),
        );
        a.and(b)
    }

    pub(super) fn copy_options(&self, kind: LedgerKind) -> CopyOptions {
        let cfg = &self.inner.config;
        let opts = match kind {
            LedgerKind::Schema => {
                CopyOptions::new(cfg.schema_digest_type, cfg.schema_password.clone())
            }
            LedgerKind::Cursor => {
                CopyOptions::new(cfg.cursor_digest_type, cfg.cursor_password.clone())
            }
        };
        opts.with_window(cfg.copy_window.max(1))
    }

    /// Copies one ledger, recording in `<switch>/created/<ledgerId>` that this
    /// switch created the target ledger before writing to it.
    ///
    /// When the target already holds a different ledger under the id, it is
    /// replaced only if that record exists: a copy of ours interrupted by a
    /// crash. Anything else there — a ledger native to the target that shares
    /// the id, another topic's data — is never deleted: the copy fails with
    /// [`CopyError::Mismatch`] and BUILD records the ledger FAILED, leaving it
    /// on the source ([I2](bkswitch_docs::invariants::I2)).
    async fn copy(
        &self,
        ctx: &Ctx,
        kind: LedgerKind,
        ledger_id: i64,
    ) -> Result<std::result::Result<CopyReport, CopyError>> {
        let store = self.inner.store.clone();
        let created_root = self.records().created_path(&ctx.id);
        // A crash right after `createLedgerAdv`, before anything else (the
        // failpoint `orchestrator::created_record`): the copy is abandoned
        // where it stands, as a dying process leaves it.
        let crash = Arc::new(tokio::sync::Notify::new());
        let crashed = crash.clone();
        let tracker = self
            .switch_progress(ctx)
            .await?
            .start(&self.inner.progress, kind, ledger_id);
        let opts = self.copy_options(kind).with_progress(tracker.callback());
        let opts = opts.with_on_created(move |id| {
            let store = store.clone();
            let path = format!("{created_root}/{id}");
            let crashed = crashed.clone();
            Box::pin(async move {
                if crash_after_create() {
                    crashed.notify_one();
                    std::future::pending::<()>().await;
                }
                match store.put(&path, b"", ExpectedVersion::NotExists).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists => {
                        Ok(())
                    }
                    Err(e) => Err(format!("recording `{path}`: {e}")),
                }
            })
        });
        fail_point!("orchestrator::copy");
        let (src, dst) = ctx.clients()?;
        // The intent first: `created/<ledgerId>` is written before
        // `createLedgerAdv` whenever the target does not hold the id yet, so
        // a crash between the two leaves a partial ledger this switch knows
        // it created (and replaces on resume) rather than one it must
        // never touch.
        if !self.created_by_this_switch(ctx, ledger_id).await?
            && !holds_ledger(dst, ledger_id, &opts).await
        {
            self.record_created(ctx, ledger_id).await?;
        }
        let mut result = tokio::select! {
            r = copy_ledger_preserving_ids(ledger_id, src, dst, &opts) => r,
            () = crash.notified() => {
                return Err(crate::OrchestratorError::Injected {
                    point: "orchestrator::created_record",
                })
            }
        };
        if matches!(result, Err(CopyError::Mismatch { .. })) {
            if self.created_by_this_switch(ctx, ledger_id).await? {
                tracing::warn!(ledger_id, cluster = %ctx.target,
                    "replacing a partial copy this switch created on the target");
                fail_point!("orchestrator::delete_target_copy");
                self.records().check_may_delete(&ctx.id).await?;
                if dst.delete_ledger_if_exists(ledger_id).await.is_ok() {
                    fail_point!("orchestrator::copy");
                    result = copy_ledger_preserving_ids(ledger_id, src, dst, &opts).await;
                }
            } else if let Err(CopyError::Mismatch { reason, .. }) = &result {
                tracing::error!(ledger_id, cluster = %ctx.target, %reason,
                    "the target holds a different ledger under this id that this switch did not \
                     create; nothing deleted, the ledger stays on the source");
                result = Err(CopyError::Mismatch {
                    ledger_id,
                    reason: format!(
                        "{reason}; the target's ledger {ledger_id} was not created by switch \
                         `{}` (it may hold another topic's data), so it was not deleted and \
                         ledger {ledger_id} stays on `{}`; advance `{}`'s ledger id generator \
                         further before the next switch",
                        ctx.id, ctx.source, ctx.target
                    ),
                });
            }
        }
        // A retryable failure (a read or write that timed out, a cluster
        // unreachable for a moment) is tried again before the ledger is
        // recorded FAILED: a failed copy deleted the partial ledger it made.
        let mut attempt = 1;
        while let Err(e) = &result {
            if !e.is_retryable() || attempt >= COPY_ATTEMPTS {
                break;
            }
            let pause = COPY_RETRY_PAUSE * (1 << (attempt - 1));
            tracing::info!(ledger_id, attempt, error = %e, ?pause,
                "retryable copy failure; copying again");
            tokio::time::sleep(pause).await;
            attempt += 1;
            result = copy_ledger_preserving_ids(ledger_id, src, dst, &opts).await;
        }
        tracker.end(&result);
        if let Ok(report) = &result {
            match report.outcome {
                CopyOutcome::Copied => self.inner.copied.fetch_add(1, Ordering::Relaxed),
                CopyOutcome::AlreadyPresent => {
                    self.inner.already_present.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        Ok(result)
    }

    /// Records that this switch creates (is about to create) `ledger_id` on
    /// the target.
    async fn record_created(&self, ctx: &Ctx, ledger_id: i64) -> Result<()> {
        let path = format!("{}/{ledger_id}", self.records().created_path(&ctx.id));
        match self
            .inner
            .store
            .put(&path, b"", ExpectedVersion::NotExists)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(crate::OrchestratorError::metadata(
                format!("recording `{path}`"),
                e,
            )),
        }
    }

    /// Whether this switch recorded creating `ledger_id` on the target.
    async fn created_by_this_switch(&self, ctx: &Ctx, ledger_id: i64) -> Result<bool> {
        let path = format!("{}/{ledger_id}", self.records().created_path(&ctx.id));
        Ok(self.records().read_node(&path).await?.is_some())
    }

    async fn build_one(&self, ctx: &Ctx, f: Found) -> Result<()> {
        let copied = self.copy(ctx, f.kind, f.ledger_id).await?;
        let mut rec = SwitchLedgerRecord {
            kind: f.kind,
            ledger_id: f.ledger_id,
            owner_path: f.owner_path.clone(),
            managed_ledger: f.managed_ledger.clone(),
            cursor: f.cursor.clone(),
            copied_last_entry_id: -1,
            copied_bytes: None,
            was_unstamped: f.stamp.is_none(),
            target_copy: false,
            already_present: false,
            state: SwitchLedgerState::Built,
            was_promoted: false,
            rollover_ledger_id: None,
            deleted_from: None,
            reason: None,
            updated_at: 0,
        };
        match copied {
            Ok(report) => {
                rec.copied_last_entry_id = report.last_entry_id;
                rec.copied_bytes = Some(report.bytes);
                rec.target_copy = true;
                rec.already_present = report.outcome == CopyOutcome::AlreadyPresent;
            }
            Err(e) if !self.still_referenced(&f).await? => {
                // A live cursor rolled over (or the schema/cursor was deleted)
                // between the scan and the copy: the ledger is gone and nothing
                // points to it any more. Nothing to move.
                tracing::info!(ledger_id = f.ledger_id, path = %f.owner_path, error = %e,
                    "ledger no longer referenced; nothing to copy");
                rec.state = SwitchLedgerState::Obsolete;
                rec.reason = Some(format!(
                    "`{}` no longer references ledger {} (rolled over or deleted before the copy)",
                    f.owner_path, f.ledger_id
                ));
            }
            Err(e) => {
                tracing::warn!(ledger_id = f.ledger_id, path = %f.owner_path, error = %e,
                    "ledger copy failed; it stays on the source");
                rec.state = SwitchLedgerState::Failed;
                rec.reason = Some(format!(
                    "{e}{}",
                    if e.is_retryable() {
                        " (retryable: start a new switch later to move it)"
                    } else {
                        ""
                    }
                ));
            }
        }
        self.records().put_ledger(&ctx.id, &mut rec).await
    }

    /// Whether the metadata that named `f`'s ledger at scan time still names it.
    async fn still_referenced(&self, f: &Found) -> Result<bool> {
        let Some(r) = self.records().read_node(&f.owner_path).await? else {
            return Ok(false);
        };
        Ok(match f.kind {
            LedgerKind::Cursor => {
                decode_cursor(&r.value).is_some_and(|info| info.cursors_ledger_id == f.ledger_id)
            }
            LedgerKind::Schema => SchemaLocator::decode(r.value.as_slice()).map_or(true, |loc| {
                std::iter::once(&loc.info)
                    .chain(loc.index.iter())
                    .any(|e| e.position.ledger_id == f.ledger_id)
            }),
        })
    }

    /// Deletes the target's copy of a ledger nothing will route to; a failed
    /// deletion is left to cleanup.
    pub(super) async fn delete_target_copy(
        &self,
        ctx: &Ctx,
        rec: &mut SwitchLedgerRecord,
    ) -> Result<()> {
        if !rec.target_copy {
            return Ok(());
        }
        if !self.made_by_this_switch(&ctx.id, rec).await? {
            tracing::warn!(ledger_id = rec.ledger_id, cluster = %ctx.target,
                "the target's ledger was not created by this switch (found identical and \
                 adopted); it is not deleted");
            return Ok(());
        }
        fail_point!("orchestrator::delete_target_copy");
        self.records().check_may_delete(&ctx.id).await?;
        match ctx
            .clients()?
            .1
            .delete_ledger_if_exists(rec.ledger_id)
            .await
        {
            Ok(_) => rec.target_copy = false,
            Err(e) => {
                tracing::warn!(ledger_id = rec.ledger_id, error = %e,
                    "unreferenced copy not deleted from the target; cleanup retries");
            }
        }
        Ok(())
    }

    /// Before the coordinator promotes a cursor no node owns: seals the source
    /// ledger and, when it holds more than the copy, replaces the copy with
    /// one of the sealed ledger.
    pub(super) async fn refresh_copy(
        &self,
        ctx: &Ctx,
        rec: &mut SwitchLedgerRecord,
    ) -> Result<CopyCheck> {
        let lac = match self.sealed_lac(ctx, rec.ledger_id).await {
            Ok(lac) => lac,
            Err(reason) => return Ok(CopyCheck::Failed(reason)),
        };
        if lac == rec.copied_last_entry_id {
            return Ok(CopyCheck::Current);
        }
        // The copy is stale: replace it with one of the sealed ledger.
        self.delete_target_copy(ctx, rec).await?;
        self.switch_progress(ctx).await?.expect(1);
        match self.copy(ctx, LedgerKind::Cursor, rec.ledger_id).await? {
            Ok(report) => {
                rec.copied_last_entry_id = report.last_entry_id;
                rec.copied_bytes = Some(report.bytes);
                rec.target_copy = true;
                self.records().put_ledger(&ctx.id, rec).await?;
                Ok(CopyCheck::Replaced)
            }
            Err(e) => Ok(CopyCheck::Failed(format!(
                "re-copying the sealed cursor ledger failed: {e}"
            ))),
        }
    }

    /// The last entry of the source ledger once sealed (recovery-open when it
    /// is still open: there is no live writer, the topic has no owner).
    async fn sealed_lac(&self, ctx: &Ctx, ledger_id: i64) -> std::result::Result<i64, String> {
        let cfg = &self.inner.config;
        let (src, _) = ctx.clients().map_err(|e| e.to_string())?;
        let h = src
            .open_ledger_no_recovery(ledger_id, cfg.cursor_digest_type, &cfg.cursor_password)
            .await
            .map_err(|e| format!("cannot open the source cursor ledger: {e}"))?;
        let lac = if h.is_closed() {
            h.last_add_confirmed()
        } else {
            let _ = h.close().await;
            let h = src
                .open_ledger(ledger_id, cfg.cursor_digest_type, &cfg.cursor_password)
                .await
                .map_err(|e| format!("cannot recover the source cursor ledger: {e}"))?;
            let lac = h.last_add_confirmed();
            let _ = h.close().await;
            return Ok(lac);
        };
        let _ = h.close().await;
        Ok(lac)
    }
}

/// Whether the failpoint `orchestrator::created_record` is set: a crash right
/// after the target ledger was created (only with the `failpoints` feature).
fn crash_after_create() -> bool {
    fail::fail_point!("orchestrator::created_record", |_| true);
    false
}

/// Whether `dst` holds a ledger `ledger_id` (or might: any answer but "no
/// such ledger" counts as yes, so no intent is recorded for a ledger that
/// may be someone else's).
async fn holds_ledger(dst: &dyn BookKeeper, ledger_id: i64, opts: &CopyOptions) -> bool {
    match dst
        .open_ledger_no_recovery(ledger_id, opts.digest_type, &opts.password)
        .await
    {
        Ok(h) => {
            let _ = h.close().await;
            true
        }
        Err(e) => !matches!(
            e.kind(),
            BkErrorKind::NoSuchLedger | BkErrorKind::NoSuchLedgerOnMetadataServer
        ),
    }
}
