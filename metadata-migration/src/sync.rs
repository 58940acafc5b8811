//! Copying and comparing nodes between the source and the target, and the
//! depth-first walk over both trees that pages through them.

use std::collections::VecDeque;

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, GetResult, MetadataStore, MetadataStoreExt, Result,
};

use crate::record::is_control_path;

/// Prefix of the children created (and deleted at once) in the target to
/// carry a parent's sequential counter.
pub(crate) const COUNTER_CHILD: &str = "migration-counter-";

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

async fn carry_counter(
    target: &dyn MetadataStore,
    path: &str,
    source: &GetResult,
    mut target_next: i64,
) -> Result<bool> {
    let wanted = source.stat.next_sequential_suffix();
    let mut changed = false;
    while target_next < wanted {
        let (actual, _) = target
            .create(
                &join(path, COUNTER_CHILD),
                b"",
                CreateMode::PERSISTENT_SEQUENTIAL,
            )
            .await?;
        target.delete(&actual, ExpectedVersion::Any).await?;
        target_next += 1;
        changed = true;
    }
    Ok(changed)
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
    let s = source.get(path).await?;
    let t = target.get(path).await?;
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
    let s = source.get(path).await?;
    let t = target.get(path).await?;
    Ok(match (s, t) {
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
    })
}

/// A depth-first walk (children in name order) over the union of the source
/// and target trees, holding only the pending children of the nodes on the
/// current path: memory grows with depth × fan-out, never with the tree.
#[derive(Debug)]
pub(crate) struct Walk {
    stack: Vec<(String, VecDeque<String>)>,
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
        let mut stack = vec![(root.to_owned(), union_children(source, target, root).await?)];
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
                    frame.1.retain(|n| n.as_str() > segment);
                    current = join(&current, segment);
                    stack.push((
                        current.clone(),
                        union_children(source, target, &current).await?,
                    ));
                }
            }
        }
        Ok(Walk { stack })
    }

    /// The next path to handle; call [`Walk::enter`] after handling it.
    pub(crate) fn next_path(&mut self) -> Option<String> {
        loop {
            let (parent, pending) = self.stack.last_mut()?;
            match pending.pop_front() {
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
    pub(crate) async fn enter(
        &mut self,
        source: &dyn MetadataStore,
        target: &dyn MetadataStore,
        path: &str,
    ) -> Result<()> {
        let children = union_children(source, target, path).await?;
        if !children.is_empty() {
            self.stack.push((path.to_owned(), children));
        }
        Ok(())
    }

    /// Names held by the walk (its memory, in children names).
    pub(crate) fn held(&self) -> usize {
        self.stack.iter().map(|(_, p)| p.len()).sum()
    }
}

/// Syncs a path; when the target node was recreated, copies its subtree.
/// Returns the number of nodes handled.
pub(crate) async fn sync_path(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    path: &str,
    by_writes: bool,
) -> Result<u64> {
    if skipped(path) {
        return Ok(0);
    }
    let outcome = sync_node(source, target, path, by_writes).await?;
    let mut handled = 1;
    if outcome == Synced::Recreated {
        let mut walk = Walk::new(source, target, path, None).await?;
        while let Some(p) = walk.next_path() {
            sync_node(source, target, &p, by_writes).await?;
            walk.enter(source, target, &p).await?;
            handled += 1;
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
    let mut walk = Walk::new(source, target, "/", None).await?;
    let mut handled = 0;
    while let Some(p) = walk.next_path() {
        sync_node(source, target, &p, by_writes).await?;
        walk.enter(source, target, &p).await?;
        handled += 1;
    }
    Ok(handled)
}

/// Compares every node of both trees; returns the differences (at most
/// `limit`) and the number of nodes compared.
pub(crate) async fn verify_tree(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    limit: usize,
) -> Result<(Vec<(String, String)>, u64)> {
    let mut walk = Walk::new(source, target, "/", None).await?;
    let mut diffs = Vec::new();
    let mut compared = 0;
    while let Some(p) = walk.next_path() {
        compared += 1;
        if let Some(reason) = compare_node(source, target, &p).await? {
            if diffs.len() < limit {
                diffs.push((p.clone(), reason));
            }
        }
        walk.enter(source, target, &p).await?;
    }
    Ok((diffs, compared))
}

#[cfg(test)]
mod tests {
    use super::*;
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
