//! Creating nodes (sequential and ephemeral ones, missing parents, imported
//! versions) and importing a sequential counter.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use super::reads::{counter_of, first_kv, nth_get, StatRead};
use super::{now_ms, Inner};
use crate::error::{MetadataError, Operation, Result};
use crate::memory::{ephemeral_counter_error, ephemeral_parent_error};
use crate::path::{name, parent};
use crate::types::{CreateMode, Stat};

impl Inner {
    fn lease_of(&self, mode: CreateMode) -> i64 {
        if mode.ephemeral {
            self.lease.load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// Creates `path` (not sequential: the actual path), creating missing
    /// parents. `offset` is the imported version (0 for a plain create).
    pub(super) async fn create_node(
        &self,
        op: Operation,
        path: &str,
        value: &[u8],
        mode: CreateMode,
        offset: i64,
    ) -> Result<(String, Stat)> {
        let parent_path = parent(path).to_owned();
        let mut parents_made = false;
        for _ in 0..1_000 {
            let (actual, counter) = if mode.sequential {
                let resp = self
                    .get(
                        op,
                        path,
                        self.side(&parent_path, "c"),
                        Some(GetOptions::new().with_prefix()),
                    )
                    .await?;
                let (n, raw) = counter_of(&Some(resp));
                (format!("{path}{n:010}"), Some(raw))
            } else {
                (path.to_owned(), None)
            };
            let key = self.key(&actual);
            let mut when = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
            if parent_path != "/" {
                let pk = self.key(&parent_path);
                when.push(Compare::create_revision(pk.clone(), CompareOp::Greater, 0));
                when.push(Compare::lease(pk, CompareOp::Equal, 0));
            }
            if let Some(n) = counter {
                when.push(Compare::version(
                    self.side(&parent_path, "c"),
                    CompareOp::Equal,
                    n,
                ));
            }
            let lease = self.lease_of(mode);
            let put = |v: Vec<u8>| {
                if lease != 0 {
                    Some(PutOptions::new().with_lease(lease))
                } else {
                    None
                }
                .map_or_else(|| (v.clone(), None), |o| (v.clone(), Some(o)))
            };
            let now = now_ms().to_string().into_bytes();
            let mut ops = Vec::new();
            let (v, o) = put(value.to_vec());
            ops.push(TxnOp::put(key.clone(), v, o));
            let (v, o) = put(now.clone());
            ops.push(TxnOp::put(self.side(&actual, "t"), v, o));
            let (v, o) = put(now);
            ops.push(TxnOp::put(self.side(&actual, "m"), v, o));
            if offset != 0 {
                ops.push(TxnOp::put(
                    self.side(&actual, "o"),
                    offset.to_string(),
                    None,
                ));
            } else {
                // A node deleted by another etcd client (Pulsar's store deletes
                // only the node key) may have left its offset behind: a new
                // node starts at version 0.
                ops.push(TxnOp::delete(self.side(&actual, "o"), None));
            }
            let (v, o) = put(Vec::new());
            ops.push(TxnOp::put(
                self.child_index(&parent_path, name(&actual)),
                v,
                o,
            ));
            ops.push(TxnOp::put(self.side(&parent_path, "c"), Vec::new(), None));
            let reads_at = ops.len();
            let read_back = StatRead::node(&actual);
            ops.extend(read_back.ops(self));
            let resp = self
                .txn(
                    op,
                    path,
                    Txn::new().when(when).and_then(ops).or_else(vec![
                        TxnOp::get(key, None),
                        TxnOp::get(self.key(&parent_path), None),
                        TxnOp::get(self.side(&parent_path, "c"), None),
                    ]),
                )
                .await?;
            if resp.succeeded() {
                let (_, stat) = read_back
                    .decode(&resp.op_responses(), reads_at)
                    .ok_or_else(|| MetadataError::Internal {
                        op,
                        path: path.to_owned(),
                        reason: "the created node was not read back".to_owned(),
                    })?;
                return Ok((actual, stat));
            }
            let node = first_kv(&nth_get(&resp, 0));
            let parent_node = first_kv(&nth_get(&resp, 1));
            let c = first_kv(&nth_get(&resp, 2)).map_or(0, |kv| kv.version());
            if let Some(n) = counter {
                if c != n {
                    continue; // another sequential child took the number
                }
            }
            if node.is_some() {
                return Err(MetadataError::AlreadyExists { op, path: actual });
            }
            match parent_node {
                Some(p) if p.lease() != 0 => {
                    return Err(ephemeral_parent_error(op, &actual, &parent_path))
                }
                Some(_) => continue,
                None if !parents_made => {
                    parents_made = true;
                    self.create_parents(op, &parent_path).await?;
                }
                None => parents_made = false, // deleted meanwhile: make it again
            }
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the node could not be created after 1000 attempts (constant contention)"
                .to_owned(),
        })
    }

    /// Raises the child counter of `path` to at least `next`: one transaction
    /// that writes `c` (so that a sequential create racing it retries) and the
    /// offset `co`, compared on `c`'s version.
    pub(super) async fn import_counter(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
        next: i64,
    ) -> Result<Stat> {
        let c_key = self.side(path, "c");
        for _ in 0..1_000 {
            let resp = self
                .txn(
                    op,
                    path,
                    Txn::new().and_then(vec![
                        TxnOp::get(self.key(path), Some(GetOptions::new().with_keys_only())),
                        self.counter_read(path),
                    ]),
                )
                .await?;
            let node = first_kv(&nth_get(&resp, 0));
            match &node {
                None if path != "/" => {
                    return Err(MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    })
                }
                Some(n) if n.lease() != 0 => return Err(ephemeral_counter_error(path)),
                _ => {}
            }
            let (counter, raw) = counter_of(&nth_get(&resp, 1));
            if counter >= next {
                return self
                    .read(op, path)
                    .await?
                    .map(|(_, stat)| stat)
                    .ok_or_else(|| MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    });
            }
            let mut when = vec![Compare::version(c_key.clone(), CompareOp::Equal, raw)];
            if let Some(n) = &node {
                when.push(Compare::create_revision(
                    self.key(path),
                    CompareOp::Equal,
                    n.create_revision(),
                ));
            }
            let mut ops = vec![
                TxnOp::put(c_key.clone(), Vec::new(), None),
                TxnOp::put(self.side(path, "co"), (next - raw - 1).to_string(), None),
            ];
            let reads_at = ops.len();
            let read_back = StatRead::node(path);
            ops.extend(read_back.ops(self));
            let resp = self
                .txn(op, path, Txn::new().when(when).and_then(ops))
                .await?;
            if resp.succeeded() {
                return read_back
                    .decode(&resp.op_responses(), reads_at)
                    .map(|(_, stat)| stat)
                    .ok_or_else(|| MetadataError::Internal {
                        op,
                        path: path.to_owned(),
                        reason: "the node was not read back after its counter import".to_owned(),
                    });
            }
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the counter could not be imported after 1000 attempts (constant contention)"
                .to_owned(),
        })
    }

    /// Creates `path` and its missing ancestors, persistent and empty.
    async fn create_parents(&self, op: Operation, path: &str) -> Result<()> {
        let mut missing = Vec::new();
        let mut p = path;
        while p != "/" {
            let resp = self
                .get(
                    op,
                    p,
                    self.key(p),
                    Some(GetOptions::new().with_count_only()),
                )
                .await?;
            if resp.count() > 0 {
                break;
            }
            missing.push(p.to_owned());
            p = parent(p);
        }
        for p in missing.iter().rev() {
            match Box::pin(self.create_node(op, p, b"", CreateMode::PERSISTENT, 0)).await {
                Ok(_) => {}
                Err(e) if e.kind() == crate::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
