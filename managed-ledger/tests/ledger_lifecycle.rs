//! Managed ledger and cursor lifecycle on MemoryBookKeeper + MemoryStore:
//! ownership and fencing, input checks, trimming, cursor properties,
//! terminate and close, and the ledgers' custom metadata.

mod common;

use std::time::Duration;

use bkswitch_bk_client::BookKeeper;
use bkswitch_managed_ledger::{
    InitialPosition, ManagedLedgerError, ManagedLedgerErrorKind, ManagedLedgerFactory, Position,
};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::{Message, Stamped, ATTR_KEY};
use common::*;

#[tokio::test]
async fn second_owner_fences_the_first() {
    let env = Env::new();
    let config = small_config().with_max_entries_per_ledger(100);
    let first = env.factory().open(NAME, config.clone()).await.unwrap();
    let acked = append_n(&first, 0, 5).await;
    let second = env.factory().open(NAME, config).await.unwrap();
    let err = first.append("late").await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::Fenced, "{err}");
    assert!(err.to_string().contains(NAME));
    assert!(first.is_fenced());
    // Later operations keep failing fenced; rollover's CAS would too.
    assert_eq!(
        first.rollover().await.unwrap_err().kind(),
        ManagedLedgerErrorKind::Fenced
    );
    let all = second.read_entries(acked[0], 100).await.unwrap();
    assert_eq!(all.iter().map(|e| e.position).collect::<Vec<_>>(), acked);
    second.append("new owner").await.unwrap();
}

#[tokio::test]
async fn stale_owner_metadata_cas_is_treated_as_fenced() {
    let env = Env::new();
    let config = small_config();
    let first = env.factory().open(NAME, config.clone()).await.unwrap();
    first.append("x").await.unwrap();
    let _second = env.factory().open(NAME, config).await.unwrap();
    // The first owner's next metadata write (terminate) loses the CAS or finds
    // its ledger fenced: either way it is fenced.
    let err = first.terminate().await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::Fenced, "{err}");
}

#[tokio::test]
async fn bad_input_is_rejected_without_changing_metadata() {
    let env = Env::new();
    let factory = env.factory();
    for bad in ["", "a//b", "/a/b", "a/b/", "a/./b", "a/../b", "a/b\u{7}"] {
        let err = factory.open(bad, small_config()).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ManagedLedgerErrorKind::InvalidName,
            "{bad:?}: {err}"
        );
    }
    assert!(snapshot(env.inner_store.as_ref()).await.is_empty());

    let ml = factory.open(NAME, small_config()).await.unwrap();
    let c = ml.open_cursor("sub").await.unwrap();
    let ps = append_n(&ml, 0, 4).await;
    let before = snapshot(env.inner_store.as_ref()).await;
    let cases = [
        Position::new(-1, 0),
        Position::new(0, -5),
        Position::new(777, 0),
        Position::new(ps[3].ledger_id, ps[3].entry_id + 1),
        Position::new(ps[0].ledger_id, 3), // ledger 0 has 3 entries
    ];
    for p in cases {
        let err = ml.read_entries(p, 10).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ManagedLedgerErrorKind::InvalidPosition,
            "{p}: {err}"
        );
        assert!(err.to_string().contains(NAME));
    }
    for p in [
        Position::new(-1, 0),
        Position::new(ps[3].ledger_id, 99),
        Position::new(9999, 0),
    ] {
        let err = c.mark_delete(p).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ManagedLedgerErrorKind::InvalidPosition,
            "{p}: {err}"
        );
        let err = c.delete(&[p]).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ManagedLedgerErrorKind::InvalidPosition,
            "{p}: {err}"
        );
    }
    assert_eq!(
        ml.cursor("nope").unwrap_err().kind(),
        ManagedLedgerErrorKind::NoSuchCursor
    );
    assert_eq!(
        ml.delete_cursor("nope").await.unwrap_err().kind(),
        ManagedLedgerErrorKind::NoSuchCursor
    );
    for bad in ["", "a/b", "..", "x\n"] {
        assert_eq!(
            ml.open_cursor(bad).await.unwrap_err().kind(),
            ManagedLedgerErrorKind::InvalidName
        );
    }
    let err = c
        .set_cursor_properties(&[(format!("{ATTR_KEY}x"), "v".into())])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::InvalidArgument);
    assert_eq!(snapshot(env.inner_store.as_ref()).await, before);
}

#[tokio::test]
async fn trim_by_slowest_cursor_and_retention() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    // No retention: consumed ledgers go at once, never the current one.
    let config = small_config().with_hooks(hooks.storage_hooks());
    let ml = env.factory().open(NAME, config).await.unwrap();
    let fast = ml
        .open_cursor_at("fast", InitialPosition::Earliest)
        .await
        .unwrap();
    let slow = ml
        .open_cursor_at("slow", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 9).await; // ledgers L0 L1 L2 full, current L3 empty
    fast.mark_delete(ps[8]).await.unwrap();
    slow.mark_delete(ps[2]).await.unwrap(); // L0 consumed by both
    let ids = ml.ledger_ids();
    assert_eq!(ml.trim_consumed_ledgers().await.unwrap(), vec![ids[0]]);
    assert_eq!(hooks.resolver.ledger_calls(ids[0]), 1);
    assert!(!env.cluster.contains_ledger(ids[0]));
    slow.mark_delete(ps[8]).await.unwrap();
    ml.rollover().await.unwrap();
    let trimmed = ml.trim_consumed_ledgers().await.unwrap();
    assert!(trimmed.contains(&ids[1]) && trimmed.contains(&ids[2]));
    assert!(ml.current_ledger_id().is_some());
    assert!(!trimmed.contains(&ml.current_ledger_id().unwrap()));
    // Reading a trimmed ledger is a clear error.
    let err = ml.read_entries(ps[0], 1).await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::InvalidPosition);

    // Time retention: kept until old enough.
    let env = Env::new();
    let config = small_config().with_retention(Some(Duration::from_secs(60)), None);
    let ml = env.factory().open(NAME, config).await.unwrap();
    let c = ml
        .open_cursor_at("c", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 6).await;
    c.mark_delete(ps[5]).await.unwrap();
    ml.rollover().await.unwrap();
    assert!(ml.trim_consumed_ledgers().await.unwrap().is_empty());
    env.clock.advance(61_000);
    assert_eq!(ml.trim_consumed_ledgers().await.unwrap().len(), 2);

    // Size retention: keep the newest ledgers within the size limit.
    let env = Env::new();
    let config = small_config().with_retention(None, Some(12));
    let ml = env.factory().open(NAME, config).await.unwrap();
    let c = ml
        .open_cursor_at("c", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 9).await; // three ledgers of 12 bytes
    c.mark_delete(ps[8]).await.unwrap();
    ml.rollover().await.unwrap();
    let trimmed = ml.trim_consumed_ledgers().await.unwrap();
    assert_eq!(trimmed.len(), 2, "{trimmed:?}");
    assert!(ml.ledger_ids().contains(&ps[8].ledger_id));
}

#[tokio::test]
async fn cursor_properties_primitive_changes_only_cursor_properties() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    let ml = env
        .factory()
        .open(NAME, small_config().with_hooks(hooks.storage_hooks()))
        .await
        .unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 3).await;
    c.mark_delete(ps[0]).await.unwrap();
    c.delete(&[ps[2]]).await.unwrap();
    let cursor_path = format!("{PATH}/sub");
    let before = env.inner_store.get(&cursor_path).await.unwrap().unwrap();
    let ledger = c.cursor_ledger_id();

    // Mismatch: refused, nothing written.
    let err = c
        .update_cursor_properties(ledger + 1, |p| p.clear())
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ManagedLedgerErrorKind::CursorRolledOver,
        "{err}"
    );
    assert_eq!(
        env.inner_store.get(&cursor_path).await.unwrap().unwrap(),
        before
    );

    c.update_cursor_properties(ledger, |props| {
        for p in props.iter_mut() {
            if p.name == ATTR_KEY {
                p.value = "bk-b".into();
            }
        }
    })
    .await
    .unwrap();
    let after = env.inner_store.get(&cursor_path).await.unwrap().unwrap();
    let mut a = decode_managed_cursor_info(&before.value).unwrap();
    let mut b = decode_managed_cursor_info(&after.value).unwrap();
    assert_eq!(b.cluster_stamp().unwrap(), Some("bk-b"));
    assert_eq!(after.stat.version, before.stat.version + 1);
    a.cursor_properties.clear();
    b.cursor_properties.clear();
    assert_eq!(a.encode_to_vec(), b.encode_to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cursor_properties_updates_serialise_with_mark_deletes() {
    let env = Env::new();
    let config = small_config().with_max_entries_per_ledger(1000);
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 40).await;
    c.mark_delete(ps[0]).await.unwrap();
    let mut tasks = Vec::new();
    for (i, p) in ps.iter().enumerate().skip(1) {
        let c1 = c.clone();
        let p = *p;
        tasks.push(tokio::spawn(
            async move { c1.mark_delete(p).await.map(|_| ()) },
        ));
        let c2 = c.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let expected = c2.cursor_ledger_id();
                match c2
                    .update_cursor_properties(expected, move |props| {
                        bkswitch_managed_ledger_props(props, i)
                    })
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(e) if e.kind() == ManagedLedgerErrorKind::CursorRolledOver => continue,
                    Err(e) => return Err(e),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(c.mark_delete_position(), ps[39]);
    drop((ml, c));
    let ml = env.factory().open(NAME, config).await.unwrap();
    let c = ml.cursor("sub").unwrap();
    assert_eq!(c.mark_delete_position(), ps[39]);
    let props = c.cursor_properties().await;
    assert_eq!(props.len(), 1);
}

fn bkswitch_managed_ledger_props(props: &mut Vec<bkswitch_proto::ml::StringProperty>, i: usize) {
    props.retain(|p| p.name != "k");
    props.push(bkswitch_proto::ml::StringProperty {
        name: "k".into(),
        value: i.to_string(),
    });
}

#[tokio::test]
async fn terminate_close_and_compressed_metadata() {
    let env = Env::new();
    let config = small_config().with_metadata_compression(
        bkswitch_proto::ml::CompressionType::Zstd,
        bkswitch_proto::ml::CompressionType::Lz4,
    );
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 5).await;
    c.mark_delete(ps[2]).await.unwrap();
    assert_eq!(ml.terminate().await.unwrap(), ps[4]);
    let err = ml.append("x").await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::Terminated);
    ml.close().await.unwrap();
    assert_eq!(
        ml.append("x").await.unwrap_err().kind(),
        ManagedLedgerErrorKind::Closed
    );

    let raw = env.inner_store.get(PATH).await.unwrap().unwrap().value;
    assert_ne!(
        raw,
        decode_managed_ledger_info(&raw).unwrap().encode_to_vec()
    );
    let ml = env.factory().open(NAME, config).await.unwrap();
    assert_eq!(ml.terminated_position(), Some(ps[4]));
    assert_eq!(ml.read_entries(ps[0], 10).await.unwrap().len(), 5);
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), ps[2]);
    let err: ManagedLedgerError = ml.append("y").await.unwrap_err();
    assert!(err.to_string().contains("terminated"));
}

#[tokio::test]
async fn user_cursor_properties_keep_reserved_keys() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    let ml = env
        .factory()
        .open(NAME, small_config().with_hooks(hooks.storage_hooks()))
        .await
        .unwrap();
    let c = ml.open_cursor("sub").await.unwrap();
    ml.append("a").await.unwrap();
    c.mark_delete(ml.last_confirmed()).await.unwrap();
    c.set_cursor_properties(&[("owner".into(), "me".into())])
        .await
        .unwrap();
    assert_eq!(
        c.cursor_properties().await,
        vec![("owner".to_string(), "me".to_string())]
    );
    let (info, _) = c.metadata().await;
    assert_eq!(info.cluster_stamp().unwrap(), Some("bk-a"));
    let _ = ManagedLedgerFactory::metadata_path(NAME);
    let _ = ManagedLedgerConfig::default();
}

/// Every data and cursor ledger carries Pulsar's custom metadata
/// (`LedgerMetadataUtils`): data ledgers `application=pulsar`,
/// `component=managed-ledger`, `pulsar/managed-ledger=<name>`; cursor
/// ledgers the same plus `pulsar/cursor=<cursor>`; across rollovers too.
#[tokio::test]
async fn every_ledger_carries_pulsars_custom_metadata() {
    use std::collections::BTreeMap;
    let env = Env::new();
    let client = env.client();
    let custom = |id| {
        let client = client.clone();
        async move {
            client
                .open_ledger_no_recovery(id, bkswitch_bk_client::DigestType::Crc32c, b"")
                .await
                .unwrap()
                .metadata()
                .custom_metadata
        }
    };
    let expected = |extra: &[(&str, &str)]| -> BTreeMap<String, Vec<u8>> {
        [
            ("application", "pulsar"),
            ("component", "managed-ledger"),
            ("pulsar/managed-ledger", "tenant/ns/persistent/topic"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect()
    };
    let ml = env
        .factory()
        .open("tenant/ns/persistent/topic", small_config())
        .await
        .unwrap();
    let cursor = ml.open_cursor("sub").await.unwrap();
    let (mut data_ledgers, mut cursor_ledgers) = (Vec::new(), Vec::new());
    for i in 0..8 {
        let p = append_n(&ml, i, 1).await[0];
        // Rollovers create new data ledgers (3 entries each).
        let data = p.ledger_id;
        if !data_ledgers.contains(&data) {
            assert_eq!(custom(data).await, expected(&[]), "data ledger {data}");
            data_ledgers.push(data);
        }
        // Cursor ledgers roll every 4 mark-deletes; the previous one is deleted.
        cursor.mark_delete(p).await.unwrap();
        let id = cursor.cursor_ledger_id();
        if !cursor_ledgers.contains(&id) {
            assert_eq!(
                custom(id).await,
                expected(&[("pulsar/cursor", "sub")]),
                "cursor ledger {id}"
            );
            cursor_ledgers.push(id);
        }
    }
    assert!(data_ledgers.len() >= 3, "{data_ledgers:?}");
    assert!(cursor_ledgers.len() >= 2, "{cursor_ledgers:?}");
}
