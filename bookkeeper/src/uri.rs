//! Metadata-service URIs: the client SPI crate owns the one parser
//! ([`bkswitch_bk_client::uri`]); this client connects to the ZooKeeper form
//! ([`MetadataServiceUri`]) and refuses `memory://` URIs.

pub use bkswitch_bk_client::uri::{LayoutChoice, MetadataServiceUri, ZOOKEEPER_SCHEMES};
