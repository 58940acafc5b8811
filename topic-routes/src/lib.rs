#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod error;
mod flat;
mod index;
mod layout;
mod names;
mod store;
mod table;

pub use error::{Result, RoutesError};
pub use index::RouteIndex;
pub use layout::Layout;
pub use names::{validate_cluster_name, validate_proxy_id, Domain, RouteKey, TopicName};
pub use store::{ProxyAck, TopicRoutes, DEFAULT_ROOT, MAX_CAS_ATTEMPTS};
pub use table::{Change, PulsarCluster, Resolved, RoutingTable};
