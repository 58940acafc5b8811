//! The routing table: Pulsar clusters and routes, validated as a whole.

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::{Deserialize, Serialize};

use crate::error::{Result, RoutesError};
use crate::names::{check_url, validate_cluster_name, RouteKey, TopicName};

/// A Pulsar cluster a route may point to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PulsarCluster {
    /// The cluster name (the key of the table's `clusters`).
    pub name: String,
    /// The binary protocol URL, `pulsar://host:port[,host:port…]`.
    pub service_url: String,
    /// The binary protocol over TLS, `pulsar+ssl://host:port[,…]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_url_tls: Option<String>,
    /// The HTTP service URL (HTTP lookups), `http[s]://host:port`.
    pub web_service_url: String,
    /// The admin REST API, `http[s]://host:port[/path]`.
    pub admin_url: String,
}

impl PulsarCluster {
    /// Checks the name and every URL.
    ///
    /// # Errors
    /// [`RoutesError::InvalidClusterName`], [`RoutesError::InvalidUrl`].
    pub fn validate(&self) -> Result<()> {
        validate_cluster_name(&self.name)?;
        let url = |field: &'static str, url: &str, schemes: &[&str], path: bool| {
            check_url(url, schemes, path).map_err(|reason| RoutesError::InvalidUrl {
                cluster: self.name.clone(),
                field,
                url: url.to_owned(),
                reason,
            })
        };
        url("serviceUrl", &self.service_url, &["pulsar:"], false)?;
        if let Some(tls) = &self.service_url_tls {
            url("serviceUrlTls", tls, &["pulsar+ssl:"], false)?;
        }
        url(
            "webServiceUrl",
            &self.web_service_url,
            &["http:", "https:"],
            false,
        )?;
        url("adminUrl", &self.admin_url, &["http:", "https:"], true)
    }
}

/// How every prefix route's key starts.
pub(crate) const PREFIX: &str = "prefix:";
/// How a topic route's key starts in [`RoutingTable::routes`].
pub(crate) const TOPIC: &str = "topic:";

/// One change of the routing table; [`RoutingTable::apply`] applies a list
/// of them all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Registers a new cluster.
    RegisterCluster(PulsarCluster),
    /// Replaces a registered cluster's URLs.
    UpdateCluster(PulsarCluster),
    /// Unregisters a cluster no route uses.
    UnregisterCluster(String),
    /// Sets (adds or replaces) a route to a registered cluster.
    SetRoute(RouteKey, String),
    /// Removes a route.
    RemoveRoute(RouteKey),
}

/// Where a topic goes, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<'a> {
    /// The cluster.
    pub cluster: &'a PulsarCluster,
    /// The route that matched.
    pub route: RouteKey,
}

/// The routing table, stored whole as one JSON node
/// (`{"version","clusters":{name:{…}},"routes":{"<route>":"<cluster>"}}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RoutingTable {
    /// Incremented by every change; what proxies acknowledge.
    pub version: u64,
    /// The registered clusters, by name.
    pub clusters: BTreeMap<String, PulsarCluster>,
    /// The routes, by canonical selector ([`RouteKey`]'s `Display`), to a
    /// cluster name.
    pub routes: BTreeMap<String, String>,
}

impl RoutingTable {
    /// Applies `changes` in order to a copy, checking each, and returns the
    /// new table (its version incremented once); `self` is untouched.
    ///
    /// # Errors
    /// The first change refused, naming the object: nothing is applied.
    pub fn apply(&self, changes: &[Change]) -> Result<RoutingTable> {
        let mut next = self.clone();
        for change in changes {
            next.apply_one(change)?;
        }
        next.version += 1;
        Ok(next)
    }

    fn apply_one(&mut self, change: &Change) -> Result<()> {
        match change {
            Change::RegisterCluster(c) => {
                c.validate()?;
                if self.clusters.contains_key(&c.name) {
                    return Err(RoutesError::ClusterExists {
                        name: c.name.clone(),
                    });
                }
                self.clusters.insert(c.name.clone(), c.clone());
            }
            Change::UpdateCluster(c) => {
                c.validate()?;
                let Some(slot) = self.clusters.get_mut(&c.name) else {
                    return Err(RoutesError::UnknownCluster {
                        name: c.name.clone(),
                    });
                };
                *slot = c.clone();
            }
            Change::UnregisterCluster(name) => {
                validate_cluster_name(name)?;
                if !self.clusters.contains_key(name) {
                    return Err(RoutesError::UnknownCluster { name: name.clone() });
                }
                let routes: Vec<String> = self
                    .routes
                    .iter()
                    .filter(|(_, c)| *c == name)
                    .map(|(r, _)| r.clone())
                    .collect();
                if !routes.is_empty() {
                    return Err(RoutesError::ClusterInUse {
                        name: name.clone(),
                        routes,
                    });
                }
                self.clusters.remove(name);
            }
            Change::SetRoute(key, cluster) => {
                key.validate()?;
                if validate_cluster_name(cluster).is_err() || !self.clusters.contains_key(cluster) {
                    return Err(RoutesError::RouteToUnknownCluster {
                        route: key.to_string(),
                        cluster: cluster.clone(),
                    });
                }
                self.routes.insert(key.to_string(), cluster.clone());
            }
            Change::RemoveRoute(key) => {
                key.validate()?;
                if self.routes.remove(&key.to_string()).is_none() {
                    return Err(RoutesError::UnknownRoute {
                        route: key.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Checks a table read from the store: every cluster and route valid,
    /// every route to a registered cluster.
    ///
    /// # Errors
    /// The first problem found.
    pub fn check(&self) -> Result<()> {
        for (name, c) in &self.clusters {
            c.validate()?;
            if *name != c.name {
                return Err(RoutesError::InvalidClusterName {
                    name: name.clone(),
                    reason: format!("stored under `{name}` but named `{}`", c.name),
                });
            }
        }
        for (route, cluster) in &self.routes {
            let key: RouteKey = route.parse()?;
            if key.to_string() != *route {
                return Err(RoutesError::InvalidRoute {
                    route: route.clone(),
                    reason: format!("not in canonical form (`{key}`)"),
                });
            }
            if !self.clusters.contains_key(cluster) {
                return Err(RoutesError::RouteToUnknownCluster {
                    route: route.clone(),
                    cluster: cluster.clone(),
                });
            }
        }
        Ok(())
    }

    /// Where `topic` goes: the most specific route (topic, longest prefix,
    /// namespace, tenant, default); a partition goes where its topic goes.
    /// `Ok(None)` when no route matches.
    ///
    /// Every key is looked up in one reused buffer, and the longest prefix
    /// is found by walking back through the sorted routes (a few lookups,
    /// whatever the length of the name), so that a resolve costs about the
    /// same with a million routes as with a hundred.
    ///
    /// # Errors
    /// [`RoutesError::InvalidTopic`] for a malformed topic name.
    pub fn resolve(&self, topic: &str) -> Result<Option<Resolved<'_>>> {
        let name = TopicName::parse(topic)?;
        let base = name.base();
        let mut key = String::with_capacity(base.len() + 16);
        key.push_str(TOPIC);
        key.push_str(&base);
        if let Some(cluster) = self.cluster_of(&key) {
            return Ok(Some(Resolved {
                cluster,
                route: RouteKey::Topic(base),
            }));
        }
        key.clear();
        key.push_str(PREFIX);
        key.push_str(&base);
        // A prefix route ends inside the local name, at least one
        // character into it.
        let shortest = PREFIX.len() + base.len() - name.local.len() + 1;
        if let Some((route, cluster)) = self.longest_prefix(&key, shortest) {
            return Ok(Some(Resolved {
                cluster,
                route: RouteKey::Prefix(route[PREFIX.len()..].to_owned()),
            }));
        }
        Ok(fallback(&name, &mut key, |k| self.cluster_of(k)))
    }

    /// The registered cluster of the route stored under `key`.
    fn cluster_of(&self, key: &str) -> Option<&PulsarCluster> {
        self.routes.get(key).and_then(|c| self.clusters.get(c))
    }

    /// The longest route key that starts `key` and is at least `shortest`
    /// bytes long, and its cluster ([`longest_prefix_by`] on the sorted
    /// routes).
    fn longest_prefix(&self, key: &str, shortest: usize) -> Option<(&str, &PulsarCluster)> {
        longest_prefix_by(key, shortest, |candidate| {
            self.routes
                .range::<str, _>((Bound::Unbounded, Bound::Included(candidate)))
                .next_back()
                .map(|(found, cluster)| (found.as_str(), self.clusters.get(cluster)))
        })
    }

    /// Where a namespace (`tenant/namespace`) goes as a whole: its
    /// namespace route, else its tenant's, else the default; topic and
    /// prefix routes inside it are not looked at
    /// ([`namespace_clusters`](Self::namespace_clusters) lists those too).
    ///
    /// # Errors
    /// [`RoutesError::InvalidRoute`] for a malformed namespace name.
    pub fn resolve_namespace(&self, namespace: &str) -> Result<Option<Resolved<'_>>> {
        let key = RouteKey::Namespace(namespace.to_owned());
        key.validate()?;
        let tenant = namespace.split_once('/').map_or(namespace, |(t, _)| t);
        let found = |key: RouteKey| {
            self.routes
                .get(&key.to_string())
                .and_then(|c| self.clusters.get(c))
                .map(|cluster| Resolved {
                    cluster,
                    route: key,
                })
        };
        Ok(found(key)
            .or_else(|| found(RouteKey::Tenant(tenant.to_owned())))
            .or_else(|| found(RouteKey::Default)))
    }

    /// Every cluster some topic of `namespace` may route to: the
    /// namespace's own ([`resolve_namespace`](Self::resolve_namespace)) and
    /// those of the topic and prefix routes inside it, each once, in name
    /// order. A namespace listing is the union of theirs.
    ///
    /// # Errors
    /// [`RoutesError::InvalidRoute`] for a malformed namespace name.
    pub fn namespace_clusters(&self, namespace: &str) -> Result<Vec<&PulsarCluster>> {
        let mut names: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        if let Some(r) = self.resolve_namespace(namespace)? {
            names.insert(&r.cluster.name);
        }
        for domain in ["persistent", "non-persistent"] {
            for kind in ["topic", "prefix"] {
                let start = format!("{kind}:{domain}://{namespace}/");
                for (_, cluster) in self
                    .routes
                    .range(start.clone()..)
                    .take_while(|(k, _)| k.starts_with(&start))
                {
                    names.insert(cluster);
                }
            }
        }
        Ok(names
            .into_iter()
            .filter_map(|n| self.clusters.get(n))
            .collect())
    }
}

/// The namespace route of `name`, else its tenant's, else the default, with
/// `cluster_of` looking a route key up (`key` is a reused buffer): the end
/// of every resolve, after topic and prefix routes.
pub(crate) fn fallback<'t>(
    name: &TopicName,
    key: &mut String,
    cluster_of: impl Fn(&str) -> Option<&'t PulsarCluster>,
) -> Option<Resolved<'t>> {
    let namespace = [name.tenant.as_str(), "/", name.namespace.as_str()];
    for (prefix, selector) in [("namespace:", &namespace[..]), ("tenant:", &namespace[..1])] {
        key.clear();
        key.push_str(prefix);
        selector.iter().for_each(|part| key.push_str(part));
        if let Some(cluster) = cluster_of(key) {
            let selector = selector.concat();
            let route = if prefix == "tenant:" {
                RouteKey::Tenant(selector)
            } else {
                RouteKey::Namespace(selector)
            };
            return Some(Resolved { cluster, route });
        }
    }
    cluster_of("default").map(|cluster| Resolved {
        cluster,
        route: RouteKey::Default,
    })
}

/// The longest key that starts `key`, at least `shortest` bytes long, with
/// a cluster, searched in a sorted set of keys through `last`: the last key
/// at or before a candidate, with its cluster (`None`: a route to an
/// unregistered cluster, passed over).
///
/// Every key that starts `candidate` sorts at or before it, so the last key
/// at or before `candidate` is tried first. When it does not start
/// `candidate`, it differs from it at some byte `d` with a smaller byte (or
/// `candidate` is longer at `d`); a key that started `candidate` and was
/// longer than `d` would then sort after it and still at or before
/// `candidate`, which the last such key excludes. So every key that starts
/// `candidate` starts `candidate[..d]`: try that next.
pub(crate) fn longest_prefix_by<'k, C>(
    key: &str,
    shortest: usize,
    mut last: impl FnMut(&str) -> Option<(&'k str, Option<C>)>,
) -> Option<(&'k str, C)> {
    let mut candidate = key;
    while candidate.len() >= shortest {
        let (found, cluster) = last(candidate)?;
        let mut common = if candidate.starts_with(found) {
            // The longest key that starts `candidate`: if it is too short,
            // so is every other.
            if found.len() < shortest {
                return None;
            }
            if let Some(c) = cluster {
                return Some((found, c));
            }
            // Unregistered: look for a shorter one.
            found.len() - 1
        } else {
            found
                .bytes()
                .zip(candidate.bytes())
                .take_while(|(a, b)| a == b)
                .count()
        };
        while !candidate.is_char_boundary(common) {
            common -= 1;
        }
        candidate = &candidate[..common];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The resolve of before the prefix walk: every prefix length tried,
    /// longest first, each key formatted anew.
    fn reference<'a>(table: &'a RoutingTable, topic: &str) -> Option<Resolved<'a>> {
        let name = TopicName::parse(topic).ok()?;
        let base = name.base();
        let found = |key: RouteKey| {
            table
                .routes
                .get(&key.to_string())
                .and_then(|c| table.clusters.get(c))
                .map(|cluster| Resolved {
                    cluster,
                    route: key,
                })
        };
        if let Some(r) = found(RouteKey::Topic(base.clone())) {
            return Some(r);
        }
        let local_start = base.len() - name.local.len();
        for end in (local_start + 1..=base.len()).rev() {
            if !base.is_char_boundary(end) {
                continue;
            }
            if let Some(r) = found(RouteKey::Prefix(base[..end].to_owned())) {
                return Some(r);
            }
        }
        found(RouteKey::Namespace(name.namespace_name()))
            .or_else(|| found(RouteKey::Tenant(name.tenant.clone())))
            .or_else(|| found(RouteKey::Default))
    }

    fn cluster(name: &str) -> PulsarCluster {
        PulsarCluster {
            name: name.to_owned(),
            service_url: "pulsar://h:6650".to_owned(),
            service_url_tls: None,
            web_service_url: "http://h:8080".to_owned(),
            admin_url: "http://h:8080".to_owned(),
        }
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }

        /// A local name over a small alphabet (multi-byte characters
        /// included), so that prefixes often share their start.
        fn local(&mut self) -> String {
            let len = 1 + self.below(6);
            (0..len)
                .map(|_| self.pick(&["a", "b", "-", "é", "è", "z", "0"]))
                .collect()
        }
    }

    #[test]
    fn resolve_matches_trying_every_prefix_length() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let tenants = ["t", "t2", "u"];
        let namespaces = ["ns", "ns2", "n"];
        let domains = ["persistent", "non-persistent"];
        let mut checked = 0;
        for _ in 0..200 {
            let mut table = RoutingTable::default();
            for c in ["a", "b"] {
                table.clusters.insert(c.to_owned(), cluster(c));
            }
            for _ in 0..rng.below(40) {
                let ns = format!("{}/{}", rng.pick(&tenants), rng.pick(&namespaces));
                let full = format!("{}://{ns}/{}", rng.pick(&domains), rng.local());
                let key = match rng.below(6) {
                    0 | 1 => RouteKey::Prefix(full),
                    2 => RouteKey::Topic(full),
                    3 => RouteKey::Namespace(ns),
                    4 => RouteKey::Tenant(rng.pick(&tenants).to_owned()),
                    _ => RouteKey::Default,
                };
                // Some routes name a cluster that is not registered (a table
                // built by hand): they are passed over.
                let to = rng.pick(&["a", "b", "gone"]);
                table.routes.insert(key.to_string(), to.to_owned());
            }
            for _ in 0..100 {
                let topic = format!(
                    "{}://{}/{}/{}{}",
                    rng.pick(&domains),
                    rng.pick(&tenants),
                    rng.pick(&namespaces),
                    rng.local(),
                    rng.pick(&["", "", "-partition-2"])
                );
                let got = table.resolve(&topic).unwrap();
                assert_eq!(
                    got,
                    reference(&table, &topic),
                    "{topic} in {:?}",
                    table.routes
                );
                checked += usize::from(got.is_some());
            }
        }
        assert!(checked > 5_000, "{checked}");
    }

    #[test]
    fn the_longest_prefix_wins_over_keys_sorted_between() {
        let mut table = RoutingTable::default();
        table.clusters.insert("a".to_owned(), cluster("a"));
        table.clusters.insert("b".to_owned(), cluster("b"));
        for (route, to) in [
            ("prefix:persistent://t/ns/or", "a"),
            ("prefix:persistent://t/ns/orb", "b"),
            ("prefix:persistent://t/ns/ord", "b"),
            ("prefix:persistent://t/ns/order", "b"),
            ("prefix:persistent://t/ns/ordersX", "b"),
            ("topic:persistent://t/ns/ore", "b"),
        ] {
            table.routes.insert(route.to_owned(), to.to_owned());
        }
        let r = table.resolve("persistent://t/ns/ordes").unwrap().unwrap();
        assert_eq!(r.route.to_string(), "prefix:persistent://t/ns/ord");
        let r = table.resolve("persistent://t/ns/orders").unwrap().unwrap();
        assert_eq!(r.route.to_string(), "prefix:persistent://t/ns/order");
        let r = table.resolve("persistent://t/ns/orz").unwrap().unwrap();
        assert_eq!(r.route.to_string(), "prefix:persistent://t/ns/or");
        assert_eq!(table.resolve("persistent://t/ns/o").unwrap(), None);
        assert_eq!(table.resolve("persistent://t/nsx/orders").unwrap(), None);
    }
}
