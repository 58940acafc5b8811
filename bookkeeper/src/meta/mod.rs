//! A cluster's metadata in ZooKeeper, handled as BookKeeper's
//! `AbstractZkLedgerManager`, `ZkLedgerIdGenerator` and `LongZkLedgerIdGenerator`
//! do: the layout check, ledger ids, and create / read / compare-and-set /
//! delete of ledger metadata.

pub(crate) mod format;
pub(crate) mod idgen;
pub(crate) mod layout;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bkswitch_bk_client::{BkError, BkErrorKind, LedgerId};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataError, MetadataStore,
};
use tracing::debug;

use crate::errors::zk_error;
use crate::uri::{LayoutChoice, MetadataServiceUri};
use format::LedgerRecord;
use layout::LedgerManagerKind;

/// The metadata of one BookKeeper cluster.
pub(crate) struct ClusterMeta {
    store: Arc<dyn MetadataStore>,
    cluster: String,
    root: String,
    kind: LedgerManagerKind,
    long_idgen: AtomicBool,
}

impl std::fmt::Debug for ClusterMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterMeta")
            .field("cluster", &self.cluster)
            .field("root", &self.root)
            .field("kind", &self.kind)
            .finish()
    }
}

/// The outcome of a metadata write that lost a compare-and-set.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Someone else changed the metadata (`MetadataVersionException`, -17).
    Conflict,
    /// Anything else.
    Failed(BkError),
}

impl ClusterMeta {
    /// Opens the cluster's metadata: the ledgers root must exist (a bookie or
    /// `bookkeeper shell initnewcluster` creates it); `LAYOUT` is read, or
    /// created with the URI's layout when missing, as BookKeeper's clients do.
    pub(crate) async fn open(
        store: Arc<dyn MetadataStore>,
        cluster: &str,
        uri: &MetadataServiceUri,
    ) -> Result<ClusterMeta, BkError> {
        let root = uri.ledgers_root().to_owned();
        let exists = store
            .exists(&root)
            .await
            .map_err(|e| zk_error(cluster, "reading the ledgers root", e))?;
        if exists.is_none() {
            return Err(BkError::new(
                BkErrorKind::Other,
                format!(
                    "no BookKeeper cluster at `{uri}`: the ledgers root `{root}` does not exist \
                     in ZooKeeper; check the URI, or initialize the cluster (`bin/bookkeeper \
                     shell initnewcluster`) and start its bookies"
                ),
            )
            .with_cluster(cluster));
        }
        let layout_path = format!("{root}/LAYOUT");
        let wanted = match uri.layout() {
            LayoutChoice::Hierarchical | LayoutChoice::FromCluster => {
                LedgerManagerKind::Hierarchical
            }
            LayoutChoice::LongHierarchical => LedgerManagerKind::LongHierarchical,
        };
        let kind = match store
            .get(&layout_path)
            .await
            .map_err(|e| zk_error(cluster, "reading LAYOUT", e))?
        {
            Some(found) => {
                let kind = LedgerManagerKind::parse_layout(&found.value)
                    .map_err(|e| e.with_cluster(cluster))?;
                if uri.layout() != LayoutChoice::FromCluster && kind != wanted {
                    return Err(BkError::new(
                        BkErrorKind::InvalidArgument,
                        format!(
                            "the URI `{uri}` asks for the {wanted:?} ledger layout but the \
                             cluster's LAYOUT records {kind:?}; use `zk://` (or the matching \
                             `zk+…://` scheme) so that both agree"
                        ),
                    )
                    .with_cluster(cluster));
                }
                kind
            }
            None => {
                match store
                    .put(
                        &layout_path,
                        &wanted.layout_bytes(),
                        ExpectedVersion::NotExists,
                    )
                    .await
                {
                    Ok(_) => wanted,
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                        let found = store
                            .get(&layout_path)
                            .await
                            .map_err(|e| zk_error(cluster, "reading LAYOUT", e))?
                            .map(|g| g.value)
                            .unwrap_or_default();
                        LedgerManagerKind::parse_layout(&found)
                            .map_err(|e| e.with_cluster(cluster))?
                    }
                    Err(e) => return Err(zk_error(cluster, "creating LAYOUT", e)),
                }
            }
        };
        Ok(ClusterMeta {
            store,
            cluster: cluster.to_owned(),
            root,
            kind,
            long_idgen: AtomicBool::new(false),
        })
    }

    pub(crate) fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn kind(&self) -> LedgerManagerKind {
        self.kind
    }

    fn err(&self, what: &str, e: MetadataError) -> BkError {
        zk_error(&self.cluster, what, e)
    }

    pub(crate) fn ledger_path(&self, ledger_id: LedgerId) -> String {
        self.kind.ledger_path(&self.root, ledger_id)
    }

    /// One id from the cluster's own generator, shared with every BookKeeper
    /// client of the cluster: an ephemeral sequential `ID-` node whose suffix is
    /// the id, deleted at once. Ids are unique and increasing (not contiguous).
    pub(crate) async fn generate_id(&self) -> Result<LedgerId, BkError> {
        if !self.kind.supports_long_ids() {
            return match self.short_id().await? {
                Some(id) => Ok(id),
                None => Err(BkError::from_code(
                    -106,
                    "the short ledger id generator overflowed and the legacy layout has no long ids",
                )
                .with_cluster(&self.cluster)),
            };
        }
        if self.long_idgen_present().await? {
            return self.long_id().await;
        }
        match self.short_id().await? {
            Some(id) => Ok(id),
            None => {
                // 31-bit ids are used up: switch to 63-bit ids for good.
                let path = format!("{}/idgen-long", self.root);
                match self.store.put(&path, b"", ExpectedVersion::NotExists).await {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(self.err("creating idgen-long", e)),
                }
                self.long_idgen.store(true, Ordering::Release);
                self.long_id().await
            }
        }
    }

    /// Whether `idgen-long` exists. Only its presence is remembered: it is
    /// never removed, but it may appear at any time — when another client's
    /// short ids overflow, or when an operator advances the generator before a
    /// switch ([`advance_ledger_id_generator`](crate::advance_ledger_id_generator)).
    /// A client that remembered its absence would go on handing out short ids
    /// below the ones the operator reserved, and collide with copied ledgers.
    /// BookKeeper's `LongZkLedgerIdGenerator` checks on every id while the node
    /// is absent too; ids are taken once per ledger, so the read is cheap.
    async fn long_idgen_present(&self) -> Result<bool, BkError> {
        if self.long_idgen.load(Ordering::Acquire) {
            return Ok(true);
        }
        let present = self
            .store
            .exists(&format!("{}/idgen-long", self.root))
            .await
            .map_err(|e| self.err("reading idgen-long", e))?
            .is_some();
        if present {
            self.long_idgen.store(true, Ordering::Release);
        }
        Ok(present)
    }

    /// A sequential suffix below `prefix` (`…/ID-`); `None` when it is at or
    /// above `i32::MAX` (overflow).
    async fn sequential(&self, prefix: &str) -> Result<Option<i64>, BkError> {
        let (path, _) = self
            .store
            .create(prefix, b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await
            .map_err(|e| self.err("generating a ledger id", e))?;
        let suffix = path.strip_prefix(prefix).unwrap_or_default();
        let id: i64 = suffix.parse().map_err(|_| {
            BkError::new(
                BkErrorKind::Other,
                format!("the id generator returned `{path}`, which does not end in a number"),
            )
            .with_cluster(&self.cluster)
        })?;
        // The node has served its purpose; BookKeeper deletes it at once too.
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(e) = store.delete(&path, ExpectedVersion::Any).await {
                debug!(%path, error = %e, "could not delete an id generator node");
            }
        });
        Ok((0..i64::from(i32::MAX)).contains(&id).then_some(id))
    }

    async fn short_id(&self) -> Result<Option<LedgerId>, BkError> {
        self.sequential(&format!("{}/idgen/ID-", self.root)).await
    }

    /// A 63-bit id: `(hob << 32) | low`, `low` from the largest `HOB-`
    /// directory. The directories are listed on every id, unlike BookKeeper's
    /// `LongZkLedgerIdGenerator`, which caches them until it creates one: a
    /// directory an operator creates to advance the generator
    /// ([`advance_ledger_id_generator`](crate::advance_ledger_id_generator)) is
    /// used at once.
    async fn long_id(&self) -> Result<LedgerId, BkError> {
        let gen = format!("{}/idgen-long", self.root);
        for _ in 0..16 {
            let hobs = self.hobs(&gen).await?;
            let Some(&hob) = hobs.last() else {
                self.create_hob(&gen, 1).await?;
                continue;
            };
            if hobs.len() > 3 {
                // Keep the three largest, as BookKeeper does.
                for old in &hobs[..hobs.len() - 3] {
                    let path = format!("{gen}/HOB-{old:010}");
                    let _ = self.store.delete(&path, ExpectedVersion::Exactly(0)).await;
                }
            }
            match self.sequential(&format!("{gen}/HOB-{hob:010}/ID-")).await? {
                Some(low) => return Ok((hob << 32) | low),
                None => self.create_hob(&gen, hob + 1).await?,
            }
        }
        Err(BkError::new(
            BkErrorKind::Other,
            "the long ledger id generator did not settle after 16 attempts",
        )
        .with_cluster(&self.cluster))
    }

    /// The `HOB-` directories below `gen`, ascending.
    async fn hobs(&self, gen: &str) -> Result<Vec<i64>, BkError> {
        let mut hobs: Vec<i64> = self
            .store
            .children(gen)
            .await
            .map_err(|e| self.err("listing idgen-long", e))?
            .iter()
            .filter_map(|c| c.strip_prefix("HOB-")?.parse().ok())
            .collect();
        hobs.sort_unstable();
        Ok(hobs)
    }

    async fn create_hob(&self, gen: &str, hob: i64) -> Result<(), BkError> {
        let path = format!("{gen}/HOB-{hob:010}");
        match self.store.put(&path, b"", ExpectedVersion::NotExists).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(self.err("creating a HOB directory", e)),
        }
        Ok(())
    }

    /// Creates the metadata of a new ledger. A create retried after a lost reply
    /// recognises its own znode by the creation token.
    ///
    /// Returns the znode's creation time. Errors: `LedgerExists` (-20) when
    /// another ledger has the id.
    pub(crate) async fn create(&self, record: &LedgerRecord) -> Result<i64, BkError> {
        let path = self.ledger_path(record.ledger_id);
        let bytes = format::encode(record);
        let mut attempts = 0;
        let created = loop {
            attempts += 1;
            match self
                .store
                .put(&path, &bytes, ExpectedVersion::NotExists)
                .await
            {
                // A delete removing the (empty) parents raced with the parents'
                // creation: create them again, as `asyncCreateFullPathOptimistic`.
                Err(e) if e.kind() == ErrorKind::NotFound && attempts < 10 => continue,
                other => break other,
            }
        };
        match created {
            Ok(stat) => Ok(stat.created_ms),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let mine = match self.read(record.ledger_id).await {
                    Ok(Some((existing, _))) if existing.ctoken == record.ctoken => {
                        Some(existing.ctime)
                    }
                    _ => None,
                };
                if let Some(ctime) = mine {
                    Ok(ctime)
                } else {
                    Err(BkError::new(
                        BkErrorKind::LedgerExists,
                        format!(
                            "ledger id {} is already taken (znode {path})",
                            record.ledger_id
                        ),
                    )
                    .with_cluster(&self.cluster)
                    .with_ledger(record.ledger_id))
                }
            }
            Err(e) => Err(self
                .err(
                    &format!("creating the metadata of ledger {}", record.ledger_id),
                    e,
                )
                .with_ledger(record.ledger_id)),
        }
    }

    /// Reads a ledger's metadata and its znode version; `None` when missing.
    pub(crate) async fn read(
        &self,
        ledger_id: LedgerId,
    ) -> Result<Option<(LedgerRecord, i64)>, BkError> {
        if ledger_id < 0 {
            return Ok(None);
        }
        let path = self.ledger_path(ledger_id);
        let Some(found) = self
            .store
            .get(&path)
            .await
            .map_err(|e| self.err(&format!("reading the metadata of ledger {ledger_id}"), e))?
        else {
            return Ok(None);
        };
        let record = format::decode(ledger_id, &found.value, found.stat.created_ms)
            .map_err(|e| e.with_cluster(&self.cluster))?;
        Ok(Some((record, found.stat.version)))
    }

    /// Reads a ledger's metadata; -25 when missing.
    pub(crate) async fn read_existing(
        &self,
        ledger_id: LedgerId,
    ) -> Result<(LedgerRecord, i64), BkError> {
        self.read(ledger_id).await?.ok_or_else(|| {
            BkError::new(
                BkErrorKind::NoSuchLedgerOnMetadataServer,
                format!("ledger {ledger_id} has no metadata (never created, or deleted)"),
            )
            .with_cluster(&self.cluster)
            .with_ledger(ledger_id)
        })
    }

    /// Compare-and-set of a ledger's metadata against `version`.
    pub(crate) async fn write(
        &self,
        record: &LedgerRecord,
        version: i64,
    ) -> Result<i64, WriteError> {
        let path = self.ledger_path(record.ledger_id);
        match self
            .store
            .put(
                &path,
                &format::encode(record),
                ExpectedVersion::Exactly(version),
            )
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(e) if e.kind() == ErrorKind::BadVersion => Err(WriteError::Conflict),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(WriteError::Failed(
                BkError::new(
                    BkErrorKind::NoSuchLedgerOnMetadataServer,
                    format!(
                        "ledger {} was deleted while its metadata was updated",
                        record.ledger_id
                    ),
                )
                .with_cluster(&self.cluster)
                .with_ledger(record.ledger_id),
            )),
            Err(e) => Err(WriteError::Failed(
                self.err(
                    &format!("updating the metadata of ledger {}", record.ledger_id),
                    e,
                )
                .with_ledger(record.ledger_id),
            )),
        }
    }

    /// Deletes a ledger's metadata (a missing ledger is a success, as with
    /// BookKeeper's ZooKeeper driver since 4.10), then each parent znode that is
    /// now empty, up to the ledgers root.
    pub(crate) async fn delete(&self, ledger_id: LedgerId) -> Result<(), BkError> {
        let path = self.ledger_path(ledger_id);
        match self.store.delete(&path, ExpectedVersion::Any).await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(self
                    .err(&format!("deleting the metadata of ledger {ledger_id}"), e)
                    .with_ledger(ledger_id))
            }
        }
        let mut parent = path.as_str();
        while let Some(i) = parent.rfind('/') {
            parent = &parent[..i];
            if parent.len() <= self.root.len() {
                break;
            }
            if self
                .store
                .delete(parent, ExpectedVersion::Any)
                .await
                .is_err()
            {
                break;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_bk_client::{DigestType, Ensemble, LedgerState};
    use bkswitch_metadata_store::MemoryStore;
    use std::collections::BTreeMap;

    fn record(id: LedgerId) -> LedgerRecord {
        LedgerRecord {
            ledger_id: id,
            ensemble_size: 1,
            write_quorum_size: 1,
            ack_quorum_size: 1,
            state: LedgerState::Open,
            last_entry_id: -1,
            length: 0,
            ensembles: vec![Ensemble {
                first_entry_id: 0,
                bookies: vec!["b:1".into()],
            }],
            digest_type: Some(DigestType::Crc32c),
            password: vec![],
            stored_ctime: Some(5),
            ctime: 5,
            custom_metadata: BTreeMap::new(),
            ctoken: 11,
        }
    }

    async fn meta(store: &Arc<dyn MetadataStore>, uri: &str) -> Result<ClusterMeta, BkError> {
        ClusterMeta::open(store.clone(), "c", &MetadataServiceUri::parse(uri).unwrap()).await
    }

    #[tokio::test]
    async fn open_checks_root_and_layout() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        let e = meta(&store, "zk://h:1/ledgers").await.unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        store
            .put("/ledgers", b"", ExpectedVersion::Any)
            .await
            .unwrap();
        let m = meta(&store, "zk://h:1/ledgers").await.unwrap();
        assert_eq!(m.kind(), LedgerManagerKind::Hierarchical);
        let layout = store.get("/ledgers/LAYOUT").await.unwrap().unwrap();
        assert_eq!(layout.value, LedgerManagerKind::Hierarchical.layout_bytes());
        let e = meta(&store, "zk+longhierarchical://h:1/ledgers")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("LAYOUT records"), "{e}");
        assert_eq!(
            store.get("/ledgers/LAYOUT").await.unwrap().unwrap().value,
            layout.value,
            "a refused open leaves LAYOUT untouched"
        );
    }

    #[tokio::test]
    async fn ids_are_increasing_and_switch_to_long_ids_on_overflow() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        store.put("/l", b"", ExpectedVersion::Any).await.unwrap();
        let m = meta(&store, "zk+hierarchical://h:1/l").await.unwrap();
        let a = m.generate_id().await.unwrap();
        let b = m.generate_id().await.unwrap();
        assert!(b > a && a >= 0, "{a} {b}");
        // Long ids once idgen-long exists: (hob << 32) | low, starting at HOB 1.
        store
            .put("/l/idgen-long", b"", ExpectedVersion::Any)
            .await
            .unwrap();
        let m = meta(&store, "zk+hierarchical://h:1/l").await.unwrap();
        let c = m.generate_id().await.unwrap();
        assert_eq!(c >> 32, 1, "{c}");
        let d = m.generate_id().await.unwrap();
        assert!(d > c);
        assert!(store
            .exists("/l/idgen-long/HOB-0000000001")
            .await
            .unwrap()
            .is_some());
    }

    #[tokio::test]
    async fn create_read_write_delete() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        store.put("/l", b"", ExpectedVersion::Any).await.unwrap();
        let m = meta(&store, "zk://h:1/l").await.unwrap();
        m.create(&record(5)).await.unwrap();
        // Retried create of our own znode succeeds; someone else's is -20.
        m.create(&record(5)).await.unwrap();
        let mut other = record(5);
        other.ctoken = 12;
        assert_eq!(m.create(&other).await.unwrap_err().code(), -20);
        let (r, v) = m.read_existing(5).await.unwrap();
        assert_eq!(r, record(5));
        let mut closed = r.clone();
        closed.state = LedgerState::Closed;
        let v2 = m.write(&closed, v).await.unwrap();
        assert!(matches!(
            m.write(&closed, v).await,
            Err(WriteError::Conflict)
        ));
        assert_eq!(m.read_existing(5).await.unwrap(), (closed, v2));
        // Delete removes the znode and its now-empty parents, not the root.
        m.create(&record(6)).await.unwrap();
        m.delete(5).await.unwrap();
        assert!(
            store.exists("/l/00/0000").await.unwrap().is_some(),
            "6 still there"
        );
        m.delete(6).await.unwrap();
        assert!(store.exists("/l/00").await.unwrap().is_none());
        assert!(store.exists("/l").await.unwrap().is_some());
        m.delete(6).await.unwrap();
        assert_eq!(m.read_existing(6).await.unwrap_err().code(), -25);
        assert_eq!(m.read_existing(-1).await.unwrap_err().code(), -25);
    }
    /// Metadata written by another client (or corrupted) with quorums the
    /// quorum arithmetic cannot hold is refused when read, naming the ledger and
    /// what is wrong, and the stored bytes stay as they were.
    #[tokio::test]
    async fn impossible_quorums_and_oversized_ensembles_are_refused_on_read() {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        store.put("/l", b"", ExpectedVersion::Any).await.unwrap();
        let m = meta(&store, "zk://h:1/l").await.unwrap();
        let mut ack_above_write = record(8);
        ack_above_write.ensemble_size = 3;
        ack_above_write.write_quorum_size = 2;
        ack_above_write.ack_quorum_size = 3;
        ack_above_write.ensembles[0].bookies = vec!["a:1".into(), "b:1".into(), "c:1".into()];
        let mut write_above_ensemble = ack_above_write.clone();
        write_above_ensemble.ledger_id = 9;
        write_above_ensemble.write_quorum_size = 4;
        write_above_ensemble.ack_quorum_size = 2;
        let mut too_many = record(10);
        too_many.ensemble_size = 65;
        too_many.write_quorum_size = 65;
        too_many.ack_quorum_size = 33;
        too_many.ensembles[0].bookies = (0..65).map(|i| format!("b{i}:3181")).collect();
        for (r, needle) in [
            (
                &ack_above_write,
                "ack quorum 3 is larger than the write quorum 2",
            ),
            (
                &write_above_ensemble,
                "write quorum 4 is larger than the ensemble size 3",
            ),
            (&too_many, "ensemble size 65 is over the 64 bookies"),
        ] {
            let path = m.ledger_path(r.ledger_id);
            let bytes = format::encode(r);
            store
                .put(&path, &bytes, ExpectedVersion::Any)
                .await
                .unwrap();
            let e = m.read_existing(r.ledger_id).await.unwrap_err();
            assert_eq!(e.ledger_id(), Some(r.ledger_id), "{e}");
            let text = e.to_string();
            assert!(text.contains(&format!("ledger {}", r.ledger_id)), "{text}");
            assert!(text.contains(needle), "{text}");
            assert_eq!(store.get(&path).await.unwrap().unwrap().value, bytes);
        }
    }
}
