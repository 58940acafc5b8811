//! Interoperability with BookKeeper's own Java client on the same real bookies
//! (`bkswitch-bk-harness` starts both): each direction for every digest type,
//! metadata bytes and fields, fencing across clients, the shared id generator,
//! createLedgerAdv ids and paths, deletes, tailing and passwords.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use bkswitch_bk_client::{
    BookKeeper, DigestType, LedgerConfig, LedgerState, ReadHandle, WriteHandle,
};
use bkswitch_bk_harness::{
    codes, shared, BkCluster, CreateOptions, DigestType as JavaDigest, JavaClient,
};
use bkswitch_bookkeeper::{
    decode_ledger_metadata, encode_ledger_metadata, BookKeeperClient, ClientConfig,
};
use bytes::Bytes;

const DIGESTS: [(DigestType, JavaDigest); 4] = [
    (DigestType::Crc32, JavaDigest::Crc32),
    (DigestType::Crc32c, JavaDigest::Crc32c),
    (DigestType::Mac, JavaDigest::Mac),
    (DigestType::Dummy, JavaDigest::Dummy),
];

/// Runs a blocking Java-session call without stalling the runtime.
fn java<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn rust_client(cluster: &BkCluster) -> BookKeeperClient {
    BookKeeperClient::connect(&cluster.metadata_service_uri(), ClientConfig::default())
        .await
        .expect("Rust client of the test cluster")
}

fn java_client(cluster: &BkCluster) -> JavaClient {
    java(|| cluster.java_client())
}

fn payloads() -> Vec<Bytes> {
    let mut p = vec![
        Bytes::new(),
        Bytes::from_static(b"x"),
        Bytes::from((0..64 * 1024).map(|i| (i % 251) as u8).collect::<Vec<_>>()),
    ];
    for i in 0..20u8 {
        p.push(Bytes::from(vec![i; 100 + i as usize]));
    }
    p
}

fn total_len(p: &[Bytes]) -> u64 {
    p.iter().map(|b| b.len() as u64).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_writes_java_reads_with_every_digest() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    for (digest, jdigest) in DIGESTS {
        for password in [&b""[..], b"secret"] {
            let config = LedgerConfig::default()
                .with_quorums(3, 2, 2)
                .with_digest_type(digest)
                .with_password(password.to_vec())
                .with_custom_metadata("application", b"bkswitch".to_vec())
                .with_custom_metadata("binary", vec![0u8, 255, 7]);
            let w = bk.create_ledger(&config).await.unwrap();
            let data = payloads();
            let adds: Vec<_> = data.iter().map(|p| w.add_entry(p.clone())).collect();
            for (i, add) in adds.into_iter().enumerate() {
                assert_eq!(add.await.unwrap(), i as i64);
            }
            w.close().await.unwrap();
            let id = w.id();
            let last = data.len() as i64 - 1;
            let what = format!("{digest:?} with password {password:?}, ledger {id}");

            // Java opens it (recovery) with another digest type: autodetection.
            let other = if jdigest == JavaDigest::Crc32 {
                JavaDigest::Crc32c
            } else {
                JavaDigest::Crc32
            };
            let opened = java(|| j.open(id, true, other, password)).unwrap();
            assert!(opened.closed, "{what}");
            assert_eq!(opened.lac, last, "{what}");
            assert_eq!(opened.length as u64, total_len(&data), "{what}");
            let entries = java(|| j.read(id, 0, last)).unwrap();
            assert_eq!(entries.len(), data.len(), "{what}");
            for (e, expected) in entries.iter().zip(&data) {
                assert_eq!(&e.data[..], &expected[..], "{what}: entry {}", e.entry_id);
            }

            // Every metadata field Java sees is what Rust recorded.
            let m = java(|| j.metadata(id)).unwrap();
            let ours = w.metadata();
            assert_eq!(m.ensemble_size, 3, "{what}");
            assert_eq!(m.write_quorum_size, 2, "{what}");
            assert_eq!(m.ack_quorum_size, 2, "{what}");
            assert_eq!(m.digest_type, jdigest, "{what}");
            assert!(m.has_password, "{what}");
            assert_eq!(m.password, password, "{what}");
            assert_eq!(
                m.custom_metadata,
                BTreeMap::from([
                    ("application".to_owned(), b"bkswitch".to_vec()),
                    ("binary".to_owned(), vec![0, 255, 7]),
                ]),
                "{what}"
            );
            assert_eq!(m.state, "CLOSED", "{what}");
            assert_eq!(m.last_entry_id, last, "{what}");
            assert_eq!(m.length as u64, total_len(&data), "{what}");
            assert_eq!(m.metadata_format_version, 3, "{what}");
            assert_eq!(m.ctime, ours.ctime, "{what}");
            assert_eq!(m.ensembles.len(), 1, "{what}");
            assert_eq!(m.ensembles[0].first_entry_id, 0);
            assert_eq!(m.ensembles[0].bookies, ours.first_ensemble(), "{what}");
            bk.delete_ledger(id).await.unwrap();
        }
    }
    // The largest entry a bookie frame takes, under Java too.
    let w = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    let big = Bytes::from(vec![0x5au8; 5 * 1024 * 1024 - 200]);
    w.add_entry(big.clone()).await.unwrap();
    let too_big = w
        .add_entry(Bytes::from(vec![0u8; 5 * 1024 * 1024]))
        .await
        .unwrap_err();
    assert_eq!(too_big.code(), -14, "{too_big}");
    w.close().await.unwrap();
    java(|| j.open(w.id(), false, JavaDigest::Crc32c, b"")).unwrap();
    let read = java(|| j.read(w.id(), 0, 0)).unwrap();
    assert_eq!(read[0].data.len(), big.len());
    assert!(read[0].data.iter().all(|b| *b == 0x5a));
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_writes_rust_reads_and_metadata_bytes_round_trip() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    for (digest, jdigest) in DIGESTS {
        let options = CreateOptions::new(3, 2, 2)
            .digest(jdigest)
            .password(b"pw".to_vec())
            .custom("k", b"v".to_vec());
        let id = java(|| j.create(&options)).unwrap();
        let data: Vec<Vec<u8>> = (0..30u8).map(|i| vec![i; 10 + i as usize * 3]).collect();
        java(|| j.add_payloads(id, &data)).unwrap();
        java(|| j.close(id)).unwrap();
        let what = format!("Java ledger {id} with {digest:?}");

        for recovery in [false, true] {
            // The digest asked for does not matter: autodetection, as Pulsar.
            let r = if recovery {
                bk.open_ledger(id, DigestType::Crc32, b"pw")
            } else {
                bk.open_ledger_no_recovery(id, DigestType::Crc32c, b"pw")
            }
            .await
            .unwrap();
            assert!(r.is_closed(), "{what}");
            assert_eq!(r.last_add_confirmed(), 29, "{what}");
            let entries = r.read_entries(0, 29).await.unwrap();
            for (e, expected) in entries.iter().zip(&data) {
                assert_eq!(&e.data[..], &expected[..], "{what}");
            }
            let m = r.metadata();
            let jm = java(|| j.metadata(id)).unwrap();
            assert_eq!(m.digest_type, digest, "{what}");
            assert_eq!(m.length as i64, jm.length, "{what}");
            assert_eq!(m.ctime, jm.ctime, "{what}: ctime falls back to the znode's");
            assert_eq!(m.custom_metadata["k"], b"v".to_vec());
            assert_eq!(m.state, LedgerState::Closed);
            assert_eq!(
                m.ensembles
                    .iter()
                    .map(|e| (e.first_entry_id, e.bookies.clone()))
                    .collect::<Vec<_>>(),
                jm.ensembles
                    .iter()
                    .map(|e| (e.first_entry_id, e.bookies.clone()))
                    .collect::<Vec<_>>(),
            );
        }

        // What Java wrote decodes in ours and re-encodes byte for byte.
        let raw = bk.ledger_metadata_bytes(id).await.unwrap().unwrap();
        let record = decode_ledger_metadata(id, &raw, 0).unwrap();
        assert_eq!(encode_ledger_metadata(&record), raw, "{what}");
        assert_eq!(record.ctoken, java(|| j.metadata(id)).unwrap().c_token);
        assert_eq!(
            record.stored_ctime, None,
            "Java does not store ctime by default"
        );

        // Wrong password: -102, nothing fenced.
        let e = bk.open_ledger(id, digest, b"nope").await.unwrap_err();
        assert_eq!(e.code(), -102, "{e}");
    }

    // A Java ledger still open: Rust tails it, then recovers it.
    let id = java(|| j.create(&CreateOptions::new(3, 2, 2))).unwrap();
    for i in 0..5u8 {
        java(|| j.add(id, &[i; 8])).unwrap();
    }
    let r = bk
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert!(!r.is_closed());
    assert!(
        (3..=4).contains(&r.last_add_confirmed()),
        "{}",
        r.last_add_confirmed()
    );
    let sealed = bk.open_ledger(id, DigestType::Crc32c, b"").await.unwrap();
    assert_eq!(sealed.last_add_confirmed(), 4);
    assert_eq!(sealed.length(), 40);
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_recovery_fences_a_live_java_writer() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    let id = java(|| j.create(&CreateOptions::new(3, 2, 2).password(b"p".to_vec()))).unwrap();
    for i in 0..5u8 {
        java(|| j.add(id, &[i; 4])).unwrap();
    }
    let r = bk.open_ledger(id, DigestType::Crc32c, b"p").await.unwrap();
    assert!(r.is_closed());
    assert_eq!(
        r.last_add_confirmed(),
        4,
        "recovered at least the Java writer's LAC"
    );
    assert_eq!(r.length(), 20);
    let e = java(|| j.add(id, b"after")).unwrap_err();
    assert_eq!(e.code, codes::LEDGER_FENCED, "{e:?}");
    let m = java(|| j.metadata(id)).unwrap();
    assert_eq!(
        (m.state.as_str(), m.last_entry_id, m.length),
        ("CLOSED", 4, 20)
    );
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_recovery_fences_a_live_rust_writer() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    let config = LedgerConfig::default()
        .with_quorums(3, 2, 2)
        .with_password(b"p".to_vec());
    let w = bk.create_ledger(&config).await.unwrap();
    for i in 0..5u8 {
        w.add_entry(Bytes::from(vec![i; 4])).await.unwrap();
    }
    let opened = java(|| j.open(w.id(), true, JavaDigest::Crc32c, b"p")).unwrap();
    assert!(opened.closed);
    assert_eq!(opened.lac, 4);
    assert_eq!(opened.length, 20);
    let e = w.add_entry(Bytes::from_static(b"after")).await.unwrap_err();
    assert_eq!(e.code(), -101, "{e}");
    // The recovered end equals the writer's: its close succeeds.
    w.close().await.unwrap();
    let m = w.metadata();
    assert_eq!(
        (m.state, m.last_entry_id, m.length),
        (LedgerState::Closed, 4, 20)
    );

    // A writer that added more than recovery saw cannot close: -101.
    let w = bk.create_ledger(&config).await.unwrap();
    w.add_entry(Bytes::from_static(b"a")).await.unwrap();
    let j2 = java_client(cluster);
    java(|| j2.open(w.id(), true, JavaDigest::Crc32c, b"p")).unwrap();
    assert_eq!(
        w.add_entry(Bytes::from_static(b"b"))
            .await
            .unwrap_err()
            .code(),
        -101
    );
    w.close().await.unwrap();
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_java_share_the_id_generator() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = Arc::new(rust_client(cluster).await);
    let j = java_client(cluster);
    let config = LedgerConfig::default();
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(bk.create_ledger(&config).await.unwrap().id());
        ids.push(java(|| j.create(&CreateOptions::new(3, 2, 2))).unwrap());
    }
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "alternating creates must increase: {ids:?}"
    );

    // At the same time, from both sides.
    let rust_side = {
        let bk = bk.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..30 {
                ids.push(
                    bk.create_ledger(&LedgerConfig::default())
                        .await
                        .unwrap()
                        .id(),
                );
            }
            ids
        })
    };
    let java_ids: Vec<i64> = java(|| {
        (0..30)
            .map(|_| j.create(&CreateOptions::new(3, 2, 2)).unwrap())
            .collect()
    });
    let rust_ids = rust_side.await.unwrap();
    assert!(rust_ids.windows(2).all(|w| w[0] < w[1]));
    assert!(java_ids.windows(2).all(|w| w[0] < w[1]));
    let all: HashSet<i64> = rust_ids.iter().chain(&java_ids).copied().collect();
    assert_eq!(all.len(), 60, "ids collide between clients");

    // Rust skips ids a Java createLedgerAdv took ahead of the generator.
    let probe = bk.create_ledger(&config).await.unwrap().id();
    // (Other tests share the cluster: an id one of them took meanwhile is skipped.)
    let mut taken = Vec::new();
    for id in (1..=6).map(|k| probe + k) {
        match java(|| j.create(&CreateOptions::new(3, 2, 2).ledger_id(id))) {
            Ok(_) => {
                java(|| j.add_at(id, 0, b"java adv")).unwrap();
                taken.push(id);
            }
            Err(e) if e.code == codes::LEDGER_EXIST => {}
            Err(e) => panic!("Java createLedgerAdv({id}): {e:?}"),
        }
    }
    assert!(!taken.is_empty());
    for _ in 0..8 {
        let w = bk.create_ledger(&config).await.unwrap();
        assert!(
            !taken.contains(&w.id()),
            "reused id {} taken by Java",
            w.id()
        );
    }
    for id in &taken {
        let r = bk
            .open_ledger_no_recovery(*id, DigestType::Crc32c, b"")
            .await
            .unwrap();
        assert_eq!(
            r.read_unconfirmed(0, 0).await.unwrap()[0].data,
            Bytes::from_static(b"java adv")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv_ids_paths_and_ledger_exists_across_clients() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    let base = bk
        .create_ledger(&LedgerConfig::default())
        .await
        .unwrap()
        .id();
    for id in [base + 1_000_000, (1i64 << 40) + base] {
        let w = bk
            .create_ledger_adv(id, &LedgerConfig::default())
            .await
            .unwrap();
        let one = w.add_entry_at(1, Bytes::from_static(b"one"));
        w.add_entry_at(0, Bytes::from_static(b"zero"))
            .await
            .unwrap();
        assert_eq!(one.await.unwrap(), 1);
        w.close().await.unwrap();
        // The znode is where Java's hybrid path rule puts it.
        let path = bk.ledger_path(id);
        assert!(cluster.zk_get(&path).is_some(), "{path}");
        if id >= i64::from(i32::MAX) {
            assert_eq!(path.matches('/').count(), 6, "long path {path}");
        }
        java(|| j.open(id, true, JavaDigest::Crc32c, b"")).unwrap();
        let entries = java(|| j.read(id, 0, 1)).unwrap();
        assert_eq!(entries[1].data, b"one");
        let e = java(|| j.create(&CreateOptions::new(3, 2, 2).ledger_id(id))).unwrap_err();
        assert_eq!(e.code, codes::LEDGER_EXIST);
    }
    let id = (1i64 << 40) + base + 7;
    java(|| j.create(&CreateOptions::new(3, 2, 2).ledger_id(id))).unwrap();
    java(|| j.add_at(id, 0, b"j")).unwrap();
    java(|| j.close(id)).unwrap();
    let r = bk.open_ledger(id, DigestType::Crc32c, b"").await.unwrap();
    assert_eq!(
        r.read_entries(0, 0).await.unwrap()[0].data,
        Bytes::from_static(b"j")
    );
    let e = bk
        .create_ledger_adv(id, &LedgerConfig::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), -20);
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_across_clients_remove_the_same_znodes() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    // Ids in a region of their own, so that their parent znodes are theirs alone.
    let base = 1_900_000_000 + (std::process::id() as i64 % 1000) * 10_000;
    let java_made = base + 11;
    let rust_made = base + 10_011;
    java(|| j.create(&CreateOptions::new(3, 2, 2).ledger_id(java_made))).unwrap();
    java(|| j.close(java_made)).unwrap();
    let w = bk
        .create_ledger_adv(rust_made, &LedgerConfig::default())
        .await
        .unwrap();
    w.close().await.unwrap();
    let parents = |id: i64| {
        let path = bk.ledger_path(id);
        let mut out = Vec::new();
        let mut p = path.as_str();
        while let Some(i) = p.rfind('/') {
            p = &p[..i];
            if p.len() <= cluster.ledgers_root().len() {
                break;
            }
            out.push(p.to_owned());
        }
        out
    };
    // Rust deletes Java's ledger; Java deletes Rust's.
    bk.delete_ledger(java_made).await.unwrap();
    java(|| j.delete(rust_made)).unwrap();
    for id in [java_made, rust_made] {
        for p in parents(id) {
            assert!(
                cluster.zk_get(&p).is_none(),
                "empty parent {p} of ledger {id} left behind"
            );
        }
    }
    let e = java(|| j.open(java_made, false, JavaDigest::Crc32c, b"")).unwrap_err();
    assert_eq!(e.code, codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER);
    let e = bk
        .open_ledger(rust_made, DigestType::Crc32c, b"")
        .await
        .unwrap_err();
    assert_eq!(e.code(), -25);
    // Deleting a missing ledger succeeds from both.
    bk.delete_ledger(rust_made).await.unwrap();
    java(|| j.delete(java_made)).unwrap();
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tailing_a_live_writer_both_ways() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    // Java writes, Rust tails.
    let id = java(|| j.create(&CreateOptions::new(3, 2, 2))).unwrap();
    java(|| j.add(id, b"0")).unwrap();
    let r = bk
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let mut seen = r.last_add_confirmed();
    for i in 1..10i64 {
        java(|| j.add(id, i.to_string().as_bytes())).unwrap();
        let lac = r.read_last_add_confirmed().await.unwrap();
        assert!(
            lac >= seen && lac >= i - 1 && lac <= i,
            "LAC {lac} with the writer at {i}"
        );
        seen = lac;
        let e = r.read_entries(0, lac).await.unwrap();
        assert_eq!(e.last().unwrap().data, Bytes::from((lac).to_string()));
    }
    // Rust writes, Java tails.
    let w = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    w.add_entry(Bytes::from_static(b"0")).await.unwrap();
    java(|| j.open(w.id(), false, JavaDigest::Crc32c, b"")).unwrap();
    for i in 1..10i64 {
        w.add_entry(Bytes::from(i.to_string())).await.unwrap();
        let lac = java(|| j.lac(w.id())).unwrap();
        assert!(
            lac >= i - 1 && lac <= i,
            "Java sees LAC {lac} with the Rust writer at {i}"
        );
    }
    w.close().await.unwrap();
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_digests_are_checked_both_ways() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let bk = rust_client(cluster).await;
    let j = java_client(cluster);
    let w = bk
        .create_ledger(
            &LedgerConfig::default()
                .with_password(b"right".to_vec())
                .with_digest_type(DigestType::Mac),
        )
        .await
        .unwrap();
    w.add_entry(Bytes::from_static(b"m")).await.unwrap();
    let e = java(|| j.open(w.id(), true, JavaDigest::Mac, b"wrong")).unwrap_err();
    assert_eq!(e.code, codes::UNAUTHORIZED_ACCESS, "{e:?}");
    // The wrong-password attempt fenced nothing: the writer continues.
    w.add_entry(Bytes::from_static(b"n")).await.unwrap();
    w.close().await.unwrap();

    // A client without digest autodetection refuses another digest: -5.
    let strict = BookKeeperClient::connect(
        &cluster.metadata_service_uri(),
        ClientConfig::default().with_digest_autodetection(false),
    )
    .await
    .unwrap();
    let e = strict
        .open_ledger(w.id(), DigestType::Crc32c, b"right")
        .await
        .unwrap_err();
    assert_eq!(e.code(), -5, "{e}");
    let r = strict
        .open_ledger(w.id(), DigestType::Mac, b"right")
        .await
        .unwrap();
    assert_eq!(r.read_entries(0, 1).await.unwrap().len(), 2);
    strict.close().await.unwrap();
    bk.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_on_one_zookeeper_share_ids_without_crosstalk() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let a = shared();
    let b = BkCluster::on_shared_zk(3);
    let bka = rust_client(a).await;
    let bkb = rust_client(&b).await;
    let id = (1i64 << 41) + std::process::id() as i64;
    for (bk, text) in [(&bka, "on a"), (&bkb, "on b")] {
        let w = bk
            .create_ledger_adv(id, &LedgerConfig::default())
            .await
            .unwrap();
        w.add_entry_at(0, Bytes::from(text)).await.unwrap();
        w.close().await.unwrap();
    }
    for (bk, text) in [(&bka, "on a"), (&bkb, "on b")] {
        let r = bk.open_ledger(id, DigestType::Crc32c, b"").await.unwrap();
        assert_eq!(
            r.read_entries(0, 0).await.unwrap()[0].data,
            Bytes::from(text)
        );
        let ensemble = r.metadata().first_ensemble().to_vec();
        let own = if text == "on a" {
            a.bookie_ids()
        } else {
            b.bookie_ids()
        };
        assert!(
            ensemble.iter().all(|x| own.contains(x)),
            "{ensemble:?} not in {own:?}"
        );
    }
    bkb.delete_ledger(id).await.unwrap();
    assert!(bka.open_ledger(id, DigestType::Crc32c, b"").await.is_ok());
    assert_eq!(
        bkb.open_ledger(id, DigestType::Crc32c, b"")
            .await
            .unwrap_err()
            .code(),
        -25
    );
    bka.close().await.unwrap();
    bkb.close().await.unwrap();
}

/// The operator's step before a switch, on real bookies: advancing the
/// generator moves a running Rust client at once, a fresh Java client too;
/// a Java client started before the step keeps its short ids (BookKeeper's
/// `LongZkLedgerIdGenerator` caches that `idgen-long` is absent), which is why
/// the step must come before any long-lived client of the cluster starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advancing_the_id_generator_for_rust_and_java_clients() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(1);
    let uri = cluster.metadata_service_uri();
    let cfg = ClientConfig::default();
    let early_java = java_client(&cluster);
    let rust = rust_client(&cluster).await;
    let one = LedgerConfig::default().with_quorums(1, 1, 1);
    let before = rust.create_ledger(&one).await.unwrap().id();
    let java_before = java(|| early_java.create(&CreateOptions::new(1, 1, 1))).unwrap();
    assert!(before < 1 << 31 && java_before < 1 << 31);
    let next = bkswitch_bookkeeper::next_ledger_id(&uri, &cfg)
        .await
        .unwrap();
    assert!(next > before.max(java_before), "{next}");

    // Beyond an id of the second HOB: every later id is at least 3 << 32.
    let above = (2_i64 << 32) + 5;
    let step = bkswitch_bookkeeper::advance_ledger_id_generator(&uri, above, &cfg)
        .await
        .unwrap();
    assert!(step.advanced && step.next_before == next, "{step:?}");
    assert_eq!(step.next_after, 3 << 32);
    let again = bkswitch_bookkeeper::advance_ledger_id_generator(&uri, above, &cfg)
        .await
        .unwrap();
    assert!(!again.advanced, "{again:?}");

    let rust_after = rust.create_ledger(&one).await.unwrap().id();
    assert!(rust_after > above, "{rust_after}");
    let fresh_java = java_client(&cluster);
    let java_after = java(|| fresh_java.create(&CreateOptions::new(1, 1, 1))).unwrap();
    assert!(
        java_after > above && java_after != rust_after,
        "{java_after}"
    );
    let stale = java(|| early_java.create(&CreateOptions::new(1, 1, 1))).unwrap();
    assert!(
        stale < 1 << 31,
        "a Java client started before the step kept short ids: {stale}"
    );
    rust.close().await.unwrap();

    // A malformed URI and a negative bound are refused.
    let e =
        bkswitch_bookkeeper::advance_ledger_id_generator("zk+hierarchical://h:notaport/l", 1, &cfg)
            .await
            .unwrap_err();
    assert_eq!(e.code(), -14, "{e}");
    let e = bkswitch_bookkeeper::advance_ledger_id_generator(&uri, -3, &cfg)
        .await
        .unwrap_err();
    assert_eq!(e.code(), -14, "{e}");
}
