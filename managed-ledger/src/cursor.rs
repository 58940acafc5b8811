//! The managed cursor: a named, durable read position with individual deletes.

use std::sync::{Arc, Weak};

use bkswitch_bk_client::{BookKeeperExt, EntryId, LedgerId, ReadHandle, WriteHandle};
use bkswitch_metadata_store::{ErrorKind as MdErrorKind, ExpectedVersion};
use bkswitch_mledger_spi::LedgerPurpose;
use bkswitch_proto::codec::{decode_managed_cursor_info, encode_managed_cursor_info};
use bkswitch_proto::ml::{ManagedCursorInfo, MessageRange, PositionInfo, StringProperty};
use bkswitch_proto::{attribution::is_reserved_key, Message, Stamped, RESERVED_PREFIX};

use crate::ctx::{merge_string_properties, Ctx};
use crate::error::{ManagedLedgerError, Result};
use crate::ledger::MlInner;
use crate::position::{Entry, Position};

/// What [`ManagedCursor::promote_cursor_ledger`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorPromotion {
    /// The cursor ledger was already stamped with the target cluster.
    AlreadyOnTarget,
    /// The stamp now names the target cluster; nothing else changed.
    Promoted {
        /// The cursor metadata version written.
        version: i64,
    },
    /// The cursor had advanced past the copy and rolled over onto a new ledger
    /// on the target cluster.
    RolledOver {
        /// The new cursor ledger.
        new_ledger_id: LedgerId,
    },
}

/// Where a new cursor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    /// After the last confirmed entry (Pulsar's default): only new entries.
    #[default]
    Latest,
    /// Before the first entry still held.
    Earliest,
}

#[derive(Debug)]
struct CursorLedger {
    handle: Arc<dyn WriteHandle>,
    id: LedgerId,
    created_ms: i64,
    entries: u64,
}

#[derive(Debug)]
struct CursorMeta {
    info: ManagedCursorInfo,
    version: i64,
    ledger: Option<CursorLedger>,
    closed: bool,
}

#[derive(Debug)]
struct CursorPos {
    mark_delete: Position,
    read: Position,
    /// Individually deleted ranges `(lower exclusive, upper inclusive]`, within one
    /// ledger each, sorted, merged.
    ranges: Vec<(Position, Position)>,
    cursors_ledger_id: LedgerId,
}

impl CursorPos {
    fn contains(&self, p: Position) -> bool {
        self.ranges.iter().any(|(lo, hi)| *lo < p && p <= *hi)
    }

    fn insert(&mut self, p: Position) {
        self.ranges.push((p.prev_in_ledger(), p));
        self.ranges.sort();
        let mut merged: Vec<(Position, Position)> = Vec::with_capacity(self.ranges.len());
        for (lo, hi) in self.ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if last.1.ledger_id == lo.ledger_id && lo <= last.1 => {
                    last.1 = last.1.max(hi);
                }
                _ => merged.push((lo, hi)),
            }
        }
        self.ranges = merged;
    }

    /// Drops what the mark-delete position covers, then advances it over
    /// individually deleted ranges that follow it.
    fn settle(&mut self, ml: &MlInner) {
        loop {
            let md = self.mark_delete;
            self.ranges.retain(|(_, hi)| *hi > md);
            for r in &mut self.ranges {
                if r.0 < md && r.0.ledger_id == md.ledger_id {
                    r.0 = md;
                }
            }
            let next = ml.next_position(md);
            match self
                .ranges
                .iter()
                .find(|(lo, hi)| *lo < next && next <= *hi)
            {
                Some(&(_, hi)) => self.mark_delete = hi,
                None => break,
            }
        }
        let next = ml.next_position(self.mark_delete);
        if self.read < next {
            self.read = next;
        }
    }

    fn position_info(&self) -> PositionInfo {
        PositionInfo {
            ledger_id: self.mark_delete.ledger_id,
            entry_id: self.mark_delete.entry_id,
            individual_deleted_messages: self.message_ranges(),
            ..Default::default()
        }
    }

    fn message_ranges(&self) -> Vec<MessageRange> {
        self.ranges
            .iter()
            .map(|(lo, hi)| MessageRange {
                lower_endpoint: lo.to_nested(),
                upper_endpoint: hi.to_nested(),
            })
            .collect()
    }
}

fn ranges_of(list: &[MessageRange]) -> Vec<(Position, Position)> {
    list.iter()
        .map(|r| {
            (
                Position::from_nested(&r.lower_endpoint),
                Position::from_nested(&r.upper_endpoint),
            )
        })
        .collect()
}

#[derive(Debug)]
pub(crate) struct CursorInner {
    name: String,
    path: String,
    ctx: Arc<Ctx>,
    ml: Weak<MlInner>,
    meta: tokio::sync::Mutex<CursorMeta>,
    pos: parking_lot::Mutex<CursorPos>,
}

/// A named cursor of a [`ManagedLedger`](crate::ManagedLedger): a read position,
/// a durable mark-delete position and individually deleted ranges.
///
/// Its metadata lives at `/managed-ledgers/<name>/<cursor>` (`ManagedCursorInfo`);
/// each persisted position is an `ml::PositionInfo` entry of its cursor ledger.
/// Every metadata write of one cursor runs under the cursor's async lock. Cheap
/// to clone (shared).
#[derive(Debug, Clone)]
pub struct ManagedCursor {
    pub(crate) inner: Arc<CursorInner>,
}

impl CursorInner {
    fn closed_error(&self) -> ManagedLedgerError {
        ManagedLedgerError::Closed {
            what: format!(
                "cursor '{}' of managed ledger '{}'",
                self.name, self.ctx.name
            ),
        }
    }

    fn ml(&self) -> Result<Arc<MlInner>> {
        self.ml.upgrade().ok_or_else(|| self.closed_error())
    }

    fn encode(&self, info: &ManagedCursorInfo) -> Result<Vec<u8>> {
        encode_managed_cursor_info(info, self.ctx.config.cursor_info_compression).map_err(|e| {
            ManagedLedgerError::InvalidArgument {
                name: self.ctx.name.clone(),
                reason: format!("cannot encode cursor '{}': {e}", self.name),
            }
        })
    }

    pub(crate) fn mark_delete_position(&self) -> Position {
        self.pos.lock().mark_delete
    }

    pub(crate) async fn create(
        ml: Weak<MlInner>,
        ctx: Arc<Ctx>,
        name: &str,
        mark_delete: Position,
    ) -> Result<Arc<CursorInner>> {
        let path = format!("{}/{name}", ctx.path);
        let info = ManagedCursorInfo {
            cursors_ledger_id: -1,
            mark_delete_ledger_id: Some(mark_delete.ledger_id),
            mark_delete_entry_id: Some(mark_delete.entry_id),
            ..Default::default()
        };
        let bytes =
            encode_managed_cursor_info(&info, ctx.config.cursor_info_compression).map_err(|e| {
                ManagedLedgerError::InvalidArgument {
                    name: ctx.name.clone(),
                    reason: format!("cannot encode cursor '{name}': {e}"),
                }
            })?;
        match ctx
            .store
            .put(&path, &bytes, ExpectedVersion::NotExists)
            .await
        {
            Ok(stat) => {
                let inner = Arc::new(CursorInner {
                    name: name.to_owned(),
                    path,
                    ctx: ctx.clone(),
                    ml: ml.clone(),
                    meta: tokio::sync::Mutex::new(CursorMeta {
                        info,
                        version: stat.version,
                        ledger: None,
                        closed: false,
                    }),
                    pos: parking_lot::Mutex::new(CursorPos {
                        mark_delete,
                        read: mark_delete,
                        ranges: Vec::new(),
                        cursors_ledger_id: -1,
                    }),
                });
                if let Some(ml) = ml.upgrade() {
                    let mut p = inner.pos.lock();
                    p.read = ml.next_position(mark_delete);
                }
                tracing::info!(managed_ledger = %ctx.name, cursor = name, mark_delete = %mark_delete, "cursor created");
                Ok(inner)
            }
            Err(e) if e.kind() == MdErrorKind::AlreadyExists => {
                CursorInner::recover(ml, ctx.clone(), name)
                    .await?
                    .ok_or_else(|| ManagedLedgerError::MetadataConflict {
                        what: format!("cursor '{name}' of managed ledger '{}'", ctx.name),
                        path: path.clone(),
                        source: e,
                    })
            }
            Err(e) => Err(ManagedLedgerError::metadata(
                format!("creating cursor '{name}' of managed ledger '{}'", ctx.name),
                e,
            )),
        }
    }

    /// Recovers a cursor from its metadata and its cursor ledger's last entry
    /// (opened with recovery through the cursor resolver, I15). `None` when the
    /// node does not exist.
    pub(crate) async fn recover(
        ml: Weak<MlInner>,
        ctx: Arc<Ctx>,
        name: &str,
    ) -> Result<Option<Arc<CursorInner>>> {
        let path = format!("{}/{name}", ctx.path);
        let Some(r) = ctx.store.get(&path).await.map_err(|e| {
            ManagedLedgerError::metadata(
                format!("reading cursor '{name}' of managed ledger '{}'", ctx.name),
                e,
            )
        })?
        else {
            return Ok(None);
        };
        let info = decode_managed_cursor_info(&r.value).map_err(|e| {
            ManagedLedgerError::corrupt(
                format!("cursor '{name}' of managed ledger '{}'", ctx.name),
                &path,
                e,
            )
        })?;
        let snapshot = (
            Position::new(
                info.mark_delete_ledger_id.unwrap_or(-1),
                info.mark_delete_entry_id.unwrap_or(-1),
            ),
            ranges_of(&info.individual_deleted_messages),
        );
        let (mark_delete, ranges) = if info.cursors_ledger_id < 0 {
            snapshot
        } else {
            let client = ctx.resolve_cursor(name, &info)?;
            let cfg = &ctx.config;
            match client
                .open_ledger(info.cursors_ledger_id, cfg.digest_type, &cfg.password)
                .await
            {
                Ok(h) => {
                    let lac = h.last_add_confirmed();
                    if lac < 0 {
                        snapshot
                    } else {
                        let entries = h.read_entries(lac, lac).await.map_err(|e| {
                            ManagedLedgerError::client(
                                format!(
                                    "reading the last position of cursor '{name}' of managed \
                                     ledger '{}' from cursor ledger {}",
                                    ctx.name, info.cursors_ledger_id
                                ),
                                e,
                            )
                        })?;
                        let data = entries
                            .into_iter()
                            .next()
                            .map(|e| e.data)
                            .unwrap_or_default();
                        let pi = PositionInfo::decode(data).map_err(|e| {
                            ManagedLedgerError::CorruptMetadata {
                                what: format!(
                                    "cursor ledger {} of cursor '{name}' of managed ledger '{}'",
                                    info.cursors_ledger_id, ctx.name
                                ),
                                path: path.clone(),
                                reason: format!("entry {lac} is not a PositionInfo: {e}"),
                            }
                        })?;
                        let _ = h.close().await;
                        (
                            Position::new(pi.ledger_id, pi.entry_id),
                            ranges_of(&pi.individual_deleted_messages),
                        )
                    }
                }
                Err(e) if e.is_already_deleted() => {
                    tracing::warn!(managed_ledger = %ctx.name, cursor = name,
                        ledger_id = info.cursors_ledger_id, error = %e,
                        "cursor ledger missing; recovering from the metadata snapshot");
                    snapshot
                }
                Err(e) => {
                    return Err(ManagedLedgerError::client(
                        format!(
                            "recovering cursor '{name}' of managed ledger '{}' from cursor \
                             ledger {}",
                            ctx.name, info.cursors_ledger_id
                        ),
                        e,
                    ))
                }
            }
        };
        let cursors_ledger_id = info.cursors_ledger_id;
        let inner = Arc::new(CursorInner {
            name: name.to_owned(),
            path,
            ctx: ctx.clone(),
            ml: ml.clone(),
            meta: tokio::sync::Mutex::new(CursorMeta {
                info,
                version: r.stat.version,
                ledger: None,
                closed: false,
            }),
            pos: parking_lot::Mutex::new(CursorPos {
                mark_delete,
                read: mark_delete,
                ranges,
                cursors_ledger_id,
            }),
        });
        if let Some(ml) = ml.upgrade() {
            inner.pos.lock().settle(&ml);
        }
        tracing::info!(managed_ledger = %ctx.name, cursor = name, mark_delete = %mark_delete, "cursor recovered");
        Ok(Some(inner))
    }

    fn check_open(&self, meta: &CursorMeta) -> Result<()> {
        if meta.closed {
            Err(self.closed_error())
        } else {
            Ok(())
        }
    }

    /// Persists `pi`: appended to the cursor ledger, or written to a new cursor
    /// ledger (rollover) recorded in one CAS with its S4 properties.
    async fn persist(&self, meta: &mut CursorMeta, pi: PositionInfo) -> Result<()> {
        let cfg = &self.ctx.config;
        if let Some(l) = meta.ledger.as_mut() {
            let age = self.ctx.now().saturating_sub(l.created_ms).max(0) as u128;
            if l.entries < cfg.cursor_max_entries_per_ledger
                && age < cfg.cursor_ledger_rollover_time.as_millis()
            {
                match l.handle.add_entry(pi.encode_to_vec().into()).await {
                    Ok(_) => {
                        l.entries += 1;
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(managed_ledger = %self.ctx.name, cursor = %self.name,
                            ledger_id = l.id, error = %e,
                            "cursor ledger append failed; switching to a new cursor ledger");
                    }
                }
            }
        }
        self.roll(meta, pi).await
    }

    async fn roll(&self, meta: &mut CursorMeta, pi: PositionInfo) -> Result<()> {
        let ctx = &self.ctx;
        let what = || format!("cursor '{}' of managed ledger '{}'", self.name, ctx.name);
        let client = ctx.creation_client();
        let handle = client
            .create_ledger(&ctx.config.cursor_ledger_config())
            .await
            .map_err(|e| {
                ManagedLedgerError::client(format!("creating a ledger for {}", what()), e)
            })?;
        let id = handle.id();
        let props = match ctx.new_ledger_properties(
            LedgerPurpose::Cursor { cursor: &self.name },
            id,
            client.as_ref(),
        ) {
            Ok(p) => p,
            Err(e) => {
                let _ = handle.close().await;
                ctx.delete_orphan(client.as_ref(), id).await;
                return Err(e);
            }
        };
        let build = |base: &ManagedCursorInfo| {
            let mut info = base.clone();
            info.cursors_ledger_id = id;
            info.mark_delete_ledger_id = Some(pi.ledger_id);
            info.mark_delete_entry_id = Some(pi.entry_id);
            info.individual_deleted_messages = pi.individual_deleted_messages.clone();
            merge_string_properties(&mut info.cursor_properties, props.clone());
            info
        };
        let mut info = build(&meta.info);
        let result = match handle.add_entry(pi.encode_to_vec().into()).await {
            Err(e) => Err(ManagedLedgerError::client(
                format!("writing the position of {} to cursor ledger {id}", what()),
                e,
            )),
            Ok(_) => match self.encode(&info) {
                Ok(bytes) => match self.cas(&bytes, meta.version, true).await {
                    // A coordinator promoted this cursor's ledger (changing
                    // only its stamp) while no node owned the topic, just
                    // before this owner loaded it: adopt that write and go on
                    // rather than giving the topic up.
                    Err(e)
                        if e.kind() == crate::ErrorKind::Fenced
                            && self.adopt_stamp_only_change(meta).await =>
                    {
                        info = build(&meta.info);
                        match self.encode(&info) {
                            Ok(bytes) => self.cas(&bytes, meta.version, true).await,
                            Err(e) => Err(e),
                        }
                    }
                    other => other,
                },
                Err(e) => Err(e),
            },
        };
        let new_version = match result {
            Ok(v) => v,
            Err(e) => {
                let _ = handle.close().await;
                match ctx.resolve_cursor(&self.name, &info) {
                    Ok(c) => ctx.delete_orphan(c.as_ref(), id).await,
                    Err(_) => ctx.delete_orphan(client.as_ref(), id).await,
                }
                return Err(e);
            }
        };
        let old_info = std::mem::replace(&mut meta.info, info);
        meta.version = new_version;
        let old = meta.ledger.replace(CursorLedger {
            handle,
            id,
            created_ms: ctx.now(),
            entries: 1,
        });
        self.pos.lock().cursors_ledger_id = id;
        if let Some(old) = old {
            let _ = old.handle.close().await;
        }
        if old_info.cursors_ledger_id >= 0 {
            self.delete_cursor_ledger(&old_info, "after cursor-ledger rollover")
                .await;
        }
        tracing::info!(managed_ledger = %ctx.name, cursor = %self.name,
            old_ledger = old_info.cursors_ledger_id, new_ledger = id, "cursor ledger rolled over");
        Ok(())
    }

    /// After a lost compare-and-set: when the stored metadata differs from
    /// ours only in the cluster stamp (a promotion written by a coordinator),
    /// takes the stored metadata and version as ours and answers true.
    async fn adopt_stamp_only_change(&self, meta: &mut CursorMeta) -> bool {
        let Ok(Some(r)) = self.ctx.store.get(&self.path).await else {
            return false;
        };
        let Ok(stored) = decode_managed_cursor_info(&r.value) else {
            return false;
        };
        let without_stamp = |info: &ManagedCursorInfo| {
            let mut i = info.clone();
            i.cursor_properties
                .retain(|p| p.name != bkswitch_proto::ATTR_KEY);
            i
        };
        let stamp_changed = stored.cluster_stamp().ok() != meta.info.cluster_stamp().ok();
        if !stamp_changed
            || r.stat.version == meta.version
            || without_stamp(&stored) != without_stamp(&meta.info)
        {
            return false;
        }
        tracing::info!(managed_ledger = %self.ctx.name, cursor = %self.name,
            stamp = ?stored.cluster_stamp().ok().flatten(),
            "cursor metadata was promoted concurrently; adopting the new stamp");
        meta.info = stored;
        meta.version = r.stat.version;
        true
    }

    /// Deletes the cursor ledger `info` names through the cursor resolver (I15).
    async fn delete_cursor_ledger(&self, info: &ManagedCursorInfo, why: &str) {
        let id = info.cursors_ledger_id;
        let result = match self.ctx.resolve_cursor(&self.name, info) {
            Ok(client) => client
                .delete_ledger_if_exists(id)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = result {
            tracing::warn!(managed_ledger = %self.ctx.name, cursor = %self.name, ledger_id = id,
                error = %e, why, "cursor ledger could not be deleted; it is orphaned");
        }
    }

    async fn cas(&self, bytes: &[u8], version: i64, fence_on_conflict: bool) -> Result<i64> {
        let ctx = &self.ctx;
        match ctx
            .store
            .put(&self.path, bytes, ExpectedVersion::Exactly(version))
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(e) if e.is_conflict() => {
                if fence_on_conflict {
                    tracing::warn!(managed_ledger = %ctx.name, cursor = %self.name,
                        "cursor metadata changed under this owner: fenced");
                    Err(ManagedLedgerError::Fenced {
                        name: ctx.name.clone(),
                        reason: format!(
                            "the metadata of cursor '{}' moved past version {version} ({e})",
                            self.name
                        ),
                    })
                } else {
                    Err(ManagedLedgerError::MetadataConflict {
                        what: format!("cursor '{}' of managed ledger '{}'", self.name, ctx.name),
                        path: self.path.clone(),
                        source: e,
                    })
                }
            }
            Err(e) => {
                if let Ok(Some(r)) = ctx.store.get(&self.path).await {
                    if r.value == bytes && r.stat.version == version + 1 {
                        return Ok(r.stat.version);
                    }
                }
                Err(ManagedLedgerError::metadata(
                    format!(
                        "updating cursor '{}' of managed ledger '{}'",
                        self.name, ctx.name
                    ),
                    e,
                ))
            }
        }
    }

    pub(crate) async fn close(&self) {
        let mut meta = self.meta.lock().await;
        if let Some(l) = meta.ledger.take() {
            let _ = l.handle.close().await;
        }
        meta.closed = true;
    }

    pub(crate) async fn delete(&self) -> Result<()> {
        let mut meta = self.meta.lock().await;
        if let Some(l) = meta.ledger.take() {
            let _ = l.handle.close().await;
        }
        if meta.info.cursors_ledger_id >= 0 {
            let client = self.ctx.resolve_cursor(&self.name, &meta.info)?;
            client
                .delete_ledger_if_exists(meta.info.cursors_ledger_id)
                .await
                .map_err(|e| {
                    ManagedLedgerError::client(
                        format!(
                            "deleting cursor ledger {} of cursor '{}' of managed ledger '{}'",
                            meta.info.cursors_ledger_id, self.name, self.ctx.name
                        ),
                        e,
                    )
                })?;
        }
        match self
            .ctx
            .store
            .delete(&self.path, ExpectedVersion::Exactly(meta.version))
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == MdErrorKind::NotFound => {}
            Err(e) => {
                return Err(ManagedLedgerError::metadata(
                    format!(
                        "deleting cursor '{}' of managed ledger '{}'",
                        self.name, self.ctx.name
                    ),
                    e,
                ))
            }
        }
        meta.closed = true;
        tracing::info!(managed_ledger = %self.ctx.name, cursor = %self.name, "cursor deleted");
        Ok(())
    }
}

impl ManagedCursor {
    /// The cursor's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The mark-delete position: every entry at or before it is consumed.
    pub fn mark_delete_position(&self) -> Position {
        self.inner.mark_delete_position()
    }

    /// The position the next [`read_entries`](Self::read_entries) starts at.
    pub fn read_position(&self) -> Position {
        self.inner.pos.lock().read
    }

    /// The id of the cursor ledger recorded in the metadata (`-1` when the
    /// position lives only in the metadata snapshot).
    pub fn cursor_ledger_id(&self) -> LedgerId {
        self.inner.pos.lock().cursors_ledger_id
    }

    /// Individually deleted ranges `(lower exclusive, upper inclusive]` after the
    /// mark-delete position.
    pub fn individually_deleted_ranges(&self) -> Vec<(Position, Position)> {
        self.inner.pos.lock().ranges.clone()
    }

    /// The `ManagedCursorInfo` last written for this cursor and its store version
    /// (taken under the cursor lock).
    pub async fn metadata(&self) -> (ManagedCursorInfo, i64) {
        let meta = self.inner.meta.lock().await;
        (meta.info.clone(), meta.version)
    }

    /// Reads up to `max_entries` entries from the read position, skipping
    /// individually deleted ones, and advances the read position. Empty when
    /// nothing new is available.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Closed`]; client and hook errors of the read.
    pub async fn read_entries(&self, max_entries: usize) -> Result<Vec<Entry>> {
        let ml = self.inner.ml()?;
        loop {
            let start = self.inner.pos.lock().read;
            let entries = ml.read_from(start, max_entries).await?;
            let Some(last) = entries.last().map(|e| e.position) else {
                return Ok(Vec::new());
            };
            let mut st = self.inner.pos.lock();
            if st.read == start {
                st.read = ml.next_position(last);
            }
            let md = st.mark_delete;
            let kept: Vec<Entry> = entries
                .into_iter()
                .filter(|e| e.position > md && !st.contains(e.position))
                .collect();
            if !kept.is_empty() {
                return Ok(kept);
            }
        }
    }

    /// Moves the read position back to right after the mark-delete position.
    pub fn rewind(&self) {
        let ml = self.inner.ml.upgrade();
        let mut st = self.inner.pos.lock();
        st.read = match ml {
            Some(ml) => ml.next_position(st.mark_delete),
            None => st.mark_delete,
        };
    }

    fn validate(&self, ml: &MlInner, p: Position) -> Result<()> {
        let invalid = |reason: String| ManagedLedgerError::InvalidPosition {
            name: self.inner.ctx.name.clone(),
            position: p,
            reason,
        };
        if p.ledger_id < 0 || p.entry_id < -1 {
            return Err(invalid("ledger id must be >= 0 and entry id >= -1".into()));
        }
        let lc = ml.last_confirmed();
        if p > lc {
            return Err(invalid(format!(
                "beyond the last confirmed entry {lc}; acknowledge only entries that were read"
            )));
        }
        Ok(())
    }

    /// Marks every entry up to and including `position` as consumed and persists
    /// the position (cursor ledger entry; a new cursor ledger when the config's
    /// thresholds are reached). A position at or before the current mark-delete
    /// position changes nothing.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidPosition`] for a negative position, one beyond
    /// the last confirmed entry, or a ledger the managed ledger does not hold
    /// (nothing changes); [`ManagedLedgerError::Closed`]; client, store and hook
    /// errors of persisting.
    pub async fn mark_delete(&self, position: Position) -> Result<()> {
        let mut meta = self.inner.meta.lock().await;
        self.inner.check_open(&meta)?;
        let ml = self.inner.ml()?;
        self.validate(&ml, position)?;
        let pi = {
            let mut st = self.inner.pos.lock();
            if position <= st.mark_delete {
                return Ok(());
            }
            if !ml.holds_ledger(position.ledger_id) {
                return Err(ManagedLedgerError::InvalidPosition {
                    name: self.inner.ctx.name.clone(),
                    position,
                    reason: "the managed ledger holds no such ledger".into(),
                });
            }
            st.mark_delete = position;
            st.settle(&ml);
            st.position_info()
        };
        self.inner.persist(&mut meta, pi).await
    }

    /// Deletes individual entries (out of order acknowledgements). Entries right
    /// after the mark-delete position advance it.
    ///
    /// # Errors
    ///
    /// As [`mark_delete`](Self::mark_delete); every position is checked before
    /// anything changes.
    pub async fn delete(&self, positions: &[Position]) -> Result<()> {
        let mut meta = self.inner.meta.lock().await;
        self.inner.check_open(&meta)?;
        let ml = self.inner.ml()?;
        for p in positions {
            self.validate(&ml, *p)?;
            if p.entry_id < 0 || !ml.holds_ledger(p.ledger_id) {
                if *p <= self.inner.pos.lock().mark_delete {
                    continue;
                }
                return Err(ManagedLedgerError::InvalidPosition {
                    name: self.inner.ctx.name.clone(),
                    position: *p,
                    reason: "not an entry of the managed ledger".into(),
                });
            }
        }
        let pi = {
            let mut st = self.inner.pos.lock();
            let mut changed = false;
            for p in positions {
                if *p > st.mark_delete && !st.contains(*p) {
                    st.insert(*p);
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
            st.settle(&ml);
            st.position_info()
        };
        self.inner.persist(&mut meta, pi).await
    }

    /// Forces a new cursor ledger (created through S1, recorded with its S4
    /// properties in one CAS) holding the current position; the previous cursor
    /// ledger is deleted through the cursor resolver.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Closed`]; client, store and hook errors (nothing
    /// unrecorded is left behind).
    pub async fn roll_cursor_ledger(&self) -> Result<()> {
        let mut meta = self.inner.meta.lock().await;
        self.inner.check_open(&meta)?;
        let pi = self.inner.pos.lock().position_info();
        self.inner.roll(&mut meta, pi).await
    }

    /// Changes `cursorProperties` and nothing else, under the cursor lock, with
    /// a compare-and-set against the cursor's current metadata version, provided
    /// the recorded cursor ledger is still `expected_cursors_ledger_id` (I9, I13).
    /// `f` may set reserved `_pulsar.` keys: this is the primitive for hooks and
    /// the orchestrator, not a user API.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::CursorRolledOver`] when the cursor ledger changed
    /// (nothing written); [`ManagedLedgerError::MetadataConflict`] when another
    /// writer changed the metadata; [`ManagedLedgerError::Closed`]; store errors.
    pub async fn update_cursor_properties<F>(
        &self,
        expected_cursors_ledger_id: LedgerId,
        f: F,
    ) -> Result<(ManagedCursorInfo, i64)>
    where
        F: FnOnce(&mut Vec<StringProperty>),
    {
        let mut meta = self.inner.meta.lock().await;
        self.inner.check_open(&meta)?;
        if meta.info.cursors_ledger_id != expected_cursors_ledger_id {
            return Err(ManagedLedgerError::CursorRolledOver {
                name: self.inner.ctx.name.clone(),
                cursor: self.inner.name.clone(),
                expected: expected_cursors_ledger_id,
                actual: meta.info.cursors_ledger_id,
            });
        }
        let mut info = meta.info.clone();
        f(&mut info.cursor_properties);
        let bytes = self.inner.encode(&info)?;
        let version = self.inner.cas(&bytes, meta.version, false).await?;
        meta.info = info;
        meta.version = version;
        Ok((meta.info.clone(), version))
    }

    /// Moves the cursor's ledger to `target_cluster` after the coordinator
    /// copied it there (the owner side of a cursor PROMOTE, invariants I9 and
    /// I13). Runs under the cursor lock, so no mark-delete interleaves.
    ///
    /// `expected_cursors_ledger_id` is the cursor ledger the coordinator copied
    /// and `copied_last_entry_id` the last entry id of its copy.
    ///
    /// - The stamp already names `target_cluster`: nothing to do,
    ///   [`CursorPromotion::AlreadyOnTarget`].
    /// - The ledger holds exactly the copied entries: one compare-and-set
    ///   changing only the stamp ([`CursorPromotion::Promoted`]). The cursor then
    ///   stops appending to that ledger (its write handle, on the old cluster, is
    ///   closed), so no position is ever written to a ledger whose stamp names
    ///   another cluster: the next persist rolls onto a new cursor ledger created
    ///   through S1 on the active cluster.
    /// - The ledger holds entries beyond the copy (the cursor is live and
    ///   acknowledged since the copy was taken): promoting the stale copy would
    ///   rewind the cursor on recovery, so the cursor rolls over instead onto a
    ///   new ledger on `target_cluster` holding the latest position
    ///   ([`CursorPromotion::RolledOver`]). The copy under the old id on the
    ///   target is then unreferenced and the caller deletes it.
    ///
    /// Rolling over rather than sealing and copying the tail is deliberate: a
    /// copy made by the coordinator is closed, so the tail could only be added by
    /// deleting and re-creating the copy (which real bookies may refuse for a
    /// while after fencing), whereas a rollover is the cursor's ordinary
    /// durable path and takes one ledger creation and one compare-and-set.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::CursorRolledOver`] when the recorded cursor ledger
    /// is not `expected_cursors_ledger_id` (nothing written);
    /// [`ManagedLedgerError::NotOnActiveCluster`] when a rollover is needed but
    /// this node does not create ledgers on `target_cluster` yet (retryable);
    /// [`ManagedLedgerError::CorruptMetadata`] for a duplicated stamp;
    /// [`ManagedLedgerError::Closed`]; client, store and hook errors.
    pub async fn promote_cursor_ledger(
        &self,
        expected_cursors_ledger_id: LedgerId,
        copied_last_entry_id: EntryId,
        target_cluster: &str,
    ) -> Result<CursorPromotion> {
        let inner = &self.inner;
        let mut meta = inner.meta.lock().await;
        inner.check_open(&meta)?;
        if meta.info.cursors_ledger_id != expected_cursors_ledger_id {
            return Err(ManagedLedgerError::CursorRolledOver {
                name: inner.ctx.name.clone(),
                cursor: inner.name.clone(),
                expected: expected_cursors_ledger_id,
                actual: meta.info.cursors_ledger_id,
            });
        }
        let corrupt = |e: bkswitch_proto::StampError| ManagedLedgerError::CorruptMetadata {
            what: format!(
                "cursor '{}' of managed ledger '{}'",
                inner.name, inner.ctx.name
            ),
            path: inner.path.clone(),
            reason: e.to_string(),
        };
        if meta.info.cluster_stamp().map_err(corrupt)? == Some(target_cluster) {
            return Ok(CursorPromotion::AlreadyOnTarget);
        }
        let id = meta.info.cursors_ledger_id;
        let current_lac = match meta.ledger.as_ref().filter(|l| l.id == id) {
            Some(l) => l.handle.last_add_confirmed(),
            None if id < 0 => -1,
            None => {
                let client = inner.ctx.resolve_cursor(&inner.name, &meta.info)?;
                let cfg = &inner.ctx.config;
                let h = client
                    .open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
                    .await
                    .map_err(|e| {
                        ManagedLedgerError::client(
                            format!(
                                "reading cursor ledger {id} of cursor '{}' of managed ledger '{}' \
                                 to promote it",
                                inner.name, inner.ctx.name
                            ),
                            e,
                        )
                    })?;
                let lac = h.last_add_confirmed();
                let _ = h.close().await;
                lac
            }
        };
        if id >= 0 && current_lac == copied_last_entry_id {
            let mut info = meta.info.clone();
            info.set_cluster_stamp(target_cluster).map_err(corrupt)?;
            let bytes = inner.encode(&info)?;
            let version = inner.cas(&bytes, meta.version, false).await?;
            meta.info = info;
            meta.version = version;
            if let Some(old) = meta.ledger.take() {
                let _ = old.handle.close().await;
            }
            tracing::info!(managed_ledger = %inner.ctx.name, cursor = %inner.name,
                ledger_id = id, cluster = target_cluster, "cursor ledger promoted");
            return Ok(CursorPromotion::Promoted { version });
        }
        let active = inner.ctx.creation_client();
        if active.cluster_name() != target_cluster {
            return Err(ManagedLedgerError::NotOnActiveCluster {
                name: inner.ctx.name.clone(),
                cursor: inner.name.clone(),
                target: target_cluster.to_owned(),
                active: active.cluster_name().to_owned(),
            });
        }
        let pi = inner.pos.lock().position_info();
        inner.roll(&mut meta, pi).await?;
        let new_ledger_id = meta.info.cursors_ledger_id;
        tracing::info!(managed_ledger = %inner.ctx.name, cursor = %inner.name,
            old_ledger = id, new_ledger = new_ledger_id, copied_last_entry_id, current_lac,
            cluster = target_cluster, "cursor moved by rollover: it advanced past the copy");
        Ok(CursorPromotion::RolledOver { new_ledger_id })
    }

    /// The user-visible cursor properties (reserved `_pulsar.` keys excluded).
    pub async fn cursor_properties(&self) -> Vec<(String, String)> {
        let meta = self.inner.meta.lock().await;
        meta.info
            .cursor_properties
            .iter()
            .filter(|p| !is_reserved_key(&p.name))
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect()
    }

    /// Sets user cursor properties (replacing values of keys already present,
    /// appending others); reserved keys are kept untouched.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidArgument`] for a key starting with `_pulsar.`
    /// (I16; nothing written); otherwise as
    /// [`update_cursor_properties`](Self::update_cursor_properties).
    pub async fn set_cursor_properties(&self, props: &[(String, String)]) -> Result<()> {
        if let Some((k, _)) = props.iter().find(|(k, _)| is_reserved_key(k)) {
            return Err(ManagedLedgerError::InvalidArgument {
                name: self.inner.ctx.name.clone(),
                reason: format!(
                    "cursor property key '{k}' uses the reserved prefix '{RESERVED_PREFIX}'; \
                     pick another key"
                ),
            });
        }
        let expected = self.inner.meta.lock().await.info.cursors_ledger_id;
        let props = props.to_vec();
        self.update_cursor_properties(expected, move |list| merge_string_properties(list, props))
            .await
            .map(|_| ())
    }

    /// Closes the cursor's ledger handle; the cursor stays recorded.
    pub async fn close(&self) {
        self.inner.close().await;
    }
}
