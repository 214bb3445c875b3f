//! `kv_put`: a put of one small item run where its shard lives, in one round trip
//! (find the key's slot, take an item, write it, swing the slot). Anything out of the
//! ordinary (a busy or full bucket, a hot key, a carved-out heap, a client item of a
//! past generation) is answered with what it met, and the client takes its two-round
//! road for that key.

use super::{FindReply, HIT};
use crate::FormatError;
use crate::SlotWord;
use crate::layout::SLOTS;

pub const KV_PUT: &str = "kv_put";
/// `kv_put` of many keys of one server in one run (their buckets and items
/// prefetched ahead, as `kv_mget` does): `[count u32]`, then per key its bucket's
/// address (u64), the length of its arguments (u32) and its [`PutArgs`]; the reply is
/// `[count u32]` and a [`PutReply`] per key, in order.
pub const KV_MPUT: &str = "kv_mput";

/// Decimal digits and sign of the longest i64.
pub const COUNTER_DIGITS: usize = 20;

/// Appends one key of a `kv_mput`.
pub fn mput_entry_into(out: &mut Vec<u8>, bucket_addr: u64, args: &PutArgs<'_>) {
    out.extend_from_slice(&bucket_addr.to_le_bytes());
    let at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    args.encode_into(out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// A `kv_mput`'s keys: (bucket address, arguments) each.
pub fn decode_mput(b: &[u8]) -> Result<Vec<(u64, PutArgs<'_>)>, FormatError> {
    let bad = |reason: String| FormatError::Malformed {
        what: "kv_mput arguments",
        reason,
    };
    let (n, mut rest) = count_head(b).ok_or_else(|| bad("no count".into()))?;
    // Each key takes at least its head: a count past that is a lie.
    if n > rest.len() / (12 + PUT_HEAD) {
        return Err(bad(format!("{n} keys in {} bytes", rest.len())));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        if rest.len() < 12 {
            return Err(bad("truncated key head".into()));
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&rest[..8]);
        let len = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
        let body = rest
            .get(12..12 + len)
            .ok_or_else(|| bad(format!("a key's {len} bytes run past the arguments")))?;
        out.push((u64::from_le_bytes(a), PutArgs::decode(body)?));
        rest = &rest[12 + len..];
    }
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes after the last key", rest.len())));
    }
    Ok(out)
}

/// A `kv_mput` reply's per-key outcomes.
pub fn decode_mput_reply(b: &[u8]) -> Result<Vec<PutReply>, FormatError> {
    let bad = || FormatError::Malformed {
        what: "kv_mput reply",
        reason: format!("{} bytes", b.len()),
    };
    let (n, rest) = count_head(b).ok_or_else(bad)?;
    if rest.len() != n.checked_mul(PUT_REPLY_LEN).ok_or_else(bad)? {
        return Err(bad());
    }
    rest.chunks_exact(PUT_REPLY_LEN)
        .map(PutReply::decode)
        .collect()
}

pub(super) fn count_head(b: &[u8]) -> Option<(usize, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*head) as usize, rest))
}

/// What a put must find in the key's slot to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutGuard {
    Always,
    /// Only if the key is absent (or expired).
    IfAbsent,
    /// Only if the key is present.
    IfPresent,
    /// Only while the key's slot still names this item (its hot flag aside).
    Slot(u64),
}

impl PutGuard {
    /// Whether a put may go ahead, given the key's find.
    pub fn allows(self, f: &FindReply) -> bool {
        let present = f.status == HIT && !f.expired;
        match self {
            PutGuard::Always => true,
            PutGuard::IfAbsent => !present,
            PutGuard::IfPresent => present,
            PutGuard::Slot(w) => {
                present
                    && f.slot.is_some_and(|s| {
                        SlotWord::with_hot(f.words[usize::from(s)]) == SlotWord::with_hot(w)
                    })
            }
        }
    }

    fn code(self) -> (u8, u64) {
        match self {
            PutGuard::Always => (0, 0),
            PutGuard::IfAbsent => (1, 0),
            PutGuard::IfPresent => (2, 0),
            PutGuard::Slot(w) => (3, w),
        }
    }
}

/// No item given: take one from the shard's bump pointer.
pub const NO_ITEM: u64 = u64::MAX;

/// `kv_put`'s arguments, invoked at the key's home bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutArgs<'a> {
    pub guard: PutGuard,
    pub tag: u16,
    /// The slot word's class byte (the size class, with the manifest flag).
    pub word_class: u8,
    /// The item's flags (`item::FLAG_*`).
    pub flags: u8,
    /// The caller's clock, for expiry (ms since the Unix epoch).
    pub now_ms: u64,
    pub shard_base: u64,
    pub refs_addr: u64,
    /// When the item expires (`item::NO_EXPIRY`: never).
    pub expires_ms: u64,
    /// An item the caller holds for reuse (offset in the shard), or [`NO_ITEM`].
    pub item: u64,
    /// The shard generation `item` was seen in.
    pub generation: u32,
    /// Bytes of the item's size class.
    pub size: u32,
    /// Where the shard's heap starts, and the shard's size (a fresh item must end
    /// within it).
    pub heap_start: u64,
    pub shard_size: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// Bytes of [`PutArgs`] before the key.
pub const PUT_HEAD: usize = 1 + 8 + 2 + 1 + 1 + 8 * 6 + 4 + 4 + 8 + 4;

impl<'a> PutArgs<'a> {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let (g, w) = self.guard.code();
        out.push(g);
        out.extend_from_slice(&w.to_le_bytes());
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.push(self.word_class);
        out.push(self.flags);
        for v in [
            self.now_ms,
            self.shard_base,
            self.refs_addr,
            self.expires_ms,
            self.item,
            self.heap_start,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.shard_size.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(self.value);
    }

    pub fn decode(b: &'a [u8]) -> Result<Self, FormatError> {
        let bad = |reason: String| FormatError::Malformed {
            what: "kv_put arguments",
            reason,
        };
        if b.len() < PUT_HEAD {
            return Err(bad(format!("{} bytes, need at least {PUT_HEAD}", b.len())));
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let guard = match (b[0], u64_at(1)) {
            (0, _) => PutGuard::Always,
            (1, _) => PutGuard::IfAbsent,
            (2, _) => PutGuard::IfPresent,
            (3, w) => PutGuard::Slot(w),
            (g, _) => return Err(bad(format!("guard {g}"))),
        };
        let klen = u32_at(PUT_HEAD - 4) as usize;
        let rest = &b[PUT_HEAD..];
        if klen > rest.len() {
            return Err(bad(format!(
                "a key of {klen} bytes in {} bytes",
                rest.len()
            )));
        }
        let (key, value) = rest.split_at(klen);
        Ok(Self {
            guard,
            tag: u16::from_le_bytes([b[9], b[10]]),
            word_class: b[11],
            flags: b[12],
            now_ms: u64_at(13),
            shard_base: u64_at(21),
            refs_addr: u64_at(29),
            expires_ms: u64_at(37),
            item: u64_at(45),
            heap_start: u64_at(53),
            generation: u32_at(61),
            size: u32_at(65),
            shard_size: u64_at(69),
            key,
            value,
        })
    }
}

/// `kv_put` outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutStatus {
    /// Written: the slot names the new item; `old` is the word it replaced.
    Written,
    /// The guard did not hold: nothing changed.
    Skipped,
    /// The bucket kept changing under the put.
    Busy,
    /// No slot for a new key in its home or pair bucket (the bucket lock's road).
    Full,
    /// The key is hot (it has a second copy whose lease a writer waits out).
    Hot,
    /// The shard's heap is carved out (free lists and eviction are the client's).
    NoHeap,
    /// The caller's item is of a past generation of the shard (it was reset).
    Stale,
    /// Memory the put needed is not writable here now (its region moved, is
    /// paused by a migration, or lost bytes): the client's road decides.
    Refused,
}

impl PutStatus {
    const ALL: [PutStatus; 8] = [
        PutStatus::Written,
        PutStatus::Skipped,
        PutStatus::Busy,
        PutStatus::Full,
        PutStatus::Hot,
        PutStatus::NoHeap,
        PutStatus::Stale,
        PutStatus::Refused,
    ];
}

/// `kv_put`'s reply: `[status, old word (u64), generation (u32), item (u64)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutReply {
    pub status: PutStatus,
    /// The slot word the new item replaced (on [`PutStatus::Written`]).
    pub old: u64,
    /// The shard's generation, as the put read it.
    pub generation: u32,
    /// On `Written`, the item now named by the slot; otherwise an item taken for
    /// this put and not used (the caller keeps it for reuse), or [`NO_ITEM`].
    pub item: u64,
}

pub const PUT_REPLY_LEN: usize = 1 + 8 + 4 + 8;

impl PutReply {
    pub fn encode(&self) -> [u8; PUT_REPLY_LEN] {
        let mut b = [0u8; PUT_REPLY_LEN];
        b[0] = self.status as u8;
        b[1..9].copy_from_slice(&self.old.to_le_bytes());
        b[9..13].copy_from_slice(&self.generation.to_le_bytes());
        b[13..21].copy_from_slice(&self.item.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        let bad = || FormatError::Malformed {
            what: "kv_put reply",
            reason: format!("{} bytes", b.len()),
        };
        if b.len() != PUT_REPLY_LEN {
            return Err(bad());
        }
        let status = *PutStatus::ALL.get(usize::from(b[0])).ok_or_else(bad)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[1..9]);
        let mut i = [0u8; 8];
        i.copy_from_slice(&b[13..21]);
        Ok(Self {
            status,
            old: u64::from_le_bytes(w),
            generation: u32::from_le_bytes([b[9], b[10], b[11], b[12]]),
            item: u64::from_le_bytes(i),
        })
    }
}

/// The slot a put of a key found as `f` goes to: its own slot on a hit, else the
/// first empty slot of the bucket the find named; `None` when there is none.
pub fn put_target(f: &FindReply) -> Option<usize> {
    if f.status == HIT {
        return f.slot.map(usize::from);
    }
    f.words[..SLOTS]
        .iter()
        .position(|&w| w == crate::slot::EMPTY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_replies_round_trip() {
        let a = PutArgs {
            guard: PutGuard::Slot(0x1234_5678_9abc),
            tag: 77,
            word_class: 0x85,
            flags: 1,
            now_ms: 5,
            shard_base: 1 << 30,
            refs_addr: (1 << 30) + 4096,
            expires_ms: 99,
            item: 4096,
            generation: 3,
            size: 96,
            heap_start: 8192,
            shard_size: 16 << 20,
            key: b"key",
            value: b"value",
        };
        let mut b = Vec::new();
        a.encode_into(&mut b);
        assert_eq!(PutArgs::decode(&b).expect("decode"), a);
        assert!(PutArgs::decode(&b[..PUT_HEAD - 1]).is_err());
        let mut long_key = b.clone();
        long_key[PUT_HEAD - 4..PUT_HEAD].copy_from_slice(&1000u32.to_le_bytes());
        assert!(PutArgs::decode(&long_key).is_err());
        for status in PutStatus::ALL {
            let r = PutReply {
                status,
                old: 7,
                generation: 2,
                item: NO_ITEM,
            };
            assert_eq!(PutReply::decode(&r.encode()).expect("reply"), r);
        }
        let mut bad = PutReply {
            status: PutStatus::Busy,
            old: 0,
            generation: 0,
            item: 0,
        }
        .encode();
        bad[0] = 200;
        assert!(PutReply::decode(&bad).is_err());
        let mut m = 2u32.to_le_bytes().to_vec();
        mput_entry_into(&mut m, 64, &a);
        mput_entry_into(&mut m, 128, &PutArgs { key: b"k2", ..a });
        let keys = decode_mput(&m).expect("mput");
        assert_eq!(keys, vec![(64, a), (128, PutArgs { key: b"k2", ..a })]);
        assert!(decode_mput(&m[..m.len() - 1]).is_err());
        let mut lie = m.clone();
        lie[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_mput(&lie).is_err());
        let r = PutReply {
            status: PutStatus::Refused,
            old: 1,
            generation: 2,
            item: 3,
        };
        let mut rb = 2u32.to_le_bytes().to_vec();
        rb.extend_from_slice(&r.encode());
        rb.extend_from_slice(&r.encode());
        assert_eq!(decode_mput_reply(&rb).expect("reply"), vec![r, r]);
        assert!(decode_mput_reply(&rb[..rb.len() - 1]).is_err());
    }
}
