//! The cluster's `LAYOUT` znode and where each ledger's metadata lives
//! (BookKeeper's `LedgerLayout` and `StringUtils` path rules).

use bkswitch_bk_client::{BkError, BkErrorKind, LedgerId};

/// The ledger managers this client supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerManagerKind {
    /// `HierarchicalLedgerManagerFactory` (BookKeeper's and Pulsar's default):
    /// ids below `i32::MAX` on short paths, others on long paths; ids from the
    /// long id generator.
    Hierarchical,
    /// `LongHierarchicalLedgerManagerFactory`: every id on a long path.
    LongHierarchical,
    /// `LegacyHierarchicalLedgerManagerFactory`: short paths and short ids only.
    LegacyHierarchical,
}

/// `LAYOUT_FORMAT_VERSION` of `LedgerLayout`.
const LAYOUT_FORMAT_VERSION: u32 = 2;
const PACKAGE: &str = "org.apache.bookkeeper.meta.";

impl LedgerManagerKind {
    /// The factory class name BookKeeper records in `LAYOUT`.
    pub fn factory_class(self) -> &'static str {
        match self {
            LedgerManagerKind::Hierarchical => {
                "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
            }
            LedgerManagerKind::LongHierarchical => {
                "org.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory"
            }
            LedgerManagerKind::LegacyHierarchical => {
                "org.apache.bookkeeper.meta.LegacyHierarchicalLedgerManagerFactory"
            }
        }
    }

    /// The bytes of the `LAYOUT` znode for this manager, as `LedgerLayout.serialize`
    /// writes them: `"2\n<factory class>:1"` with no trailing newline.
    pub fn layout_bytes(self) -> Vec<u8> {
        format!("{LAYOUT_FORMAT_VERSION}\n{}:1", self.factory_class()).into_bytes()
    }

    /// Parses the `LAYOUT` znode.
    ///
    /// # Errors
    /// [`BkErrorKind::Other`] naming the layout when it is malformed, of another
    /// layout format version, or a ledger manager this client does not support
    /// (flat, MS).
    pub fn parse_layout(bytes: &[u8]) -> Result<LedgerManagerKind, BkError> {
        let text = String::from_utf8_lossy(bytes);
        let fail = |why: &str| {
            BkError::new(
                BkErrorKind::Other,
                format!(
                    "the cluster's LAYOUT znode `{}` {why}; this client supports the \
                     hierarchical, long hierarchical and legacy hierarchical ledger managers",
                    text.escape_debug()
                ),
            )
        };
        let mut lines = text.lines();
        let version = lines.next().unwrap_or_default().trim();
        if version.parse::<u32>().ok() != Some(LAYOUT_FORMAT_VERSION) {
            return Err(fail("is not of layout format version 2"));
        }
        let manager = lines.next().unwrap_or_default().trim();
        let (class, _version) = manager
            .rsplit_once(':')
            .ok_or_else(|| fail("has no `<factory class>:<version>` line"))?;
        match class.strip_prefix(PACKAGE).unwrap_or(class) {
            "HierarchicalLedgerManagerFactory" => Ok(LedgerManagerKind::Hierarchical),
            "LongHierarchicalLedgerManagerFactory" => Ok(LedgerManagerKind::LongHierarchical),
            "LegacyHierarchicalLedgerManagerFactory" => Ok(LedgerManagerKind::LegacyHierarchical),
            _ => Err(fail("names a ledger manager this client does not support")),
        }
    }

    /// The metadata path of `ledger_id` below `root`.
    ///
    /// ```
    /// use bkswitch_bookkeeper::LedgerManagerKind;
    ///
    /// let h = LedgerManagerKind::Hierarchical;
    /// assert_eq!(h.ledger_path("/ledgers", 123456789), "/ledgers/01/2345/L6789");
    /// assert_eq!(h.ledger_path("/ledgers", 1 << 32), "/ledgers/000/0000/0042/9496/L7296");
    /// ```
    pub fn ledger_path(self, root: &str, ledger_id: LedgerId) -> String {
        let long = match self {
            LedgerManagerKind::Hierarchical => ledger_id >= i64::from(i32::MAX),
            LedgerManagerKind::LongHierarchical => true,
            LedgerManagerKind::LegacyHierarchical => false,
        };
        if long {
            let s = format!("{ledger_id:019}");
            format!(
                "{root}/{}/{}/{}/{}/L{}",
                &s[0..3],
                &s[3..7],
                &s[7..11],
                &s[11..15],
                &s[15..19]
            )
        } else {
            let s = format!("{ledger_id:010}");
            format!("{root}/{}/{}/L{}", &s[0..2], &s[2..6], &s[6..10])
        }
    }

    /// Whether the manager stores ids of 2^31 − 1 and above.
    pub fn supports_long_ids(self) -> bool {
        !matches!(self, LedgerManagerKind::LegacyHierarchical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Examples of [formats §3](bkswitch_docs::formats) (BookKeeper's hybrid path rule).
    #[test]
    fn paths() {
        let h = LedgerManagerKind::Hierarchical;
        for (id, path) in [
            (0, "/ledgers/00/0000/L0000"),
            (5, "/ledgers/00/0000/L0005"),
            (123456789, "/ledgers/01/2345/L6789"),
            (2147483646, "/ledgers/21/4748/L3646"),
            (2147483647, "/ledgers/000/0000/0021/4748/L3647"),
            (1 << 40, "/ledgers/000/0001/0995/1162/L7776"),
            (4294967296, "/ledgers/000/0000/0042/9496/L7296"),
        ] {
            assert_eq!(h.ledger_path("/ledgers", id), path, "{id}");
        }
        assert_eq!(
            LedgerManagerKind::LongHierarchical.ledger_path("/l", 5),
            "/l/000/0000/0000/0000/L0005"
        );
        assert_eq!(
            LedgerManagerKind::LegacyHierarchical.ledger_path("/l", 5),
            "/l/00/0000/L0005"
        );
        assert_eq!(
            h.ledger_path("/ledgers", i64::MAX),
            "/ledgers/922/3372/0368/5477/L5807"
        );
    }

    #[test]
    fn layout_round_trip_and_refusals() {
        assert_eq!(
            LedgerManagerKind::Hierarchical.layout_bytes(),
            b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
        );
        for kind in [
            LedgerManagerKind::Hierarchical,
            LedgerManagerKind::LongHierarchical,
            LedgerManagerKind::LegacyHierarchical,
        ] {
            assert_eq!(
                LedgerManagerKind::parse_layout(&kind.layout_bytes()).unwrap(),
                kind
            );
        }
        for bad in [
            &b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1"[..],
            b"1\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1",
            b"2",
            b"",
        ] {
            let e = LedgerManagerKind::parse_layout(bad).unwrap_err();
            assert!(e.to_string().contains("LAYOUT"), "{e}");
        }
    }
}
