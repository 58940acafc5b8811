//! BookKeeper's quorum arithmetic (`RoundRobinDistributionSchedule`), as pure
//! functions over ensemble size `E`, write quorum `WQ` and ack quorum `AQ`.

/// The bookie indexes entry `entry_id` is written to: `(entry_id + i) % E` for
/// `i` in `0..WQ`, in that order (also the order replicas are read in).
///
/// ```
/// assert_eq!(bkswitch_bookkeeper::quorum::write_set(4, 3, 2), vec![1, 2]);
/// ```
pub fn write_set(entry_id: i64, ensemble: u32, write_quorum: u32) -> Vec<usize> {
    let e = ensemble as i64;
    (0..write_quorum as i64)
        .map(|i| (entry_id.max(0) + i).rem_euclid(e) as usize)
        .collect()
}

/// The coverage rule of a last-add-confirmed read: the answers cover the ledger
/// once, for every write quorum `(i..i + WQ) % E`, fewer than `AQ` of its bookies
/// are still unknown (no answer yet, or an error other than "no such entry" or
/// "no such ledger"). Any entry acknowledged by `AQ` bookies then has at least
/// one bookie among the answers.
///
/// `unknown[i]` tells whether bookie `i` of the ensemble is unknown.
///
/// ```
/// use bkswitch_bookkeeper::quorum::covered;
/// // E3 WQ2 AQ2: one silent bookie leaves each write quorum with one unknown.
/// assert!(covered(&[true, false, false], 2, 2));
/// assert!(!covered(&[true, true, false], 2, 2));
/// ```
pub fn covered(unknown: &[bool], write_quorum: u32, ack_quorum: u32) -> bool {
    let e = unknown.len();
    (0..e).all(|i| {
        let missing = (0..write_quorum as usize)
            .filter(|j| unknown[(i + j) % e])
            .count();
        missing < ack_quorum as usize
    })
}

/// How many "no such entry" answers from an entry's write set prove that the
/// entry was never acknowledged, during recovery: `WQ − AQ + 1` (an
/// acknowledged entry is on at least `AQ` of the `WQ` bookies).
pub fn absence_threshold(write_quorum: u32, ack_quorum: u32) -> usize {
    (write_quorum - ack_quorum + 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn write_sets_stripe_round_robin() {
        assert_eq!(write_set(0, 3, 2), vec![0, 1]);
        assert_eq!(write_set(2, 3, 2), vec![2, 0]);
        assert_eq!(write_set(5, 5, 5), vec![0, 1, 2, 3, 4]);
        assert_eq!(write_set(7, 1, 1), vec![0]);
        assert_eq!(write_set(-1, 3, 2), vec![0, 1]);
    }

    #[test]
    fn absence() {
        assert_eq!(absence_threshold(2, 2), 1);
        assert_eq!(absence_threshold(3, 2), 2);
        assert_eq!(absence_threshold(3, 1), 3);
    }

    proptest! {
        /// Covered answers always include a bookie of every entry's write set
        /// that holds it, whichever `AQ` bookies acknowledged it.
        #[test]
        fn coverage_finds_every_acknowledged_entry(
            e in 1u32..7, wq_off in 0u32..7, aq_off in 0u32..7, mask in 0u64..128, entry in 0i64..50,
        ) {
            let wq = 1 + wq_off % e;
            let aq = 1 + aq_off % wq;
            let unknown: Vec<bool> = (0..e).map(|i| mask & (1 << i) != 0).collect();
            if covered(&unknown, wq, aq) {
                let ws = write_set(entry, e, wq);
                // Any AQ-subset of the write set (the bookies that acked) has a known
                // member: the unknown ones in the write set are fewer than AQ.
                let unknown_in_ws = ws.iter().filter(|i| unknown[**i]).count();
                prop_assert!(unknown_in_ws < aq as usize);
            }
        }
    }
}
