//! Apache Pulsar's own `EtcdMetadataStore` (pulsar-metadata 4.2.4, opened by
//! URL as a broker opens it, in a JVM: `PulsarMetadataStore`) against
//! bkswitch's `EtcdStore`, on one real etcd server (`bkswitch-etcd-harness`):
//!
//! - bkswitch writes managed-ledger, cursor, schema and registry values (its
//!   own managed ledger, schema storage and cluster registry on `EtcdStore`);
//!   Pulsar's store reads every node byte for byte with the same version and
//!   lists the same children, and Pulsar's `MLDataFormats` classes decode the
//!   values it read; Pulsar's compare-and-set on them follows bkswitch's
//!   versions, and bkswitch's follows Pulsar's writes;
//! - Pulsar writes values (made by Pulsar's own classes), a conditional
//!   update, an ephemeral node and sequential children; `EtcdStore` reads the
//!   same value, version, ephemeral flag and children, and sees the ephemeral
//!   node go with Pulsar's session.
//!
//! Needs Java, the `pulsar-metadata` jars and the Pulsar format jars
//! (`scripts/fetch-java-deps.sh`); skipped with a loud note without them
//! unless `BKSWITCH_REQUIRE_BK=1` (the project's test script sets it).

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, MemoryCluster};
use bkswitch_bk_harness::{
    encoded, judged, pulsar_metadata_available, PulsarJudge, PulsarKind, PulsarMetadataStore,
};
use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions};
use bkswitch_managed_ledger::ManagedLedgerFactory;
use bkswitch_metadata_store::{
    CreateMode, EtcdStore, EtcdStoreOptions, ExpectedVersion, MetadataStore,
};
use bkswitch_mledger_spi::{
    HookError, ManagedLedgerConfig, NewLedgerContext, NewLedgerPropertiesProvider, StorageHooks,
};
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::{Message, Stamped, ATTR_KEY};
use bkswitch_registry::{ClusterStatus, Registry};
use bkswitch_schema_spi::SingleClientSchemaProvider;

/// Stamps new ledgers with their cluster's name, as bkswitch's router does.
#[derive(Debug)]
struct Stamp;

impl NewLedgerPropertiesProvider for Stamp {
    fn new_ledger_properties(
        &self,
        _ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        Ok(vec![(ATTR_KEY.to_owned(), "old".to_owned())])
    }
}

/// Java, the jars and etcd; `None` (the test returns) when Java is missing
/// and not required.
fn setup() -> Option<&'static bkswitch_etcd_harness::EtcdCluster> {
    if !pulsar_metadata_available() || !bkswitch_bk_harness::bk_available() {
        return None;
    }
    bkswitch_etcd_harness::require_etcd();
    Some(bkswitch_etcd_harness::shared())
}

/// Pulsar's store on the etcd of `etcd` (no key prefix: Pulsar has none).
fn pulsar(etcd: &bkswitch_etcd_harness::EtcdCluster) -> PulsarMetadataStore {
    tokio::task::block_in_place(|| {
        PulsarMetadataStore::start(&format!("etcd:http://{}", etcd.endpoint(0)), false)
    })
    .expect("Pulsar's EtcdMetadataStore opens")
}

async fn bkswitch(etcd: &bkswitch_etcd_harness::EtcdCluster) -> Arc<EtcdStore> {
    Arc::new(
        EtcdStore::connect(&etcd.url(""), EtcdStoreOptions::default())
            .await
            .expect("EtcdStore connects"),
    )
}

/// Every node below `root` (included), with its value and version, as
/// `store` reads it.
async fn walk(store: &dyn MetadataStore, root: &str) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        if let Some(v) = store.get(&p).await.expect("get") {
            out.push((p.clone(), v.value, v.stat.version));
        }
        for c in store.children(&p).await.expect("children") {
            todo.push(format!("{}/{c}", p.trim_end_matches('/')));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulsars_etcd_store_reads_what_bkswitch_wrote() {
    let Some(etcd) = setup() else { return };
    let store = bkswitch(etcd).await;
    let dyn_store: Arc<dyn MetadataStore> = store.clone();

    // bkswitch's own writers on EtcdStore: a managed ledger with stamped
    // ledgers and a cursor, a schema, the cluster registry.
    let cluster = MemoryCluster::new("old");
    let client: Arc<dyn BookKeeper> = Arc::new(cluster.client());
    let hooks = StorageHooks {
        new_ledger_properties: vec![Arc::new(Stamp)],
        new_cursor_ledger_properties: vec![Arc::new(Stamp)],
        ..StorageHooks::default()
    };
    let config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
        .with_max_entries_per_ledger(2)
        .with_hooks(hooks);
    let factory = ManagedLedgerFactory::new(dyn_store.clone(), client.clone());
    let topic = "judge/ns/persistent/etcd-layout";
    let ledger = factory.open(topic, config).await.expect("open");
    let cursor = ledger.open_cursor("sub").await.expect("cursor");
    let mut last = None;
    for i in 0..5u8 {
        last = Some(ledger.append(vec![i; 16]).await.expect("append"));
    }
    cursor
        .mark_delete(last.expect("appended"))
        .await
        .expect("mark delete");
    cursor.roll_cursor_ledger().await.expect("cursor ledger");
    let schemas = SchemaStorage::new(
        dyn_store.clone(),
        Arc::new(SingleClientSchemaProvider::new(client.clone())),
        SchemaStorageOptions::default(),
    );
    schemas
        .put("judge/ns/etcd-layout", b"{\"type\":\"STRING\"}", b"h1")
        .await
        .expect("schema");
    schemas
        .put("judge/ns/etcd-layout", b"{\"type\":\"BYTES\"}", b"h2")
        .await
        .expect("schema v2");
    let registry = Registry::new(dyn_store.clone());
    registry
        .register("old", "memory://old", ClusterStatus::Active)
        .await
        .expect("register");

    let ml_path = format!("/managed-ledgers/{topic}");
    let mut written = Vec::new();
    for root in [
        "/managed-ledgers/judge",
        "/schemas/judge",
        "/admin/bookie-clusters",
    ] {
        written.extend(walk(dyn_store.as_ref(), root).await);
    }
    let paths: Vec<&str> = written.iter().map(|(p, _, _)| p.as_str()).collect();
    for must in [
        ml_path.as_str(),
        &format!("{ml_path}/sub"),
        "/schemas/judge/ns/etcd-layout",
        "/admin/bookie-clusters/old",
    ] {
        assert!(paths.contains(&must), "{must} not written: {paths:?}");
    }
    let ml_version = written.iter().find(|w| w.0 == ml_path).expect("ml").2;
    assert!(ml_version > 0, "the managed ledger was rewritten");

    // Pulsar's EtcdMetadataStore reads every node as bkswitch wrote it.
    let java = pulsar(etcd);
    let mut judge = PulsarJudge::new();
    let mut judged_paths = Vec::new();
    for (path, value, version) in &written {
        let node = tokio::task::block_in_place(|| java.get(path))
            .expect("Pulsar get")
            .unwrap_or_else(|| panic!("Pulsar does not find {path}"));
        assert_eq!(&node.value, value, "{path}: Pulsar reads other bytes");
        assert_eq!(
            node.version, *version,
            "{path}: Pulsar reads another version"
        );
        assert!(!node.ephemeral, "{path}");
        let ours = dyn_store.children(path).await.expect("children");
        let theirs = tokio::task::block_in_place(|| java.children(path)).expect("Pulsar children");
        assert_eq!(theirs, ours, "{path}: Pulsar lists other children");
        if path == &ml_path {
            let info = decode_managed_ledger_info(&node.value).expect("ours decodes");
            assert!(info.ledger_info.len() >= 2, "{info:?}");
            judge.decode(PulsarKind::ManagedLedger, &node.value);
            judged_paths.push(path.clone());
        } else if path.starts_with(&format!("{ml_path}/")) {
            let info = decode_managed_cursor_info(&node.value).expect("ours decodes");
            assert_eq!(info.cluster_stamp().ok().flatten(), Some("old"));
            judge.decode(PulsarKind::Cursor, &node.value);
            judged_paths.push(path.clone());
        } else if path.starts_with("/schemas/") && !node.value.is_empty() {
            bkswitch_proto::schema::SchemaLocator::decode(node.value.as_slice())
                .expect("ours decodes");
            judge.decode(PulsarKind::SchemaLocator, &node.value);
            judged_paths.push(path.clone());
        } else if path == "/admin/bookie-clusters/old" {
            let record: serde_json::Value =
                serde_json::from_slice(&node.value).expect("the record is JSON");
            assert_eq!(record["name"], "old");
        }
    }
    assert_eq!(judged_paths.len(), 3, "{judged_paths:?}");
    // The bytes Pulsar's store read are what Pulsar's classes take.
    let answers = tokio::task::block_in_place(|| judge.run()).expect("Pulsar's classes");
    for (path, answer) in judged_paths.iter().zip(&answers) {
        let j = judged(answer).unwrap_or_else(|e| panic!("Pulsar cannot decode {path}: {e}"));
        if path.starts_with("/managed-ledgers/") {
            assert!(j.identical, "{path}: Pulsar re-encodes other bytes");
            assert!(
                j.stamps.iter().all(|s| s == "old") && !j.stamps.is_empty(),
                "{path}: {j:?}"
            );
        }
    }

    // Pulsar's compare-and-set follows bkswitch's versions …
    let registry_path = "/admin/bookie-clusters/old";
    let before = dyn_store.get(registry_path).await.unwrap().unwrap();
    let stale = tokio::task::block_in_place(|| {
        java.put(registry_path, b"stale", Some(before.stat.version + 1))
    })
    .expect_err("a wrong version is refused");
    assert_eq!(stale.kind, "BadVersionException", "{stale}");
    assert_eq!(
        dyn_store.get(registry_path).await.unwrap().unwrap(),
        before,
        "a refused write changes nothing"
    );
    let (_, v) = tokio::task::block_in_place(|| {
        java.put(registry_path, &before.value, Some(before.stat.version))
    })
    .expect("Pulsar's compare-and-set on bkswitch's version");
    assert_eq!(v, before.stat.version + 1);
    // … and bkswitch's follows Pulsar's write.
    let after = dyn_store.get(registry_path).await.unwrap().unwrap();
    assert_eq!(after.stat.version, before.stat.version + 1);
    assert_eq!(after.value, before.value);
    let err = store
        .put(
            registry_path,
            b"x",
            ExpectedVersion::Exactly(before.stat.version),
        )
        .await
        .expect_err("bkswitch's stale version is refused");
    assert_eq!(err.kind(), bkswitch_metadata_store::ErrorKind::BadVersion);
    store
        .put(
            registry_path,
            &before.value,
            ExpectedVersion::Exactly(after.stat.version),
        )
        .await
        .expect("bkswitch's compare-and-set on Pulsar's version");
    let v = tokio::task::block_in_place(|| java.get(registry_path))
        .unwrap()
        .unwrap()
        .version;
    assert_eq!(v, after.stat.version + 1);

    // Pulsar cannot create what bkswitch created.
    let e = tokio::task::block_in_place(|| java.put(&ml_path, b"x", Some(-1))).expect_err("exists");
    assert_eq!(e.kind, "BadVersionException", "{e}");
    assert_eq!(
        dyn_store.get(&ml_path).await.unwrap().unwrap().stat.version,
        ml_version
    );

    ledger.close().await.expect("close");
    tokio::task::block_in_place(|| java.quit());
    store.close().await.expect("close store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bkswitch_reads_what_pulsars_etcd_store_wrote() {
    let Some(etcd) = setup() else { return };
    let store = bkswitch(etcd).await;

    // Values made by Pulsar's own classes (MLDataFormats), stamped.
    let mut made = PulsarJudge::new();
    made.encode(PulsarKind::ManagedLedger, Some("old"))
        .encode(PulsarKind::Cursor, Some("old"));
    let answers = tokio::task::block_in_place(|| made.run()).expect("Pulsar's classes");
    let ml_bytes = encoded(&answers[0]).expect("ManagedLedgerInfo");
    let cursor_bytes = encoded(&answers[1]).expect("ManagedCursorInfo");

    let java = pulsar(etcd);
    let topic = "/managed-ledgers/pulsar/ns/persistent/written-by-pulsar";
    let cursor = format!("{topic}/sub");
    let schema = "/schemas/pulsar/ns/written-by-pulsar";
    let schema_bytes = b"\x0a\x04\x08\x01\x10\x02".to_vec();
    let registry = "/admin/bookie-clusters/pulsar-cluster";
    let record =
        br#"{"name":"pulsar-cluster","metadataServiceUri":"memory://p","status":"standby"}"#;
    let call = |f: &dyn Fn() -> Result<(String, i64), bkswitch_bk_harness::PulsarStoreError>| {
        tokio::task::block_in_place(f).expect("Pulsar put")
    };
    assert_eq!(call(&|| java.put(topic, &ml_bytes, Some(-1))).1, 0);
    assert_eq!(call(&|| java.put(&cursor, &cursor_bytes, Some(-1))).1, 0);
    assert_eq!(call(&|| java.put(schema, &schema_bytes, None)).1, 0);
    assert_eq!(call(&|| java.put(registry, record, None)).1, 0);
    // A conditional update: version 0 → 1.
    assert_eq!(call(&|| java.put(registry, record, Some(0))).1, 1);

    for (path, value, version) in [
        (topic, &ml_bytes[..], 0),
        (cursor.as_str(), &cursor_bytes[..], 0),
        (schema, &schema_bytes[..], 0),
        (registry, &record[..], 1),
    ] {
        let got = store
            .get(path)
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("bkswitch does not find {path}"));
        assert_eq!(got.value, value, "{path}");
        assert_eq!(got.stat.version, version, "{path}");
        assert!(!got.stat.ephemeral, "{path}");
    }
    // bkswitch's codec reads Pulsar's bytes and writes them back identical.
    let info = decode_managed_ledger_info(&ml_bytes).expect("bkswitch decodes Pulsar's ML info");
    assert_eq!(info.encode_to_vec(), ml_bytes);
    let c = decode_managed_cursor_info(&cursor_bytes).expect("bkswitch decodes Pulsar's cursor");
    assert_eq!(c.encode_to_vec(), cursor_bytes);
    assert_eq!(c.cluster_stamp().ok().flatten(), Some("old"));
    // Children of nodes Pulsar wrote without parents.
    assert_eq!(
        store
            .children("/managed-ledgers/pulsar/ns/persistent")
            .await
            .unwrap(),
        vec!["written-by-pulsar".to_owned()]
    );
    assert_eq!(store.children(topic).await.unwrap(), vec!["sub".to_owned()]);
    assert_eq!(
        store.children("/admin/bookie-clusters").await.unwrap(),
        tokio::task::block_in_place(|| java.children("/admin/bookie-clusters")).unwrap()
    );

    // bkswitch's compare-and-set on a node Pulsar wrote, and Pulsar reads it.
    let e = store
        .put(topic, b"x", ExpectedVersion::Exactly(1))
        .await
        .expect_err("wrong version");
    assert_eq!(e.kind(), bkswitch_metadata_store::ErrorKind::BadVersion);
    assert_eq!(store.get(topic).await.unwrap().unwrap().value, ml_bytes);
    let stat = store
        .put(topic, &ml_bytes, ExpectedVersion::Exactly(0))
        .await
        .expect("bkswitch's compare-and-set on Pulsar's version");
    assert_eq!(stat.version, 1);
    let theirs = tokio::task::block_in_place(|| java.get(topic))
        .unwrap()
        .unwrap();
    assert_eq!((theirs.value, theirs.version), (ml_bytes.clone(), 1));

    // An ephemeral node on Pulsar's session, and sequential children.
    let owner = "/bkswitch/topic-owners/written-by-pulsar";
    let (p, _) = call(&|| java.put_with(owner, b"{\"nodeId\":\"p\"}", Some(-1), true, false));
    assert_eq!(p, owner);
    let eph = store.get(owner).await.unwrap().expect("ephemeral node");
    assert!(eph.stat.ephemeral);
    assert_eq!(eph.value, b"{\"nodeId\":\"p\"}");
    assert_eq!(
        store.children("/bkswitch/topic-owners").await.unwrap(),
        vec!["written-by-pulsar".to_owned()]
    );
    let (s0, _) = call(&|| java.put_with("/pulsar-seq/n-", b"a", None, false, true));
    let (s1, _) = call(&|| java.put_with("/pulsar-seq/n-", b"b", None, false, true));
    assert_ne!(s0, s1);
    let mut seq = store.children("/pulsar-seq").await.unwrap();
    seq.sort();
    let mut want: Vec<String> = [&s0, &s1]
        .iter()
        .map(|p| p.trim_start_matches("/pulsar-seq/").to_owned())
        .collect();
    want.sort();
    assert_eq!(seq, want);
    assert_eq!(store.get(&s1).await.unwrap().unwrap().value, b"b");

    // bkswitch cannot hang a node below Pulsar's ephemeral one, and its
    // refusal writes nothing.
    let e = store
        .create(&format!("{owner}/child"), b"", CreateMode::PERSISTENT)
        .await
        .expect_err("below an ephemeral node");
    assert_eq!(
        e.kind(),
        bkswitch_metadata_store::ErrorKind::InvalidArgument,
        "{e}"
    );
    assert!(store.children(owner).await.unwrap().is_empty());

    // An imported version lives in a side key Pulsar does not read; a node
    // Pulsar deletes (only its key) and bkswitch creates again starts over at
    // version 0, for both.
    let imported = "/pulsar-deletes/imported";
    let stat = store
        .import_version(imported, b"v", 7)
        .await
        .expect("import");
    assert_eq!(stat.version, 7);
    let theirs = tokio::task::block_in_place(|| java.get(imported))
        .unwrap()
        .unwrap();
    assert_eq!((theirs.value.as_slice(), theirs.version), (&b"v"[..], 0));
    tokio::task::block_in_place(|| java.delete(imported, None)).expect("Pulsar deletes");
    assert!(store.get(imported).await.unwrap().is_none());
    let (_, again) = store
        .create(imported, b"again", CreateMode::PERSISTENT)
        .await
        .expect("create again");
    assert_eq!(again.version, 0, "no offset left from the imported node");
    assert_eq!(store.get(imported).await.unwrap().unwrap().stat.version, 0);
    let theirs = tokio::task::block_in_place(|| java.get(imported))
        .unwrap()
        .unwrap();
    assert_eq!(theirs.version, 0);

    // An ephemeral node of bkswitch's session is ephemeral for Pulsar too.
    let ours = "/bkswitch/topic-owners/written-by-bkswitch";
    store
        .create(ours, b"{}", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let theirs = tokio::task::block_in_place(|| java.get(ours))
        .unwrap()
        .unwrap();
    assert!(theirs.ephemeral && !theirs.created_by_self, "{theirs:?}");

    // Pulsar's session ends: its lease goes, and the ephemeral node with it.
    // Pulsar's `close()` sends the lease revoke without waiting for it and
    // closes its client right after, so the revoke may never reach etcd; the
    // lease then ends by expiry, one session timeout (30 s in the helper)
    // later. Either way the node must go: wait for the longer of the two.
    tokio::task::block_in_place(|| java.close_store()).expect("close Pulsar's store");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(45);
    while store.get(owner).await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "Pulsar's ephemeral node outlived its session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        store.get(topic).await.unwrap().is_some(),
        "persistent nodes stay"
    );
    tokio::task::block_in_place(|| java.quit());
    store.close().await.expect("close store");
}
