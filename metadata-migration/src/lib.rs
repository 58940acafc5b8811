#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod coordinator;
mod dirty;
mod fence;
mod location;
mod opener;
mod participant;
mod reads;
mod record;
mod start;
mod sync;
mod target;
mod tasks;

pub use coordinator::{abort, Coordinator, CoordinatorOptions, MigrationRequest};
pub use location::{Backend, Nesting, StoreLocation};
pub use opener::{NamedMemoryStores, SecureUrlOpener, StoreOpener, UrlOpener};
pub use participant::{MigratingStore, ParticipantOptions};
pub use record::{
    dirty_path, is_control_path, joined_path, read_current, read_record, record_path,
    MigrationRecord, ParticipantAck, Phase, CURRENT_PATH, MIGRATION_ROOT, PARTICIPANTS_PATH,
};
pub use start::{StartPlan, OPEN_TIMEOUT};
pub use target::{ProtectedRoot, TargetEntry, TargetPlan};
