//! Items: a 24-byte header, the key, the value. The checksum covers everything after
//! itself, so a reader that raced with the item's reuse sees a mismatch, never a
//! mix of two values.

use xxhash_rust::xxh3::xxh3_64;

use crate::FormatError;

pub const HEADER: usize = 24;
/// Longest key a store accepts.
pub const MAX_KEY: usize = 4096;

/// Expiry value meaning "never".
pub const NO_EXPIRY: u64 = 0;

/// Flags ride in the top byte of the key-length field (keys are far shorter).
const KLEN_BITS: u32 = 24;
/// The value is an erasure-coded object's manifest (`crate::manifest`).
pub const FLAG_MANIFEST: u8 = 1;

/// Bytes an item of this key and value occupies before rounding to its class.
#[inline]
pub fn len(key: usize, value: usize) -> u64 {
    (HEADER + key) as u64 + value as u64
}

/// Appends the item for `key`/`value` (expiring at `expires_ms`, or [`NO_EXPIRY`]).
pub fn encode_into(out: &mut Vec<u8>, key: &[u8], value: &[u8], expires_ms: u64, flags: u8) {
    let at = out.len();
    out.extend_from_slice(&[0u8; 8]);
    let klen = (key.len() as u32 & ((1 << KLEN_BITS) - 1)) | u32::from(flags) << KLEN_BITS;
    out.extend_from_slice(&klen.to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(&expires_ms.to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    let sum = xxh3_64(&out[at + 8..]);
    out[at..at + 8].copy_from_slice(&sum.to_le_bytes());
}

/// A checked item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub expires_ms: u64,
    pub flags: u8,
}

impl Item<'_> {
    #[inline]
    pub fn expired(&self, now_ms: u64) -> bool {
        self.expires_ms != NO_EXPIRY && self.expires_ms <= now_ms
    }
}

/// Key and value lengths from a header, if the header is long enough.
#[inline]
pub fn lengths(head: &[u8]) -> Option<(usize, usize)> {
    let k = u32::from_le_bytes(head.get(8..12)?.try_into().ok()?);
    let v = u32::from_le_bytes(head.get(12..16)?.try_into().ok()?);
    Some(((k & ((1 << KLEN_BITS) - 1)) as usize, v as usize))
}

/// Parses and checks the item at the start of `bytes` (which may run past it).
/// An error means the bytes are not (or no longer) a whole item.
pub fn decode(bytes: &[u8]) -> Result<Item<'_>, FormatError> {
    let bad = |reason: &str| FormatError::Malformed {
        what: "item",
        reason: reason.into(),
    };
    let (k, v) = lengths(bytes).ok_or_else(|| bad("shorter than its header"))?;
    let end = HEADER
        .checked_add(k)
        .and_then(|e| e.checked_add(v))
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| bad("lengths run past the item"))?;
    let mut sum = [0u8; 8];
    sum.copy_from_slice(&bytes[..8]);
    if u64::from_le_bytes(sum) != xxh3_64(&bytes[8..end]) {
        return Err(bad("checksum mismatch"));
    }
    let mut exp = [0u8; 8];
    exp.copy_from_slice(&bytes[16..24]);
    Ok(Item {
        key: &bytes[HEADER..HEADER + k],
        value: &bytes[HEADER + k..end],
        expires_ms: u64::from_le_bytes(exp),
        flags: bytes[11],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn items_round_trip_and_detect_damage() {
        let mut b = Vec::new();
        encode_into(&mut b, b"key", b"value", 77, FLAG_MANIFEST);
        assert_eq!(b.len() as u64, len(3, 5));
        b.extend_from_slice(b"trailing");
        let it = decode(&b).expect("item");
        assert_eq!(
            (it.key, it.value, it.expires_ms),
            (&b"key"[..], &b"value"[..], 77)
        );
        assert_eq!(it.flags, FLAG_MANIFEST);
        assert!(it.expired(77) && !it.expired(76));
        for i in 0..len(3, 5) as usize {
            let mut d = b.clone();
            d[i] ^= 0x40;
            assert!(decode(&d).is_err(), "flip at {i} undetected");
        }
        assert!(decode(&b[..10]).is_err());
        let mut huge = b.clone();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
        }
    }
}
