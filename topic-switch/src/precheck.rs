//! The precheck: which topics a batch moves, and whether moving them could
//! lose a message. Nothing is written; a refusal lists every problem.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bkswitch_topic_routes::{Change, RouteKey, RoutingTable, TopicName};
use serde::{Deserialize, Serialize};

use crate::admin::PulsarAdmin;
use crate::record::TopicMove;
use crate::switcher::AdminFactory;

/// What the precheck found for one batch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrecheckReport {
    /// The topics that change cluster, with where they are now.
    pub topics: BTreeMap<String, TopicMove>,
    /// The cluster each route named before the move.
    pub previous: BTreeMap<String, Option<String>>,
    /// Every reason to refuse (empty: the move may start).
    pub problems: Vec<String>,
}

impl PrecheckReport {
    /// Whether the move may start.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The routes of a batch as table changes to `to`.
///
/// # Errors
/// A route that is not a valid selector, or one a move does not take
/// (`tenant:` and `default` move too much at once: use namespaces).
pub fn route_changes(routes: &[String], to: &str) -> Result<Vec<(RouteKey, Change)>, String> {
    let mut out = Vec::new();
    for r in routes {
        let key: RouteKey = r.parse().map_err(|e| format!("{e}"))?;
        match key {
            RouteKey::Topic(_) | RouteKey::Prefix(_) | RouteKey::Namespace(_) => {}
            RouteKey::Tenant(_) | RouteKey::Default => {
                return Err(format!(
                    "route `{r}`: a topic move takes topics, prefixes and namespaces; move a tenant namespace by namespace"
                ))
            }
        }
        out.push((key.clone(), Change::SetRoute(key, to.to_owned())));
    }
    Ok(out)
}

fn namespace_of(key: &RouteKey) -> Option<String> {
    match key {
        RouteKey::Topic(t) | RouteKey::Prefix(t) => {
            let rest = t.split_once("://")?.1;
            let mut parts = rest.splitn(3, '/');
            Some(format!("{}/{}", parts.next()?, parts.next()?))
        }
        RouteKey::Namespace(ns) => Some(ns.clone()),
        _ => None,
    }
}

/// Checks a batch of `routes` moving to `to` against `table` and the
/// clusters' admin APIs.
pub async fn precheck(
    table: &RoutingTable,
    routes: &[String],
    to: &str,
    max_backlog: u64,
    admins: &dyn AdminFactory,
) -> PrecheckReport {
    let mut report = PrecheckReport::default();
    let Some(target) = table.clusters.get(to) else {
        report.problems.push(format!(
            "the target cluster `{to}` is not registered: register it first"
        ));
        return report;
    };
    let changes = match route_changes(routes, to) {
        Ok(c) => c,
        Err(e) => {
            report.problems.push(e);
            return report;
        }
    };
    let after = match table.apply(&changes.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>()) {
        Ok(t) => t,
        Err(e) => {
            report.problems.push(e.to_string());
            return report;
        }
    };
    for (key, _) in &changes {
        report
            .previous
            .insert(key.to_string(), table.routes.get(&key.to_string()).cloned());
    }
    let target_admin = admins.admin(target);
    if let Err(e) = target_admin.ping().await {
        report
            .problems
            .push(format!("the target cluster is not reachable: {e}"));
        return report;
    }
    // Candidate topics: named ones, and those the source clusters list in
    // the namespaces of prefixes and namespaces.
    let mut candidates = BTreeSet::new();
    let mut namespaces = BTreeSet::new();
    for (key, _) in &changes {
        match key {
            RouteKey::Topic(t) => {
                candidates.insert(t.clone());
            }
            other => {
                if let Some(ns) = namespace_of(other) {
                    namespaces.insert((ns, other.clone()));
                }
            }
        }
    }
    for (ns, key) in &namespaces {
        let sources: BTreeSet<&str> = table
            .namespace_clusters(ns)
            .map(|cs| cs.into_iter().map(|c| c.name.as_str()).collect())
            .unwrap_or_default();
        for source in sources.into_iter().filter(|s| *s != to) {
            let Some(cluster) = table.clusters.get(source) else {
                continue;
            };
            match admins.admin(cluster).topics(ns).await {
                Ok(ts) => candidates.extend(ts.into_iter().filter(|t| match key {
                    RouteKey::Prefix(p) => t.starts_with(p.as_str()),
                    _ => true,
                })),
                Err(e) => report
                    .problems
                    .push(format!("cannot list the topics of `{ns}`: {e}")),
            }
        }
    }
    for topic in candidates {
        let before = table
            .resolve(&topic)
            .ok()
            .flatten()
            .map(|r| r.cluster.name.clone());
        let after_c = after
            .resolve(&topic)
            .ok()
            .flatten()
            .map(|r| r.cluster.name.clone());
        let Some(from) = before else {
            report.problems.push(format!(
                "topic `{topic}` has no route now: set one (on the cluster that holds it) before moving it"
            ));
            continue;
        };
        if after_c.as_deref() != Some(to) || from == to {
            continue;
        }
        match check_topic(table, &topic, &from, to, max_backlog, admins, &target_admin).await {
            Ok(m) => {
                report.topics.insert(topic, m);
            }
            Err(mut ps) => report.problems.append(&mut ps),
        }
    }
    report
}

async fn check_topic(
    table: &RoutingTable,
    topic: &str,
    from: &str,
    to: &str,
    max_backlog: u64,
    admins: &dyn AdminFactory,
    target: &Arc<dyn PulsarAdmin>,
) -> Result<TopicMove, Vec<String>> {
    let mut problems = Vec::new();
    let name = TopicName::parse(topic).map_err(|e| vec![e.to_string()])?;
    if topic.starts_with("non-persistent://") {
        return Err(vec![format!(
            "topic `{topic}` is non-persistent: nothing replicates it, its messages in flight would be lost"
        )]);
    }
    let Some(source_cluster) = table.clusters.get(from) else {
        return Err(vec![format!(
            "topic `{topic}` routes to unknown cluster `{from}`"
        )]);
    };
    let source = admins.admin(source_cluster);
    let ns = name.namespace_name();
    for (side, admin) in [(from, &source), (to, target)] {
        match admin.replication_clusters(&ns).await {
            Ok(cs) if cs.iter().any(|c| c == from) && cs.iter().any(|c| c == to) => {}
            Ok(cs) => problems.push(format!(
                "namespace `{ns}` on `{side}` replicates to [{}], not both `{from}` and `{to}`: set its replication clusters on both",
                cs.join(", ")
            )),
            Err(e) => problems.push(e.to_string()),
        }
    }
    let partitions = match (
        source.partitions(topic).await,
        target.partitions(topic).await,
    ) {
        (Ok(a), Ok(b)) if a == b => a,
        (Ok(a), Ok(b)) => {
            problems.push(format!(
                "topic `{topic}` has {a} partitions on `{from}` and {b} on `{to}`: make them equal"
            ));
            a
        }
        (Err(e), _) | (_, Err(e)) => {
            problems.push(e.to_string());
            0
        }
    };
    let before = match source.stats(topic, partitions).await {
        Ok(s) => s,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    if let Some(stats) = &before {
        let on_target = match target.stats(topic, partitions).await {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => {
                problems.push(e.to_string());
                Default::default()
            }
        };
        for (sub, s) in stats.subscriptions.iter().filter(|(_, s)| s.durable) {
            if !s.replicated {
                problems.push(format!(
                    "subscription `{sub}` of `{topic}` is not replicated: its consumers would resume at the wrong position on `{to}` (enable replicated subscriptions: replicateSubscriptionState)"
                ));
            }
            if !on_target.subscriptions.contains_key(sub) {
                problems.push(format!(
                    "subscription `{sub}` of `{topic}` does not exist on `{to}`: messages published there before it appears would be lost to it"
                ));
            }
        }
        match stats.replication.get(to) {
            Some(r) if r.connected && r.backlog <= max_backlog => {}
            Some(r) if !r.connected => problems.push(format!(
                "replication of `{topic}` from `{from}` to `{to}` is not connected"
            )),
            Some(r) => problems.push(format!(
                "replication of `{topic}` from `{from}` to `{to}` is {} messages behind (limit {max_backlog}): wait for it to drain",
                r.backlog
            )),
            None if stats.has_clients() || !stats.subscriptions.is_empty() => problems.push(format!(
                "topic `{topic}` does not replicate from `{from}` to `{to}`"
            )),
            None => {}
        }
        match (source.schema(topic).await, target.schema(topic).await) {
            (Ok(Some((a, _))), Ok(Some((b, _)))) if a != b => problems.push(format!(
                "topic `{topic}` has a {a} schema on `{from}` and a {b} schema on `{to}`"
            )),
            (Ok(Some((a, _))), Ok(None)) => problems.push(format!(
                "topic `{topic}` has a {a} schema on `{from}` and none on `{to}`: replicate it first"
            )),
            (Err(e), _) | (_, Err(e)) => problems.push(e.to_string()),
            _ => {}
        }
    }
    if problems.is_empty() {
        Ok(TopicMove {
            from: from.to_owned(),
            partitions,
            before,
        })
    } else {
        Err(problems)
    }
}
