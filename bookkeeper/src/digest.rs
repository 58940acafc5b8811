//! Entry digests and the ledger master key, as BookKeeper's `DigestManager` and
//! `MacDigestManager` compute them.
//!
//! Every entry a bookie stores is the 32-byte header `ledgerId · entryId ·
//! lastAddConfirmed · length` (big-endian `i64`s), then the digest of the header
//! and the payload, then the payload. The digest is over the header and the
//! payload, never over itself:
//!
//! | type | bytes | algorithm |
//! |---|---|---|
//! | CRC32 | 8 | IEEE CRC-32 (`java.util.zip.CRC32`) stored as a big-endian `long` (upper half zero) |
//! | CRC32C | 4 | Castagnoli CRC-32C stored as a big-endian `int` |
//! | MAC | 20 | HMAC-SHA1 keyed with `SHA1("mac" ‖ password)` |
//! | DUMMY | 0 | none |
//!
//! The master key a bookie checks on adds and fences is `SHA1("ledger" ‖
//! password)` for every digest type (an empty password included).

use bkswitch_bk_client::DigestType;
use hmac::{Hmac, Mac};
use sha1::{Digest as _, Sha1};

/// Length of the entry header every digest covers.
pub const HEADER_LEN: usize = 32;

/// Length of a master key (`BookieProtocol.MASTER_KEY_LENGTH`).
pub const MASTER_KEY_LEN: usize = 20;

/// `SHA1(pad ‖ password)`, BookKeeper's `MacDigestManager.genDigest`.
fn gen_digest(pad: &[u8], password: &[u8]) -> [u8; 20] {
    let mut sha = Sha1::new();
    sha.update(pad);
    sha.update(password);
    sha.finalize().into()
}

/// The master key of a ledger with `password`: `SHA1("ledger" ‖ password)`.
///
/// ```
/// let key = bkswitch_bookkeeper::digest::master_key(b"");
/// assert_eq!(key[..4], [0x85, 0x0b, 0xf1, 0x07]);
/// ```
pub fn master_key(password: &[u8]) -> [u8; MASTER_KEY_LEN] {
    gen_digest(b"ledger", password)
}

/// Computes and checks entry digests of one ledger (one digest type and, for
/// MAC, one password).
#[derive(Clone)]
pub struct DigestManager {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Crc32,
    Crc32c,
    Mac(Box<Hmac<Sha1>>),
    Dummy,
}

impl std::fmt::Debug for DigestManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DigestManager")
            .field(&self.digest_type())
            .finish()
    }
}

impl DigestManager {
    /// A digest manager of `digest_type`; `password` keys the MAC digest.
    pub fn new(digest_type: DigestType, password: &[u8]) -> DigestManager {
        let kind = match digest_type {
            DigestType::Crc32 => Kind::Crc32,
            DigestType::Crc32c => Kind::Crc32c,
            DigestType::Dummy => Kind::Dummy,
            DigestType::Mac => {
                let key = gen_digest(b"mac", password);
                Kind::Mac(Box::new(
                    Hmac::<Sha1>::new_from_slice(&key).expect("HMAC accepts any key length"),
                ))
            }
        };
        DigestManager { kind }
    }

    /// The digest type.
    pub fn digest_type(&self) -> DigestType {
        match self.kind {
            Kind::Crc32 => DigestType::Crc32,
            Kind::Crc32c => DigestType::Crc32c,
            Kind::Mac(_) => DigestType::Mac,
            Kind::Dummy => DigestType::Dummy,
        }
    }

    /// Number of digest bytes after the header: 8, 4, 20 or 0.
    pub fn len(&self) -> usize {
        match self.kind {
            Kind::Crc32 => 8,
            Kind::Crc32c => 4,
            Kind::Mac(_) => 20,
            Kind::Dummy => 0,
        }
    }

    /// Whether the digest is empty (DUMMY).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the digest of `header ‖ payload` into `out` (exactly [`len`](Self::len)
    /// bytes).
    pub fn compute_into(&self, header: &[u8], payload: &[u8], out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.len());
        match &self.kind {
            Kind::Crc32 => {
                let mut h = crc32fast::Hasher::new();
                h.update(header);
                h.update(payload);
                out.copy_from_slice(&u64::from(h.finalize()).to_be_bytes());
            }
            Kind::Crc32c => {
                let crc = crc32c::crc32c_append(crc32c::crc32c(header), payload);
                out.copy_from_slice(&crc.to_be_bytes());
            }
            Kind::Mac(mac) => {
                let mut mac = (**mac).clone();
                mac.update(header);
                mac.update(payload);
                out.copy_from_slice(&mac.finalize().into_bytes());
            }
            Kind::Dummy => {}
        }
    }

    /// Whether `digest` is the digest of `header ‖ payload`.
    pub fn verify(&self, header: &[u8], payload: &[u8], digest: &[u8]) -> bool {
        if digest.len() != self.len() {
            return false;
        }
        let mut expected = [0u8; 20];
        let expected = &mut expected[..self.len()];
        self.compute_into(header, payload, expected);
        expected == digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn header() -> Vec<u8> {
        let mut h = Vec::new();
        for v in [1i64, 0, -1, 5] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        h
    }

    fn digest(t: DigestType, pw: &[u8]) -> String {
        let d = DigestManager::new(t, pw);
        let mut out = vec![0; d.len()];
        d.compute_into(&header(), b"hello", &mut out);
        hex(&out)
    }

    /// Vectors of [formats §2](bkswitch_docs::formats) (computed with independent
    /// implementations, and confirmed by the interop tests against Java).
    #[test]
    fn known_vectors() {
        assert_eq!(
            hex(&master_key(b"")),
            "850bf1071c5e3d8c24235676f8816ae0cbe2f14f"
        );
        assert_eq!(
            hex(&master_key(b"secret")),
            "e793cbc379107648537183605cd361d3bb789a39"
        );
        assert_eq!(
            hex(&gen_digest(b"mac", b"secret")),
            "190c685bae851574f5ab47c960a00c0466f96603"
        );
        assert_eq!(digest(DigestType::Crc32c, b""), "e3a5f74d");
        assert_eq!(digest(DigestType::Crc32, b""), "0000000030a56872");
        assert_eq!(
            digest(DigestType::Mac, b"secret"),
            "985ff33d73766e6ab95e91f14097a562ffc64ae8"
        );
        assert_eq!(digest(DigestType::Dummy, b""), "");
    }

    #[test]
    fn verify_rejects_changed_bytes() {
        for t in [DigestType::Crc32, DigestType::Crc32c, DigestType::Mac] {
            let d = DigestManager::new(t, b"pw");
            let mut out = vec![0; d.len()];
            d.compute_into(&header(), b"hello", &mut out);
            assert!(d.verify(&header(), b"hello", &out), "{t:?}");
            assert!(!d.verify(&header(), b"hellp", &out), "{t:?}");
            let mut h = header();
            h[7] = 2;
            assert!(!d.verify(&h, b"hello", &out), "{t:?}");
            assert!(!d.verify(&header(), b"hello", &out[1..]), "{t:?}");
        }
        let other = DigestManager::new(DigestType::Mac, b"other");
        let d = DigestManager::new(DigestType::Mac, b"pw");
        let mut out = vec![0; 20];
        d.compute_into(&header(), b"hello", &mut out);
        assert!(!other.verify(&header(), b"hello", &out));
    }
}
