//! How the routing table lies in the metadata store.
//!
//! `<root>/table` (the *head*) is what every writer compare-and-sets and
//! every proxy watches. A small table is held whole in it, as
//! [`RoutingTable`]'s JSON (`{"version","clusters","routes"}`). A table
//! whose JSON would pass [`Layout::inline_limit`] bytes is *sharded*: the
//! head holds the version, the clusters, the shard count and, for each
//! non-empty shard, the name of the node under `<root>/shards/` that holds
//! its routes (`{"<route>":"<cluster>"}`); a route's shard is the FNV-1a
//! hash of its key modulo the count. Shard nodes are immutable: a write
//! creates new nodes for the shards it changes (named
//! `<shard>-<version>-<nonce>`), then compare-and-sets the head to name
//! them, then deletes the nodes the head no longer names. A reader reads the
//! head, then the nodes it names; a node deleted under it means a newer
//! head, read again. So every table a reader sees is one a write committed,
//! whole, and a write touches the shards it changes only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::table::{PulsarCluster, RoutingTable};

/// Where the routes of a table go, and when a table is sharded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// A table whose JSON is longer than this many bytes is sharded.
    pub inline_limit: usize,
    /// How many shards a sharded table has (fixed when it is first
    /// sharded; kept by later writes).
    pub shards: u32,
}

impl Default for Layout {
    /// Tables up to 512 KiB whole in one node (about 6,000 routes), then 256
    /// shards (room for about 3,000,000 routes under the store's 1,000,000
    /// byte values).
    fn default() -> Self {
        Layout {
            inline_limit: 512 * 1024,
            shards: 256,
        }
    }
}

/// The head node as stored: a whole table (`routes` present, no
/// `shards`), or a sharded one.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Head {
    pub(crate) version: u64,
    pub(crate) clusters: BTreeMap<String, PulsarCluster>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) routes: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) shards: Option<u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) shard_nodes: BTreeMap<u32, String>,
}

impl Head {
    /// A head holding `table` whole.
    pub(crate) fn inline(table: &RoutingTable) -> Head {
        Head {
            version: table.version,
            clusters: table.clusters.clone(),
            routes: Some(table.routes.clone()),
            shards: None,
            shard_nodes: BTreeMap::new(),
        }
    }
}

/// The shard of `route` among `shards` (FNV-1a, 64 bits: stable across
/// builds and platforms, unlike the standard library's hasher).
pub(crate) fn shard_of(route: &str, shards: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in route.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % u64::from(shards.max(1))) as u32
}

/// `table`'s routes split by shard (only non-empty shards).
pub(crate) fn split(
    routes: &BTreeMap<String, String>,
    shards: u32,
) -> BTreeMap<u32, BTreeMap<String, String>> {
    let mut out: BTreeMap<u32, BTreeMap<String, String>> = BTreeMap::new();
    for (route, cluster) in routes {
        out.entry(shard_of(route, shards))
            .or_default()
            .insert(route.clone(), cluster.clone());
    }
    out
}

/// The table version a shard node was written for, from its name
/// (`<shard>-<version>-<nonce>`).
pub(crate) fn node_version(name: &str) -> Option<u64> {
    name.split('-').nth(1)?.parse().ok()
}

/// A name for shard `shard`'s new node at `version`, unique to this writer.
pub(crate) fn node_name(shard: u32, version: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(version);
    format!("{shard:03}-{version}-{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        // Fixed answers: a change here would scatter stored tables.
        assert_eq!(shard_of("default", 256), shard_of("default", 256));
        assert_eq!(shard_of("", 256), (0xcbf2_9ce4_8422_2325u64 % 256) as u32);
        let mut counts = vec![0u32; 16];
        for i in 0..16_000 {
            counts[shard_of(&format!("topic:persistent://t/ns/o-{i}"), 16) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1_200).contains(&c)),
            "{counts:?}"
        );
        assert_eq!(shard_of("x", 0), 0);
    }

    #[test]
    fn node_names_carry_their_version() {
        let a = node_name(7, 42);
        assert!(a.starts_with("007-42-"));
        assert_eq!(node_version(&a), Some(42));
        assert_ne!(a, node_name(7, 42), "two writers share a name");
        assert_eq!(node_version("junk"), None);
    }
}
