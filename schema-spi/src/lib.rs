#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt::Debug;
use std::sync::Arc;

use bkswitch_bk_client::BookKeeper;
pub use bkswitch_mledger_spi::{HookError, HookErrorKind};
use bkswitch_proto::schema::PositionInfo;

/// S3 — which client schema ledgers are created on and read from.
///
/// # Contract
///
/// - [`active_for`](Self::active_for) (by default [`active`](Self::active))
///   is consulted once per schema version written, with the schema id: the
///   new schema ledger is created on the client it returns.
/// - [`creation_properties`](Self::creation_properties) is then asked, with that
///   same client, for the entries to merge into the new
///   `PositionInfo.properties` **before** the locator CAS that records the ledger
///   (invariant [I1](bkswitch_docs::invariants::I1)). Stamp the given client's cluster, never re-read the active
///   one: a switch may have happened in between.
/// - [`resolve`](Self::resolve) is consulted once per schema-ledger open and
///   before deleting a schema ledger, including the orphan left by a lost locator
///   CAS (invariant [I15](bkswitch_docs::invariants::I15)). It must never fall back silently.
pub trait SchemaClientProvider: Send + Sync + Debug {
    /// The client that holds the schema ledger `position` points at.
    ///
    /// # Errors
    ///
    /// A [`HookError`] naming the ledger and cluster when the stamp cannot be
    /// routed (unknown cluster, corrupt stamp, unavailable cluster).
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError>;

    /// The client new schema ledgers are created on now.
    fn active(&self) -> Arc<dyn BookKeeper>;

    /// The client a new schema ledger of `schema_id` is created on now: where
    /// a per-prefix override (a canary) sends the topic's new ledgers, else
    /// [`active`](Self::active) (the default).
    fn active_for(&self, schema_id: &str) -> Arc<dyn BookKeeper> {
        let _ = schema_id;
        self.active()
    }

    /// The properties to record in the new `PositionInfo` of a schema ledger
    /// created on `client`.
    ///
    /// # Errors
    ///
    /// A [`HookError`] when the ledger cannot be attributed; the schema write is
    /// then abandoned and the new ledger deleted.
    fn creation_properties(
        &self,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError>;
}

/// The provider of a plain single-cluster broker: one client for everything and
/// no property, so schema metadata is byte-identical to a broker without PIP-477.
#[derive(Debug, Clone)]
pub struct SingleClientSchemaProvider {
    client: Arc<dyn BookKeeper>,
}

impl SingleClientSchemaProvider {
    /// A provider that always answers `client`.
    pub fn new(client: Arc<dyn BookKeeper>) -> SingleClientSchemaProvider {
        SingleClientSchemaProvider { client }
    }
}

impl SchemaClientProvider for SingleClientSchemaProvider {
    fn resolve(&self, _position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        Ok(self.client.clone())
    }

    fn active(&self) -> Arc<dyn BookKeeper> {
        self.client.clone()
    }

    fn creation_properties(
        &self,
        _client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError> {
        Ok(Vec::new())
    }
}
