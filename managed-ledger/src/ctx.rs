//! What a managed ledger and its cursors share: the store, the clients, the
//! config, the clock, and the hook call sites (S1, S2, S4).

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, BookKeeperExt, LedgerId};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{LedgerPurpose, ManagedLedgerConfig, NewLedgerContext};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{KeyValue, ManagedCursorInfo, StringProperty};

use crate::clock::Clock;
use crate::error::{ManagedLedgerError, Result};

/// Root of the managed-ledger metadata tree.
pub(crate) const ROOT: &str = "/managed-ledgers";

#[derive(Debug)]
pub(crate) struct Ctx {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) store: Arc<dyn MetadataStore>,
    /// The storage's client: used for everything a hook does not decide.
    pub(crate) client: Arc<dyn BookKeeper>,
    pub(crate) config: ManagedLedgerConfig,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Ctx {
    pub(crate) fn now(&self) -> i64 {
        self.clock.now_millis()
    }

    /// S1: the client a new ledger is created on.
    pub(crate) fn creation_client(&self) -> Arc<dyn BookKeeper> {
        match &self.config.hooks.active_client {
            Some(supplier) => supplier.active_client(),
            None => self.client.clone(),
        }
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
}

/// Merges `(key, value)` pairs into a `KeyValue` list: a key already present is
/// replaced in place, others are appended in order.
pub(crate) fn merge_key_values(list: &mut Vec<KeyValue>, props: Vec<(String, String)>) {
    for (key, value) in props {
        match list.iter_mut().find(|kv| kv.key == key) {
            Some(kv) => kv.value = value,
            None => list.push(KeyValue { key, value }),
        }
    }
}

/// As [`merge_key_values`], for `StringProperty` lists.
pub(crate) fn merge_string_properties(
    list: &mut Vec<StringProperty>,
    props: Vec<(String, String)>,
) {
    for (name, value) in props {
        match list.iter_mut().find(|p| p.name == name) {
            Some(p) => p.value = value,
            None => list.push(StringProperty { name, value }),
        }
    }
}
