//! The etcd keys of a node: its own key (under the URL's prefix), the prefix
//! of its descendants, and its side keys (see the parent module's table).

use super::Inner;

/// Start of the side keys (outside the `/` key space, and above `0`, the end of
/// the range Pulsar's store watches).
const SIDE: &[u8] = b"~bkswitch";

/// The smallest key after every key starting with `prefix`.
/// The etcd key prefixes an [`EtcdStore`](crate::EtcdStore) at `etcd://…<prefix>`
/// reads and writes: `<prefix>` (the nodes) and `~bkswitch<prefix>` (their
/// versions, children indexes and counters). A role with `readwrite` on both
/// (`etcdctl role grant-permission --prefix=true <role> readwrite <p>` for
/// each) is all the store needs. The prefix is matched as bytes: `/t-1`
/// also covers `/t-10`, so choose prefixes that are not prefixes of others.
pub fn etcd_key_prefixes(prefix: &str) -> [String; 2] {
    [
        prefix.to_owned(),
        format!("{}{prefix}", String::from_utf8_lossy(SIDE)),
    ]
}

pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Inner {
    /// The etcd key of a node.
    pub(super) fn key(&self, path: &str) -> Vec<u8> {
        if path == "/" && !self.prefix.is_empty() {
            self.prefix.as_bytes().to_vec()
        } else {
            format!("{}{path}", self.prefix).into_bytes()
        }
    }

    /// The key prefix of a node's descendants (`key/`).
    pub(super) fn children_prefix(&self, path: &str) -> Vec<u8> {
        let mut k = self.key(path);
        if k.last() != Some(&b'/') {
            k.push(b'/');
        }
        k
    }

    /// The start of a node's side keys (`~bkswitch` + key + NUL).
    pub(super) fn side_base(&self, path: &str) -> Vec<u8> {
        let mut k = SIDE.to_vec();
        k.extend_from_slice(&self.key(path));
        if path == "/" {
            k.push(b'/');
        }
        k.push(0);
        k
    }

    /// The side key of `kind` of a node.
    pub(super) fn side(&self, path: &str, kind: &str) -> Vec<u8> {
        let mut k = self.side_base(path);
        k.extend_from_slice(kind.as_bytes());
        k
    }

    /// The entry of `child` in the child index (`k` keys) of `parent`.
    pub(super) fn child_index(&self, parent: &str, child: &str) -> Vec<u8> {
        let mut k = self.side(parent, "k");
        k.extend_from_slice(child.as_bytes());
        k
    }
}
