//! What a migration may do to its target before it starts: the checks that
//! keep it out of the source and out of metadata it does not own, and the
//! wipe plan an operator reads (a dry run) and confirms by naming the
//! target's root.
//!
//! A migration copies the source over the target's whole root and deletes
//! there what the source does not hold, so the root must be the migration's
//! alone. It never deletes, copies into or over:
//! - the source (the same servers, with either root inside the other);
//! - a BookKeeper metadata root (a node with a `LAYOUT`/`INSTANCEID` child
//!   on ZooKeeper, `layout`/`instanceid` on etcd);
//! - a root a registered bookie cluster names ([`ProtectedRoot`]);
//! - a tree with live migration participants (nodes using it);
//! - ZooKeeper's own `/zookeeper`.
//!
//! A wipe keeps the control tree of earlier migrations (never copied, so
//! never in the way): the pointer of a migration away from the target sends
//! a node started with the target's URL to where the data went, until the
//! flip that makes the target the store in use.

use std::sync::Arc;

use bkswitch_metadata_store::{
    ErrorKind, MetadataError, MetadataStore, MetadataStoreExt, Operation, Result,
};
use futures::{stream, StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use crate::location::{Nesting, StoreLocation};
use crate::record::{MIGRATION_ROOT, PARTICIPANTS_PATH};

/// A root that belongs to someone else and that a migration never touches:
/// the metadata root of a registered bookie cluster, for instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedRoot {
    /// The store URL of the root (`zk://host:port/ledgers`).
    pub url: String,
    /// Whose it is, as error messages name it (`bookie cluster \`old\``).
    pub owner: String,
}

/// One subtree at the top of the target: what a wipe would delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetEntry {
    /// The subtree's path in the target store.
    pub path: String,
    /// Nodes in the subtree, itself included.
    pub nodes: u64,
    /// Whose it is, when it can be told (`BookKeeper ledger metadata
    /// (instance id …)`); `None` when nothing marks it.
    pub owner: Option<String>,
    /// Whether a migration may delete it (nothing protected inside).
    pub deletable: bool,
    /// What it looks like, by its name at the top of a Pulsar or bkswitch
    /// tree (`managed ledgers and cursors`), when it is one of those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// What a top-level subtree of Pulsar's or bkswitch's layout holds.
fn kind_of(top: &str) -> Option<String> {
    let kind = match top.trim_start_matches('/') {
        "managed-ledgers" => "Pulsar/bkswitch managed ledgers and cursors",
        "schemas" => "Pulsar/bkswitch schemas",
        "admin" => "bkswitch registry, switch and migration records, or Pulsar's policies",
        "bkswitch" => "bkswitch node registrations and topic ownership",
        "loadbalance" => "Pulsar load-balancer data",
        "namespace" => "Pulsar namespace ownership",
        "ledgers" => "a BookKeeper-style path (without a layout node)",
        _ => return None,
    };
    Some(kind.to_owned())
}

/// What the target holds, as a migration start sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetPlan {
    /// The target URL.
    pub target_url: String,
    /// The target's root on its servers (`/`, `/pulsar`): what an operator
    /// names to confirm a wipe.
    pub root: String,
    /// The subtrees at the top of the target (ZooKeeper's `/zookeeper`
    /// left out): what a wipe deletes, when every one is deletable.
    pub entries: Vec<TargetEntry>,
}

impl TargetPlan {
    /// Nodes a wipe would delete.
    pub fn nodes(&self) -> u64 {
        self.entries.iter().map(|e| e.nodes).sum()
    }

    fn listing(&self, max: usize) -> String {
        let mut parts: Vec<String> = self
            .entries
            .iter()
            .take(max)
            .map(|e| match (&e.owner, &e.kind) {
                (Some(owner), _) => format!("{} ({} nodes, {owner})", e.path, e.nodes),
                (None, Some(kind)) => format!("{} ({} nodes: {kind})", e.path, e.nodes),
                (None, None) => format!("{} ({} nodes, no known owner)", e.path, e.nodes),
            })
            .collect();
        if self.entries.len() > max {
            parts.push(format!("… {} more", self.entries.len() - max));
        }
        parts.join(", ")
    }

    /// Refuses the start unless the target is empty, or a wipe is confirmed
    /// by `wipe` naming [`root`](Self::root) and every entry is deletable.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` saying what the target holds and what to do.
    pub fn check_wipe(&self, wipe: Option<&str>) -> Result<()> {
        let url = &self.target_url;
        if let Some(kept) = self.entries.iter().find(|e| !e.deletable) {
            return Err(refused(
                url,
                format!(
                    "the target holds {}, which a migration never deletes or copies over ({}); \
                     the target root must be the migration's alone: name another root (for \
                     instance a ZooKeeper chroot or an etcd prefix of its own). Nothing was \
                     written",
                    kept.path,
                    kept.owner.as_deref().unwrap_or("protected")
                ),
            ));
        }
        if self.entries.is_empty() {
            return Ok(());
        }
        match wipe {
            None => Err(refused(
                url,
                format!(
                    "the target metadata store is not empty: it holds {} ({} nodes in all). \
                     A migration needs an empty target: empty it, or list what a wipe would \
                     delete with a dry run and confirm it by naming the target's root \
                     (wipeTarget `{}`). Nothing was written",
                    self.listing(5),
                    self.nodes(),
                    self.root
                ),
            )),
            Some(named) if named.trim_end_matches('/') != self.root.trim_end_matches('/') => {
                Err(refused(
                    url,
                    format!(
                        "wipeTarget `{named}` does not name the target's root `{}`: a wipe is \
                         confirmed by naming exactly the root it empties. Nothing was written",
                        self.root
                    ),
                ))
            }
            Some(_) => Ok(()),
        }
    }
}

pub(crate) fn refused(url: &str, reason: String) -> MetadataError {
    MetadataError::InvalidArgument {
        op: Operation::Connect,
        path: url.to_owned(),
        reason,
    }
}

/// Refuses a target that overlaps the source or a protected root, from the
/// URLs alone (before the target is opened: opening a ZooKeeper target
/// creates its chroot).
pub(crate) async fn check_locations(
    source_url: &str,
    target_url: &str,
    protected: &[ProtectedRoot],
) -> Result<StoreLocation> {
    let target = StoreLocation::parse(target_url)?;
    if let Ok(source) = StoreLocation::parse(source_url) {
        if let Some(n) = target.nesting(&source) {
            if source.shares_servers(&target).await? {
                let how = match n {
                    Nesting::Same => "is the source store".to_owned(),
                    Nesting::Inside => format!(
                        "lies inside the source store (root `{}` is under the source's `{}` \
                         on the same servers)",
                        target.root, source.root
                    ),
                    Nesting::Holds => format!(
                        "holds the source store (root `{}` is above the source's `{}` on the \
                         same servers)",
                        target.root, source.root
                    ),
                };
                return Err(refused(
                    target_url,
                    format!(
                        "the target {how}; a migration copies over and deletes in its target, \
                         so it must not overlap the source (`{source_url}`). Name a root of its \
                         own. Nothing was written"
                    ),
                ));
            }
        }
    }
    for p in protected {
        let Ok(loc) = StoreLocation::parse(&p.url) else {
            continue;
        };
        let Some(n) = target.nesting(&loc) else {
            continue;
        };
        if !loc.shares_servers(&target).await? {
            continue;
        }
        let how = match n {
            Nesting::Same => "is".to_owned(),
            Nesting::Inside => "lies inside".to_owned(),
            Nesting::Holds => format!(
                "holds (at {})",
                target.path_of(&loc).unwrap_or_else(|| loc.root.clone())
            ),
        };
        return Err(refused(
            target_url,
            format!(
                "the target {how} the metadata root of {} (`{}`), which a migration never \
                 deletes or copies over. Name a root of its own. Nothing was written",
                p.owner, p.url
            ),
        ));
    }
    Ok(target)
}

/// Refuses a target whose root lies inside BookKeeper ledger metadata that
/// no registered cluster names: an ancestor of the root (on the same
/// servers, read through a session without chroot or prefix) has a layout
/// node or an instance id. Read only.
pub(crate) async fn check_ancestors(
    opener: &dyn crate::StoreOpener,
    target_url: &str,
    location: &StoreLocation,
) -> Result<()> {
    if location.root == "/" || location.backend == crate::Backend::Memory {
        return Ok(());
    }
    let base_url = target_url
        .strip_suffix(location.root.as_str())
        .unwrap_or(target_url)
        .to_owned();
    let base = opener.open(&base_url).await?;
    let mut found = None;
    let mut ancestor = String::new();
    let segments: Vec<&str> = location.root.trim_start_matches('/').split('/').collect();
    'walk: for seg in &segments[..segments.len() - 1] {
        ancestor.push('/');
        ancestor.push_str(seg);
        for marker in ["LAYOUT", "INSTANCEID", "layout", "instanceid"] {
            match base.exists(&format!("{ancestor}/{marker}")).await {
                Ok(Some(_)) => {
                    found = Some(ancestor.clone());
                    break 'walk;
                }
                Ok(None) => {}
                Err(e) => {
                    let _ = base.close().await;
                    return Err(e);
                }
            }
        }
    }
    let _ = base.close().await;
    match found {
        Some(at) => Err(refused(
            target_url,
            format!(
                "the target lies inside BookKeeper ledger metadata at {at} (its layout node or \
                 instance id is there), which a migration never deletes or copies over. Name a \
                 root of its own. Nothing was written"
            ),
        )),
        None => Ok(()),
    }
}

/// Reads what the target holds: its top-level subtrees, their sizes and
/// owners. Read only.
pub(crate) async fn inspect(
    target: &Arc<dyn MetadataStore>,
    target_url: &str,
    root: &str,
) -> Result<TargetPlan> {
    let mut names = children_or_empty(target.as_ref(), "/").await?;
    names.retain(|n| n != "zookeeper");
    names.sort();
    // The target's root itself may be BookKeeper's (its layout node right
    // below): then nothing in it is the migration's.
    let root_owner = owner_of(target.as_ref(), "/", &names).await?;
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        let mut entry = inspect_subtree(target.as_ref(), &format!("/{name}")).await?;
        if let Some(owner) = &root_owner {
            entry.deletable = false;
            entry.owner = Some(format!("{owner}: the target's root itself"));
        }
        // Only the control tree of earlier migrations: nothing to delete.
        if entry.nodes > 0 || !entry.deletable {
            entries.push(entry);
        }
    }
    Ok(TargetPlan {
        target_url: target_url.to_owned(),
        root: root.to_owned(),
        entries,
    })
}

async fn children_or_empty(store: &dyn MetadataStore, path: &str) -> Result<Vec<String>> {
    match store.children(path).await {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Walks one subtree: counts it and looks for what marks an owner.
async fn inspect_subtree(store: &dyn MetadataStore, top: &str) -> Result<TargetEntry> {
    let mut nodes = 0u64;
    let mut owners: Vec<String> = Vec::new();
    let mut level = vec![top.to_owned()];
    while !level.is_empty() {
        let listed: Vec<(String, Vec<String>)> = stream::iter(level)
            .map(|p| async move {
                Ok::<_, MetadataError>((p.clone(), children_or_empty(store, &p).await?))
            })
            .buffered(32)
            .try_collect()
            .await?;
        let mut next = Vec::new();
        for (path, children) in listed {
            if path == MIGRATION_ROOT {
                // The control tree of earlier migrations stays (a wipe keeps
                // it, see [`wipe`]); only its live participants matter.
                let live = children_or_empty(store, PARTICIPANTS_PATH).await?;
                if !live.is_empty() {
                    owners.push(in_use("/", live));
                }
                continue;
            }
            // An ancestor of the control tree stays (the nodes below it
            // that go are counted themselves).
            if !holds_control(&path) {
                nodes += 1;
            }
            if let Some(owner) = owner_of(store, &path, &children).await? {
                owners.push(owner);
            }
            next.extend(children.iter().map(|c| format!("{path}/{c}")));
        }
        level = next;
    }
    Ok(TargetEntry {
        path: top.to_owned(),
        kind: kind_of(top),
        nodes,
        deletable: owners.is_empty(),
        owner: if owners.is_empty() {
            None
        } else {
            owners.truncate(3);
            Some(owners.join("; "))
        },
    })
}

/// Whose the node at `path` (with `children`) marks its tree as, if anyone's
/// that a migration must not delete.
async fn owner_of(
    store: &dyn MetadataStore,
    path: &str,
    children: &[String],
) -> Result<Option<String>> {
    let has = |n: &str| children.iter().any(|c| c == n);
    for (layout, instance) in [("LAYOUT", "INSTANCEID"), ("layout", "instanceid")] {
        if has(layout) || has(instance) {
            let at = if path == "/" {
                format!("/{instance}")
            } else {
                format!("{path}/{instance}")
            };
            let id = match store.get(&at).await? {
                Some(r) => String::from_utf8_lossy(&r.value).trim().to_owned(),
                None => String::new(),
            };
            let id = if id.is_empty() {
                "no instance id".to_owned()
            } else {
                format!("instance id {id}")
            };
            return Ok(Some(format!("BookKeeper ledger metadata at {path} ({id})")));
        }
    }
    let participants = PARTICIPANTS_PATH.trim_start_matches('/');
    if let Some(rel) = format!("{path}/").strip_suffix(&format!("/{participants}/")) {
        if !children.is_empty() {
            let base = if rel.is_empty() { "/" } else { rel };
            return Ok(Some(in_use(base, children.to_vec())));
        }
    }
    Ok(None)
}

fn in_use(base: &str, mut live: Vec<String>) -> String {
    live.sort();
    live.truncate(3);
    format!(
        "a metadata tree in use at {base}: nodes still use the target (migration participants \
         {} are registered there; wait until they moved away, or stop them)",
        live.join(", ")
    )
}

/// Whether `path` is an ancestor of the control tree ([`MIGRATION_ROOT`]).
fn holds_control(path: &str) -> bool {
    MIGRATION_ROOT
        .strip_prefix(path)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Deletes the subtree at `path`, except the control tree of earlier
/// migrations: its pointer sends a node started with this store's URL to
/// the store the data moved to (the coordinator removes the pointer just
/// before the flip that makes this store the one in use).
pub(crate) async fn wipe(store: &dyn MetadataStore, path: &str) -> Result<()> {
    if path == MIGRATION_ROOT {
        return Ok(());
    }
    if holds_control(path) {
        for c in children_or_empty(store, path).await? {
            Box::pin(wipe(store, &format!("{path}/{c}"))).await?;
        }
        return Ok(());
    }
    store.delete_recursive(path).await
}
