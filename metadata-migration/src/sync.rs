//! Copying and comparing nodes between the source and the target, and the
//! depth-first walk over both trees that pages through them.

use std::collections::VecDeque;

use bkswitch_metadata_store::{
    ErrorKind, ExpectedVersion, GetResult, MetadataStore, MetadataStoreExt, Result,
};
use futures::{stream, StreamExt, TryStreamExt};

use crate::record::is_control_path;

/// Nodes synced or compared at once by a walk (siblings of one parent).
pub(crate) const IN_FLIGHT: usize = 32;

/// Siblings a walk takes at a time (each batch is handled [`IN_FLIGHT`] at
/// once; the walk's memory is unchanged, the names were listed already).
pub(crate) const BATCH: usize = 256;

/// Whether the walk skips `path`: the migration's own nodes and ZooKeeper's
/// reserved tree.
pub(crate) fn skipped(path: &str) -> bool {
    is_control_path(path) || path == "/zookeeper" || path.starts_with("/zookeeper/")
}

pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

pub(crate) fn parent_of(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// Whether a target at `url` reaches a version by writes (ZooKeeper: one
/// write per version) rather than importing it directly (memory, etcd).
pub(crate) fn versions_by_writes(url: &str) -> bool {
    url.starts_with("zk://")
}

/// What [`sync_node`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synced {
    /// Nothing to do.
    Equal,
    /// Created, updated, deleted or counter carried.
    Changed,
    /// The target node was deleted with its subtree and copied again: the
    /// subtree must be copied too.
    Recreated,
}

/// Raises the target's sequential counter of `path` to the source's (see
/// [`MetadataStore::import_sequential_counter`]); `true` when it was behind.
async fn carry_counter(
    target: &dyn MetadataStore,
    path: &str,
    source: &GetResult,
    target_next: i64,
) -> Result<bool> {
    let wanted = source.stat.next_sequential_suffix();
    if target_next >= wanted {
        return Ok(false);
    }
    target.import_sequential_counter(path, wanted).await?;
    Ok(true)
}

/// Makes the target's node at `path` equal to the source's: value, version
/// (imported, or raised by writes of the same value) and sequential counter.
/// Ephemeral source nodes are not copied (their owners recreate them).
pub(crate) async fn sync_node(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
    by_writes: bool,
) -> Result<Synced> {
    Ok(sync_node_and_count(source, target, path, by_writes)
        .await?
        .0)
}

/// [`sync_node`], and whether the node had children in either store when
/// read (the walk lists only those).
async fn sync_node_and_count(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
    by_writes: bool,
) -> Result<(Synced, bool)> {
    let (s, t) = read_both(source, target, path).await?;
    let parent = has_children(&s, &t);
    Ok((
        sync_read(source, target, path, by_writes, s, t).await?,
        parent,
    ))
}

/// The node at `path` in both stores.
async fn read_both(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
) -> Result<(Option<GetResult>, Option<GetResult>)> {
    Ok((source.get(path).await?, target.get(path).await?))
}

/// Whether the node has children in either store.
fn has_children(s: &Option<GetResult>, t: &Option<GetResult>) -> bool {
    s.as_ref().is_some_and(|r| r.stat.num_children > 0)
        || t.as_ref().is_some_and(|r| r.stat.num_children > 0)
}

async fn sync_read(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
    by_writes: bool,
    s: Option<GetResult>,
    t: Option<GetResult>,
) -> Result<Synced> {
    tracing::trace!(
        "sync {path}: source {:?}, target {:?}",
        s.as_ref().map(|r| r.stat),
        t.as_ref().map(|r| r.stat)
    );
    match (s, t) {
        (None, None) => Ok(Synced::Equal),
        (None, Some(_)) => {
            target.delete_recursive(path).await?;
            Ok(Synced::Changed)
        }
        (Some(s), _) if s.stat.ephemeral => Ok(Synced::Equal),
        (Some(s), None) => {
            let stat = match target.import_version(path, &s.value, s.stat.version).await {
                Ok(stat) => stat,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    return Box::pin(sync_node(source, target, path, by_writes)).await;
                }
                Err(e) => return Err(e),
            };
            carry_counter(target, path, &s, stat.next_sequential_suffix()).await?;
            Ok(Synced::Changed)
        }
        (Some(s), Some(t)) => {
            let mut outcome = Synced::Equal;
            let mut t_next = t.stat.next_sequential_suffix();
            if t.stat.version > s.stat.version
                || (t.stat.version == s.stat.version && t.value != s.value)
                || t.stat.ephemeral
            {
                // The source node was deleted and created again since the
                // target's copy: start the subtree again.
                target.delete_recursive(path).await?;
                let stat = target
                    .import_version(path, &s.value, s.stat.version)
                    .await?;
                t_next = stat.next_sequential_suffix();
                outcome = Synced::Recreated;
            } else if t.stat.version < s.stat.version && t.stat.num_children == 0 && !by_writes {
                // A leaf on a store that imports versions directly: replace
                // it (two writes, whatever the difference).
                target
                    .delete(path, ExpectedVersion::Exactly(t.stat.version))
                    .await?;
                let stat = target
                    .import_version(path, &s.value, s.stat.version)
                    .await?;
                t_next = stat.next_sequential_suffix();
                outcome = Synced::Changed;
            } else if t.stat.version < s.stat.version {
                // Raise the version by writes of the source's value: what
                // ZooKeeper would have counted.
                for v in t.stat.version..s.stat.version {
                    target
                        .put(path, &s.value, ExpectedVersion::Exactly(v))
                        .await?;
                }
                outcome = Synced::Changed;
            }
            if carry_counter(target, path, &s, t_next).await? && outcome == Synced::Equal {
                outcome = Synced::Changed;
            }
            Ok(outcome)
        }
    }
}

/// Compares one node; `Some(reason)` when the target differs from the source.
pub(crate) async fn compare_node(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
) -> Result<Option<String>> {
    Ok(compare_node_and_count(source, target, path).await?.0)
}

/// [`compare_node`], and whether the node has children in either store.
async fn compare_node_and_count(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
) -> Result<(Option<String>, bool)> {
    let s = source.get(path).await?;
    let t = target.get(path).await?;
    let parent = s.as_ref().is_some_and(|r| r.stat.num_children > 0)
        || t.as_ref().is_some_and(|r| r.stat.num_children > 0);
    Ok((compare_read(s, t), parent))
}

fn compare_read(s: Option<GetResult>, t: Option<GetResult>) -> Option<String> {
    match (s, t) {
        (None, None) => None,
        (None, Some(_)) => Some("present in the target, absent from the source".to_owned()),
        (Some(s), t) if s.stat.ephemeral => match t {
            Some(t) if !t.stat.ephemeral => Some(
                "a persistent node in the target where the source has an ephemeral one".to_owned(),
            ),
            _ => None,
        },
        (Some(_), None) => Some("absent from the target".to_owned()),
        (Some(s), Some(t)) => {
            if s.value != t.value {
                Some(format!(
                    "values differ ({} bytes in the source, {} in the target)",
                    s.value.len(),
                    t.value.len()
                ))
            } else if s.stat.version != t.stat.version {
                Some(format!(
                    "versions differ ({} in the source, {} in the target)",
                    s.stat.version, t.stat.version
                ))
            } else if t.stat.next_sequential_suffix() < s.stat.next_sequential_suffix() {
                Some(format!(
                    "sequential counter behind ({} in the source, {} in the target)",
                    s.stat.next_sequential_suffix(),
                    t.stat.next_sequential_suffix()
                ))
            } else {
                None
            }
        }
    }
}

/// A depth-first walk (children in name order) over the union of the source
/// and target trees, holding only the pending children of the nodes on the
/// current path: memory grows with depth × fan-out, never with the tree. The
/// nodes of a batch that have children wait on the stack unlisted until the
/// walk reaches them, so a batch of many parents holds only their paths.
#[derive(Debug)]
pub(crate) struct Walk {
    /// Each frame: a node and its children still to hand out (`None`: not
    /// listed yet).
    stack: Vec<(String, Option<VecDeque<String>>)>,
}

async fn union_children(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
) -> Result<VecDeque<String>> {
    let mut names = source.children(path).await?;
    let t = target.children(path).await?;
    if !t.is_empty() {
        names.extend(t);
        names.sort_unstable();
        names.dedup();
    }
    Ok(names.into())
}

impl Walk {
    /// A walk of the subtree below `root` (not `root` itself), resuming after
    /// `cursor` (the last path handed out and entered) when given.
    pub(crate) async fn new(
        source: &dyn MetadataStore,
        target: &dyn MetadataStore,
        root: &str,
        cursor: Option<&str>,
    ) -> Result<Walk> {
        let mut stack = vec![(
            root.to_owned(),
            Some(union_children(source, target, root).await?),
        )];
        if let Some(cursor) = cursor {
            let rest = if root == "/" {
                cursor.strip_prefix('/')
            } else {
                cursor.strip_prefix(root).and_then(|r| r.strip_prefix('/'))
            };
            if let Some(rest) = rest {
                let mut current = root.to_owned();
                for segment in rest.split('/') {
                    let frame = stack.last_mut().expect("a frame");
                    if let Some(pending) = &mut frame.1 {
                        pending.retain(|n| n.as_str() > segment);
                    }
                    current = join(&current, segment);
                    stack.push((
                        current.clone(),
                        Some(union_children(source, target, &current).await?),
                    ));
                }
            }
        }
        Ok(Walk { stack })
    }

    /// The next path to handle; call [`Walk::enter`] after handling it.
    #[cfg(test)]
    pub(crate) fn next_path(&mut self) -> Option<String> {
        loop {
            let (parent, pending) = self.stack.last_mut()?;
            match pending.as_mut().expect("listed by enter").pop_front() {
                Some(name) => {
                    let path = join(parent, &name);
                    if skipped(&path) {
                        continue;
                    }
                    return Some(path);
                }
                None => {
                    self.stack.pop();
                }
            }
        }
    }

    /// Lists the children of `path` (just handed out) so that the walk
    /// continues below it.
    #[cfg(test)]
    pub(crate) async fn enter(
        &mut self,
        source: &dyn MetadataStore,
        target: &dyn MetadataStore,
        path: &str,
    ) -> Result<()> {
        let children = union_children(source, target, path).await?;
        if !children.is_empty() {
            self.stack.push((path.to_owned(), Some(children)));
        }
        Ok(())
    }

    /// Up to `max` next paths that share a parent (pending children of the
    /// deepest node entered), in name order; empty at the end of the walk.
    /// Call [`Walk::enter_batch`] after handling them.
    pub(crate) async fn next_siblings(
        &mut self,
        source: &dyn MetadataStore,
        target: &dyn MetadataStore,
        max: usize,
    ) -> Result<Vec<String>> {
        let mut out = Vec::new();
        while out.is_empty() {
            let Some((parent, pending)) = self.stack.last_mut() else {
                break;
            };
            let pending = match pending {
                Some(pending) => pending,
                None => pending.insert(union_children(source, target, parent).await?),
            };
            while out.len() < max {
                let Some(name) = pending.pop_front() else {
                    break;
                };
                let path = join(parent, &name);
                if !skipped(&path) {
                    out.push(path);
                }
            }
            if pending.is_empty() {
                self.stack.pop();
            }
        }
        Ok(out)
    }

    /// Schedules the `parents` of a batch just handed out by
    /// [`Walk::next_siblings`] (those that had children) so that the walk
    /// goes below each in name order; each is listed when the walk reaches
    /// it.
    pub(crate) fn enter_batch(&mut self, parents: &[&str]) {
        for path in parents.iter().rev() {
            self.stack.push(((*path).to_owned(), None));
        }
    }

    /// Names held by the walk (its memory, in children names and unlisted
    /// parents).
    pub(crate) fn held(&self) -> usize {
        self.stack
            .iter()
            .map(|(_, p)| p.as_ref().map_or(1, VecDeque::len))
            .sum()
    }
}

/// Syncs one batch of siblings from [`Walk::next_siblings`], [`IN_FLIGHT`]
/// at once (a parent is always synced before its children: they come in a
/// later batch), and enters those that have children. Returns, per path,
/// whether it had children.
pub(crate) async fn sync_batch(
    walk: &mut Walk,
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    batch: &[String],
    by_writes: bool,
) -> Result<Vec<bool>> {
    // Every node of the batch read first, then written: one check of the
    // coordinator's fence covers the batch's writes (crate::fence). The
    // futures are made first and then run IN_FLIGHT at once (a closure in
    // the stream would make the future not `Send` for every lifetime).
    let reads: Vec<_> = batch.iter().map(|p| read_both(source, target, p)).collect();
    let pairs: Vec<(Option<GetResult>, Option<GetResult>)> = stream::iter(reads)
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let parents: Vec<bool> = pairs.iter().map(|(s, t)| has_children(s, t)).collect();
    let writes: Vec<_> = batch
        .iter()
        .zip(pairs)
        .map(|(p, (s, t))| sync_read(source, target, p, by_writes, s, t))
        .collect();
    let _: Vec<Synced> = stream::iter(writes)
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    let entered: Vec<&str> = batch
        .iter()
        .zip(&parents)
        .filter(|(_, parent)| **parent)
        .map(|(p, _)| p.as_str())
        .collect();
    walk.enter_batch(&entered);
    Ok(parents)
}

/// Syncs every node below `root` (not `root` itself). Returns the nodes
/// handled.
async fn sync_below(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    root: &str,
    by_writes: bool,
) -> Result<u64> {
    let mut walk = Walk::new(source, target, root, None).await?;
    let mut handled = 0;
    loop {
        let batch = walk.next_siblings(source, target, BATCH).await?;
        if batch.is_empty() {
            return Ok(handled);
        }
        sync_batch(&mut walk, source, target, &batch, by_writes).await?;
        handled += batch.len() as u64;
    }
}

/// Syncs `paths` (a node whose target copy was recreated with its subtree),
/// [`BATCH`] at a time: the nodes of a batch all read, then written, so that one check of the coordinator's
/// fence covers the batch's writes (`crate::fence`). Returns the nodes
/// handled.
pub(crate) async fn sync_paths(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    paths: &[String],
    by_writes: bool,
) -> Result<u64> {
    let paths: Vec<&String> = paths.iter().filter(|p| !skipped(p)).collect();
    let mut handled = 0;
    for chunk in paths.chunks(BATCH) {
        let reads: Vec<_> = chunk.iter().map(|p| read_both(source, target, p)).collect();
        let pairs: Vec<(Option<GetResult>, Option<GetResult>)> = stream::iter(reads)
            .buffered(IN_FLIGHT)
            .try_collect()
            .await?;
        for (path, (s, t)) in chunk.iter().zip(pairs) {
            handled += 1;
            if sync_read(source, target, path, by_writes, s, t).await? == Synced::Recreated {
                handled += sync_below(source, target, path, by_writes).await?;
            }
        }
    }
    Ok(handled)
}

/// Syncs every node of both trees (a full re-scan). Returns the nodes handled.
pub(crate) async fn sync_tree(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    by_writes: bool,
) -> Result<u64> {
    sync_below(source, target, "/", by_writes).await
}

/// Compares every node of both trees, [`IN_FLIGHT`] siblings at once;
/// returns the differences (at most `limit`, in walk order) and the number
/// of nodes compared.
pub(crate) async fn verify_tree(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    limit: usize,
) -> Result<(Vec<(String, String)>, u64)> {
    let mut walk = Walk::new(source, target, "/", None).await?;
    let mut diffs = Vec::new();
    let mut compared = 0;
    loop {
        let batch = walk.next_siblings(source, target, BATCH).await?;
        if batch.is_empty() {
            return Ok((diffs, compared));
        }
        let compares: Vec<_> = batch
            .iter()
            .map(|p| compare_node_and_count(source, target, p))
            .collect();
        let results: Vec<(Option<String>, bool)> = stream::iter(compares)
            .buffered(IN_FLIGHT)
            .try_collect()
            .await?;
        let mut entered = Vec::new();
        for (p, (reason, parent)) in batch.iter().zip(results) {
            compared += 1;
            if let Some(reason) = reason {
                if diffs.len() < limit {
                    diffs.push((p.clone(), reason));
                }
            }
            if parent {
                entered.push(p.as_str());
            }
        }
        walk.enter_batch(&entered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_metadata_store::CreateMode;
    use bkswitch_metadata_store::MemoryStore;

    async fn walk_all(s: &MemoryStore, t: &MemoryStore, cursor: Option<&str>) -> Vec<String> {
        let mut walk = Walk::new(s, t, "/", cursor).await.expect("walk");
        let mut out = Vec::new();
        while let Some(p) = walk.next_path() {
            walk.enter(s, t, &p).await.expect("enter");
            out.push(p);
        }
        out
    }

    #[tokio::test]
    async fn the_walk_is_depth_first_sorted_and_resumes_after_any_cursor() {
        let s = MemoryStore::new();
        let t = MemoryStore::new();
        for p in [
            "/b/y",
            "/a/x/1",
            "/a/x/2",
            "/a/w",
            "/c",
            "/admin/metadata-migration/x",
        ] {
            s.put(p, b"", ExpectedVersion::Any).await.expect("put");
        }
        // A node only in the target is walked too (to be deleted).
        t.put("/b/z", b"", ExpectedVersion::Any).await.expect("put");
        let all = walk_all(&s, &t, None).await;
        assert_eq!(
            all,
            ["/a", "/a/w", "/a/x", "/a/x/1", "/a/x/2", "/admin", "/b", "/b/y", "/b/z", "/c"]
        );
        for (i, cursor) in all.iter().enumerate() {
            assert_eq!(
                walk_all(&s, &t, Some(cursor)).await,
                all[i + 1..],
                "resumed after {cursor}"
            );
        }
    }

    #[tokio::test]
    async fn a_batch_of_many_parents_holds_their_paths_not_their_children() {
        let s = MemoryStore::new();
        let t = MemoryStore::new();
        for p in 0..200 {
            for c in 0..50 {
                s.put(&format!("/w/p{p:03}/c{c:02}"), b"", ExpectedVersion::Any)
                    .await
                    .expect("put");
            }
        }
        let mut walk = Walk::new(&s, &t, "/", None).await.expect("walk");
        let (mut seen, mut peak) = (0, 0);
        loop {
            let batch = walk.next_siblings(&s, &t, BATCH).await.expect("next");
            if batch.is_empty() {
                break;
            }
            seen += batch.len();
            let parents: Vec<&str> = batch
                .iter()
                .map(String::as_str)
                .filter(|p| p.matches('/').count() < 3)
                .collect();
            walk.enter_batch(&parents);
            peak = peak.max(walk.held());
        }
        assert_eq!(seen, 1 + 200 + 200 * 50);
        // The 200 parents wait unlisted; one of them listed at a time.
        assert!(peak <= 200 + 50, "held {peak} names");
    }

    #[tokio::test]
    async fn sync_carries_versions_and_counters_and_deletes_extra_nodes() {
        let s = MemoryStore::new();
        let t = MemoryStore::new();
        s.put("/n", b"v", ExpectedVersion::Any).await.expect("put");
        for _ in 0..4 {
            s.put("/n", b"v", ExpectedVersion::Any).await.expect("put");
        }
        for _ in 0..3 {
            let (p, _) = s
                .create("/n/id-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
                .await
                .expect("seq");
            s.delete(&p, ExpectedVersion::Any).await.expect("delete");
        }
        t.put("/gone", b"x", ExpectedVersion::Any)
            .await
            .expect("put");
        for by_writes in [false, true] {
            assert_eq!(
                sync_node(&s, &t, "/n", by_writes).await.expect("sync"),
                Synced::Changed
            );
            assert_eq!(compare_node(&s, &t, "/n").await.expect("compare"), None);
            assert_eq!(
                sync_node(&s, &t, "/n", by_writes).await.expect("sync"),
                Synced::Equal
            );
            s.put("/n", b"w", ExpectedVersion::Any).await.expect("put");
            assert!(compare_node(&s, &t, "/n").await.expect("compare").is_some());
        }
        assert_eq!(
            sync_node(&s, &t, "/n", true).await.expect("sync"),
            Synced::Changed
        );
        let n = t.get("/n").await.expect("get").expect("copied");
        assert_eq!((n.value.as_slice(), n.stat.version), (&b"w"[..], 6));
        assert_eq!(n.stat.next_sequential_suffix(), 3);
        sync_node(&s, &t, "/gone", false).await.expect("sync");
        assert!(t.get("/gone").await.expect("get").is_none());
    }
}
