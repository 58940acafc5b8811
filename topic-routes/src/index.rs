//! A lookup index over a routing table: hash maps instead of the table's
//! sorted maps, so that a resolve costs the same with a million routes as
//! with a hundred (the sorted maps' walks grow with the logarithm of the
//! table and miss the cache at every level).

use std::collections::HashMap;

use crate::error::Result;
use crate::flat::FlatMap;
use crate::names::{RouteKey, TopicName};
use crate::table::{fallback, longest_prefix_by, Resolved, RoutingTable, PREFIX, TOPIC};

/// One namespace's prefix routes: (the prefix's part of the local name,
/// cluster number), sorted by that part.
type PrefixGroup = Vec<(Box<str>, u32)>;

/// Resolves topics as [`RoutingTable::resolve`] does, in constant time in
/// the number of routes: topic routes in a flat table whose slots are one
/// cache line each and hold the name, so that a topic route costs one
/// memory access however large the table (`flat.rs`); the other exact
/// routes (namespace, tenant, default), far fewer, in a hash map; prefix
/// routes grouped by the namespace they lie in
/// (`domain://tenant/namespace/`), each group sorted, so that the longest
/// prefix is searched among one namespace's prefix routes only.
///
/// Built from one table version ([`RouteIndex::new`]) and used with that
/// table: a lookup proxy builds it once per table it serves.
#[derive(Debug, Clone, Default)]
pub struct RouteIndex {
    /// Topic (`domain://tenant/namespace/local`) → cluster number (in
    /// `names`).
    topics: FlatMap,
    /// Other exact route keys (`namespace:…`, `tenant:…`, `default`) →
    /// cluster number.
    exact: HashMap<Box<str>, u32>,
    /// `domain://tenant/namespace/` → that namespace's prefix routes.
    prefixes: HashMap<Box<str>, PrefixGroup>,
    /// The cluster names routes use, numbered.
    names: Vec<Box<str>>,
    /// The version of the table it was built from.
    version: u64,
}

impl RouteIndex {
    /// The index of `table`.
    pub fn new(table: &RoutingTable) -> RouteIndex {
        let mut topics: Vec<(&str, u32)> = Vec::with_capacity(table.routes.len());
        let mut exact = HashMap::new();
        let mut prefixes: HashMap<Box<str>, PrefixGroup> = HashMap::new();
        let mut names: Vec<Box<str>> = Vec::new();
        let mut number: HashMap<&str, u32> = HashMap::new();
        for (key, cluster) in &table.routes {
            let n = *number.entry(cluster.as_str()).or_insert_with(|| {
                names.push(cluster.as_str().into());
                // Fewer names than routes, and routes fit in memory.
                u32::try_from(names.len() - 1).expect("fewer than 2^32 clusters")
            });
            if let Some(topic) = key.strip_prefix(TOPIC) {
                topics.push((topic, n));
                continue;
            }
            match key.strip_prefix(PREFIX) {
                Some(prefix) => {
                    // `domain://tenant/namespace/local-part`: split after
                    // the fourth `/` (two of `://`, the tenant's, the
                    // namespace's).
                    let Some(at) = prefix.match_indices('/').nth(3).map(|(i, _)| i + 1) else {
                        continue;
                    };
                    prefixes
                        .entry(prefix[..at].into())
                        .or_default()
                        .push((prefix[at..].into(), n));
                }
                None => {
                    exact.insert(key.as_str().into(), n);
                }
            }
        }
        // The table's map is sorted, so is each group; sorted again in case.
        for group in prefixes.values_mut() {
            group.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            group.shrink_to_fit();
        }
        exact.shrink_to_fit();
        RouteIndex {
            topics: FlatMap::new(topics.into_iter()),
            exact,
            prefixes,
            names,
            version: table.version,
        }
    }

    /// The version of the table the index was built from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Starts loading the memory a resolve of `topic` reads first (the slot
    /// of its topic route), without waiting for it: a lookup proxy calls
    /// it for each lookup of a batch before resolving the first, so that
    /// with a million routes the batch waits for memory about once rather
    /// than once per lookup. A hint only; a table small enough to stay in
    /// the caches is left alone, and so is a name that is not fully
    /// qualified (its resolve reads as it would).
    pub fn prefetch(&self, topic: &str) {
        if self.topics.len() < PREFETCH_FROM || !topic.contains("://") {
            return;
        }
        self.topics.prefetch(strip_partition(topic));
    }

    /// How many topic routes the index holds.
    pub fn topic_routes(&self) -> usize {
        self.topics.len()
    }

    /// The bytes of the index that lie in a memory mapping rather than on
    /// the heap (a large table of topic routes), which a counting global
    /// allocator does not see.
    pub fn mapped_bytes(&self) -> usize {
        self.topics.mapped_bytes()
    }

    /// Where `topic` goes in `table` (the table the index was built from):
    /// the same answer as [`RoutingTable::resolve`].
    ///
    /// # Errors
    /// [`RoutesError::InvalidTopic`](crate::RoutesError::InvalidTopic) for a
    /// malformed topic name.
    pub fn resolve<'t>(
        &self,
        table: &'t RoutingTable,
        topic: &str,
    ) -> Result<Option<Resolved<'t>>> {
        let name = TopicName::parse(topic)?;
        let base = name.base();
        if let Some(cluster) = self.topics.get(&base).and_then(|n| self.cluster(table, n)) {
            return Ok(Some(Resolved {
                cluster,
                route: RouteKey::Topic(base),
            }));
        }
        let cluster_of = |key: &str| self.exact.get(key).and_then(|&n| self.cluster(table, n));
        let split = base.len() - name.local.len();
        if let Some(group) = self.prefixes.get(&base[..split]) {
            if let Some((part, cluster)) =
                longest_prefix(group, &name.local, |n| self.cluster(table, n))
            {
                return Ok(Some(Resolved {
                    cluster,
                    route: RouteKey::Prefix(format!("{}{part}", &base[..split])),
                }));
            }
        }
        let mut key = String::with_capacity(base.len() + 16);
        Ok(fallback(&name, &mut key, cluster_of))
    }
}

/// Topic routes from which [`RouteIndex::prefetch`] prefetches: fewer lie
/// in a few MB, which stay in the caches of a busy proxy.
const PREFETCH_FROM: usize = 16_384;

/// `topic` without a `-partition-<n>` suffix (the name its topic route has).
fn strip_partition(topic: &str) -> &str {
    match topic.rsplit_once(crate::names::PARTITION) {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => topic,
    }
}

impl RouteIndex {
    /// Cluster number `n` in `table`.
    fn cluster<'t>(&self, table: &'t RoutingTable, n: u32) -> Option<&'t crate::PulsarCluster> {
        self.names
            .get(n as usize)
            .and_then(|name| table.clusters.get(name.as_ref()))
    }
}

/// The longest entry of `group` (sorted) that starts `local` (at least one
/// character long) and routes to a cluster `table` has, and that cluster:
/// the table's own walk ([`longest_prefix_by`]) on a sorted slice.
fn longest_prefix<'g, 't>(
    group: &'g [(Box<str>, u32)],
    local: &str,
    cluster: impl Fn(u32) -> Option<&'t crate::PulsarCluster>,
) -> Option<(&'g str, &'t crate::PulsarCluster)> {
    longest_prefix_by(local, 1, |candidate| {
        let at = group.partition_point(|(p, _)| p.as_ref() <= candidate);
        let (found, n) = group.get(at.checked_sub(1)?)?;
        Some((found.as_ref(), cluster(*n)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Change, PulsarCluster};

    fn cluster(name: &str) -> PulsarCluster {
        PulsarCluster {
            name: name.to_owned(),
            service_url: "pulsar://127.0.0.1:6650".to_owned(),
            service_url_tls: None,
            web_service_url: "http://127.0.0.1:8080".to_owned(),
            admin_url: "http://127.0.0.1:8080".to_owned(),
        }
    }

    /// A small deterministic generator.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) % n
        }
    }

    /// Names from a small alphabet, so that prefixes overlap often.
    fn local(rng: &mut Rng) -> String {
        let len = 1 + rng.below(5) as usize;
        (0..len)
            .map(|_| ['a', 'b', 'é', '-'][rng.below(4) as usize])
            .collect()
    }

    #[test]
    fn the_index_answers_as_the_table_does() {
        let mut rng = Rng(7);
        for round in 0..40 {
            let mut changes = vec![
                Change::RegisterCluster(cluster("east")),
                Change::RegisterCluster(cluster("west")),
            ];
            let to = |rng: &mut Rng| if rng.below(2) == 0 { "east" } else { "west" }.to_owned();
            if round % 3 != 0 {
                changes.push(Change::SetRoute(RouteKey::Default, to(&mut rng)));
            }
            for _ in 0..rng.below(60) {
                let ns = format!("t{}/n{}", rng.below(2), rng.below(2));
                let domain = ["persistent", "non-persistent"][rng.below(2) as usize];
                let key = match rng.below(4) {
                    0 => RouteKey::Topic(format!("{domain}://{ns}/{}", local(&mut rng))),
                    1 => RouteKey::Prefix(format!("{domain}://{ns}/{}", local(&mut rng))),
                    2 => RouteKey::Namespace(ns),
                    _ => RouteKey::Tenant(format!("t{}", rng.below(2))),
                };
                changes.push(Change::SetRoute(key, to(&mut rng)));
            }
            let table = RoutingTable::default().apply(&changes).unwrap();
            let index = RouteIndex::new(&table);
            assert_eq!(index.version(), table.version);
            for _ in 0..300 {
                let topic = format!(
                    "{}://t{}/n{}/{}{}",
                    ["persistent", "non-persistent"][rng.below(2) as usize],
                    rng.below(3),
                    rng.below(3),
                    local(&mut rng),
                    if rng.below(3) == 0 {
                        format!("-partition-{}", rng.below(4))
                    } else {
                        String::new()
                    }
                );
                assert_eq!(
                    index.resolve(&table, &topic).unwrap(),
                    table.resolve(&topic).unwrap(),
                    "{topic} in {:?}",
                    table.routes
                );
            }
        }
        let table = RoutingTable::default();
        let index = RouteIndex::new(&table);
        assert_eq!(index.topic_routes(), 0);
        assert!(index.resolve(&table, "not a topic").is_err());
        assert_eq!(index.resolve(&table, "persistent://t/n/x").unwrap(), None);
    }

    #[test]
    fn long_topic_names_resolve_as_short_ones() {
        // Names past what a slot of the flat table holds whole.
        let long = |i: usize| {
            format!(
                "persistent://tenant/namespace/{}-{i}",
                "segment".repeat(i % 12)
            )
        };
        let mut changes = vec![
            Change::RegisterCluster(cluster("east")),
            Change::RegisterCluster(cluster("west")),
            Change::SetRoute(RouteKey::Default, "east".to_owned()),
        ];
        changes.extend(
            (0..500).map(|i| Change::SetRoute(RouteKey::Topic(long(i)), "west".to_owned())),
        );
        let table = RoutingTable::default().apply(&changes).unwrap();
        let index = RouteIndex::new(&table);
        assert_eq!(index.topic_routes(), 500);
        for i in 0..1_000 {
            let topic = format!("{}-partition-3", long(i));
            let resolved = index.resolve(&table, &topic).unwrap().unwrap();
            assert_eq!(resolved, table.resolve(&topic).unwrap().unwrap(), "{topic}");
            let want = if i < 500 { "west" } else { "east" };
            assert_eq!(resolved.cluster.name, want, "{topic}");
        }
    }

    #[test]
    fn a_large_index_prefetches_and_answers_the_same() {
        let name = |i: usize| format!("persistent://t/n-{}/topic-{i}", i % 3);
        let mut changes = vec![
            Change::RegisterCluster(cluster("east")),
            Change::RegisterCluster(cluster("west")),
            Change::SetRoute(RouteKey::Default, "east".to_owned()),
        ];
        changes.extend(
            (0..PREFETCH_FROM + 10)
                .map(|i| Change::SetRoute(RouteKey::Topic(name(i)), "west".to_owned())),
        );
        let table = RoutingTable::default().apply(&changes).unwrap();
        let index = RouteIndex::new(&table);
        assert!(index.mapped_bytes() > 0, "a large index lies in a mapping");
        for i in (0..PREFETCH_FROM + 100).step_by(7) {
            for topic in [
                name(i),
                format!("{}-partition-{}", name(i), i % 5),
                format!("t/n-0/x-{i}"),
            ] {
                index.prefetch(&topic);
                assert_eq!(
                    index.resolve(&table, &topic).ok(),
                    table.resolve(&topic).ok(),
                    "{topic}"
                );
            }
        }
        index.prefetch("not a topic");
    }

    #[test]
    fn the_partition_suffix_is_stripped_only_with_a_number() {
        assert_eq!(
            strip_partition("persistent://t/n/a-partition-12"),
            "persistent://t/n/a"
        );
        for kept in [
            "persistent://t/n/a-partition-",
            "persistent://t/n/a-partition-x",
            "persistent://t/n/a",
        ] {
            assert_eq!(strip_partition(kept), kept);
        }
    }
}
