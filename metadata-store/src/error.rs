//! The one error type of the crate.

use std::fmt;

/// Result alias of the crate.
pub type Result<T, E = MetadataError> = std::result::Result<T, E>;

/// The operation that failed, as named in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`MetadataStore::get`](crate::MetadataStore::get).
    Get,
    /// [`MetadataStore::put`](crate::MetadataStore::put).
    Put,
    /// [`MetadataStore::create`](crate::MetadataStore::create).
    Create,
    /// [`MetadataStore::delete`](crate::MetadataStore::delete).
    Delete,
    /// [`MetadataStore::exists`](crate::MetadataStore::exists).
    Exists,
    /// [`MetadataStore::children`](crate::MetadataStore::children).
    Children,
    /// [`MetadataStore::watch`](crate::MetadataStore::watch).
    Watch,
    /// Opening a store ([`ZkStore::connect`](crate::ZkStore::connect)).
    Connect,
    /// [`MetadataStore::close`](crate::MetadataStore::close).
    Close,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Get => "get",
            Operation::Put => "put",
            Operation::Create => "create",
            Operation::Delete => "delete",
            Operation::Exists => "exists",
            Operation::Children => "children",
            Operation::Watch => "watch",
            Operation::Connect => "connect",
            Operation::Close => "close",
        })
    }
}

/// What kind of failure a [`MetadataError`] is; match on this rather than on the
/// variants when only the category matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The node does not exist.
    NotFound,
    /// The node already exists.
    AlreadyExists,
    /// The node's version is not the expected one.
    BadVersion,
    /// The node has children and cannot be deleted.
    NotEmpty,
    /// The path breaks a path rule (see [`validate_path`](crate::validate_path)).
    InvalidPath,
    /// Another argument is invalid (value too large, meaningless expected version,
    /// child of an ephemeral node, bad URL or option, …).
    InvalidArgument,
    /// The backend cannot be reached in time; retrying can help.
    Unavailable,
    /// The session ended; the store opens a new one, so retrying can help, but the
    /// ephemeral nodes of the old session are gone.
    SessionExpired,
    /// The store was closed.
    Closed,
    /// Writes are paused for a moment (the metadata store is being moved, see
    /// `bkswitch-metadata-migration`); retrying after a short wait helps.
    WritesPaused,
    /// The backend refused the credentials, or they do not give access to
    /// the node (ZooKeeper ACL, etcd role); retrying does not help.
    PermissionDenied,
    /// Anything else the backend reported.
    Internal,
}

/// Error of every [`MetadataStore`](crate::MetadataStore) operation.
///
/// Each variant names the operation and the path; [`MetadataError::kind`] gives
/// the category and [`MetadataError::is_retryable`] whether retrying can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// The node does not exist.
    #[error(
        "{op} `{path}` failed: the node does not exist; create it first, or re-read \
         and retry if another writer deleted it"
    )]
    NotFound {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
    },
    /// The node already exists.
    #[error(
        "{op} `{path}` failed: the node already exists; read it and update it with \
         ExpectedVersion::Exactly(version), or use another path"
    )]
    AlreadyExists {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
    },
    /// The node's version is not the expected one.
    #[error(
        "{op} `{path}` failed: version conflict (expected version {expected}): another \
         writer changed the node; re-read it and retry the compare-and-set"
    )]
    BadVersion {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
        /// The version the caller expected.
        expected: i64,
    },
    /// The node has children.
    #[error(
        "{op} `{path}` failed: the node has children; delete them first \
         (MetadataStoreExt::delete_recursive)"
    )]
    NotEmpty {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
    },
    /// The path breaks a path rule.
    #[error("{op} {path:?} failed: invalid path: {rule}")]
    InvalidPath {
        /// The failed operation.
        op: Operation,
        /// The offending path (escaped when printed).
        path: String,
        /// The rule that is broken.
        rule: &'static str,
    },
    /// Another argument is invalid.
    #[error("{op} `{path}` failed: {reason}")]
    InvalidArgument {
        /// The failed operation.
        op: Operation,
        /// The path of the operation (the URL for [`Operation::Connect`]).
        path: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The backend cannot be reached in time.
    #[error(
        "{op} `{path}` failed: metadata store unavailable: {reason}; retry later (a \
         write may or may not have been applied: re-read before retrying it)"
    )]
    Unavailable {
        /// The failed operation.
        op: Operation,
        /// The path of the operation (the URL for [`Operation::Connect`]).
        path: String,
        /// Why, including the timeout that expired, if any.
        reason: String,
    },
    /// The session ended while the operation ran.
    #[error(
        "{op} `{path}` failed: the metadata store session expired (its ephemeral nodes \
         are gone); the store is opening a new session: retry, and re-create ephemeral \
         nodes you own"
    )]
    SessionExpired {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
    },
    /// The store was closed.
    #[error("{op} `{path}` failed: the metadata store is closed; open a new one")]
    Closed {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
    },
    /// Writes are paused (the metadata store is being moved to another
    /// backend); nothing was written.
    #[error(
        "{op} `{path}` failed: metadata writes are paused while the metadata store moves \
         ({reason}); nothing was written: retry in a moment"
    )]
    WritesPaused {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
        /// Which migration paused the writes.
        reason: String,
    },
    /// The backend refused the credentials or their access to the node.
    #[error("{op} `{path}` failed: permission denied: {reason}")]
    PermissionDenied {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
        /// Which credentials were refused and what they lack (never a secret).
        reason: String,
    },
    /// Anything else the backend reported.
    #[error("{op} `{path}` failed: unexpected metadata store error: {reason}")]
    Internal {
        /// The failed operation.
        op: Operation,
        /// The path of the operation.
        path: String,
        /// The backend's description.
        reason: String,
    },
}

impl MetadataError {
    /// The category of the error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            MetadataError::NotFound { .. } => ErrorKind::NotFound,
            MetadataError::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            MetadataError::BadVersion { .. } => ErrorKind::BadVersion,
            MetadataError::NotEmpty { .. } => ErrorKind::NotEmpty,
            MetadataError::InvalidPath { .. } => ErrorKind::InvalidPath,
            MetadataError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            MetadataError::Unavailable { .. } => ErrorKind::Unavailable,
            MetadataError::SessionExpired { .. } => ErrorKind::SessionExpired,
            MetadataError::Closed { .. } => ErrorKind::Closed,
            MetadataError::WritesPaused { .. } => ErrorKind::WritesPaused,
            MetadataError::PermissionDenied { .. } => ErrorKind::PermissionDenied,
            MetadataError::Internal { .. } => ErrorKind::Internal,
        }
    }

    /// The path of the failed operation (the URL for [`Operation::Connect`]).
    pub fn path(&self) -> &str {
        match self {
            MetadataError::NotFound { path, .. }
            | MetadataError::AlreadyExists { path, .. }
            | MetadataError::BadVersion { path, .. }
            | MetadataError::NotEmpty { path, .. }
            | MetadataError::InvalidPath { path, .. }
            | MetadataError::InvalidArgument { path, .. }
            | MetadataError::Unavailable { path, .. }
            | MetadataError::SessionExpired { path, .. }
            | MetadataError::Closed { path, .. }
            | MetadataError::WritesPaused { path, .. }
            | MetadataError::PermissionDenied { path, .. }
            | MetadataError::Internal { path, .. } => path,
        }
    }

    /// The failed operation.
    pub fn operation(&self) -> Operation {
        match self {
            MetadataError::NotFound { op, .. }
            | MetadataError::AlreadyExists { op, .. }
            | MetadataError::BadVersion { op, .. }
            | MetadataError::NotEmpty { op, .. }
            | MetadataError::InvalidPath { op, .. }
            | MetadataError::InvalidArgument { op, .. }
            | MetadataError::Unavailable { op, .. }
            | MetadataError::SessionExpired { op, .. }
            | MetadataError::Closed { op, .. }
            | MetadataError::WritesPaused { op, .. }
            | MetadataError::PermissionDenied { op, .. }
            | MetadataError::Internal { op, .. } => *op,
        }
    }

    /// Whether the same call can succeed later: [`ErrorKind::Unavailable`],
    /// [`ErrorKind::SessionExpired`] and [`ErrorKind::WritesPaused`].
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Unavailable | ErrorKind::SessionExpired | ErrorKind::WritesPaused
        )
    }

    /// Whether a conditional write lost against the stored state:
    /// [`ErrorKind::BadVersion`], [`ErrorKind::AlreadyExists`] (expected
    /// [`ExpectedVersion::NotExists`](crate::ExpectedVersion::NotExists)) or
    /// [`ErrorKind::NotFound`] (expected a version of a missing node). Pulsar
    /// reports all three as `BadVersionException`; re-read and retry.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::BadVersion | ErrorKind::AlreadyExists | ErrorKind::NotFound
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_paused_is_retryable_and_not_a_conflict() {
        let e = MetadataError::WritesPaused {
            op: Operation::Put,
            path: "/a".to_owned(),
            reason: "migration m1 to etcd://x:2379 is in its pause".to_owned(),
        };
        assert_eq!(e.kind(), ErrorKind::WritesPaused);
        assert!(e.is_retryable());
        assert!(!e.is_conflict());
        assert_eq!(e.path(), "/a");
        let msg = e.to_string();
        assert!(
            msg.contains("paused") && msg.contains("retry") && msg.contains("m1"),
            "{msg}"
        );
    }
}
