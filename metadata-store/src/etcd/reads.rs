//! Reads: the one plan of a node's [`Stat`] read (what a transaction asks
//! etcd for, and how the answers are decoded), the answer helpers the writes
//! share, and the paged listing of children.

use std::sync::Arc;

use etcd_client::{GetOptions, GetResponse, KeyValue, TxnOp, TxnOpResponse, TxnResponse};

use super::keys::prefix_end;
use super::Inner;
use crate::error::{Operation, Result};
use crate::types::Stat;

pub(super) fn parse_i64(kv: Option<&KeyValue>) -> Option<i64> {
    kv.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
}

fn get_resp(r: &TxnOpResponse) -> Option<&GetResponse> {
    match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    }
}

/// The `i`-th response of a transaction, a range read.
pub(super) fn nth_get(resp: &TxnResponse, i: usize) -> Option<GetResponse> {
    resp.op_responses().get(i).and_then(get_resp).cloned()
}

pub(super) fn first_kv(g: &Option<GetResponse>) -> Option<KeyValue> {
    g.as_ref().and_then(|g| g.kvs().first().cloned())
}

/// The child counter from a prefix read of the `c` side key: the etcd
/// version of `c` (one per child creation) plus the imported offset in `co`.
/// Also returns `c`'s own version, which writes compare.
pub(super) fn counter_of(g: &Option<GetResponse>) -> (i64, i64) {
    let mut raw = 0;
    let mut offset = 0;
    for kv in g.as_ref().map_or(&[][..], |g| g.kvs()) {
        if kv.key().last() == Some(&b'o') {
            offset = parse_i64(Some(kv)).unwrap_or(0);
        } else {
            raw = kv.version();
        }
    }
    (raw + offset, raw)
}

/// What a value write knows of the node it wrote, so that its read-back asks
/// etcd for less.
#[derive(Debug, Clone, Copy)]
struct Written {
    /// The modification time the write set.
    modified_ms: i64,
    /// The version offset when the write's compare fixed it; otherwise it is
    /// read (the [`StatRead::OFFSET`] slot).
    offset: Option<i64>,
}

/// The read of one node's value and [`Stat`] inside a transaction: it builds
/// the range reads ([`ops`](Self::ops)) and decodes their answers
/// ([`decode`](Self::decode)) by the same slots, so the two cannot disagree
/// on where an answer is.
///
/// A plain read ([`node`](Self::node)) asks for the node, its child counter
/// (`c`, `co`), its times and version offset (`m`, `o`, `t`: one range, as
/// no other side key's kind sorts between `m` and `u`) and its child count.
/// The read-back of a value write ([`written`](Self::written)) asks for the
/// node without its value (version, lease), the child counter, the creation
/// time, the child count and, when the compare did not fix it, the version
/// offset; the modification time is the one the write set.
#[derive(Debug, Clone, Copy)]
pub(super) struct StatRead<'p> {
    path: &'p str,
    written: Option<Written>,
}

impl<'p> StatRead<'p> {
    /// The node key (with its value for a plain read).
    const NODE: usize = 0;
    /// The child counter: `c` and `co` (see [`counter_of`]).
    const COUNTER: usize = 1;
    /// The times: `m`, `o` and `t` for a plain read, `t` after a write.
    const TIMES: usize = 2;
    /// The number of `k` keys.
    const CHILDREN: usize = 3;
    /// The version offset `o`: only after a write whose compare did not fix it.
    const OFFSET: usize = 4;

    /// A plain read of `path`: its value and [`Stat`].
    pub(super) fn node(path: &'p str) -> Self {
        StatRead {
            path,
            written: None,
        }
    }

    /// The read-back of a value write of `path` at `modified_ms`; `offset`
    /// when the write's compare fixed the version offset. Its value is not
    /// read ([`decode`](Self::decode) gives it empty).
    pub(super) fn written(path: &'p str, modified_ms: i64, offset: Option<i64>) -> Self {
        StatRead {
            path,
            written: Some(Written {
                modified_ms,
                offset,
            }),
        }
    }

    /// The range reads, in slot order, to append to a transaction.
    pub(super) fn ops(&self, inner: &Inner) -> Vec<TxnOp> {
        let path = self.path;
        let mut ops = Vec::with_capacity(Self::OFFSET + 1);
        match self.written {
            None => {
                ops.push(TxnOp::get(inner.key(path), None));
                ops.push(inner.counter_read(path));
                ops.push(TxnOp::get(
                    inner.side(path, "m"),
                    Some(GetOptions::new().with_range(inner.side(path, "u"))),
                ));
                ops.push(inner.child_count_read(path));
            }
            Some(written) => {
                ops.push(TxnOp::get(
                    inner.key(path),
                    Some(GetOptions::new().with_keys_only()),
                ));
                ops.push(inner.counter_read(path));
                ops.push(TxnOp::get(inner.side(path, "t"), None));
                ops.push(inner.child_count_read(path));
                if written.offset.is_none() {
                    ops.push(TxnOp::get(inner.side(path, "o"), None));
                }
            }
        }
        ops
    }

    /// The node's value and [`Stat`] from a transaction's answers `rs`
    /// (`op_responses`, which copies every answer: taken once by the caller,
    /// not once per read), where [`ops`](Self::ops) start at `at`. `None`
    /// when the node does not exist (the root always does: empty, version
    /// 0, until written).
    pub(super) fn decode(&self, rs: &[TxnOpResponse], at: usize) -> Option<(Vec<u8>, Stat)> {
        let get_at = |slot: usize| rs.get(at + slot).and_then(get_resp);
        let node = get_at(Self::NODE).and_then(|g| g.kvs().first());
        let (value, version, lease) = match node {
            Some(node) => (node.value().to_vec(), node.version() - 1, node.lease()),
            None if self.path == "/" => (Vec::new(), 0, 0),
            None => return None,
        };
        let (c, _) = counter_of(&get_at(Self::COUNTER).cloned());
        let (mut m, mut t, mut o) = (None, 0, 0);
        if let Some(times) = get_at(Self::TIMES) {
            // The range holds only `m`, `o` and `t`: the kind is the last byte.
            for kv in times.kvs() {
                match kv.key().last() {
                    Some(b'm') => m = parse_i64(Some(kv)),
                    Some(b't') => t = parse_i64(Some(kv)).unwrap_or(0),
                    Some(b'o') => o = parse_i64(Some(kv)).unwrap_or(0),
                    _ => {}
                }
            }
        }
        let children = get_at(Self::CHILDREN).map_or(0, |g| g.count());
        if let Some(written) = self.written {
            m = Some(written.modified_ms);
            o = written.offset.unwrap_or_else(|| {
                parse_i64(get_at(Self::OFFSET).and_then(|g| g.kvs().first())).unwrap_or(0)
            });
        }
        let stat = Stat {
            version: version.max(0) + o,
            cversion: (2 * c - children).max(0),
            created_ms: t,
            modified_ms: m.unwrap_or(t),
            ephemeral: lease != 0,
            num_children: children,
        };
        Some((value, stat))
    }
}

impl Inner {
    /// The child counter of `path`: `c` and `co` (see [`counter_of`]).
    pub(super) fn counter_read(&self, path: &str) -> TxnOp {
        TxnOp::get(self.side(path, "c"), Some(GetOptions::new().with_prefix()))
    }

    /// The number of direct children of `path`: a count of its `k` keys.
    pub(super) fn child_count_read(&self, path: &str) -> TxnOp {
        let k = self.side(path, "k");
        TxnOp::get(
            k.clone(),
            Some(
                GetOptions::new()
                    .with_range(prefix_end(&k))
                    .with_count_only(),
            ),
        )
    }

    /// The value and [`Stat`] of `path` (batched with concurrent reads).
    pub(super) async fn read(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
    ) -> Result<Option<(Vec<u8>, Stat)>> {
        let plan = StatRead::node(path);
        let rs = self.batched_reads(op, path, plan.ops(self)).await?;
        Ok(plan.decode(&rs, 0))
    }

    /// The names of the direct children of `path`, sorted, read in pages of
    /// [`EtcdStoreOptions::children_page_size`](super::EtcdStoreOptions::children_page_size) keys.
    pub(super) async fn list_children(&self, op: Operation, path: &str) -> Result<Vec<String>> {
        let prefix = self.children_prefix(path);
        let end = prefix_end(&prefix);
        let mut start = prefix.clone();
        let mut names: Vec<String> = Vec::new();
        loop {
            let resp = self
                .get(
                    op,
                    path,
                    start.clone(),
                    Some(
                        GetOptions::new()
                            .with_range(end.clone())
                            .with_keys_only()
                            .with_limit(self.options.children_page_size),
                    ),
                )
                .await?;
            let mut last_child: Option<(String, bool)> = None;
            for kv in resp.kvs() {
                let rest = &kv.key()[prefix.len()..];
                let (child, deeper) = match rest.iter().position(|&b| b == b'/') {
                    Some(i) => (&rest[..i], true),
                    None => (rest, false),
                };
                let child = String::from_utf8_lossy(child).into_owned();
                if names.last() != Some(&child) {
                    names.push(child.clone());
                }
                last_child = Some((child, deeper));
            }
            if !resp.more() {
                break;
            }
            // Next page: after the last key, or past the whole subtree of the
            // last child when that key was below it.
            let last_key = resp.kvs().last().map(|kv| kv.key().to_vec());
            start = match (last_child, last_key) {
                (Some((child, true)), _) => {
                    let mut sub = prefix.clone();
                    sub.extend_from_slice(child.as_bytes());
                    sub.push(b'/');
                    prefix_end(&sub)
                }
                (_, Some(mut key)) => {
                    key.push(0);
                    key
                }
                _ => break,
            };
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
}
