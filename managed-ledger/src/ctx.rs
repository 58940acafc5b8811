//! What a managed ledger and its cursors share: the store, the clients, the
//! config, the clock, and the hook call sites (S1, S2, S4).
//!
//! Every ledger this crate creates, records, opens for recovery or deletes goes
//! through a method here, so the hook call sites are in one place: S1 in
//! [`Ctx::create_ledger`], S4 in [`Ctx::properties_or_discard`], S2 in
//! [`Ctx::resolve_ledger`] and [`Ctx::resolve_cursor`] (and the deletes built on
//! them). Every metadata write of a managed ledger or cursor is a
//! compare-and-set through [`Ctx::cas`].

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, BookKeeperExt, LedgerConfig, LedgerId, WriteHandle};
use bkswitch_metadata_store::{ExpectedVersion, MetadataError, MetadataStore};
use bkswitch_mledger_spi::{LedgerPurpose, ManagedLedgerConfig, NewLedgerContext};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;

use crate::error::{ManagedLedgerError, Result};
use crate::fence::{fence, Fence};
use crate::session::MetadataSession;
use crate::Clock;

/// How long [`Ctx::resolve_ledger_to_open`] waits for a cluster's client to
/// start.
pub(crate) const CLIENT_START_WAIT: std::time::Duration = std::time::Duration::from_secs(15);

/// How often it asks the hook again meanwhile.
const CLIENT_START_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// One managed ledger's name, metadata path, store, clients, config and clock,
/// shared by the ledger and its cursors.
#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) store: Arc<dyn MetadataStore>,
    /// The storage's client: used for everything a hook does not decide.
    pub(crate) client: Arc<dyn BookKeeper>,
    pub(crate) config: ManagedLedgerConfig,
    pub(crate) clock: Arc<dyn Clock>,
    /// The metadata store's session, as the factory follows it: trims and
    /// rollovers wait while it is lost.
    pub(crate) session: Arc<MetadataSession>,
}

impl Ctx {
    pub(crate) fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// Refuses `what` (a trim, a forced rollover) while the metadata session
    /// is lost, counting it as deferred.
    pub(crate) fn check_session(&self, what: &'static str, trim: bool) -> Result<()> {
        if self.session.is_available() {
            return Ok(());
        }
        if trim {
            self.session.defer_trim();
        } else {
            self.session.defer_rollover();
        }
        tracing::info!(managed_ledger = %self.name, what, "deferred: the metadata session is lost");
        Err(ManagedLedgerError::MetadataSessionLost {
            name: self.name.clone(),
            deferred: what,
        })
    }

    /// Whether a rollover that is due may run now; when the metadata session
    /// is lost it is put off (counted) and the current ledger kept.
    pub(crate) fn rollover_may_run(&self) -> bool {
        let available = self.session.is_available();
        if !available {
            self.session.defer_rollover();
        }
        available
    }

    /// S1: the client a new ledger is created on.
    pub(crate) fn creation_client(&self) -> Arc<dyn BookKeeper> {
        match &self.config.hooks.active_client {
            Some(supplier) => supplier.active_client_for(&self.name),
            None => self.client.clone(),
        }
    }

    /// The configuration of a new data ledger: the managed ledger's quorums,
    /// digest and password, with Pulsar's data-ledger custom metadata
    /// ([`crate::ledger_metadata::data_ledger`]).
    pub(crate) fn data_ledger_config(&self) -> LedgerConfig {
        crate::ledger_metadata::with_metadata(
            self.config.data_ledger_config(),
            crate::ledger_metadata::data_ledger(&self.name),
        )
    }

    /// The configuration of a new ledger of cursor `cursor`, with Pulsar's
    /// cursor-ledger custom metadata
    /// ([`crate::ledger_metadata::cursor_ledger`]).
    pub(crate) fn cursor_ledger_config(&self, cursor: &str) -> LedgerConfig {
        crate::ledger_metadata::with_metadata(
            self.config.cursor_ledger_config(),
            crate::ledger_metadata::cursor_ledger(&self.name, cursor),
        )
    }

    /// Creates a ledger with `config` on the S1 client; returns the client and
    /// the handle. `what` names the ledger's owner in the error
    /// (`managed ledger 'x'`, `cursor 'c' of managed ledger 'x'`).
    pub(crate) async fn create_ledger(
        &self,
        config: &LedgerConfig,
        what: &str,
    ) -> Result<(Arc<dyn BookKeeper>, Arc<dyn WriteHandle>)> {
        let client = self.creation_client();
        let handle = client
            .create_ledger(config)
            .await
            .map_err(|e| ManagedLedgerError::client(format!("creating a ledger for {what}"), e))?;
        Ok((client, handle))
    }

    /// S2: the client that holds a data ledger (once per handle open or delete).
    pub(crate) fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>> {
        match &self.config.hooks.ledger_resolver {
            Some(resolver) => resolver.resolve_ledger(info).map_err(|e| {
                ManagedLedgerError::hook(
                    format!(
                        "resolving the cluster of ledger {} of managed ledger '{}'",
                        info.ledger_id, self.name
                    ),
                    e,
                )
            }),
            None => Ok(self.client.clone()),
        }
    }

    /// S2 for a path that opens the ledger at once (a read, the recovery of
    /// the last ledger at load): like [`resolve_ledger`](Self::resolve_ledger),
    /// but while the hook answers that the cluster's client is starting
    /// (retryable, with a `retry_after`), it waits and asks again, for up to
    /// [`CLIENT_START_WAIT`]. After a restart the client of a non-active
    /// cluster starts on the first ledger that needs it; without the wait that
    /// first read would fail although the cluster is healthy.
    pub(crate) async fn resolve_ledger_to_open(
        &self,
        info: &LedgerInfo,
    ) -> Result<Arc<dyn BookKeeper>> {
        let Some(resolver) = &self.config.hooks.ledger_resolver else {
            return Ok(self.client.clone());
        };
        // The clock is read only once the hook asks to wait: a successful
        // resolve costs what `resolve_ledger` costs.
        let mut deadline = None;
        loop {
            match resolver.resolve_ledger(info) {
                Err(e)
                    if e.is_retryable()
                        && e.retry_after().is_some()
                        && tokio::time::Instant::now()
                            < *deadline.get_or_insert_with(|| {
                                tokio::time::Instant::now() + CLIENT_START_WAIT
                            }) =>
                {
                    let pause = e.retry_after().unwrap_or_default().min(CLIENT_START_POLL);
                    tokio::time::sleep(pause).await;
                }
                Err(_) => return self.resolve_ledger(info),
                Ok(client) => return Ok(client),
            }
        }
    }

    /// S2: the client that holds the cursor ledger `info` names.
    pub(crate) fn resolve_cursor(
        &self,
        cursor: &str,
        info: &ManagedCursorInfo,
    ) -> Result<Arc<dyn BookKeeper>> {
        match &self.config.hooks.cursor_resolver {
            Some(resolver) => resolver.resolve_cursor(info).map_err(|e| {
                ManagedLedgerError::hook(
                    format!(
                        "resolving the cluster of cursor ledger {} of cursor '{cursor}' of \
                         managed ledger '{}'",
                        info.cursors_ledger_id, self.name
                    ),
                    e,
                )
            }),
            None => Ok(self.client.clone()),
        }
    }

    /// S4: the properties of a new ledger, from every provider in order.
    pub(crate) fn new_ledger_properties(
        &self,
        purpose: LedgerPurpose<'_>,
        ledger_id: LedgerId,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>> {
        let providers = match purpose {
            LedgerPurpose::Data => &self.config.hooks.new_ledger_properties,
            LedgerPurpose::Cursor { .. } => &self.config.hooks.new_cursor_ledger_properties,
        };
        let mut out = Vec::new();
        if providers.is_empty() {
            return Ok(out);
        }
        let ctx = NewLedgerContext {
            managed_ledger: &self.name,
            ledger_id,
            purpose,
            client,
        };
        for provider in providers {
            let props = provider.new_ledger_properties(&ctx).map_err(|e| {
                ManagedLedgerError::hook(
                    format!(
                        "new-ledger properties of ledger {ledger_id} of managed ledger '{}' \
                         (the ledger is deleted and nothing is recorded)",
                        self.name
                    ),
                    e,
                )
            })?;
            out.extend(props);
        }
        Ok(out)
    }

    /// S4 for the ledger `handle` just created on `client`. When a provider
    /// fails the ledger is closed and deleted on `client`: it carries no
    /// properties, so no stamp exists to route by.
    pub(crate) async fn properties_or_discard(
        &self,
        purpose: LedgerPurpose<'_>,
        handle: &dyn WriteHandle,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>> {
        let id = handle.id();
        match self.new_ledger_properties(purpose, id, client) {
            Ok(props) => Ok(props),
            Err(e) => {
                let _ = handle.close().await;
                self.delete_orphan(client, id).await;
                Err(e)
            }
        }
    }

    /// Closes and deletes a ledger whose recording failed after it got its
    /// properties: on the client `resolve` names (S2 on the metadata that was
    /// not written, [I15](bkswitch_docs::invariants::I15)), or on `creator` when
    /// the resolver refuses.
    pub(crate) async fn discard_unrecorded(
        &self,
        handle: &dyn WriteHandle,
        creator: &dyn BookKeeper,
        resolve: impl FnOnce() -> Result<Arc<dyn BookKeeper>>,
    ) {
        let id = handle.id();
        let _ = handle.close().await;
        match resolve() {
            Ok(client) => self.delete_orphan(client.as_ref(), id).await,
            Err(e) => {
                tracing::warn!(managed_ledger = %self.name, ledger_id = id, error = %e,
                    "resolver refused the unrecorded ledger; deleting on its creator");
                self.delete_orphan(creator, id).await;
            }
        }
    }

    /// After the compare-and-set that was to record the new ledger `handle`
    /// failed: reads the metadata at `path` back and deletes the ledger (as
    /// [`discard_unrecorded`](Self::discard_unrecorded)) only when the stored
    /// value does not name it (`names_it`). A failure may hide an applied
    /// write (the answer was lost, or a client retry of an applied write saw
    /// its own version as a conflict): deleting then would leave the metadata
    /// naming a deleted ledger. `expected` is the version the failed
    /// compare-and-set expected: when the node still stands at it, the lost
    /// write could land later, so it is fenced first ([`fence`]). When the stored value names it, or cannot be
    /// read, the ledger is closed and kept (at worst unreferenced, reported in
    /// the log), as the schema storage does.
    pub(crate) async fn discard_unless_recorded(
        &self,
        path: &str,
        expected: i64,
        handle: &dyn WriteHandle,
        creator: &dyn BookKeeper,
        resolve: impl FnOnce() -> Result<Arc<dyn BookKeeper>>,
        names_it: impl Fn(&[u8]) -> bool,
    ) -> Unrecorded {
        let id = handle.id();
        let keep = |why: String| async move {
            let _ = handle.close().await;
            tracing::warn!(managed_ledger = %self.name, ledger_id = id, path,
                cluster = creator.cluster_name(),
                "{why}; keeping the ledger, which may be unreferenced");
            Unrecorded::Unknown
        };
        match self.store.get(path).await {
            Ok(Some(r)) if names_it(&r.value) => {
                let _ = handle.close().await;
                tracing::warn!(managed_ledger = %self.name, ledger_id = id, path,
                    version = r.stat.version,
                    "the metadata write failed but the stored metadata names the new ledger; \
                     keeping it");
                Unrecorded::Recorded
            }
            // Unchanged: the lost write may still land. Fence it first.
            Ok(Some(r)) if r.stat.version == expected => {
                match fence(self.store.as_ref(), path, &r.value, expected).await {
                    Fence::Fenced(version) => {
                        self.discard_unrecorded(handle, creator, resolve).await;
                        Unrecorded::Fenced(version)
                    }
                    Fence::Moved => match self.store.get(path).await {
                        Ok(Some(now)) if names_it(&now.value) => {
                            let _ = handle.close().await;
                            Unrecorded::Recorded
                        }
                        // Moved past the version the lost write expects: it
                        // can no longer land.
                        Ok(_) => {
                            self.discard_unrecorded(handle, creator, resolve).await;
                            Unrecorded::Deleted
                        }
                        Err(e) => keep(format!("cannot read back after fencing: {e}")).await,
                    },
                    Fence::Failed(e) => {
                        keep(format!("cannot fence the lost metadata write: {e}")).await
                    }
                }
            }
            // Moved on (or gone): a compare-and-set on `expected` can no
            // longer land.
            Ok(_) => {
                self.discard_unrecorded(handle, creator, resolve).await;
                Unrecorded::Deleted
            }
            Err(e) => {
                keep(format!(
                    "cannot tell whether the metadata write recording the new ledger was \
                     applied: {e}"
                ))
                .await
            }
        }
    }

    /// Deletes a ledger that was created but could not be recorded, through
    /// `client` (the resolver's answer, or the creator when no stamp exists).
    pub(crate) async fn delete_orphan(&self, client: &dyn BookKeeper, ledger_id: LedgerId) {
        match client.delete_ledger_if_exists(ledger_id).await {
            Ok(_) => tracing::info!(
                managed_ledger = %self.name,
                ledger_id,
                cluster = client.cluster_name(),
                "deleted ledger that could not be recorded"
            ),
            Err(e) => tracing::warn!(
                managed_ledger = %self.name,
                ledger_id,
                cluster = client.cluster_name(),
                error = %e,
                "could not delete unrecorded ledger; it is orphaned on the cluster"
            ),
        }
    }

    /// Deletes a recorded data ledger through the S2 resolver
    /// ([I15](bkswitch_docs::invariants::I15)).
    pub(crate) async fn delete_ledger(&self, li: &LedgerInfo, why: &str) -> Result<()> {
        let client = self.resolve_ledger(li)?;
        delete_recorded(client.as_ref(), li.ledger_id, || {
            format!(
                "deleting ledger {} of managed ledger '{}' ({why})",
                li.ledger_id, self.name
            )
        })
        .await
    }

    /// Deletes the cursor ledger `info` names through the cursor resolver
    /// ([I15](bkswitch_docs::invariants::I15)).
    pub(crate) async fn delete_cursor_ledger(
        &self,
        cursor: &str,
        info: &ManagedCursorInfo,
    ) -> Result<()> {
        let client = self.resolve_cursor(cursor, info)?;
        delete_recorded(client.as_ref(), info.cursors_ledger_id, || {
            format!(
                "deleting cursor ledger {} of cursor '{cursor}' of managed ledger '{}'",
                info.cursors_ledger_id, self.name
            )
        })
        .await
    }

    /// Writes `bytes` at `path` with a compare-and-set on `version`
    /// ([I3](bkswitch_docs::invariants::I3)) and returns the new version. A
    /// failure other than a conflict may hide an applied write, so the value
    /// is read back: holding `bytes` at `version + 1`, the write counts as
    /// done. Otherwise the store's error is returned for the caller to name.
    pub(crate) async fn cas(
        &self,
        path: &str,
        bytes: &[u8],
        version: i64,
    ) -> std::result::Result<i64, MetadataError> {
        match self
            .store
            .put_version(path, bytes, ExpectedVersion::Exactly(version))
            .await
        {
            Ok(v) => Ok(v),
            Err(e) if e.is_conflict() => Err(e),
            Err(e) => {
                if let Ok(Some(r)) = self.store.get(path).await {
                    if r.value == bytes && r.stat.version == version + 1 {
                        return Ok(r.stat.version);
                    }
                }
                Err(e)
            }
        }
    }
}

/// What [`Ctx::discard_unless_recorded`] did with a new ledger whose
/// recording failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unrecorded {
    /// The stored metadata does not name it and the lost write can no
    /// longer land: it was deleted.
    Deleted,
    /// The stored metadata was unchanged: it was written back at this new
    /// version so that the lost write can never land, then the ledger was
    /// deleted. The writer continues from this version.
    Fenced(i64),
    /// The stored metadata names it (the write was applied, or a later writer
    /// kept it): closed and kept.
    Recorded,
    /// The metadata could not be read back: closed and kept.
    Unknown,
}

/// Deletes `ledger_id` on `client` (already gone counts as deleted); a failure
/// is a client error described by `context`.
async fn delete_recorded(
    client: &dyn BookKeeper,
    ledger_id: LedgerId,
    context: impl FnOnce() -> String,
) -> Result<()> {
    client
        .delete_ledger_if_exists(ledger_id)
        .await
        .map(|_| ())
        .map_err(|e| ManagedLedgerError::client(context(), e))
}
