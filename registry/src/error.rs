//! The one error type of the crate.

use bkswitch_bk_client::{BkError, UriError};
use bkswitch_metadata_store::MetadataError;

/// Result alias of the crate.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// Error of every registry operation.
///
/// Bad input (invalid name or URI, collision, unknown or deprecated cluster,
/// refusing to unregister the ACTIVE cluster) never changes the store.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The cluster is not registered.
    #[error("bookie cluster `{name}` is not registered; list the registered clusters and check the name, or register it first")]
    NotFound {
        /// The unknown cluster.
        name: String,
    },
    /// A cluster with this name is already registered.
    #[error(
        "bookie cluster `{name}` is already registered; unregister it first or choose another name"
    )]
    AlreadyExists {
        /// The registered cluster.
        name: String,
    },
    /// An override prefix breaks the prefix rules
    /// ([`validate_prefix`](crate::validate_prefix)).
    #[error("invalid override prefix `{prefix}`: {reason}. Nothing was written")]
    InvalidPrefix {
        /// The offending prefix.
        prefix: String,
        /// The broken rule and the prefix to use.
        reason: String,
    },
    /// The cluster name breaks the name rules.
    #[error("invalid bookie cluster name {name:?}: {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// The broken rule.
        reason: String,
    },
    /// The metadata-service URI is not accepted.
    #[error("invalid metadata service URI {uri:?}: {reason}")]
    InvalidUri {
        /// The offending URI.
        uri: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The URI names the same BookKeeper cluster as a registered one.
    #[error("metadata service URI `{uri}` collides with bookie cluster `{existing}` (`{existing_uri}`): {reason}; use the registered cluster or a different ledgers root")]
    UriCollision {
        /// The refused URI.
        uri: String,
        /// The registered cluster it collides with.
        existing: String,
        /// That cluster's URI.
        existing_uri: String,
        /// Why they collide.
        reason: String,
    },
    /// The operation is refused because the cluster is (or is becoming) ACTIVE.
    #[error("bookie cluster `{name}` is the ACTIVE cluster (or being promoted); switch to another cluster and finish the cleanup first")]
    ActiveCluster {
        /// The ACTIVE cluster.
        name: String,
    },
    /// Registering a cluster as ACTIVE while another cluster is ACTIVE.
    #[error("cannot register `{name}` as ACTIVE: bookie cluster `{active}` is ACTIVE; register it as STANDBY and switch to it")]
    AnotherActive {
        /// The cluster that was to be registered.
        name: String,
        /// The cluster that is ACTIVE.
        active: String,
    },
    /// The cluster is DEPRECATED and cannot be switched to or promoted.
    #[error("bookie cluster `{name}` is DEPRECATED; it cannot become the target again: register the cluster under a new name")]
    Deprecated {
        /// The deprecated cluster.
        name: String,
    },
    /// A compare-and-set kept losing against concurrent writers.
    #[error("`{path}` kept changing concurrently ({attempts} compare-and-set attempts lost); retry later")]
    Conflict {
        /// The contended path.
        path: String,
        /// How many attempts were made.
        attempts: usize,
    },
    /// A stored value cannot be understood.
    #[error("corrupt registry node `{path}`: {reason}; repair or delete the node by hand")]
    Corrupt {
        /// The path of the node.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A cluster's ledger-id generator cannot be read (the precheck's target).
    #[error("cannot read the ledger id generator of bookie cluster `{cluster}`: {source}")]
    Idgen {
        /// The registered cluster.
        cluster: String,
        /// What the [`IdgenSource`](bkswitch_bk_client::IdgenSource) reported
        /// (boxed: it is large).
        source: Box<BkError>,
    },
    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
}

impl RegistryError {
    /// Whether the same call can succeed later without anyone changing the
    /// input or the stored state: a compare-and-set that kept losing
    /// ([`Conflict`](Self::Conflict)), a metadata store that is unavailable
    /// or whose session expired, or an id generator that could not be reached.
    /// Bad input, refusals and corrupt nodes are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            RegistryError::Conflict { .. } => true,
            RegistryError::Metadata(e) => e.is_retryable(),
            RegistryError::Idgen { source, .. } => source.is_retryable(),
            _ => false,
        }
    }
}

impl From<UriError> for RegistryError {
    fn from(e: UriError) -> RegistryError {
        RegistryError::InvalidUri {
            uri: e.uri().to_owned(),
            reason: e.reason().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_bk_client::BkErrorKind;
    use bkswitch_metadata_store::Operation;

    use super::*;

    #[test]
    fn retryability_follows_the_cause() {
        let unavailable = RegistryError::Metadata(MetadataError::Unavailable {
            op: Operation::Get,
            path: "/admin/x".into(),
            reason: "timeout".into(),
        });
        assert!(unavailable.is_retryable());
        let lost = RegistryError::Metadata(MetadataError::BadVersion {
            op: Operation::Put,
            path: "/admin/x".into(),
            expected: 3,
        });
        assert!(!lost.is_retryable());
        let idgen = |kind| RegistryError::Idgen {
            cluster: "new".into(),
            source: Box::new(BkError::new(kind, "reading idgen")),
        };
        assert!(idgen(BkErrorKind::Unavailable).is_retryable());
        assert!(!idgen(BkErrorKind::InvalidArgument).is_retryable());
        assert!(RegistryError::Conflict {
            path: "/p".into(),
            attempts: 3
        }
        .is_retryable());
        for e in [
            RegistryError::NotFound { name: "x".into() },
            RegistryError::Corrupt {
                path: "/p".into(),
                reason: "bad json".into(),
            },
            RegistryError::from(bkswitch_bk_client::ClusterUri::parse("etcd://h").unwrap_err()),
            RegistryError::ActiveCluster { name: "x".into() },
        ] {
            assert!(!e.is_retryable(), "{e}");
        }
    }
}
