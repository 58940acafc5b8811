//! Range reads with BookKeeper 4.17's batched reads: consecutive entries one
//! bookie holds, asked for in one request and answered in one frame.
//!
//! Which runs one bookie holds follows from the round-robin placement: entry
//! `e` is on bookies `(e + i) % E` for `i` in `0..WQ`, so bookie
//! `(e + WQ - 1) % E` holds `e..e + WQ` (and every bookie holds everything when
//! `WQ == E`). A range is cut into such runs, within one ensemble each; each
//! run is one request. When `E` and `WQ` share a factor those runs would fall
//! on a few bookies only, so such ledgers are read entry by entry.
//!
//! A bookie answers with the entries it has from the first one asked for, up
//! to the count and size asked for and its own `maxBatchReadSize`; it stops
//! early at an entry it does not have. Whatever an answer leaves out (or an
//! error, a refused digest, a lost connection) is read entry by entry through
//! [`read_entry`], which asks every replica in turn: a batched read never
//! fails a read that single reads would have served.

use std::sync::atomic::{AtomicI64, Ordering};

use bkswitch_bk_client::{BkError, EntryId, LedgerEntry};
use futures::stream::{StreamExt, TryStreamExt};
use tokio::sync::oneshot;

use super::read::read_entry;
use super::LedgerCtx;
use crate::meta::format::LedgerRecord;
use crate::quorum::write_set;
use crate::wire::codec::{
    encode_batch_read, rc, split_batch, verify_entry, MAX_FRAME_LEN, OP_BATCH_READ,
};
use crate::wire::conn::{Completion, ConnErrorKind};

/// The most entries one batched read asks for when every bookie holds the
/// whole ledger (a range is cut into runs of at most this many, read in
/// parallel).
pub(crate) const MAX_BATCH_ENTRIES: usize = 64;

/// Request ids of batched reads (the bookie echoes them; answers are matched
/// by opcode, ledger and first entry like every other version-2 answer).
static REQUEST_IDS: AtomicI64 = AtomicI64::new(1);

/// Consecutive entries `first..first + len` that one bookie (`bookie`, an
/// index into the ensemble of `first`) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: EntryId,
    pub(crate) len: usize,
    pub(crate) bookie: usize,
}

/// Whether ranges of this ledger are read in batches: enabled, and runs that
/// spread over every bookie (`WQ == E`, or `WQ > 1` with no factor shared
/// with `E`).
pub(crate) fn batchable(enabled: bool, ensemble: u32, write_quorum: u32) -> bool {
    fn gcd(a: u32, b: u32) -> u32 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    enabled
        && write_quorum >= 1
        && ensemble >= write_quorum
        && (write_quorum == ensemble || (write_quorum > 1 && gcd(ensemble, write_quorum) == 1))
}

/// Cuts `first..=last` into runs one bookie holds, none crossing an ensemble
/// change. `sticky`: the bookie to ask when every bookie holds everything.
pub(crate) fn plan_runs(
    record: &LedgerRecord,
    first: EntryId,
    last: EntryId,
    sticky: Option<usize>,
) -> Vec<Run> {
    let (e_size, wq) = (record.ensemble_size, record.write_quorum_size);
    let mut runs = Vec::new();
    let mut at = first;
    while at <= last {
        // The first entry of the next ensemble bounds this run.
        let segment_end = record
            .ensembles
            .iter()
            .map(|s| s.first_entry_id)
            .find(|&f| f > at)
            .map_or(last, |f| (f - 1).min(last));
        let (len, bookie) = if wq == e_size {
            let len = ((segment_end - at + 1) as usize).min(MAX_BATCH_ENTRIES);
            let bookie = sticky.unwrap_or_else(|| write_set(at, e_size, wq)[0]);
            (len, bookie % e_size as usize)
        } else {
            let len = ((segment_end - at + 1) as usize).min(wq as usize);
            let holder = write_set(at, e_size, wq)[wq as usize - 1];
            (len, holder)
        };
        runs.push(Run {
            first: at,
            len,
            bookie,
        });
        at += len as EntryId;
    }
    runs
}

/// Reads `first..=last` (checked by the caller) in runs ([`plan_runs`]), at
/// most `read_window` entries asked for at once; entries in order.
pub(crate) async fn read_range_batched(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    first: EntryId,
    last: EntryId,
) -> Result<Vec<LedgerEntry>, BkError> {
    let window = ctx.client.config.read_window.max(1);
    let sticky = (ctx.client.config.sticky_reads
        && record.write_quorum_size == record.ensemble_size)
        .then(|| ctx.sticky.load(Ordering::Relaxed));
    let runs = plan_runs(record, first, last, sticky);
    let per_run = runs.first().map_or(1, |r| r.len.max(1));
    let mut out = Vec::with_capacity(usize::try_from(last - first + 1).unwrap_or(0).min(1 << 16));
    let mut answers = futures::stream::iter(runs.into_iter().map(|run| read_run(ctx, record, run)))
        .buffered((window / per_run).max(1));
    while let Some(entries) = answers.try_next().await? {
        out.extend(entries);
    }
    Ok(out)
}

/// Reads one run: a batched read to its bookie, then entry by entry whatever
/// the answer left out.
async fn read_run(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    run: Run,
) -> Result<Vec<LedgerEntry>, BkError> {
    let mut got = Vec::with_capacity(run.len);
    if run.len > 1 {
        let ensemble = &record.ensemble_for(run.first).bookies;
        got = batch_from(ctx, &ensemble[run.bookie], run.first, run.len).await;
    }
    let rest = run.first + got.len() as EntryId..run.first + run.len as EntryId;
    if !rest.is_empty() {
        let singles: Vec<LedgerEntry> = futures::stream::iter(rest)
            .map(|e| read_entry(ctx, record, e))
            .buffered(run.len)
            .try_collect()
            .await?;
        got.extend(singles);
    }
    Ok(got)
}

/// One batched read of `first..first + count` from `bookie`: the entries it
/// answered, checked, in order, up to the first missing or refused one
/// (none on any error).
async fn batch_from(
    ctx: &LedgerCtx,
    bookie: &str,
    first: EntryId,
    count: usize,
) -> Vec<LedgerEntry> {
    let conn = ctx.client.conn(bookie);
    if !conn.batch_reads_allowed() {
        return Vec::new();
    }
    let frame = encode_batch_read(
        ctx.ledger_id,
        first,
        REQUEST_IDS.fetch_add(1, Ordering::Relaxed),
        i32::try_from(count).unwrap_or(i32::MAX),
        MAX_FRAME_LEN as i64,
    );
    // With speculative reads, a batch waits no longer than a single read
    // waits before asking another replica: what it has not answered by then
    // is read entry by entry, speculatively.
    let config = &ctx.client.config;
    let timeout = if config.speculative_read_timeout.is_zero() {
        config.read_timeout
    } else {
        config.speculative_read_timeout.min(config.read_timeout)
    };
    let (tx, rx) = oneshot::channel();
    conn.send(
        (OP_BATCH_READ, ctx.ledger_id, first),
        frame,
        timeout,
        Completion::Channel(tx),
    );
    let response = match rx.await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            if e.kind == ConnErrorKind::Closed {
                conn.refuse_batch_reads();
            }
            tracing::debug!(ledger_id = ctx.ledger_id, first, count, error = %e, "batched read failed; reading entry by entry");
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    if response.rc != rc::EOK {
        return Vec::new();
    }
    let Ok(stored) = split_batch(response.body) else {
        tracing::warn!(
            ledger_id = ctx.ledger_id,
            first,
            bookie,
            "malformed batched read answer; reading entry by entry"
        );
        return Vec::new();
    };
    let mut entries = Vec::with_capacity(stored.len().min(count));
    for (entry_id, body) in (first..first + count as EntryId).zip(stored) {
        match verify_entry(&ctx.digest, ctx.ledger_id, Some(entry_id), body) {
            Ok(v) => entries.push(LedgerEntry {
                entry_id,
                data: v.payload,
            }),
            Err(e) => {
                tracing::warn!(ledger_id = ctx.ledger_id, entry_id, bookie, error = %e, "entry of a batched read refused; reading it from its replicas");
                break;
            }
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_bk_client::Ensemble;

    fn record(e: u32, wq: u32, firsts: &[EntryId]) -> LedgerRecord {
        LedgerRecord {
            ledger_id: 1,
            ensemble_size: e,
            write_quorum_size: wq,
            ack_quorum_size: wq,
            state: bkswitch_bk_client::LedgerState::Closed,
            last_entry_id: 1_000,
            length: 0,
            ensembles: firsts
                .iter()
                .map(|&f| Ensemble {
                    first_entry_id: f,
                    bookies: (0..e).map(|i| format!("b{f}-{i}:3181")).collect(),
                })
                .collect(),
            digest_type: None,
            password: Vec::new(),
            stored_ctime: None,
            ctime: 0,
            custom_metadata: Default::default(),
            ctoken: 0,
        }
    }

    #[test]
    fn which_ledgers_are_read_in_batches() {
        assert!(batchable(true, 3, 2));
        assert!(batchable(true, 2, 2));
        assert!(batchable(true, 5, 3));
        assert!(batchable(true, 1, 1));
        assert!(
            !batchable(true, 4, 2),
            "runs would fall on two bookies of four"
        );
        assert!(!batchable(true, 3, 1), "one entry per bookie in a row");
        assert!(!batchable(false, 3, 3));
    }

    #[test]
    fn runs_of_a_striped_ledger_are_held_by_one_bookie_and_spread() {
        let r = record(3, 2, &[0]);
        let runs = plan_runs(&r, 0, 8, None);
        assert_eq!(
            runs.iter()
                .map(|r| (r.first, r.len, r.bookie))
                .collect::<Vec<_>>(),
            vec![(0, 2, 1), (2, 2, 0), (4, 2, 2), (6, 2, 1), (8, 1, 0)]
        );
        for run in &runs {
            for e in run.first..run.first + run.len as EntryId {
                assert!(
                    write_set(e, 3, 2).contains(&run.bookie),
                    "entry {e} not on bookie {}",
                    run.bookie
                );
            }
        }
        let r = record(5, 3, &[0]);
        for run in plan_runs(&r, 7, 40, None) {
            for e in run.first..run.first + run.len as EntryId {
                assert!(write_set(e, 5, 3).contains(&run.bookie));
            }
        }
    }

    #[test]
    fn runs_stop_at_an_ensemble_change_and_at_the_batch_size() {
        let r = record(3, 2, &[0, 5]);
        let runs = plan_runs(&r, 3, 7, None);
        assert_eq!(
            runs.iter().map(|r| (r.first, r.len)).collect::<Vec<_>>(),
            vec![(3, 2), (5, 2), (7, 1)]
        );
        let r = record(2, 2, &[0, 100]);
        let runs = plan_runs(&r, 0, 199, Some(1));
        assert_eq!(
            runs.iter()
                .map(|r| (r.first, r.len, r.bookie))
                .collect::<Vec<_>>(),
            vec![(0, 64, 1), (64, 36, 1), (100, 64, 1), (164, 36, 1)]
        );
        // Without sticky reads, runs start at the first bookie of their entry.
        let runs = plan_runs(&r, 1, 70, None);
        assert_eq!(
            runs.iter()
                .map(|r| (r.first, r.len, r.bookie))
                .collect::<Vec<_>>(),
            vec![(1, 64, 1), (65, 6, 1)]
        );
    }
}
