#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod clock;
mod config;
mod hooks;
mod storage;

pub use clock::{Clock, SystemClock};
pub use config::ManagedLedgerConfig;
pub use hooks::{
    ActiveClientSupplier, CursorResolver, HookError, HookErrorKind, LedgerPurpose, LedgerResolver,
    NewLedgerContext, NewLedgerPropertiesProvider, StorageHooks,
};
pub use storage::{
    ManagedLedgerStorage, ManagedLedgerStorageClass, StorageError, StorageErrorKind,
    StorageSettings,
};
