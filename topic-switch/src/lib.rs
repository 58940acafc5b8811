#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod admin;
mod error;
mod precheck;
mod record;
mod switcher;

pub use admin::{
    parse_internal_stats, AdminError, HttpAdmin, LedgerEntries, ManagedLedgerIds, PulsarAdmin,
    ReplicationStats, SubscriptionStats, TopicStats,
};
pub use error::{Result, SwitchError};
pub use precheck::{precheck, route_changes, PrecheckReport};
pub use record::{
    now_ms, Batch, Evidence, Phase, Request, State, SwitchOptions, SwitchRecord, TopicMove,
};
pub use switcher::{
    ids_clash, AdminFactory, Clash, ClientsReturned, HttpAdmins, Plan, SloProbe, TopicSwitcher,
};
