//! [`RouterError`]: the one error type of the storage's management API.

use bkswitch_bk_client::{BkError, LedgerId};
use bkswitch_mledger_spi::{StorageError, StorageErrorKind};

/// A failure of a management operation of
/// [`MultiClusterManagedLedgerStorage`](crate::MultiClusterManagedLedgerStorage)
/// (register, connect, switch, close).
///
/// Every message names the cluster concerned and says what the operator can do.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RouterError {
    /// The cluster is not registered with the storage.
    #[error(
        "bookie cluster '{name}' is not registered (registered: {registered:?}); \
         register it with add_cluster(name, metadata_service_uri) first"
    )]
    UnknownCluster {
        /// The name asked for.
        name: String,
        /// The clusters that are registered.
        registered: Vec<String>,
    },
    /// A cluster of that name is already registered with another URI, or the URI
    /// is already registered under another name.
    #[error(
        "cannot register bookie cluster '{name}' at '{uri}': {reason}; \
         unregister the existing cluster or pick another name"
    )]
    Conflict {
        /// The name asked for.
        name: String,
        /// The URI asked for.
        uri: String,
        /// What it collides with.
        reason: String,
    },
    /// The client of the cluster could not be created; nothing changed (a switch
    /// keeps the previous cluster active).
    #[error(
        "cannot start a client for bookie cluster '{name}' at '{uri}': {source}; \
         the active cluster is unchanged, fix the cluster or its URI and retry"
    )]
    ClientStart {
        /// The cluster.
        name: String,
        /// Its metadata-service URI.
        uri: String,
        /// The factory's error.
        #[source]
        source: Box<BkError>,
    },
    /// The client cannot be closed: handles opened through it are still open
    /// (invariant [I5](bkswitch_docs::invariants::I5)), or it is the active cluster.
    #[error(
        "refusing to close the client of bookie cluster '{name}': {reason}{handles}",
        handles = describe_handles(*open_handles, ledger_ids)
    )]
    CloseRefused {
        /// The cluster.
        name: String,
        /// Why, in words.
        reason: String,
        /// How many handles are open on it.
        open_handles: usize,
        /// The ledgers those handles are open on (one entry per handle).
        ledger_ids: Vec<LedgerId>,
    },
    /// The bootstrap cluster is recorded once and never changed (invariant
    /// [I17](bkswitch_docs::invariants::I17)).
    #[error(
        "the bootstrap cluster is already '{current}' and cannot become '{requested}': \
         it is recorded once (legacy ledgers are on it) and never changed"
    )]
    BootstrapAlreadySet {
        /// The recorded bootstrap cluster.
        current: String,
        /// The cluster asked for.
        requested: String,
    },
    /// The storage has no client factory yet.
    #[error(
        "the storage is not initialized: call initialize() (or set_client_factory()) before {operation}"
    )]
    NotInitialized {
        /// The operation attempted.
        operation: &'static str,
    },
    /// The `bootstrapClusterName` property disagrees with the bootstrap marker
    /// recorded in the registry (invariant [I17](bkswitch_docs::invariants::I17)); nothing was
    /// written.
    #[error(
        "the bootstrapClusterName property says '{property}' but the registry recorded \
         '{recorded}' as the bootstrap cluster (recorded once, legacy ledgers are on it); \
         remove the property or set it to '{recorded}'"
    )]
    BootstrapMismatch {
        /// The property's value.
        property: String,
        /// The recorded bootstrap cluster.
        recorded: String,
    },
    /// The cluster registry in the metadata store failed or refused.
    #[error("cluster registry: {operation} failed: {source}")]
    Registry {
        /// What was being done, naming the cluster.
        operation: String,
        /// The registry's error.
        #[source]
        source: bkswitch_registry::RegistryError,
    },
    /// A setting is invalid.
    #[error("invalid setting: {0}")]
    InvalidSettings(String),
    /// Closing the client failed (it is dropped anyway).
    #[error("closing the client of bookie cluster '{name}' failed: {source}")]
    Close {
        /// The cluster.
        name: String,
        /// The client's error.
        #[source]
        source: Box<BkError>,
    },
}

impl RouterError {
    /// Whether the same call can succeed later without anyone changing the
    /// input: a client that could not start for a retryable reason (the
    /// cluster unreachable), a registry failure that is retryable
    /// ([`RegistryError::is_retryable`](bkswitch_registry::RegistryError::is_retryable)),
    /// or a close refused only because handles are still open (they close).
    /// Unknown clusters, conflicts, settings and bootstrap refusals are final.
    pub fn is_retryable(&self) -> bool {
        match self {
            RouterError::ClientStart { source, .. } => source.is_retryable(),
            RouterError::Registry { source, .. } => source.is_retryable(),
            RouterError::CloseRefused { open_handles, .. } => *open_handles > 0,
            _ => false,
        }
    }
}

fn describe_handles(count: usize, ids: &[LedgerId]) -> String {
    if count == 0 {
        String::new()
    } else {
        format!(
            "; {count} handle(s) still open on ledger(s) {ids:?}: wait until the readers \
             finish (or the ledgers are trimmed) and retry"
        )
    }
}

impl From<RouterError> for StorageError {
    fn from(error: RouterError) -> Self {
        let kind = match &error {
            RouterError::ClientStart { .. } | RouterError::Close { .. } => StorageErrorKind::Client,
            RouterError::NotInitialized { .. } => StorageErrorKind::NotInitialized,
            RouterError::Registry { .. } => StorageErrorKind::Metadata,
            _ => StorageErrorKind::InvalidSettings,
        };
        StorageError::new(kind, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_bk_client::BkErrorKind;

    use super::*;

    #[test]
    fn retryability_follows_the_cause() {
        let start = |kind| RouterError::ClientStart {
            name: "new".into(),
            uri: "zk://h:1/ledgers".into(),
            source: Box::new(BkError::new(kind, "connecting")),
        };
        assert!(start(BkErrorKind::Unavailable).is_retryable());
        assert!(!start(BkErrorKind::InvalidArgument).is_retryable());
        let registry = |source| RouterError::Registry {
            operation: "reading `new`".into(),
            source,
        };
        assert!(registry(bkswitch_registry::RegistryError::Conflict {
            path: "/p".into(),
            attempts: 3
        })
        .is_retryable());
        assert!(
            !registry(bkswitch_registry::RegistryError::NotFound { name: "x".into() })
                .is_retryable()
        );
        let refused = |open_handles| RouterError::CloseRefused {
            name: "old".into(),
            reason: "handles are open".into(),
            open_handles,
            ledger_ids: vec![1; open_handles],
        };
        assert!(refused(2).is_retryable());
        assert!(
            !refused(0).is_retryable(),
            "the active cluster stays active"
        );
        for e in [
            RouterError::UnknownCluster {
                name: "x".into(),
                registered: vec![],
            },
            RouterError::InvalidSettings("x".into()),
            RouterError::NotInitialized {
                operation: "switch",
            },
        ] {
            assert!(!e.is_retryable(), "{e}");
        }
    }
}
