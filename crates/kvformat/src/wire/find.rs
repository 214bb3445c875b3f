//! `kv_find` and `kv_mfind` replies: where a key is in its bucket, with the bucket's
//! words (and, in `MODE_ENTRY`, the item the key's slot names).

use super::{BUSY, HIT, MOVED};
use crate::FormatError;
use crate::layout::SLOTS;

/// `kv_find` reply: where the key is (if anywhere) and the bucket as read. The
/// bucket is the one holding the key on a hit; on a miss, the one a new key goes
/// to: home while it has an empty slot, else the pair while that has one, else home
/// (to be taken under its lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FindReply {
    pub status: u8,
    /// The slot holding the key, if `status == HIT`, in [`FindReply::pair`]'s bucket.
    pub slot: Option<u8>,
    /// The words are the pair bucket's, not the home bucket's.
    pub pair: bool,
    /// The key's item has expired (it still occupies its slot).
    pub expired: bool,
    /// The shard's generation (`layout::GENERATION`).
    pub generation: u32,
    /// The bucket's words: [`SLOTS`] slots, then the lock.
    pub words: [u64; SLOTS + 1],
    pub refs: [u8; 8],
}

pub const FIND_LEN: usize = 8 + (SLOTS + 1) * 8 + 8;

/// The item a `kv_find` in [`MODE_ENTRY`](super::MODE_ENTRY) found, as its reply carries it after the
/// find: `[flags, expires (u64 LE, ms; item::NO_EXPIRY for none)]`, then the value.
/// A read-modify-write learns the value and the slot word guarding its rewrite in
/// one round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundItem<'a> {
    pub flags: u8,
    pub expires_ms: u64,
    pub value: &'a [u8],
}

/// Bytes of a [`FoundItem`] before its value.
pub const FOUND_ITEM_HEAD: usize = 9;

impl FoundItem<'_> {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(self.flags);
        out.extend_from_slice(&self.expires_ms.to_le_bytes());
        out.extend_from_slice(self.value);
    }
}

impl FindReply {
    pub fn encode(&self) -> [u8; FIND_LEN] {
        let mut b = [0u8; FIND_LEN];
        b[0] = self.status;
        b[1] = self.slot.unwrap_or(u8::MAX);
        b[2] = u8::from(self.expired);
        b[3] = u8::from(self.pair);
        b[4..8].copy_from_slice(&self.generation.to_le_bytes());
        for (i, w) in self.words.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        b[FIND_LEN - 8..].copy_from_slice(&self.refs);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        let bad = || FormatError::Malformed {
            what: "kv_find reply",
            reason: format!("{} bytes", b.len()),
        };
        if b.len() != FIND_LEN || b[0] > BUSY || b[3] > 1 {
            return Err(bad());
        }
        let slot = match b[1] {
            u8::MAX => None,
            s if (s as usize) < SLOTS => Some(s),
            _ => return Err(bad()),
        };
        let mut words = [0u64; SLOTS + 1];
        for (i, w) in words.iter_mut().enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[8 + i * 8..16 + i * 8]);
            *w = u64::from_le_bytes(a);
        }
        let mut refs = [0u8; 8];
        refs.copy_from_slice(&b[FIND_LEN - 8..]);
        Ok(Self {
            status: b[0],
            slot,
            expired: b[2] != 0,
            pair: b[3] == 1,
            generation: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            words,
            refs,
        })
    }

    /// Splits a `kv_find` reply asked for in [`MODE_ENTRY`](super::MODE_ENTRY): the find, and on a hit
    /// the item it names (flags, expiry, value). `None` for the item on a miss, and
    /// on a hit from a server that predates the mode (it answers the find alone).
    pub fn decode_with_item(b: &[u8]) -> Result<(Self, Option<FoundItem<'_>>), FormatError> {
        let (head, tail) = b.split_at(b.len().min(FIND_LEN));
        Self::decode_parts(head, tail)
    }

    /// [`FindReply::decode_with_item`] of a find and the item bytes after it.
    fn decode_parts<'a>(
        head: &[u8],
        tail: &'a [u8],
    ) -> Result<(Self, Option<FoundItem<'a>>), FormatError> {
        let f = Self::decode(head)?;
        if tail.is_empty() {
            return Ok((f, None));
        }
        if f.status != HIT || tail.len() < FOUND_ITEM_HEAD {
            return Err(FormatError::Malformed {
                what: "kv_find reply",
                reason: format!("{} item bytes after a status {}", tail.len(), f.status),
            });
        }
        let mut at = [0u8; 8];
        at.copy_from_slice(&tail[1..9]);
        Ok((
            f,
            Some(FoundItem {
                flags: tail[0],
                expires_ms: u64::from_le_bytes(at),
                value: &tail[FOUND_ITEM_HEAD..],
            }),
        ))
    }

    /// The bucket the reply's words belong to, for a key whose home is `home`.
    #[inline]
    pub fn bucket(&self, home: u32) -> u32 {
        if self.pair {
            crate::Layout::pair(home)
        } else {
            home
        }
    }
}

/// A `kv_mfind` entry for a key whose bucket was not readable where the procedure
/// ran (moved, lost): ask for it with `kv_find`.
pub fn mfind_moved() -> [u8; FIND_LEN] {
    let mut b = [0u8; FIND_LEN];
    b[0] = MOVED;
    b[1] = u8::MAX;
    b
}

fn malformed(reason: String) -> FormatError {
    FormatError::Malformed {
        what: "kv_mfind reply",
        reason,
    }
}

/// A `kv_mfind` reply's entry count and the bytes after it.
fn mfind_head(b: &[u8]) -> Result<(usize, &[u8]), FormatError> {
    let head: [u8; 4] = b
        .get(..4)
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| malformed("no head".into()))?;
    Ok((u32::from_le_bytes(head) as usize, &b[4..]))
}

/// Splits a `kv_mfind` reply: per key its [`FindReply`], or `None` when moved.
pub fn decode_mfind_reply(b: &[u8]) -> Result<Vec<Option<FindReply>>, FormatError> {
    let (count, body) = mfind_head(b)?;
    if count.checked_mul(FIND_LEN) != Some(body.len()) {
        return Err(malformed(format!(
            "{count} entries in {} bytes",
            body.len()
        )));
    }
    body.chunks_exact(FIND_LEN)
        .map(|e| {
            if e[0] == MOVED {
                Ok(None)
            } else {
                FindReply::decode(e).map(Some)
            }
        })
        .collect()
}

/// One key of a `kv_mfind` asked in [`MODE_ENTRY`](super::MODE_ENTRY): its find and, on a hit, the
/// item; `None` when moved.
pub type FoundEntry<'a> = Option<(FindReply, Option<FoundItem<'a>>)>;

/// Appends a `kv_mfind` entry in [`MODE_ENTRY`](super::MODE_ENTRY): the find, the item's length (u32
/// LE, 0 for none), the item.
pub fn mfind_entry_into(out: &mut Vec<u8>, f: &FindReply, item: Option<&FoundItem<'_>>) {
    out.extend_from_slice(&f.encode());
    match item {
        Some(it) => {
            let len = FOUND_ITEM_HEAD + it.value.len();
            out.extend_from_slice(&(len as u32).to_le_bytes());
            it.encode_into(out);
        }
        None => out.extend_from_slice(&0u32.to_le_bytes()),
    }
}

/// Splits a `kv_mfind` reply asked in [`MODE_ENTRY`](super::MODE_ENTRY). A server that predates the
/// mode answers plain entries ([`decode_mfind_reply`]): those come back without
/// items.
pub fn decode_mfind_entries(b: &[u8]) -> Result<Vec<FoundEntry<'_>>, FormatError> {
    let (count, mut rest) = mfind_head(b)?;
    if count.checked_mul(FIND_LEN) == Some(rest.len()) {
        return Ok(decode_mfind_reply(b)?
            .into_iter()
            .map(|f| f.map(|f| (f, None)))
            .collect());
    }
    if count > rest.len() / (FIND_LEN + 4) {
        return Err(malformed(format!(
            "{count} entries in {} bytes",
            rest.len()
        )));
    }
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let (e, tail) = rest
            .split_at_checked(FIND_LEN + 4)
            .ok_or_else(|| malformed(format!("entry {i}: truncated")))?;
        let len = u32::from_le_bytes([
            e[FIND_LEN],
            e[FIND_LEN + 1],
            e[FIND_LEN + 2],
            e[FIND_LEN + 3],
        ]) as usize;
        let (item, tail) = tail.split_at_checked(len).ok_or_else(|| {
            malformed(format!(
                "entry {i}: item of {len} bytes runs past the reply"
            ))
        })?;
        rest = tail;
        if e[0] == MOVED {
            out.push(None);
            continue;
        }
        out.push(Some(FindReply::decode_parts(&e[..FIND_LEN], item)?));
    }
    if !rest.is_empty() {
        return Err(malformed(format!("{} trailing bytes", rest.len())));
    }
    Ok(out)
}
