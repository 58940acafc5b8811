//! Metadata-service URIs as Pulsar's `bookkeeperMetadataServiceUri` and
//! BookKeeper's `metadataServiceUri` write them.
//!
//! `zk+<layout>://host:port[;host:port…]/<ledgers root>`, where `<layout>` is
//! `hierarchical`, `longhierarchical` or `null`, and plain `zk://` means "the
//! layout the cluster's `LAYOUT` znode records" (as `zk+null://` does). Hosts
//! are separated by `;` (BookKeeper's form) or `,` (ZooKeeper's). The path is the
//! cluster's ledgers root, e.g. `/ledgers`.

use std::fmt;

use bkswitch_bk_client::{BkError, BkErrorKind};
use bkswitch_metadata_store::check_zk_host;

/// The ledger manager a URI asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayoutChoice {
    /// `zk+hierarchical://`: short paths below id 2^31 − 1, long paths above.
    Hierarchical,
    /// `zk+longhierarchical://`: long paths for every id.
    LongHierarchical,
    /// `zk://` or `zk+null://`: whatever the cluster's `LAYOUT` says
    /// (hierarchical when the cluster has none yet).
    FromCluster,
}

/// A parsed metadata-service URI.
///
/// ```
/// use bkswitch_bookkeeper::{LayoutChoice, MetadataServiceUri};
///
/// let uri = MetadataServiceUri::parse("zk+hierarchical://zk1:2181;zk2:2181/pulsar/ledgers")?;
/// assert_eq!(uri.layout(), LayoutChoice::Hierarchical);
/// assert_eq!(uri.zk_hosts(), ["zk1:2181", "zk2:2181"]);
/// assert_eq!(uri.ledgers_root(), "/pulsar/ledgers");
/// assert_eq!(uri.zk_url(), "zk://zk1:2181,zk2:2181");
/// # Ok::<(), bkswitch_bk_client::BkError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetadataServiceUri {
    raw: String,
    layout: LayoutChoice,
    hosts: Vec<String>,
    root: String,
}

/// The schemes [`MetadataServiceUri::parse`] accepts.
pub const SUPPORTED_SCHEMES: [&str; 4] =
    ["zk", "zk+hierarchical", "zk+longhierarchical", "zk+null"];

const EXAMPLE: &str = "zk+hierarchical://127.0.0.1:2181/ledgers";

impl MetadataServiceUri {
    /// Parses a metadata-service URI.
    ///
    /// # Errors
    /// [`BkErrorKind::InvalidArgument`] (-14) naming the URI, what is wrong and an
    /// example: an unsupported scheme (`zk+flat`, `zk+ms`, `etcd`, …), no host, a
    /// host without a port, a bad port, or no ledgers root.
    pub fn parse(uri: &str) -> Result<MetadataServiceUri, BkError> {
        let fail = |reason: String| {
            BkError::new(
                BkErrorKind::InvalidArgument,
                format!(
                    "invalid BookKeeper metadata-service URI `{uri}`: {reason}; expected \
                     zk[+hierarchical|+longhierarchical|+null]://host:port[;host:port...]/<ledgers root>, \
                     e.g. {EXAMPLE}"
                ),
            )
        };
        let (scheme, rest) = uri
            .split_once("://")
            .ok_or_else(|| fail("it has no `scheme://`".to_owned()))?;
        let layout = match scheme {
            "zk" | "zk+null" => LayoutChoice::FromCluster,
            "zk+hierarchical" => LayoutChoice::Hierarchical,
            "zk+longhierarchical" => LayoutChoice::LongHierarchical,
            "zk+flat" | "zk+ms" | "zk+legacyhierarchical" => {
                return Err(fail(format!(
                    "the `{scheme}` ledger layout is not supported by this client (hierarchical and long hierarchical are)"
                )))
            }
            other => {
                return Err(fail(format!(
                    "unsupported scheme `{other}` (supported: {})",
                    SUPPORTED_SCHEMES.join(", ")
                )))
            }
        };
        if let Some(c) = rest
            .chars()
            .find(|c| matches!(c, '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control())
        {
            return Err(fail(format!(
                "it contains {c:?} (no credentials, query, fragment or spaces)"
            )));
        }
        let (hosts, root) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let hosts: Vec<String> = hosts.split([';', ',']).map(str::to_owned).collect();
        for host in &hosts {
            check_zk_host(host).map_err(|reason| fail(format!("host `{host}`: {reason}")))?;
        }
        let root = root.trim_end_matches('/');
        if root.is_empty() {
            return Err(fail(
                "it has no ledgers root path (the cluster's root, e.g. `/ledgers`)".to_owned(),
            ));
        }
        if root
            .split('/')
            .skip(1)
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
        {
            return Err(fail(format!(
                "the ledgers root `{root}` has an empty, `.` or `..` segment"
            )));
        }
        Ok(MetadataServiceUri {
            raw: uri.to_owned(),
            layout,
            hosts,
            root: root.to_owned(),
        })
    }

    /// The URI as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The layout the URI asks for.
    pub fn layout(&self) -> LayoutChoice {
        self.layout
    }

    /// The ZooKeeper servers, `host:port` each.
    pub fn zk_hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The cluster's ledgers root, e.g. `/ledgers` (no trailing `/`).
    pub fn ledgers_root(&self) -> &str {
        &self.root
    }

    /// The ZooKeeper URL of the servers, without chroot, as
    /// `bkswitch_metadata_store::ZkStore::connect` takes it.
    pub fn zk_url(&self) -> String {
        format!("zk://{}", self.hosts.join(","))
    }
}

impl fmt::Display for MetadataServiceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_forms() {
        let u = MetadataServiceUri::parse("zk://127.0.0.1:2181/ledgers").unwrap();
        assert_eq!(u.layout(), LayoutChoice::FromCluster);
        assert_eq!(u.ledgers_root(), "/ledgers");
        let u = MetadataServiceUri::parse("zk+null://a:1,b:2/x/ledgers/").unwrap();
        assert_eq!(u.layout(), LayoutChoice::FromCluster);
        assert_eq!(u.zk_hosts(), ["a:1", "b:2"]);
        assert_eq!(u.ledgers_root(), "/x/ledgers");
        let u = MetadataServiceUri::parse("zk+longhierarchical://[::1]:2181/l").unwrap();
        assert_eq!(u.layout(), LayoutChoice::LongHierarchical);
        assert_eq!(u.zk_url(), "zk://[::1]:2181");
        assert_eq!(u.to_string(), "zk+longhierarchical://[::1]:2181/l");
    }

    #[test]
    fn refused_forms_name_the_problem() {
        for (uri, needle) in [
            ("memory://x", "unsupported scheme `memory`"),
            ("zk+flat://h:1/l", "not supported"),
            ("etcd://h:1/l", "unsupported scheme"),
            ("127.0.0.1:2181/ledgers", "no `scheme://`"),
            ("zk+hierarchical://h:1", "no ledgers root"),
            ("zk+hierarchical://h:1/", "no ledgers root"),
            ("zk+hierarchical://h/l", "port is missing"),
            ("zk+hierarchical://h:0/l", "port must be a number"),
            ("zk+hierarchical://h:99999/l", "port must be a number"),
            ("zk+hierarchical://h:1;;h:2/l", "stray separator"),
            ("zk+hierarchical:///l", "empty entry"),
            ("zk+hierarchical://u@h:1/l", "credentials"),
            ("zk+hierarchical://h:1/a//b", "empty"),
            ("zk+hierarchical://h:1/a/../b", "`..`"),
        ] {
            let e = MetadataServiceUri::parse(uri).unwrap_err();
            assert_eq!(e.code(), -14, "{uri}");
            let s = e.to_string();
            assert!(s.contains(needle), "{uri}: {s}");
            assert!(s.contains(uri), "{uri}: {s}");
            assert!(s.contains(EXAMPLE), "{uri}: {s}");
        }
    }
}
