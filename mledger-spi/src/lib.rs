#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod config;
pub mod hooks;
pub mod storage;

pub use config::ManagedLedgerConfig;
pub use hooks::{
    ActiveClientSupplier, CursorResolver, HookError, HookErrorKind, LedgerPurpose, LedgerResolver,
    NewLedgerContext, NewLedgerPropertiesProvider, StorageHooks,
};
pub use storage::{
    ManagedLedgerStorage, ManagedLedgerStorageClass, StorageError, StorageErrorKind,
    StorageSettings,
};
