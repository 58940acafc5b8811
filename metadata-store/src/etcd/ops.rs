//! The [`MetadataStore`] operations of [`EtcdStore`], each bounded by the
//! operation timeout.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::watch::watch_task;
use super::{EtcdStore, Signal};
use crate::error::{MetadataError, Operation, Result};
use crate::memory::{
    check_create_args, check_delete_args, check_import_counter, check_import_version,
    check_put_args,
};
use crate::path::{check_value, validate_path, PathUse};
use crate::store::MetadataStore;
use crate::types::{CreateMode, ExpectedVersion, GetResult, Stat, WatchStream};

#[async_trait]
impl MetadataStore for EtcdStore {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        let op = Operation::Get;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                Ok(inner
                    .read(op, path)
                    .await?
                    .map(|(value, stat)| GetResult { value, stat }))
            })
            .await
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, expected)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                loop {
                    match expected {
                        ExpectedVersion::NotExists => {
                            return inner
                                .create_node(op, path, value, CreateMode::PERSISTENT, 0)
                                .await
                                .map(|(_, s)| s)
                        }
                        ExpectedVersion::Exactly(_) => {
                            return inner
                                .update_node(op, path, value, expected, true)
                                .await?
                                .ok_or_else(|| MetadataError::NotFound {
                                    op,
                                    path: path.to_owned(),
                                })
                        }
                        ExpectedVersion::Any => {
                            if let Some(stat) =
                                inner.update_node(op, path, value, expected, true).await?
                            {
                                return Ok(stat);
                            }
                            match inner
                                .create_node(op, path, value, CreateMode::PERSISTENT, 0)
                                .await
                            {
                                Ok((_, stat)) => return Ok(stat),
                                Err(e) if e.kind() == crate::ErrorKind::AlreadyExists => {}
                                Err(e) => return Err(e),
                            }
                        }
                    }
                }
            })
            .await
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> Result<i64> {
        let ExpectedVersion::Exactly(_) = expected else {
            // Creating, or writing whatever version is there: the version has
            // to be read anyway.
            return Ok(self.put(path, value, expected).await?.version);
        };
        let op = Operation::Put;
        check_put_args(path, value, expected)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                inner
                    .update_node(op, path, value, expected, false)
                    .await?
                    .map(|s| s.version)
                    .ok_or_else(|| MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    })
            })
            .await
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        let op = Operation::Create;
        check_create_args(path, value, mode)?;
        check_value(op, path, value)?;
        let inner = &self.inner;
        inner
            .run(op, path, inner.create_node(op, path, value, mode, 0))
            .await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        let op = Operation::Delete;
        check_delete_args(path, expected)?;
        let inner = &self.inner;
        inner
            .run(op, path, inner.delete_node(op, path, expected))
            .await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        let op = Operation::Exists;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                Ok(inner.read(op, path).await?.map(|(_, s)| s))
            })
            .await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        let op = Operation::Children;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner.run(op, path, inner.list_children(op, path)).await
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        let op = Operation::Watch;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        let signals = inner.signals.subscribe();
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(watch_task(
            Arc::downgrade(inner),
            path.to_owned(),
            tx,
            signals,
            ready_tx,
        ));
        let abort = task.abort_handle();
        let armed = inner
            .run(op, path, async {
                ready_rx.await.unwrap_or_else(|_| {
                    Err(MetadataError::Closed {
                        op,
                        path: path.to_owned(),
                    })
                })
            })
            .await;
        if let Err(e) = armed {
            abort.abort();
            return Err(e);
        }
        struct AbortOnDrop(tokio::task::AbortHandle);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        Ok(WatchStream::new(
            path.to_owned(),
            rx,
            Some(Box::new(AbortOnDrop(abort))),
        ))
    }

    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.signal(Signal::Closed);
        let lease = inner.lease.load(Ordering::Acquire);
        let revoked = tokio::time::timeout(
            inner.options.operation_timeout,
            inner.client.lease_client().revoke(lease),
        )
        .await;
        match revoked {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.to_string().contains("requested lease not found") => Ok(()),
            Ok(Err(e)) => Err(inner.map_err(e, Operation::Close, "/")),
            Err(_) => Err(inner.unavailable(
                Operation::Close,
                "/",
                format!(
                    "etcd `{}` did not revoke the lease within {:?}; it expires by itself",
                    inner.hosts, inner.options.operation_timeout
                ),
            )),
        }
    }

    fn can_import_versions(&self) -> bool {
        true
    }

    fn session_generation(&self) -> Option<u64> {
        Some(self.inner.generation.load(Ordering::Acquire))
    }

    /// etcd numbers versions itself, so the store keeps the difference in a
    /// side key (`o`) and adds it when reading; a conditional write of an
    /// imported node costs one more round trip than of a plain one. Pulsar's
    /// store, which knows no offset, reads such a node's version as if it had
    /// just been created.
    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, ExpectedVersion::NotExists)?;
        check_import_version(path, version)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                inner
                    .create_node(op, path, value, CreateMode::PERSISTENT, version)
                    .await
                    .map(|(_, stat)| stat)
            })
            .await
    }

    /// etcd cannot set a key's version, so the counter is the etcd version of
    /// the `c` side key plus an offset kept in `co`: one transaction,
    /// whatever the difference.
    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_import_counter(path, next)?;
        let inner = &self.inner;
        inner
            .run(op, path, inner.import_counter(op, path, next))
            .await
    }
}
