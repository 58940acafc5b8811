//! The migration nemesis's writers and readers: the faulty store opener,
//! the write loops of the live writers, and the snapshots and checks of
//! what they acknowledged.

use bkswitch_metadata_migration::{
    MigratingStore, NamedMemoryStores, StoreOpener, CURRENT_PATH, MIGRATION_ROOT,
};
use bkswitch_metadata_store::testkit::RecordingStore;
use bkswitch_metadata_store::{ErrorKind, ExpectedVersion, MetadataStore};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Keys each writer owns.
pub const KEYS: usize = 4;

/// The model: the last acknowledged write of every key, and what broke.
#[derive(Debug, Default)]
pub(super) struct Model {
    /// Key → (value, version) of its last acknowledged write.
    pub(super) acked: BTreeMap<String, (Vec<u8>, i64)>,
    /// Key → the value of a write in flight when its writer was lost (it
    /// may or may not have been applied).
    pub(super) in_flight: BTreeMap<String, Vec<u8>>,
    pub(super) writes: usize,
    pub(super) violations: Vec<String>,
}

/// The path of writer `writer`'s key `k`.
pub(super) fn key(writer: usize, k: usize) -> String {
    format!("/managed-ledgers/t/ns/persistent/w{writer}-k{k}")
}

/// Opens the stores of one writer's participant (its first one, and the
/// targets it follows) behind a [`RecordingStore`] that injects the faults
/// the plan asks for; the last one opened is the one in use.
#[derive(Debug)]
pub(super) struct FaultyOpener {
    pub(super) stores: NamedMemoryStores,
    pub(super) last: Mutex<Arc<RecordingStore>>,
}

#[async_trait::async_trait]
impl StoreOpener for FaultyOpener {
    async fn open(&self, url: &str) -> bkswitch_metadata_store::Result<Arc<dyn MetadataStore>> {
        let inner = self.stores.open(url).await?;
        let store = Arc::new(RecordingStore::new(inner));
        *self.last.lock() = store.clone();
        Ok(store)
    }
}

/// The migration records and the current-migration pointer of a store.
pub(super) async fn records(store: &dyn MetadataStore) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let base = format!("{MIGRATION_ROOT}/records");
    let mut paths = vec![CURRENT_PATH.to_owned()];
    if let Ok(ids) = store.children(&base).await {
        paths.extend(ids.into_iter().map(|id| format!("{base}/{id}")));
    }
    for path in paths {
        if let Ok(Some(r)) = store.get(&path).await {
            out.push((path, r.value, r.stat.version));
        }
    }
    out.sort();
    out
}

/// Every path and value under `/` (control paths included).
pub(super) async fn snapshot(store: &dyn MetadataStore) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut todo = vec!["/".to_owned()];
    while let Some(p) = todo.pop() {
        let Ok(children) = store.children(&p).await else {
            continue;
        };
        for c in children {
            let path = if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            };
            if let Ok(Some(r)) = store.get(&path).await {
                out.push((path.clone(), r.value, r.stat.version));
            }
            todo.push(path);
        }
    }
    out.sort();
    out
}

/// The checker: every key holds its last acknowledged write (value and
/// version) in the store in use.
pub(super) async fn check(
    acked: &BTreeMap<String, (Vec<u8>, i64)>,
    store: &dyn MetadataStore,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, (value, version)) in acked {
        match store.get(path).await {
            Ok(Some(r)) if r.value == *value && r.stat.version == *version => {}
            Ok(Some(r)) => out.push(format!(
                "lost write: {path} holds {:?} at version {}, the last acknowledged write was \
                 {:?} at version {version}",
                String::from_utf8_lossy(&r.value),
                r.stat.version,
                String::from_utf8_lossy(value)
            )),
            Ok(None) => out.push(format!(
                "lost write: {path} is missing, the last acknowledged write was {:?} at \
                 version {version}",
                String::from_utf8_lossy(value)
            )),
            Err(e) => out.push(format!("reading {path}: {e}")),
        }
    }
    out
}

/// A writer: conditional writes of its keys, holding the version of the
/// last acknowledged write; retries what the pause refuses.
pub(super) async fn write_loop(
    w: usize,
    store: MigratingStore,
    model: Arc<Mutex<Model>>,
    stop: Arc<AtomicBool>,
) {
    // Adopt what the store holds: it must be the last acknowledged write,
    // or the write in flight when the previous incarnation was lost.
    let mut held: Vec<Option<i64>> = vec![None; KEYS];
    for (k, slot) in held.iter_mut().enumerate() {
        let path = key(w, k);
        let r = loop {
            match store.get(&path).await {
                Ok(r) => break r,
                Err(_) if !stop.load(Ordering::Acquire) => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(_) => return,
            }
        };
        let mut m = model.lock();
        let acked = m.acked.get(&path).cloned();
        let pending = m.in_flight.remove(&path);
        match (acked, r) {
            (None, None) => {}
            (Some((v, ver)), Some(r)) if r.value == v && r.stat.version == ver => {
                *slot = Some(ver);
            }
            (acked, Some(r))
                if pending.as_deref() == Some(r.value.as_slice())
                    && r.stat.version == acked.as_ref().map_or(0, |a| a.1 + 1) =>
            {
                m.acked.insert(path.clone(), (r.value, r.stat.version));
                *slot = Some(r.stat.version);
            }
            (None, Some(r)) => {
                m.violations.push(format!(
                    "{path} holds {:?} at version {} that nobody acknowledged",
                    String::from_utf8_lossy(&r.value),
                    r.stat.version
                ));
                *slot = Some(r.stat.version);
            }
            (Some((v, ver)), r) => {
                m.violations.push(format!(
                    "lost write: writer {w} restarted and read {path} as {:?}, the last \
                     acknowledged write was {:?} at version {ver}",
                    r.map(|r| (
                        String::from_utf8_lossy(&r.value).into_owned(),
                        r.stat.version
                    )),
                    String::from_utf8_lossy(&v)
                ));
                return;
            }
        }
    }
    let mut seq = 0u64;
    while !stop.load(Ordering::Acquire) {
        let k = (seq as usize) % KEYS;
        seq += 1;
        let path = key(w, k);
        let value = format!("w{w}-{seq}-{}", store.name()).into_bytes();
        let expected = match held[k] {
            Some(v) => ExpectedVersion::Exactly(v),
            None => ExpectedVersion::NotExists,
        };
        model.lock().in_flight.insert(path.clone(), value.clone());
        let r = store.put(&path, &value, expected).await;
        let fenced = {
            let mut m = model.lock();
            m.in_flight.remove(&path);
            match r {
                Ok(stat) => {
                    if let Some(before) = held[k] {
                        if stat.version <= before {
                            m.violations.push(format!(
                            "version went back: {path} acknowledged at version {} after {before}",
                            stat.version
                        ));
                        }
                    }
                    held[k] = Some(stat.version);
                    m.acked.insert(path, (value, stat.version));
                    m.writes += 1;
                    false
                }
                Err(e)
                    if e.kind() == ErrorKind::BadVersion
                        || e.kind() == ErrorKind::AlreadyExists =>
                {
                    m.violations.push(format!(
                        "a conditional write with the last acknowledged version ({expected:?}) of \
                     {path} was refused (the topic would be fenced): {e}"
                    ));
                    true
                }
                // The pause (retryable), or the store going away under a lost
                // process: nothing acknowledged.
                Err(_) => false,
            }
        };
        if fenced {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1 + seq % 3)).await;
    }
}
