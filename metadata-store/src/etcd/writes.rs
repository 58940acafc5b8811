//! Writing an existing node's value, and deleting a node.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};

use super::keys::prefix_end;
use super::reads::{first_kv, nth_get, parse_i64, StatRead};
use super::{now_ms, Inner};
use crate::error::{MetadataError, Operation, Result};
use crate::path::{name, parent};
use crate::types::{ExpectedVersion, Stat};

impl Inner {
    /// Writes an existing node's value; `expected` is `Any` or `Exactly`.
    /// `Ok(None)` when the node does not exist (for `Any`). Without
    /// `with_stat` and with `Exactly`, nothing is read back: only the
    /// returned version is meaningful.
    pub(super) async fn update_node(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
        with_stat: bool,
    ) -> Result<Option<Stat>> {
        let key = self.key(path);
        let m = self.side(path, "m");
        let mut offset: Option<i64> = None;
        // The fast path: a node of bkswitch's layout (its `m` side key
        // exists), so `m` is a plain put and the reply reads only what the
        // write does not tell. A node without `m` (the root, a node written
        // by another etcd client) takes the general path.
        let mut fast = path != "/";
        for _ in 0..100 {
            let mut when = Vec::new();
            if path != "/" || expected != ExpectedVersion::Any {
                when.push(Compare::create_revision(key.clone(), CompareOp::Greater, 0));
            }
            if let ExpectedVersion::Exactly(v) = expected {
                match offset {
                    None => {
                        when.push(Compare::version(key.clone(), CompareOp::Equal, v + 1));
                        when.push(Compare::version(self.side(path, "o"), CompareOp::Equal, 0));
                    }
                    Some(o) => {
                        when.push(Compare::version(key.clone(), CompareOp::Equal, v + 1 - o));
                        when.push(Compare::value(
                            self.side(path, "o"),
                            CompareOp::Equal,
                            o.to_string(),
                        ));
                    }
                }
            }
            let now = now_ms();
            let keep_lease = Some(PutOptions::new().with_ignore_lease());
            let mut ops;
            if fast {
                when.push(Compare::create_revision(m.clone(), CompareOp::Greater, 0));
                ops = vec![
                    TxnOp::put(key.clone(), value.to_vec(), keep_lease.clone()),
                    TxnOp::put(m.clone(), now.to_string(), keep_lease),
                ];
            } else if path == "/" {
                // The root has no lease: a plain put.
                ops = vec![
                    TxnOp::put(key.clone(), value.to_vec(), None),
                    TxnOp::put(m.clone(), now.to_string(), None),
                ];
            } else {
                ops = vec![
                    TxnOp::put(key.clone(), value.to_vec(), keep_lease),
                    self.touch_modified(path),
                ];
            }
            let reads_at = ops.len();
            let known_offset = match expected {
                ExpectedVersion::Exactly(_) => Some(offset.unwrap_or(0)),
                _ => None,
            };
            // Without a `Stat` wanted and with the version fixed by the
            // compare, the write is the whole transaction.
            let bare = fast && !with_stat && known_offset.is_some();
            let read_back = if fast {
                StatRead::written(path, now, known_offset)
            } else {
                StatRead::node(path)
            };
            if !bare {
                ops.extend(read_back.ops(self));
            }
            // Concurrent writes of other nodes leave in one request.
            let resp = self
                .batched_txn(
                    op,
                    path,
                    Txn::new().when(when).and_then(ops).or_else(vec![
                        TxnOp::get(key.clone(), None),
                        TxnOp::get(self.side(path, "o"), None),
                        TxnOp::get(m.clone(), Some(GetOptions::new().with_keys_only())),
                    ]),
                    value.len(),
                )
                .await?;
            if resp.succeeded() {
                if let (true, ExpectedVersion::Exactly(v)) = (bare, expected) {
                    // Only the version is meant to be read (`put_version`).
                    return Ok(Some(Stat {
                        version: v + 1,
                        cversion: 0,
                        created_ms: 0,
                        modified_ms: now,
                        ephemeral: false,
                        num_children: 0,
                    }));
                }
                return Ok(read_back
                    .decode(&resp.op_responses(), reads_at)
                    .map(|(_, s)| s));
            }
            if fast && first_kv(&nth_get(&resp, 2)).is_none() {
                fast = false;
            }
            let node = first_kv(&nth_get(&resp, 0));
            let o = parse_i64(first_kv(&nth_get(&resp, 1)).as_ref());
            let Some(node) = node else {
                return match expected {
                    ExpectedVersion::Exactly(_) => Err(MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    }),
                    _ => Ok(None),
                };
            };
            if let ExpectedVersion::Exactly(v) = expected {
                let o_now = o.unwrap_or(0);
                if node.version() - 1 + o_now != v {
                    return Err(MetadataError::BadVersion {
                        op,
                        path: path.to_owned(),
                        expected: v,
                    });
                }
                offset = o;
            }
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the write did not settle after 100 attempts".to_owned(),
        })
    }

    /// Writes the node's `m` side key, on the lease it has. A node written by
    /// another etcd client (Pulsar's store) has none: a persistent one gets
    /// one (so that bkswitch's watches see its writes); an ephemeral one is
    /// left without (its lease is not this store's to extend to a side key).
    fn touch_modified(&self, path: &str) -> TxnOp {
        let m = self.side(path, "m");
        let now = now_ms().to_string();
        let foreign = Txn::new()
            .when(vec![Compare::lease(self.key(path), CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(m.clone(), now.clone(), None)]);
        TxnOp::txn(
            Txn::new()
                .when(vec![Compare::create_revision(
                    m.clone(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then(vec![TxnOp::put(
                    m,
                    now,
                    Some(PutOptions::new().with_ignore_lease()),
                )])
                .or_else(vec![TxnOp::txn(foreign)]),
        )
    }

    pub(super) async fn delete_node(
        &self,
        op: Operation,
        path: &str,
        expected: ExpectedVersion,
    ) -> Result<()> {
        let key = self.key(path);
        let below = self.children_prefix(path);
        let parent_path = parent(path);
        let mut offset: Option<i64> = None;
        for _ in 0..100 {
            let mut when = vec![
                Compare::create_revision(key.clone(), CompareOp::Greater, 0),
                Compare::create_revision(below.clone(), CompareOp::Equal, 0)
                    .with_range(prefix_end(&below)),
            ];
            if let ExpectedVersion::Exactly(v) = expected {
                let o = offset.unwrap_or(0);
                when.push(Compare::version(key.clone(), CompareOp::Equal, v + 1 - o));
                if o == 0 {
                    when.push(Compare::version(self.side(path, "o"), CompareOp::Equal, 0));
                } else {
                    when.push(Compare::value(
                        self.side(path, "o"),
                        CompareOp::Equal,
                        o.to_string(),
                    ));
                }
            }
            let base = self.side_base(path);
            let mut base_end = base.clone();
            if let Some(last) = base_end.last_mut() {
                *last = 1;
            }
            let ops = vec![
                TxnOp::delete(key.clone(), None),
                TxnOp::delete(base, Some(DeleteOptions::new().with_range(base_end))),
                TxnOp::delete(self.child_index(parent_path, name(path)), None),
            ];
            let resp = self
                .txn(
                    op,
                    path,
                    Txn::new().when(when).and_then(ops).or_else(vec![
                        TxnOp::get(key.clone(), None),
                        TxnOp::get(self.side(path, "o"), None),
                        TxnOp::get(
                            below.clone(),
                            Some(
                                GetOptions::new()
                                    .with_range(prefix_end(&below))
                                    .with_count_only(),
                            ),
                        ),
                    ]),
                )
                .await?;
            if resp.succeeded() {
                return Ok(());
            }
            let Some(node) = first_kv(&nth_get(&resp, 0)) else {
                return Err(MetadataError::NotFound {
                    op,
                    path: path.to_owned(),
                });
            };
            let o = parse_i64(first_kv(&nth_get(&resp, 1)).as_ref());
            if let ExpectedVersion::Exactly(v) = expected {
                if node.version() - 1 + o.unwrap_or(0) != v {
                    return Err(MetadataError::BadVersion {
                        op,
                        path: path.to_owned(),
                        expected: v,
                    });
                }
            }
            if nth_get(&resp, 2).is_some_and(|g| g.count() > 0) {
                return Err(MetadataError::NotEmpty {
                    op,
                    path: path.to_owned(),
                });
            }
            offset = o;
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the delete did not settle after 100 attempts".to_owned(),
        })
    }
}
