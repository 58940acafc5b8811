//! The checker: run after every fault healed and every node restarted, it
//! compares what the traffic and the operator were told with what the stack
//! holds (issue #20, item 2). A history passes only with zero
//! [`Violation`]s.

use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use bkswitch_admin::Node;
use bkswitch_managed_ledger::schema::SchemaVersion;
use bkswitch_managed_ledger::{InitialPosition, ManagedLedger, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::Phase;

pub use crate::violation::{Violation, ViolationKind, Violations};

use crate::plan::{CLUSTERS, TOPICS};
use crate::stack::Stack;
use crate::traffic::{Model, CURSOR, READ_BATCH};

/// A ledger the metadata references.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reference {
    /// `data`, `cursor` or `schema`.
    pub kind: &'static str,
    /// The metadata node that references it.
    pub path: String,
    /// The ledger id.
    pub ledger_id: i64,
    /// The cluster its stamp names (unstamped: the bootstrap cluster, `old`).
    pub cluster: String,
    /// For a data ledger: the entries the managed ledger recorded for it
    /// (`0` while it is the open one).
    pub entries: i64,
}

/// Every node under `root` with its value, sorted by path.
pub async fn dump(store: &dyn MetadataStore, root: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if let Ok(Some(r)) = store.get(&p).await {
            out.insert(p.clone(), r.value);
        }
        if let Ok(children) = store.children(&p).await {
            for c in children {
                stack.push(format!("{p}/{c}"));
            }
        }
    }
    out
}

/// The cluster a stamp names: unstamped is the bootstrap cluster (`old`);
/// a stamp that does not decode is a violation (never read as a cluster).
fn stamp_of<E: fmt::Display>(
    stamp: Result<Option<&str>, E>,
    what: &str,
    out: &mut Violations,
) -> String {
    match stamp {
        Ok(s) => s.unwrap_or(CLUSTERS[0]).to_owned(),
        Err(e) => {
            out.push(
                ViolationKind::CorruptMetadata,
                format!("the stamp of {what} does not decode: {e}"),
            );
            format!("<corrupt stamp: {e}>")
        }
    }
}

/// Every data, cursor and schema ledger the metadata references; a node that
/// does not decode, or a stamp that does not, is a violation.
pub async fn references(store: &dyn MetadataStore, out: &mut Violations) -> Vec<Reference> {
    let mut refs = Vec::new();
    for (path, value) in dump(store, MANAGED_LEDGERS_ROOT).await {
        let topic = TOPICS
            .iter()
            .find(|t| path == format!("{MANAGED_LEDGERS_ROOT}/{t}"));
        let cursor_of = TOPICS
            .iter()
            .find(|t| path.starts_with(&format!("{MANAGED_LEDGERS_ROOT}/{t}/")));
        if value.is_empty() {
            if topic.is_some() || cursor_of.is_some() {
                out.push(
                    ViolationKind::CorruptMetadata,
                    format!("managed-ledger node {path} is empty"),
                );
            }
            continue;
        }
        if topic.is_some() {
            match decode_managed_ledger_info(&value) {
                Ok(info) => {
                    for l in &info.ledger_info {
                        let what = format!("ledger {} in {path}", l.ledger_id);
                        refs.push(Reference {
                            kind: "data",
                            path: path.clone(),
                            ledger_id: l.ledger_id,
                            cluster: stamp_of(l.cluster_stamp(), &what, out),
                            entries: l.entries.unwrap_or(0),
                        });
                    }
                }
                Err(e) => out.push(
                    ViolationKind::CorruptMetadata,
                    format!("managed-ledger node {path} does not decode: {e}"),
                ),
            }
        } else if cursor_of.is_some() {
            match decode_managed_cursor_info(&value) {
                Ok(c) if c.cursors_ledger_id >= 0 => {
                    let what = format!("cursor ledger {} in {path}", c.cursors_ledger_id);
                    refs.push(Reference {
                        kind: "cursor",
                        path: path.clone(),
                        ledger_id: c.cursors_ledger_id,
                        cluster: stamp_of(c.cluster_stamp(), &what, out),
                        entries: 0,
                    });
                }
                Ok(_) => {}
                Err(e) => out.push(
                    ViolationKind::CorruptMetadata,
                    format!("cursor node {path} does not decode: {e}"),
                ),
            }
        }
    }
    for (path, value) in dump(store, SCHEMAS_ROOT).await {
        if value.is_empty() {
            continue;
        }
        match SchemaLocator::decode(value.as_slice()) {
            Ok(l) => {
                for e in std::iter::once(&l.info).chain(l.index.iter()) {
                    if e.position.ledger_id >= 0 {
                        let what = format!("schema ledger {} in {path}", e.position.ledger_id);
                        refs.push(Reference {
                            kind: "schema",
                            path: path.clone(),
                            ledger_id: e.position.ledger_id,
                            cluster: stamp_of(e.position.cluster_stamp(), &what, out),
                            entries: 0,
                        });
                    }
                }
            }
            Err(e) => {
                out.push(
                    ViolationKind::CorruptMetadata,
                    format!("schema locator {path} does not decode: {e}"),
                );
                out.push(
                    ViolationKind::SchemaLost,
                    format!("schema locator {path} does not decode: {e}"),
                );
            }
        }
    }
    refs.sort();
    refs.dedup();
    refs
}

/// Registry invariants: exactly one ACTIVE cluster, and no override or
/// unfinished switch names an unregistered cluster.
async fn check_registry(node: &Node, out: &mut Violations) -> BTreeSet<String> {
    let records = match node.registry().list().await {
        Ok(r) => r,
        Err(e) => {
            out.push(
                ViolationKind::Registry,
                format!("the registry does not list: {e}"),
            );
            return BTreeSet::new();
        }
    };
    let registered: BTreeSet<String> = records.iter().map(|r| r.name.clone()).collect();
    let active: Vec<&str> = records
        .iter()
        .filter(|r| r.status == ClusterStatus::Active)
        .map(|r| r.name.as_str())
        .collect();
    if active.len() != 1 {
        out.push(
            ViolationKind::Registry,
            format!(
                "{} ACTIVE clusters, expected exactly one: {active:?}",
                active.len()
            ),
        );
    }
    match node.registry().prefix_overrides().await {
        Ok((map, _)) => {
            for (prefix, o) in map {
                if !registered.contains(&o.cluster) {
                    out.push(
                        ViolationKind::Registry,
                        format!(
                            "the override of `{prefix}` names cluster `{}`, which is not \
                             registered",
                            o.cluster
                        ),
                    );
                }
            }
        }
        Err(e) => out.push(
            ViolationKind::Registry,
            format!("overrides unreadable: {e}"),
        ),
    }
    let mut statuses = Vec::new();
    if let Ok(Some(st)) = node.orchestrator().current_status().await {
        statuses.push(("switch".to_owned(), st));
    }
    if let Ok(list) = node.overrides().await {
        for (prefix, _, st) in list {
            if let Some(st) = st {
                statuses.push((format!("canary of `{prefix}`"), st));
            }
        }
    }
    for (what, st) in statuses {
        let unfinished = !st.phase.is_final() && st.phase != Phase::RolledBack;
        for side in [&st.source, &st.target] {
            if unfinished && !registered.contains(side) {
                out.push(
                    ViolationKind::Registry,
                    format!(
                        "{what} {} ({}) names cluster `{side}`, which is not registered",
                        st.switch_id, st.phase
                    ),
                );
            }
        }
    }
    registered
}

/// Every referenced ledger is on the cluster its stamp names, that cluster
/// is registered, and the ledger reads.
async fn check_references(
    stack: &Stack,
    refs: &[Reference],
    registered: &BTreeSet<String>,
    out: &mut Violations,
) {
    for r in refs {
        let cluster = stack.clusters.get(&r.cluster);
        if cluster
            .as_ref()
            .and_then(|c| c.is_metadata_corrupt(r.ledger_id))
            == Some(true)
        {
            out.push(
                ViolationKind::CorruptMetadata,
                format!(
                    "the BookKeeper metadata of {} ledger {} referenced by {} on `{}` does not \
                     decode",
                    r.kind, r.ledger_id, r.path, r.cluster
                ),
            );
        }
        let held = cluster.is_some_and(|c| c.contains_ledger(r.ledger_id));
        if !held {
            let elsewhere: Vec<&str> = CLUSTERS
                .iter()
                .copied()
                .filter(|c| stack.cluster(c).contains_ledger(r.ledger_id))
                .collect();
            out.push(
                ViolationKind::LedgerMissing,
                format!(
                    "{} ledger {} referenced by {} is stamped `{}` but that cluster does not \
                     hold it (held by: {elsewhere:?})",
                    r.kind, r.ledger_id, r.path, r.cluster
                ),
            );
        }
        if !registered.contains(&r.cluster) {
            out.push(
                ViolationKind::Registry,
                format!(
                    "{} ledger {} of {} is stamped `{}`, which is not registered",
                    r.kind, r.ledger_id, r.path, r.cluster
                ),
            );
        }
    }
}

/// Opens `topic` on `node`, retrying retryable errors for a while.
async fn load(node: &Node, topic: &str) -> Result<ManagedLedger, String> {
    let mut last = String::new();
    for _ in 0..30 {
        match tokio::time::timeout(Duration::from_secs(30), node.open_topic(topic)).await {
            Ok(Ok(ml)) => return Ok(ml),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "no answer within 30 s".to_owned(),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(last)
}

/// Every acknowledged message is read back in order without a gap (unless
/// consumed and acknowledged, when it may be trimmed), and no cursor is
/// behind its acknowledged mark-delete. Returns the duplicates seen.
async fn check_topics(node: &Node, model: &Model, out: &mut Violations) -> u64 {
    let mut duplicates = 0;
    for topic in TOPICS {
        let acked = model.acked.get(topic).cloned().unwrap_or_default();
        let md = model.mark_deleted.get(topic).copied();
        if acked.is_empty() && md.is_none() {
            continue;
        }
        let ml = match load(node, topic).await {
            Ok(ml) => ml,
            Err(e) => {
                out.push(
                    ViolationKind::TopicUnloadable,
                    format!(
                        "topic {topic} with {} acknowledged messages does not load after the \
                         faults healed: {e}",
                        acked.len()
                    ),
                );
                continue;
            }
        };
        // The durable cursor first (opening the check cursor does not move
        // it): exactly at the acknowledged mark-delete, or at a later one
        // whose call failed after it applied; never behind, never ahead.
        if let Some(md) = md {
            match ml.cursor(CURSOR).ok() {
                Some(c) if model.allowed_mark_delete(topic, c.mark_delete_position()) => {}
                Some(c) if c.mark_delete_position() < md => out.push(
                    ViolationKind::CursorBehind,
                    format!(
                        "cursor {CURSOR} of {topic} is at {:?}, behind its acknowledged \
                         mark-delete {md:?}",
                        c.mark_delete_position()
                    ),
                ),
                Some(c) => out.push(
                    ViolationKind::CursorAhead,
                    format!(
                        "cursor {CURSOR} of {topic} is at {:?}, ahead of its acknowledged \
                         mark-delete {md:?} and of every one asked for since (highest {:?})",
                        c.mark_delete_position(),
                        model.highest_mark_delete(topic)
                    ),
                ),
                None => out.push(
                    ViolationKind::CursorBehind,
                    format!(
                        "cursor {CURSOR} of {topic} is gone; its mark-delete {md:?} was \
                         acknowledged"
                    ),
                ),
            }
        }
        check_consumer(topic, model, &acked, md, out);
        let mut seen: Vec<u64> = Vec::new();
        let read = async {
            let c = ml
                .open_cursor_at("nemesis-check", InitialPosition::Earliest)
                .await
                .map_err(|e| e.to_string())?;
            for _ in 0..10_000 {
                let entries = c.read_entries(100).await.map_err(|e| e.to_string())?;
                if entries.is_empty() {
                    break;
                }
                for e in entries {
                    let text = String::from_utf8_lossy(&e.data);
                    if let Some(n) = text.rsplit('#').next().and_then(|s| s.parse().ok()) {
                        seen.push(n);
                    }
                }
            }
            let _ = ml.delete_cursor("nemesis-check").await;
            Ok::<(), String>(())
        };
        if let Err(e) = tokio::time::timeout(Duration::from_secs(120), read)
            .await
            .unwrap_or_else(|_| Err("no answer within 120 s".into()))
        {
            out.push(
                ViolationKind::MessageLost,
                format!("reading {topic} back failed: {e}"),
            );
            continue;
        }
        let mut index: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, n) in seen.iter().enumerate() {
            if index.insert(*n, i).is_some() {
                duplicates += 1;
            }
        }
        let mut last_index = None;
        let mut lost = Vec::new();
        for (pos, n) in &acked {
            let consumed = md.is_some_and(|md| *pos <= md);
            match index.get(n) {
                Some(i) => {
                    if last_index.is_some_and(|l| *i < l) {
                        out.push(
                            ViolationKind::MessageLost,
                            format!("{topic}: acknowledged message #{n} is read out of order"),
                        );
                    }
                    last_index = Some(*i);
                }
                None if consumed => {}
                None => lost.push((*n, *pos)),
            }
        }
        if !lost.is_empty() {
            out.push(
                ViolationKind::MessageLost,
                format!(
                    "{topic}: {} acknowledged messages not read back (not consumed either), \
                     first: #{} at {:?}; {} read back",
                    lost.len(),
                    lost[0].0,
                    lost[0].1,
                    seen.len()
                ),
            );
        }
        let _ = node.unload_topic(topic).await;
    }
    duplicates
}

/// The consumer side: every acknowledged message the cursor has since
/// moved past was received at least once (no consumer-side gap), and it
/// received no more duplicates than its reopens allow.
fn check_consumer(
    topic: &str,
    model: &Model,
    acked: &[(Position, u64)],
    md: Option<Position>,
    out: &mut Violations,
) {
    let empty = BTreeMap::new();
    let delivered = model.delivered.get(topic).unwrap_or(&empty);
    let never: Vec<(u64, Position)> = acked
        .iter()
        .filter(|(pos, n)| md.is_some_and(|md| *pos <= md) && !delivered.contains_key(n))
        .map(|(pos, n)| (*n, *pos))
        .collect();
    if let Some((n, pos)) = never.first() {
        out.push(
            ViolationKind::ConsumerGap,
            format!(
                "{topic}: {} acknowledged messages before the acknowledged mark-delete \
                 {md:?} never reached the consumer, first: #{n} at {pos:?}",
                never.len()
            ),
        );
    }
    let redelivered: u64 = delivered
        .values()
        .map(|c| u64::from(c.saturating_sub(1)))
        .sum();
    let opens = model.opens.get(topic).copied().unwrap_or(0);
    let bound = opens.saturating_sub(1) * READ_BATCH as u64;
    if redelivered > bound {
        out.push(
            ViolationKind::Duplicates,
            format!(
                "{topic}: the consumer received {redelivered} messages again, more than its \
                 {opens} opens allow ({bound}: at most one unacknowledged batch of \
                 {READ_BATCH} per reopen)"
            ),
        );
    }
}

/// Every acknowledged message still referenced is on the cluster its
/// ledger's stamp names, with its bytes; every closed data ledger holds
/// exactly the entries the managed ledger recorded.
fn check_contents(stack: &Stack, model: &Model, refs: &[Reference], out: &mut Violations) {
    for topic in TOPICS {
        let path = format!("{MANAGED_LEDGERS_ROOT}/{topic}");
        let data: BTreeMap<i64, &Reference> = refs
            .iter()
            .filter(|r| r.kind == "data" && r.path == path)
            .map(|r| (r.ledger_id, r))
            .collect();
        for r in data.values() {
            let Some(cluster) = stack.clusters.get(&r.cluster) else {
                continue;
            };
            if r.entries > 0 {
                // Closed: exactly the recorded entries. Not closed yet (its
                // writer died; the first reader's recovery closes it): at
                // least those entries confirmed.
                let held = cluster.ledger_metadata(r.ledger_id).map(|m| {
                    if m.is_closed() {
                        (true, m.last_entry_id + 1)
                    } else {
                        let lac = cluster.last_add_confirmed(r.ledger_id).unwrap_or(-1);
                        (false, lac + 1)
                    }
                });
                let fine = match held {
                    Some((true, n)) => n == r.entries,
                    Some((false, n)) => n >= r.entries,
                    None => true, // reported by the reference check
                };
                if !fine {
                    out.push(
                        ViolationKind::LedgerContents,
                        format!(
                            "data ledger {} of {topic} on `{}` holds {held:?} entries \
                             (closed, count), the managed ledger recorded {}",
                            r.ledger_id, r.cluster, r.entries
                        ),
                    );
                }
            }
        }
        let mut wrong = Vec::new();
        for (pos, n) in model.acked.get(topic).into_iter().flatten() {
            let Some(r) = data.get(&pos.ledger_id) else {
                continue; // trimmed after it was consumed
            };
            let Some(cluster) = stack.clusters.get(&r.cluster) else {
                continue; // reported by the reference check
            };
            let want = format!("{topic}#{n}");
            match cluster.entry(pos.ledger_id, pos.entry_id) {
                Some(b) if b.as_ref() == want.as_bytes() => {}
                got => wrong.push(format!(
                    "#{n} at {pos:?} on `{}`: {:?}",
                    r.cluster,
                    got.map(|b| String::from_utf8_lossy(&b).into_owned())
                )),
            }
        }
        if let Some(first) = wrong.first() {
            out.push(
                ViolationKind::LedgerContents,
                format!(
                    "{topic}: {} acknowledged messages are not what their ledger holds, \
                     first: {first}",
                    wrong.len()
                ),
            );
        }
    }
}

/// Every acknowledged schema version reads back with its data.
async fn check_schemas(node: &Node, model: &Model, out: &mut Violations) {
    for (id, v, data) in &model.schemas {
        let mut got = node.schemas().get(id, SchemaVersion(*v)).await;
        // A client of a cluster starts on first use: retryable errors are
        // retried for a while (virtual time).
        for _ in 0..20 {
            match &got {
                Err(e) if e.is_retryable() => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    got = node.schemas().get(id, SchemaVersion(*v)).await;
                }
                _ => break,
            }
        }
        match got {
            Ok(s) if s.data.as_ref() == data.as_slice() => {}
            Ok(_) => out.push(
                ViolationKind::SchemaLost,
                format!("schema {id} version {v} reads back other data"),
            ),
            Err(e) => out.push(
                ViolationKind::SchemaLost,
                format!("schema {id} version {v} was acknowledged and is lost: {e}"),
            ),
        }
    }
}

/// What one run of the checker found besides violations.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CheckFigures {
    /// Messages read back more than once.
    pub duplicates: u64,
    /// Referenced ledgers.
    pub references: usize,
}

/// Runs every data check of item 2 on the healed stack (through `node`).
pub async fn check(
    stack: &Stack,
    node: &Node,
    model: &Model,
    out: &mut Violations,
) -> CheckFigures {
    let registered = check_registry(node, out).await;
    let refs = references(&stack.root, out).await;
    check_references(stack, &refs, &registered, out).await;
    out.0.extend(model.observed.iter().cloned());
    check_contents(stack, model, &refs, out);
    check_schemas(node, model, out).await;
    let duplicates = check_topics(node, model, out).await;
    // Loading and reading may have rolled ledgers: check the references
    // again.
    let refs = references(&stack.root, out).await;
    check_references(stack, &refs, &registered, out).await;
    CheckFigures {
        duplicates,
        references: refs.len(),
    }
}

/// Ledgers on each cluster that no metadata references (what a final
/// cleanup left behind, or never removed), by cluster.
pub async fn leftovers(stack: &Stack) -> BTreeMap<String, usize> {
    let mut ignore = Violations::default();
    let refs = references(&stack.root, &mut ignore).await;
    let referenced: BTreeSet<(String, i64)> =
        refs.into_iter().map(|r| (r.cluster, r.ledger_id)).collect();
    CLUSTERS
        .iter()
        .map(|c| {
            let n = stack
                .cluster(c)
                .ledger_ids()
                .into_iter()
                .filter(|id| !referenced.contains(&((*c).to_owned(), *id)))
                .count();
            ((*c).to_owned(), n)
        })
        .collect()
}
