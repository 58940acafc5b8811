//! The loss checker of a real history, run once every process is stopped:
//! every line of every ack log (the killed processes' too) is read back on
//! the cluster that the stamp of its ledger in the managed ledger's metadata
//! names, with the same bytes — unless the subscription's durable cursor is
//! past it and its ledger left the managed ledger (consumed and trimmed).
//! Every stamp decodes and names a registered cluster; every listed ledger
//! opens on its stamped cluster; exactly one cluster is ACTIVE.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, DigestType, ReadHandle};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bkswitch_cli::{AckLog, AckRecord};
use bkswitch_metadata_store::{open_store, MetadataStore, StoreTimeouts};
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::ml::{ManagedCursorInfo, PositionInfo};
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::{ClusterStatus, Registry, DEFAULT_ROOT};

use crate::stack::Clusters;

/// What the checker saw.
#[derive(Debug, Default)]
pub(crate) struct Checked {
    /// Ack-log lines.
    pub(crate) acks: usize,
    /// Acknowledged entries read back with the same bytes.
    pub(crate) read: usize,
    /// Acknowledged entries consumed and trimmed (cursor past them, ledger
    /// gone from the managed ledger).
    pub(crate) trimmed: usize,
    /// Ledgers listed by the managed ledgers, each opened on its cluster.
    pub(crate) ledgers: usize,
    /// Listed ledgers per stamped cluster.
    pub(crate) by_cluster: BTreeMap<String, usize>,
    /// What is wrong.
    pub(crate) violations: Vec<String>,
    /// One record read back per topic (the self-test tampers with them).
    pub(crate) samples: Vec<AckRecord>,
}

/// A stamp: unstamped is the bootstrap cluster `old`; a stamp that does not
/// decode is a violation.
fn cluster_of<E: std::fmt::Display>(
    stamp: Result<Option<&str>, E>,
    what: &str,
    out: &mut Vec<String>,
) -> Option<String> {
    match stamp {
        Ok(s) => Some(s.unwrap_or("old").to_owned()),
        Err(e) => {
            out.push(format!("the stamp of {what} does not decode: {e}"));
            None
        }
    }
}

struct Reader {
    clients: BTreeMap<String, BookKeeperClient>,
    open: BTreeMap<(String, i64), Arc<dyn ReadHandle>>,
}

impl Reader {
    async fn open(&mut self, cluster: &str, ledger: i64) -> Result<Arc<dyn ReadHandle>, String> {
        let key = (cluster.to_owned(), ledger);
        if let Some(h) = self.open.get(&key) {
            return Ok(h.clone());
        }
        let client = self
            .clients
            .get(cluster)
            .ok_or_else(|| format!("no cluster `{cluster}` in this stack"))?;
        // With recovery: every writer is gone, and an open ledger of a
        // killed process is closed where its acknowledged entries end.
        let h = client
            .open_ledger(ledger, DigestType::Crc32c, b"")
            .await
            .map_err(|e| e.to_string())?;
        self.open.insert(key, h.clone());
        Ok(h)
    }
}

/// The durable mark-delete position of a cursor: the last position in its
/// cursor ledger, else the one in its node.
async fn cursor_position(
    info: &ManagedCursorInfo,
    path: &str,
    reader: &mut Reader,
    registered: &BTreeSet<String>,
    out: &mut Vec<String>,
) -> (i64, i64) {
    let node = (
        info.mark_delete_ledger_id.unwrap_or(-1),
        info.mark_delete_entry_id.unwrap_or(-1),
    );
    if info.cursors_ledger_id < 0 {
        return node;
    }
    let what = format!("cursor ledger {} of {path}", info.cursors_ledger_id);
    let Some(cluster) = cluster_of(info.cluster_stamp(), &what, out) else {
        return node;
    };
    if !registered.contains(&cluster) {
        out.push(format!(
            "{what} is stamped `{cluster}`, which is not registered"
        ));
    }
    let h = match reader.open(&cluster, info.cursors_ledger_id).await {
        Ok(h) => h,
        Err(e) => {
            out.push(format!("{what} does not open on `{cluster}`: {e}"));
            return node;
        }
    };
    let last = h.last_add_confirmed();
    if last < 0 {
        return node;
    }
    match h.read_entries(last, last).await {
        Ok(entries) => match entries
            .first()
            .map(|e| PositionInfo::decode(e.data.clone()))
        {
            Some(Ok(pi)) => (pi.ledger_id, pi.entry_id),
            Some(Err(e)) => {
                out.push(format!("entry {last} of {what} does not decode: {e}"));
                node
            }
            None => node,
        },
        Err(e) => {
            out.push(format!("entry {last} of {what} does not read: {e}"));
            node
        }
    }
}

/// Checks what `logs` (`(node, path)`) say was acknowledged against the
/// store at `store_url` and the bookies of `clusters`.
pub(crate) async fn check(
    store_url: &str,
    clusters: &Clusters,
    logs: &[(usize, PathBuf)],
) -> Checked {
    let mut c = Checked::default();
    let out = &mut c.violations;
    let store = open_store(store_url, StoreTimeouts::default())
        .await
        .expect("the metadata store");
    let registry = Registry::with_root(store.clone(), DEFAULT_ROOT).expect("registry");
    let records = registry.list().await.expect("the registry lists");
    let registered: BTreeSet<String> = records.iter().map(|r| r.name.clone()).collect();
    let active: Vec<&str> = records
        .iter()
        .filter(|r| r.status == ClusterStatus::Active)
        .map(|r| r.name.as_str())
        .collect();
    if active.len() != 1 {
        out.push(format!("{} ACTIVE clusters: {active:?}", active.len()));
    }

    // What was acknowledged, per topic and ledger.
    let mut acked: BTreeMap<String, BTreeMap<i64, Vec<(usize, AckRecord)>>> = BTreeMap::new();
    for (node, path) in logs {
        let Ok(read) = AckLog::read(path) else {
            continue;
        };
        let lines = read.records;
        for (n, line) in read.bad_lines {
            out.push(format!(
                "line {n} of node-{node}'s ack log is not a record: {line:?}"
            ));
        }
        c.acks += lines.len();
        for r in lines {
            acked
                .entry(r.topic.clone())
                .or_default()
                .entry(r.ledger_id)
                .or_default()
                .push((*node, r));
        }
    }

    let mut reader = Reader {
        clients: BTreeMap::new(),
        open: BTreeMap::new(),
    };
    for name in ["old", "new"] {
        let config = ClientConfig::default().with_cluster_name(name);
        let client = BookKeeperClient::connect(&clusters.uri(name), config)
            .await
            .expect("a client of the bookies");
        reader.clients.insert(name.to_owned(), client);
    }

    for (topic, ledgers) in &acked {
        let path = format!("/managed-ledgers/{topic}");
        let info = match store.get(&path).await {
            Ok(Some(r)) => match decode_managed_ledger_info(&r.value) {
                Ok(info) => info,
                Err(e) => {
                    out.push(format!("{path} does not decode: {e}"));
                    continue;
                }
            },
            Ok(None) => {
                out.push(format!("{path} is gone, with acknowledged entries"));
                continue;
            }
            Err(e) => panic!("reading {path}: {e}"),
        };
        let mut listed: BTreeMap<i64, Option<String>> = BTreeMap::new();
        for l in &info.ledger_info {
            let what = format!("ledger {} in {path}", l.ledger_id);
            let cluster = cluster_of(l.cluster_stamp(), &what, out);
            if let Some(name) = &cluster {
                if !registered.contains(name) {
                    out.push(format!(
                        "{what} is stamped `{name}`, which is not registered"
                    ));
                }
                c.ledgers += 1;
                *c.by_cluster.entry(name.clone()).or_default() += 1;
                if let Err(e) = reader.open(name, l.ledger_id).await {
                    out.push(format!("{what} does not open on `{name}`: {e}"));
                }
            }
            listed.insert(l.ledger_id, cluster);
        }
        let cursor_path = format!("{path}/sub");
        let md = match store.get(&cursor_path).await {
            Ok(Some(r)) => match decode_managed_cursor_info(&r.value) {
                Ok(ci) => cursor_position(&ci, &cursor_path, &mut reader, &registered, out).await,
                Err(e) => {
                    out.push(format!("{cursor_path} does not decode: {e}"));
                    (-1, -1)
                }
            },
            _ => (-1, -1),
        };
        for (ledger, records) in ledgers {
            let Some(stamped) = listed.get(ledger) else {
                // Gone from the list: only a consumed ledger may be trimmed.
                for (node, r) in records {
                    if (r.ledger_id, r.entry_id) <= md {
                        c.trimmed += 1;
                    } else {
                        out.push(format!(
                            "{topic}: entry {ledger}:{} acknowledged to node-{node} (sequence \
                             {}) is lost: its ledger is no longer in the managed ledger and the \
                             cursor is at {}:{}",
                            r.entry_id, r.seq, md.0, md.1
                        ));
                    }
                }
                continue;
            };
            let Some(cluster) = stamped else { continue };
            let h = match reader.open(cluster, *ledger).await {
                Ok(h) => h,
                // Reported with the listed ledgers.
                Err(_) => continue,
            };
            let lac = h.last_add_confirmed();
            let first = records.iter().map(|(_, r)| r.entry_id).min().unwrap_or(0);
            let last = records.iter().map(|(_, r)| r.entry_id).max().unwrap_or(0);
            let mut data = BTreeMap::new();
            let mut from = first;
            while from <= last.min(lac) {
                let to = (from + 99).min(last.min(lac));
                match h.read_entries(from, to).await {
                    Ok(entries) => {
                        for e in entries {
                            data.insert(e.entry_id, e.data);
                        }
                    }
                    Err(e) => out.push(format!(
                        "{topic}: entries {from}..={to} of ledger {ledger} do not read on \
                         `{cluster}`: {e}"
                    )),
                }
                from = to + 1;
            }
            for (node, r) in records {
                match data.get(&r.entry_id) {
                    Some(bytes) if *bytes == r.payload() => {
                        c.read += 1;
                        if !c.samples.iter().any(|s| s.topic == r.topic) {
                            c.samples.push(r.clone());
                        }
                    }
                    Some(_) => out.push(format!(
                        "{topic}: entry {ledger}:{} on `{cluster}` does not hold what node-{node} \
                         was acknowledged (sequence {}, incarnation {})",
                        r.entry_id, r.seq, r.incarnation
                    )),
                    None => out.push(format!(
                        "{topic}: entry {ledger}:{} acknowledged to node-{node} (sequence {}) is \
                         not in ledger {ledger} on `{cluster}` (last entry {lac})",
                        r.entry_id, r.seq
                    )),
                }
            }
        }
    }
    for (_, client) in reader.clients {
        let _ = client.close().await;
    }
    let _ = store.close().await;
    c
}

/// The checker's self-test: three losses seeded into an extra ack log next
/// to the real ones — a record whose bytes differ from the entry's, a record
/// beyond the end of a ledger that holds acknowledged entries, and a record
/// in a ledger the managed ledger never listed, ahead of the cursor — must
/// each be reported, and nothing else.
pub(crate) async fn seeded_losses_are_caught(
    store_url: &str,
    clusters: &Clusters,
    logs: &[(usize, PathBuf)],
    samples: &[AckRecord],
    dir: &std::path::Path,
) -> Result<(), String> {
    let a = samples.first().ok_or("no record was read back")?;
    let tampered = [
        AckRecord {
            seq: a.seq + 1,
            ..a.clone()
        },
        AckRecord {
            entry_id: a.entry_id + 1_000_000,
            ..a.clone()
        },
        AckRecord {
            ledger_id: i64::MAX - 1,
            ..a.clone()
        },
    ];
    let path = dir.join("acks-seeded.log");
    let log = AckLog::open(&path).map_err(|e| e.to_string())?;
    for r in &tampered {
        log.record(r).map_err(|e| e.to_string())?;
    }
    let mut all = logs.to_vec();
    all.push((99, path));
    let c = check(store_url, clusters, &all).await;
    let expected = ["does not hold", "is not in ledger", "is lost"];
    let caught = expected
        .iter()
        .all(|w| c.violations.iter().filter(|v| v.contains(w)).count() == 1);
    if c.violations.len() == 3 && caught {
        Ok(())
    } else {
        Err(format!(
            "the seeded losses were not each caught once: {:?}",
            c.violations
        ))
    }
}
