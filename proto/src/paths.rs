//! Where Pulsar keeps the metadata these formats describe: the roots of its
//! metadata-store layout, defined once for every `bkswitch` crate.
//!
//! | path | value |
//! |---|---|
//! | `/managed-ledgers/<tenant>/<ns>/persistent/<topic>` | [`ManagedLedgerInfo`](crate::ml::ManagedLedgerInfo) |
//! | `/managed-ledgers/<topic>/<cursor>` | [`ManagedCursorInfo`](crate::ml::ManagedCursorInfo) |
//! | `/schemas/<schemaId>` | [`SchemaLocator`](crate::schema::SchemaLocator) |
//!
//! ```
//! use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
//!
//! assert_eq!(format!("{MANAGED_LEDGERS_ROOT}/t/ns/persistent/orders"), "/managed-ledgers/t/ns/persistent/orders");
//! assert_eq!(format!("{SCHEMAS_ROOT}/t/ns/orders"), "/schemas/t/ns/orders");
//! ```

/// The root of the managed ledgers' metadata (Pulsar's `/managed-ledgers`):
/// a managed ledger's [`ManagedLedgerInfo`](crate::ml::ManagedLedgerInfo) is
/// at `/managed-ledgers/<name>`, each of its cursors'
/// [`ManagedCursorInfo`](crate::ml::ManagedCursorInfo) one level below.
pub const MANAGED_LEDGERS_ROOT: &str = "/managed-ledgers";

/// The root of the schema storage's metadata (Pulsar's `/schemas`): a schema
/// id's [`SchemaLocator`](crate::schema::SchemaLocator) is at
/// `/schemas/<schemaId>`.
pub const SCHEMAS_ROOT: &str = "/schemas";
