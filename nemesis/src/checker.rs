//! The checker: run after every fault healed and every node restarted, it
//! compares what the traffic and the operator were told with what the stack
//! holds (issue #20, item 2). A history passes only with zero
//! [`Violation`]s.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use bkswitch_admin::Node;
use bkswitch_managed_ledger::schema::SchemaVersion;
use bkswitch_managed_ledger::{InitialPosition, ManagedLedger};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::Phase;

use crate::plan::{CLUSTERS, TOPICS};
use crate::stack::Stack;
use crate::traffic::{Model, CURSOR};

/// What went wrong in a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// An acknowledged message is missing or out of order.
    MessageLost,
    /// A ledger the metadata references is missing, or on another cluster
    /// than its stamp names.
    LedgerMissing,
    /// An acknowledged schema version cannot be read.
    SchemaLost,
    /// A cursor is behind its last acknowledged mark-delete.
    CursorBehind,
    /// A topic does not load after the faults healed.
    TopicUnloadable,
    /// Not exactly one ACTIVE cluster, or a stamp, override or switch names an
    /// unregistered cluster.
    Registry,
    /// An operator call answered without a clear error, or did not do what
    /// its answer said.
    OperatorCall,
    /// A switch or canary is stuck: no final state and no documented call
    /// moves it.
    Stuck,
    /// A node started with the id of a running node.
    DuplicateNode,
    /// A canary or switch started while another coordinator works on the
    /// same ledgers (an overlapping canary, a cluster-wide switch in
    /// progress or cleaning up).
    TwoCoordinators,
    /// New data does not go where the registry routes it (a schema version
    /// of a canary's prefix created on another cluster).
    Routing,
    /// A node's managed ledgers did not pause trims and rollovers while its
    /// metadata session was lost, or did not resume once it was back.
    SessionPause,
}

/// One violation, with a message saying what and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Its kind.
    pub kind: ViolationKind,
    /// What was seen.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:?}] {}", self.kind, self.message)
    }
}

/// Violations collected during a history.
#[derive(Debug, Default, Clone)]
pub struct Violations(pub Vec<Violation>);

impl Violations {
    /// Records one.
    pub fn push(&mut self, kind: ViolationKind, message: impl Into<String>) {
        self.0.push(Violation {
            kind,
            message: message.into(),
        });
    }
}

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

/// Every data, cursor and schema ledger the metadata references.
pub async fn references(store: &dyn MetadataStore, out: &mut Violations) -> Vec<Reference> {
    let stamp_of = |s: Result<Option<&str>, _>| s.ok().flatten().unwrap_or(CLUSTERS[0]).to_owned();
    let mut refs = Vec::new();
    for (path, value) in dump(store, "/managed-ledgers").await {
        if value.is_empty() {
            continue;
        }
        let is_ml = TOPICS
            .iter()
            .any(|t| path == format!("/managed-ledgers/{t}"));
        if is_ml {
            match decode_managed_ledger_info(&value) {
                Ok(info) => {
                    for l in &info.ledger_info {
                        refs.push(Reference {
                            kind: "data",
                            path: path.clone(),
                            ledger_id: l.ledger_id,
                            cluster: stamp_of(l.cluster_stamp()),
                        });
                    }
                }
                Err(e) => out.push(
                    ViolationKind::LedgerMissing,
                    format!("managed-ledger node {path} does not decode: {e}"),
                ),
            }
        } else if let Ok(c) = decode_managed_cursor_info(&value) {
            if c.cursors_ledger_id >= 0 {
                refs.push(Reference {
                    kind: "cursor",
                    path: path.clone(),
                    ledger_id: c.cursors_ledger_id,
                    cluster: stamp_of(c.cluster_stamp()),
                });
            }
        }
    }
    for (path, value) in dump(store, "/schemas").await {
        if value.is_empty() {
            continue;
        }
        match SchemaLocator::decode(value.as_slice()) {
            Ok(l) => {
                for e in std::iter::once(&l.info).chain(l.index.iter()) {
                    if e.position.ledger_id >= 0 {
                        refs.push(Reference {
                            kind: "schema",
                            path: path.clone(),
                            ledger_id: e.position.ledger_id,
                            cluster: stamp_of(e.position.cluster_stamp()),
                        });
                    }
                }
            }
            Err(e) => out.push(
                ViolationKind::SchemaLost,
                format!("schema locator {path} does not decode: {e}"),
            ),
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
        let held = stack
            .clusters
            .get(&r.cluster)
            .is_some_and(|c| c.contains_ledger(r.ledger_id));
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
        // The durable cursor first (opening the check cursor does not move it).
        if let Some(md) = md {
            match ml.cursor(CURSOR).ok() {
                Some(c) if c.mark_delete_position() >= md => {}
                Some(c) => out.push(
                    ViolationKind::CursorBehind,
                    format!(
                        "cursor {CURSOR} of {topic} is at {:?}, behind its acknowledged \
                         mark-delete {md:?}",
                        c.mark_delete_position()
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
