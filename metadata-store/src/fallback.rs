//! The answers of a store that does not offer an optional capability, for
//! backends and test doubles to name explicitly: [`MetadataStore`] has no
//! defaulted methods, so that a decorator that forgets to forward one does
//! not compile (decorators implement [`Layer`](crate::layer::Layer), which
//! forwards every call).

use std::fmt::Debug;

use crate::error::{MetadataError, Operation, Result};
use crate::path::{validate_path, PathUse};
use crate::store::MetadataStore;
use crate::types::{ExpectedVersion, Stat};

/// [`MetadataStore::put_version`] as a [`put`](MetadataStore::put) that keeps
/// only the version, for a store whose `put` costs no more than that.
///
/// # Errors
///
/// Those of `put`.
pub async fn put_version_by_put<S: MetadataStore + ?Sized>(
    store: &S,
    path: &str,
    value: &[u8],
    expected: ExpectedVersion,
) -> Result<i64> {
    Ok(store.put(path, value, expected).await?.version)
}

/// The refusal of [`MetadataStore::import_version`] by a store that numbers
/// versions itself ([`can_import_versions`](MetadataStore::can_import_versions)
/// is `false`): [`InvalidArgument`](crate::ErrorKind::InvalidArgument) naming
/// the store, the path and the version; nothing is written. A bad path is
/// [`InvalidPath`](crate::ErrorKind::InvalidPath), as every call reports it.
///
/// # Errors
///
/// Always.
pub fn refuse_import_version(store: &dyn Debug, path: &str, version: i64) -> Result<Stat> {
    validate_path(Operation::Put, path, PathUse::Write)?;
    Err(MetadataError::InvalidArgument {
        op: Operation::Put,
        path: path.to_owned(),
        reason: format!(
            "this metadata store ({store:?}) cannot import versions (it numbers them \
             itself); copy the record with put and let its readers re-read it, or \
             migrate to a store that can (memory, etcd). Version {version} was not \
             imported"
        ),
    })
}

/// The refusal of [`MetadataStore::import_sequential_counter`] by a store
/// that does not offer it; nothing is written.
///
/// # Errors
///
/// Always: [`InvalidArgument`](crate::ErrorKind::InvalidArgument), or
/// [`InvalidPath`](crate::ErrorKind::InvalidPath) for a bad path.
pub fn refuse_import_sequential_counter(store: &dyn Debug, path: &str, next: i64) -> Result<Stat> {
    validate_path(Operation::Put, path, PathUse::Write)?;
    Err(MetadataError::InvalidArgument {
        op: Operation::Put,
        path: path.to_owned(),
        reason: format!(
            "this metadata store ({store:?}) cannot import sequential counters; \
             create and delete sequential children to raise it. The counter was not \
             raised to {next}"
        ),
    })
}
