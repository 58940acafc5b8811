//! The [`MetadataStore`] operations of [`ZkStore`], each bounded by the
//! operation timeout.

use super::*;

use futures::{StreamExt, TryStreamExt};

use crate::memory::{check_import_counter, ephemeral_counter_error};

/// Name prefix of the children that [`ZkStore`] creates and deletes to raise a
/// sequential counter ([`MetadataStore::import_sequential_counter`]).
const COUNTER_CHILD_PREFIX: &str = "bkswitch-counter-";

/// Create-and-delete pairs in flight while raising a sequential counter.
const COUNTER_PAIRS_IN_FLIGHT: usize = 64;

fn to_stat(s: &zookeeper_async::Stat) -> Stat {
    Stat {
        version: i64::from(s.version),
        cversion: i64::from(s.cversion),
        created_ms: s.ctime,
        modified_ms: s.mtime,
        ephemeral: s.ephemeral_owner != 0,
        num_children: i64::from(s.num_children),
    }
}

fn zk_mode(mode: CreateMode) -> zookeeper_async::CreateMode {
    match (mode.ephemeral, mode.sequential) {
        (false, false) => zookeeper_async::CreateMode::Persistent,
        (true, false) => zookeeper_async::CreateMode::Ephemeral,
        (false, true) => zookeeper_async::CreateMode::PersistentSequential,
        (true, true) => zookeeper_async::CreateMode::EphemeralSequential,
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl MetadataStore for ZkStore {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        let op = Operation::Get;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                match conn.zk.get_data(&inner.full(path), false).await {
                    Ok((value, stat)) => Ok(Some(GetResult {
                        value,
                        stat: to_stat(&stat),
                    })),
                    Err(ZkError::NoNode) => Ok(None),
                    Err(e) => Err(inner.map_err(e, op, path, -1)),
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
        // Nothing to leave out: the write answers the whole `Stat`.
        Ok(self.put(path, value, expected).await?.version)
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, expected)?;
        let inner = &self.inner;
        let full = inner.full(path);
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let persistent = zookeeper_async::CreateMode::Persistent;
                match expected {
                    ExpectedVersion::Exactly(v) => {
                        let Ok(version) = i32::try_from(v) else {
                            // ZooKeeper versions are 32-bit: this one cannot match.
                            return match conn.zk.exists(&full, false).await {
                                Ok(Some(_)) => Err(MetadataError::BadVersion {
                                    op,
                                    path: path.to_owned(),
                                    expected: v,
                                }),
                                Ok(None) => Err(inner.map_err(ZkError::NoNode, op, path, v)),
                                Err(e) => Err(inner.map_err(e, op, path, v)),
                            };
                        };
                        conn.zk
                            .set_data(&full, value.to_vec(), Some(version))
                            .await
                            .map(|s| to_stat(&s))
                            .map_err(|e| inner.map_err(e, op, path, v))
                    }
                    ExpectedVersion::NotExists => inner
                        .create_full(&conn, op, path, &full, value, persistent)
                        .await
                        .map(|(_, stat)| to_stat(&stat)),
                    ExpectedVersion::Any => {
                        // Overwrite or create; a concurrent delete or create
                        // between the two steps makes us try the other one.
                        let mut attempts = 0;
                        loop {
                            attempts += 1;
                            match conn.zk.set_data(&full, value.to_vec(), None).await {
                                Ok(stat) => return Ok(to_stat(&stat)),
                                Err(ZkError::NoNode) => {}
                                Err(e) => return Err(inner.map_err(e, op, path, -1)),
                            }
                            match inner
                                .create_full(&conn, op, path, &full, value, persistent)
                                .await
                            {
                                Err(e)
                                    if e.kind() == crate::ErrorKind::AlreadyExists
                                        && attempts < 5 => {}
                                other => return other.map(|(_, stat)| to_stat(&stat)),
                            }
                        }
                    }
                }
            })
            .await
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        let op = Operation::Create;
        check_create_args(path, value, mode)?;
        let inner = &self.inner;
        let full = inner.full(path);
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let (actual, stat) = inner
                    .create_full(&conn, op, path, &full, value, zk_mode(mode))
                    .await?;
                Ok((inner.strip(&actual).to_owned(), to_stat(&stat)))
            })
            .await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        let op = Operation::Delete;
        check_delete_args(path, expected)?;
        let inner = &self.inner;
        let full = inner.full(path);
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let (version, expected_num) = match expected {
                    ExpectedVersion::Exactly(v) => match i32::try_from(v) {
                        Ok(v32) => (Some(v32), v),
                        // ZooKeeper versions are 32-bit: this one cannot match.
                        Err(_) => {
                            return match conn.zk.exists(&full, false).await {
                                Ok(Some(_)) => Err(MetadataError::BadVersion {
                                    op,
                                    path: path.to_owned(),
                                    expected: v,
                                }),
                                Ok(None) => Err(inner.map_err(ZkError::NoNode, op, path, v)),
                                Err(e) => Err(inner.map_err(e, op, path, v)),
                            }
                        }
                    },
                    _ => (None, -1),
                };
                conn.zk
                    .delete(&full, version)
                    .await
                    .map_err(|e| inner.map_err(e, op, path, expected_num))?;
                inner.disown(&full);
                Ok(())
            })
            .await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        let op = Operation::Exists;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                conn.zk
                    .exists(&inner.full(path), false)
                    .await
                    .map(|s| s.as_ref().map(to_stat))
                    .map_err(|e| inner.map_err(e, op, path, -1))
            })
            .await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        let op = Operation::Children;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let mut names = match conn.zk.get_children(&inner.full(path), false).await {
                    Ok(names) => names,
                    Err(ZkError::NoNode) => Vec::new(),
                    Err(e) => return Err(inner.map_err(e, op, path, -1)),
                };
                if path == "/" && inner.chroot.is_empty() {
                    // ZooKeeper's own subtree is not part of the store.
                    names.retain(|n| n != RESERVED_ROOT);
                }
                names.sort_unstable();
                Ok(names)
            })
            .await
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        watch::start(&self.inner, path).await
    }

    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.shared.state.send_replace(ConnState::Closed);
        inner.signal(Signal::Closed);
        let conn = inner.conn.load_full();
        let owned = inner.take_owned(&conn);
        match tokio::time::timeout(inner.options.operation_timeout, close_session(&conn, owned))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(inner.map_err(e, Operation::Close, "/", -1)),
            Err(_) => Err(MetadataError::Unavailable {
                op: Operation::Close,
                path: "/".to_owned(),
                reason: format!(
                    "ZooKeeper `{}` did not take the session close within {:?}; the \
                     server will expire the session",
                    inner.hosts, inner.options.operation_timeout
                ),
            }),
        }
    }

    fn can_import_versions(&self) -> bool {
        true
    }

    fn session_generation(&self) -> Option<u64> {
        Some(self.inner.conn.load().generation)
    }

    /// ZooKeeper numbers versions itself (+1 per setData), so version `v` is
    /// imported as a create and then `v` writes of the same value, each a
    /// compare-and-set on the version just reached: `v + 1` round trips,
    /// each bounded by the operation timeout. An import cut short leaves the
    /// node at a lower version with the right value; calling `put` with
    /// [`ExpectedVersion::Exactly`] the remaining times completes it.
    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, ExpectedVersion::NotExists)?;
        check_import_version(path, version)?;
        if i32::try_from(version).is_err() {
            return Err(MetadataError::InvalidArgument {
                op,
                path: path.to_owned(),
                reason: format!(
                    "ZooKeeper versions are 32-bit; version {version} cannot be imported"
                ),
            });
        }
        let mut stat = self.put(path, value, ExpectedVersion::NotExists).await?;
        while stat.version < version {
            stat = self
                .put(path, value, ExpectedVersion::Exactly(stat.version))
                .await?;
        }
        Ok(stat)
    }

    /// ZooKeeper counts child creations itself, so the counter is raised by
    /// creating and at once deleting `next − current` sequential children
    /// named `bkswitch-counter-`, 64 pairs at a time on the one connection: two round trips per step, pipelined. A
    /// crash between a create and its delete leaves that empty child behind.
    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_import_counter(path, next)?;
        let child = crate::path::join(path, COUNTER_CHILD_PREFIX);
        loop {
            let stat = self
                .exists(path)
                .await?
                .ok_or_else(|| MetadataError::NotFound {
                    op,
                    path: path.to_owned(),
                })?;
            if stat.ephemeral {
                return Err(ephemeral_counter_error(path));
            }
            let missing = next - stat.next_sequential_suffix();
            if missing <= 0 {
                return Ok(stat);
            }
            let child = &child;
            futures::stream::iter(0..missing)
                .map(|_| async move {
                    let (made, _) = self
                        .create(child, b"", CreateMode::PERSISTENT_SEQUENTIAL)
                        .await?;
                    self.delete(&made, ExpectedVersion::Any).await
                })
                .buffer_unordered(COUNTER_PAIRS_IN_FLIGHT)
                .try_collect::<()>()
                .await?;
        }
    }
}
