//! The write path: ordered, pipelined appends to the current ledger, and
//! rollover onto a new ledger created through S1 and recorded with its S4
//! properties in one compare-and-set ([I1](bkswitch_docs::invariants::I1)).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bkswitch_bk_client::{BkError, BkErrorKind, ReadHandle};
use bkswitch_mledger_spi::LedgerPurpose;
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedLedgerInfo;
use bytes::Bytes;
use futures::future::FutureExt;

use super::metadata::{encode_info, names_ledger, replace_ledger_info};
use super::state::{Current, MlInner, Unsettled, Writer};
use crate::ctx::Unrecorded;
use crate::error::{ManagedLedgerError, Result};
use crate::position::Position;
use crate::props::merge_properties;

impl MlInner {
    /// Appends `data` (see [`ManagedLedger::append`](super::ManagedLedger::append)).
    pub(super) async fn append(&self, data: Bytes) -> Result<Position> {
        let (fut, id, broken) = {
            let mut w = self.writer.lock().await;
            self.check_writable()?;
            let full = match &w.current {
                None => Some("no current ledger"),
                Some(c) => self.full_reason(c),
            };
            if let Some(reason) = full {
                self.rollover_locked(&mut w, reason).await?;
            }
            let Some(c) = w.current.as_mut() else {
                return Err(self.closed_error());
            };
            let len = data.len() as u64;
            let fut = c.handle.add_entry(data).shared();
            c.last_add = Some(fut.clone());
            c.entries += 1;
            c.bytes += len;
            (fut, c.id, c.broken.clone())
        };
        match fut.await {
            Ok(entry_id) => {
                let p = Position::new(id, entry_id);
                let mut s = self.state.lock();
                if p > s.last_confirmed {
                    s.last_confirmed = p;
                }
                Ok(p)
            }
            Err(e) => {
                broken.store(true, Ordering::Release);
                let err = ManagedLedgerError::from_add(&self.ctx.name, id, e);
                if matches!(err, ManagedLedgerError::Fenced { .. }) {
                    self.mark_fenced("append");
                }
                Err(err)
            }
        }
    }

    /// Rolls over now (see [`ManagedLedger::rollover`](super::ManagedLedger::rollover)).
    pub(super) async fn force_rollover(&self) -> Result<()> {
        let mut w = self.writer.lock().await;
        self.check_writable()?;
        self.ctx.check_session("a forced rollover", false)?;
        self.rollover_locked(&mut w, "forced").await
    }

    /// Why the current ledger must be rolled over before the next append, if
    /// it must. A full or old ledger is kept while the metadata session is
    /// lost (the rollover is deferred, as Pulsar's `currentLedgerIsFull`
    /// does); a failed one is not.
    fn full_reason(&self, c: &Current) -> Option<&'static str> {
        if c.broken.load(Ordering::Acquire) {
            return Some("the current ledger failed");
        }
        let reason = self.full_or_old(c)?;
        self.ctx.rollover_may_run().then_some(reason)
    }

    /// Whether the current ledger reached a size or age threshold.
    fn full_or_old(&self, c: &Current) -> Option<&'static str> {
        let cfg = &self.ctx.config;
        let age = self.ctx.now().saturating_sub(c.created_ms).max(0) as u128;
        if c.entries > 0 && age >= cfg.max_ledger_rollover_time.as_millis() {
            return Some("max ledger age reached");
        }
        if age < cfg.min_ledger_rollover_time.as_millis() {
            return None;
        }
        if c.entries >= cfg.max_entries_per_ledger {
            return Some("max entries per ledger reached");
        }
        if c.bytes >= cfg.max_size_per_ledger_bytes {
            return Some("max ledger size reached");
        }
        None
    }

    /// Waits for pending adds and seals the current ledger; its final
    /// `LedgerInfo` (entries, size, close timestamp, properties kept) is left in
    /// `w.closed_unrecorded` for the caller to record.
    pub(super) async fn finish_current(&self, w: &mut Writer, now: i64) -> Result<()> {
        let Some(mut c) = w.current.take() else {
            return Ok(());
        };
        if let Some(f) = c.last_add.take() {
            let _ = f.await;
        }
        self.state.lock().current = None;
        if let Err(e) = c.handle.close().await {
            if e.kind() == BkErrorKind::LedgerFenced {
                self.mark_fenced("sealing the current ledger");
                return Err(ManagedLedgerError::from_add(&self.ctx.name, c.id, e));
            }
            tracing::warn!(managed_ledger = %self.ctx.name, ledger_id = c.id, error = %e,
                "sealing the current ledger failed; recording what it acknowledged");
        }
        let lac = c.handle.last_add_confirmed();
        let len = c.handle.length();
        let mut li = {
            let s = self.state.lock();
            s.info
                .ledger_info
                .iter()
                .find(|l| l.ledger_id == c.id)
                .cloned()
                .unwrap_or_else(|| LedgerInfo {
                    ledger_id: c.id,
                    ..Default::default()
                })
        };
        li.entries = Some(lac + 1);
        li.size = Some(i64::try_from(len).unwrap_or(i64::MAX));
        li.timestamp = Some(now);
        w.closed_unrecorded = Some(li);
        let as_read: Arc<dyn ReadHandle> = c.handle;
        self.read_handles.lock().insert(c.id, as_read);
        Ok(())
    }

    /// Seals the current ledger and records it, with a new ledger, in one
    /// compare-and-set.
    pub(super) async fn rollover_locked(&self, w: &mut Writer, reason: &str) -> Result<()> {
        self.settle_unknown_write(w).await?;
        let now = self.ctx.now();
        let old = w.current.as_ref().map(|c| c.id);
        self.finish_current(w, now).await?;
        let (mut info, version) = {
            let s = self.state.lock();
            (s.info.clone(), s.version)
        };
        if let Some(li) = &w.closed_unrecorded {
            replace_ledger_info(&mut info, li.clone());
        }
        let (current, info, new_version) = self.create_and_record(info, version, now).await?;
        w.closed_unrecorded = None;
        tracing::info!(managed_ledger = %self.ctx.name, old_ledger = ?old, new_ledger = current.id,
            reason, "rolled over");
        self.install(w, current, info, new_version);
        Ok(())
    }

    /// Makes `current` the ledger appends go to, with the metadata that
    /// records it.
    pub(super) fn install(
        &self,
        w: &mut Writer,
        current: Current,
        info: ManagedLedgerInfo,
        version: i64,
    ) {
        let mut s = self.state.lock();
        s.info = info;
        s.version = version;
        s.current = Some((current.id, current.handle.clone()));
        if s.last_confirmed.ledger_id < 0 {
            s.last_confirmed = Position::new(current.id, -1);
        }
        w.current = Some(current);
    }

    /// Creates a ledger through S1, asks S4 for its properties and records it in
    /// `info` with one compare-and-set ([I1](bkswitch_docs::invariants::I1)). On
    /// any failure after creation the ledger is deleted (through the resolver
    /// once it carries its properties).
    pub(super) async fn create_and_record(
        &self,
        mut info: ManagedLedgerInfo,
        version: i64,
        now: i64,
    ) -> Result<(Current, ManagedLedgerInfo, i64)> {
        let ctx = &self.ctx;
        let what = format!("managed ledger '{}'", ctx.name);
        let (mut client, mut handle) = ctx.create_ledger(&ctx.data_ledger_config(), &what).await?;
        let mut id = handle.id();
        let last_id = info.ledger_info.last().map(|l| l.ledger_id);
        if let Some(last) = last_id.filter(|last| id <= *last) {
            // The cluster's generator is behind this topic's last ledger (its
            // ids were advanced on another cluster meanwhile, e.g. for a
            // rollback, N22): move it past, once, and create again.
            let _ = handle.close().await;
            ctx.delete_orphan(client.as_ref(), id).await;
            client.advance_ledger_ids_beyond(last).await.map_err(|e| {
                ManagedLedgerError::client(format!("creating a ledger for {what}"), e)
            })?;
            tracing::warn!(
                ledger = %ctx.name,
                cluster = client.cluster_name(),
                below = id,
                last,
                "the cluster's ledger id generator was behind the topic's last ledger; advanced it"
            );
            (client, handle) = ctx.create_ledger(&ctx.data_ledger_config(), &what).await?;
            id = handle.id();
        }
        if let Some(last) = info.ledger_info.last() {
            if id <= last.ledger_id {
                let _ = handle.close().await;
                ctx.delete_orphan(client.as_ref(), id).await;
                return Err(ManagedLedgerError::client(
                    format!("creating a ledger for {what}"),
                    BkError::new(
                        BkErrorKind::Other,
                        format!(
                            "new ledger id {id} is not above the last recorded ledger {}: \
                             positions would go backwards; advance the cluster's ledger id \
                             generator (run the idgen precheck) before writing to it",
                            last.ledger_id
                        ),
                    )
                    .with_cluster(client.cluster_name())
                    .with_ledger(id),
                ));
            }
        }
        let props = ctx
            .properties_or_discard(LedgerPurpose::Data, handle.as_ref(), client.as_ref())
            .await?;
        let mut li = LedgerInfo {
            ledger_id: id,
            timestamp: Some(0),
            ..Default::default()
        };
        merge_properties(&mut li.properties, props);
        info.ledger_info.push(li.clone());
        let recorded = match encode_info(ctx, &info) {
            Ok(bytes) => self.cas(&bytes, version).await,
            Err(e) => Err(e),
        };
        match recorded {
            Ok(new_version) => Ok((
                Current {
                    handle,
                    id,
                    created_ms: now,
                    entries: 0,
                    bytes: 0,
                    last_add: None,
                    broken: Arc::new(AtomicBool::new(false)),
                },
                info,
                new_version,
            )),
            Err(e) => {
                let kept = ctx
                    .discard_unless_recorded(
                        &ctx.path,
                        version,
                        handle.as_ref(),
                        client.as_ref(),
                        || ctx.resolve_ledger(&li),
                        |stored| names_ledger(stored, id),
                    )
                    .await;
                if let Unrecorded::Fenced(v) = kept {
                    self.state.lock().version = v;
                }
                if matches!(kept, Unrecorded::Recorded | Unrecorded::Unknown) {
                    if let Ok(bytes) = encode_info(ctx, &info) {
                        self.state.lock().unsettled = Some(Unsettled {
                            bytes,
                            version,
                            info,
                            ledger: li,
                        });
                    }
                }
                Err(e)
            }
        }
    }
}
