//! Arguments and replies of the store's built-in procedures (`kv_get`, `kv_find`,
//! `kv_stats`). The client encodes what the server decodes; both sides use these.

use crate::FormatError;
use crate::layout::SLOTS;

mod edit;
mod find;
mod put;

pub use put::{
    COUNTER_DIGITS, KV_MPUT, KV_PUT, NO_ITEM, PUT_HEAD, PUT_REPLY_LEN, PutArgs, PutGuard, PutReply,
    PutStatus, decode_mput, decode_mput_reply, mput_entry_into, put_target,
};

pub use edit::{
    EDIT_REPLY_HEAD, Edit, EditReply, Edited, KV_MEDIT, apply_edits, decode_edits,
    decode_medit_reply, encode_edits, parse_integer,
};

pub use find::{
    FIND_LEN, FOUND_ITEM_HEAD, FindReply, FoundEntry, FoundItem, decode_mfind_entries,
    decode_mfind_reply, mfind_entry_into, mfind_moved,
};

/// Slots a key may be in: its home bucket's, then its pair bucket's. Replies number
/// a key's slot in this order (`s >= SLOTS` is slot `s - SLOTS` of the pair).
pub const REACH: usize = 2 * SLOTS;

pub const KV_GET: &str = "kv_get";
pub const KV_FIND: &str = "kv_find";
pub const KV_STATS: &str = "kv_stats";
pub const KV_SCAN: &str = "kv_scan";
pub const KV_HOT: &str = "kv_hot";
pub const KV_MGET: &str = "kv_mget";
/// `kv_find` of many keys of one server in one run (a PUT's first round trip).
/// Arguments as `kv_mget`'s (the mode is not used); reply `[count u32]`, then per
/// key a [`FindReply`] of [`FIND_LEN`] bytes whose status may also be [`MOVED`].
pub const KV_MFIND: &str = "kv_mfind";

/// `kv_mget` statuses beyond [`HIT`], [`MISS`] and [`BUSY`]: the key's bucket is not
/// readable here (moved, lost, out of range: ask with `kv_get`), or the reply was full
/// before this key (ask again).
pub const MOVED: u8 = 3;
pub const AGAIN: u8 = 4;

/// `kv_mget` argument head: `[mode u8][now_ms u64][count u32]`, then per key
/// [`MgetKey`]. Invoked at the first key's bucket; every key should be on the same
/// server.
pub const MGET_HEAD: usize = 13;
/// Per-key bytes before the key.
pub const MGET_KEY_HEAD: usize = 2 + 2 + 8 + 8 + 8;
/// Per-key reply head: `[status, slot, ref, flags, vlen u32]`, then the value.
pub const MGET_ENTRY_HEAD: usize = 8;

/// One key of a `kv_mget`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MgetKey<'a> {
    pub tag: u16,
    pub bucket_addr: u64,
    pub shard_base: u64,
    pub refs_addr: u64,
    pub key: &'a [u8],
}

pub fn mget_head(out: &mut Vec<u8>, mode: u8, now_ms: u64, count: u32) {
    out.push(mode);
    out.extend_from_slice(&now_ms.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
}

impl MgetKey<'_> {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.bucket_addr.to_le_bytes());
        out.extend_from_slice(&self.shard_base.to_le_bytes());
        out.extend_from_slice(&self.refs_addr.to_le_bytes());
        out.extend_from_slice(self.key);
    }
}

/// Reads a `kv_mget` argument list: (mode, now_ms, keys).
#[allow(clippy::type_complexity)]
pub fn decode_mget(b: &[u8]) -> Result<(u8, u64, Vec<MgetKey<'_>>), FormatError> {
    let bad = |r: String| FormatError::Malformed {
        what: "kv_mget args",
        reason: r,
    };
    if b.len() < MGET_HEAD {
        return Err(bad(format!("{} bytes, no head", b.len())));
    }
    let u64_at = |b: &[u8], i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(a)
    };
    let mode = b[0];
    let now = u64_at(b, 1);
    let count = u32::from_le_bytes([b[9], b[10], b[11], b[12]]) as usize;
    let mut rest = &b[MGET_HEAD..];
    if count > rest.len() / MGET_KEY_HEAD {
        return Err(bad(format!(
            "{count} keys cannot fit in {} bytes",
            rest.len()
        )));
    }
    let mut keys = Vec::with_capacity(count);
    for i in 0..count {
        if rest.len() < MGET_KEY_HEAD {
            return Err(bad(format!("key {i}: truncated")));
        }
        let klen = usize::from(u16::from_le_bytes([rest[2], rest[3]]));
        let key = rest
            .get(MGET_KEY_HEAD..MGET_KEY_HEAD + klen)
            .ok_or_else(|| bad(format!("key {i}: runs past the arguments")))?;
        keys.push(MgetKey {
            tag: u16::from_le_bytes([rest[0], rest[1]]),
            bucket_addr: u64_at(rest, 4),
            shard_base: u64_at(rest, 12),
            refs_addr: u64_at(rest, 20),
            key,
        });
        rest = &rest[MGET_KEY_HEAD + klen..];
    }
    if !rest.is_empty() {
        return Err(bad(format!("{} trailing bytes", rest.len())));
    }
    Ok((mode, now, keys))
}

/// One key's answer in a `kv_mget` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MgetEntry {
    pub status: u8,
    pub slot: u8,
    pub referenced: u8,
    pub flags: u8,
    /// Where the value lies in the reply.
    pub value: (usize, usize),
}

/// Splits a `kv_mget` reply into the server's load figure and one entry per key.
pub fn decode_mget_reply(b: &[u8]) -> Result<(u32, Vec<MgetEntry>), FormatError> {
    let bad = |r: String| FormatError::Malformed {
        what: "kv_mget reply",
        reason: r,
    };
    if b.len() < 8 {
        return Err(bad("no head".into()));
    }
    let load = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let count = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let mut at = 8;
    let mut out = Vec::with_capacity(count.min(4096));
    for i in 0..count {
        let h = b
            .get(at..at + MGET_ENTRY_HEAD)
            .ok_or_else(|| bad(format!("entry {i}: truncated")))?;
        let vlen = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let start = at + MGET_ENTRY_HEAD;
        let end = start
            .checked_add(vlen)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| bad(format!("entry {i}: value runs past the reply")))?;
        if h[0] > AGAIN || (h[0] == HIT && h[1] as usize >= REACH) {
            return Err(bad(format!("entry {i}: head {h:?}")));
        }
        out.push(MgetEntry {
            status: h[0],
            slot: h[1],
            referenced: h[2],
            flags: h[3],
            value: (start, end),
        });
        at = end;
    }
    if at != b.len() {
        return Err(bad(format!("{} trailing bytes", b.len() - at)));
    }
    Ok((load, out))
}

/// A `kv_hot` entry: a heavy hitter on the answering server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKey {
    pub shard_base: u64,
    pub count: u32,
    pub key: Vec<u8>,
}

/// `kv_hot` reply: the server's lookup count, then its heavy hitters.
pub fn encode_hot(lookups: u64, hot: &[HotKey]) -> Vec<u8> {
    let mut b = lookups.to_le_bytes().to_vec();
    b.extend_from_slice(&(hot.len() as u32).to_le_bytes());
    for h in hot {
        b.extend_from_slice(&h.count.to_le_bytes());
        b.extend_from_slice(&h.shard_base.to_le_bytes());
        b.extend_from_slice(&(h.key.len() as u16).to_le_bytes());
        b.extend_from_slice(&h.key);
    }
    b
}

pub fn decode_hot(b: &[u8]) -> Result<(u64, Vec<HotKey>), FormatError> {
    let bad = |r: &str| FormatError::Malformed {
        what: "kv_hot reply",
        reason: r.into(),
    };
    if b.len() < 12 {
        return Err(bad("no head"));
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    let lookups = u64::from_le_bytes(a);
    let n = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
    let mut rest = &b[12..];
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        if rest.len() < 14 {
            return Err(bad("truncated entry"));
        }
        let count = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        a.copy_from_slice(&rest[4..12]);
        let klen = usize::from(u16::from_le_bytes([rest[12], rest[13]]));
        let key = rest
            .get(14..14 + klen)
            .ok_or_else(|| bad("key runs past the reply"))?;
        out.push(HotKey {
            shard_base: u64::from_le_bytes(a),
            count,
            key: key.to_vec(),
        });
        rest = &rest[14 + klen..];
    }
    Ok((lookups, out))
}

/// `kv_scan` arguments: items whose flags meet `mask`, from bucket `from`, until the
/// reply holds about `max_bytes`. Invoked at a shard's first byte. A `mask` of
/// [`SCAN_KEYS`] lists every item's key (values left out, `vlen` 0), skipping items
/// expired at `now_ms` (sent only then: the arguments are 17 bytes instead of 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    pub mask: u8,
    pub from: u32,
    pub max_bytes: u32,
    pub now_ms: u64,
}

/// The `kv_scan` mask that lists keys (of every item, whatever its flags).
pub const SCAN_KEYS: u8 = 0;

/// `kv_scan` reply: `next` (the bucket to continue from, `u32::MAX` when done), then
/// `[klen u32][vlen u32][key][value]` per item.
pub const SCAN_DONE: u32 = u32::MAX;

impl Scan {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(17);
        b.push(self.mask);
        b.extend_from_slice(&self.from.to_le_bytes());
        b.extend_from_slice(&self.max_bytes.to_le_bytes());
        if self.mask == SCAN_KEYS {
            b.extend_from_slice(&self.now_ms.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        let want = if b.first() == Some(&SCAN_KEYS) { 17 } else { 9 };
        if b.len() != want {
            return Err(FormatError::Malformed {
                what: "kv_scan args",
                reason: format!("{} bytes, want {want}", b.len()),
            });
        }
        let now_ms = match b.get(9..17) {
            Some(t) => u64::from_le_bytes(t.try_into().unwrap_or_default()),
            None => 0,
        };
        Ok(Self {
            mask: b[0],
            from: u32::from_le_bytes([b[1], b[2], b[3], b[4]]),
            max_bytes: u32::from_le_bytes([b[5], b[6], b[7], b[8]]),
            now_ms,
        })
    }
}

/// Splits a `kv_scan` reply into `next` and its (key, value) pairs.
#[allow(clippy::type_complexity)]
pub fn scan_reply(b: &[u8]) -> Result<(u32, Vec<(&[u8], &[u8])>), FormatError> {
    let bad = |r: &str| FormatError::Malformed {
        what: "kv_scan reply",
        reason: r.into(),
    };
    if b.len() < 4 {
        return Err(bad("no head"));
    }
    let next = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut rest = &b[4..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        if rest.len() < 8 {
            return Err(bad("truncated entry head"));
        }
        let k = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let v = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let end = 8usize
            .checked_add(k)
            .and_then(|e| e.checked_add(v))
            .filter(|&e| e <= rest.len())
            .ok_or_else(|| bad("entry runs past the reply"))?;
        out.push((&rest[8..8 + k], &rest[8 + k..end]));
        rest = &rest[end..];
    }
    Ok((next, out))
}

/// Bytes of [`Lookup`] before the key.
pub const LOOKUP_HEAD: usize = 1 + 2 + 8 + 8 + 8;

/// `kv_get` modes.
pub const MODE_VALUE: u8 = 0;
pub const MODE_EXISTS: u8 = 1;
/// The value preceded by the item's expiry (u64 LE, ms since the Unix epoch, 0 for
/// none): a read-modify-write keeping the key's expiry in one round trip. A server
/// that predates this mode answers as for `MODE_EXISTS` (no bytes after the head).
/// Asked of `kv_find`, the find is followed by the item on a hit ([`FoundItem`]).
pub const MODE_ENTRY: u8 = 2;

/// A lookup of one key, invoked at its bucket's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup<'a> {
    pub mode: u8,
    pub tag: u16,
    /// The caller's clock, for expiry (ms since the Unix epoch).
    pub now_ms: u64,
    pub shard_base: u64,
    pub refs_addr: u64,
    pub key: &'a [u8],
}

impl<'a> Lookup<'a> {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(self.mode);
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.extend_from_slice(&self.now_ms.to_le_bytes());
        out.extend_from_slice(&self.shard_base.to_le_bytes());
        out.extend_from_slice(&self.refs_addr.to_le_bytes());
        out.extend_from_slice(self.key);
    }

    pub fn decode(b: &'a [u8]) -> Result<Self, FormatError> {
        if b.len() < LOOKUP_HEAD {
            return Err(FormatError::Malformed {
                what: "kv lookup",
                reason: format!("{} bytes, need at least {LOOKUP_HEAD}", b.len()),
            });
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Ok(Self {
            mode: b[0],
            tag: u16::from_le_bytes([b[1], b[2]]),
            now_ms: u64_at(3),
            shard_base: u64_at(11),
            refs_addr: u64_at(19),
            key: &b[LOOKUP_HEAD..],
        })
    }
}

/// Status byte leading every lookup reply.
pub const HIT: u8 = 0;
pub const MISS: u8 = 1;
/// The bucket kept changing under the lookup (it retried): ask again.
pub const BUSY: u8 = 2;

/// `kv_get` reply head: `[status, slot, ref, item flags, load (u32 LE)]`, then the
/// value on a hit. `load` is the low 32 bits of the server's count of lookups served
/// (clients difference it over time to tell which server is busier).
pub const GET_HEAD: usize = 8;
/// Set in a `kv_get` reply's flags byte when the key is hot (has a second copy).
pub const REPLY_HOT: u8 = 0x80;

pub fn get_head(status: u8, slot: u8, referenced: u8, flags: u8, load: u32) -> [u8; GET_HEAD] {
    let l = load.to_le_bytes();
    [status, slot, referenced, flags, l[0], l[1], l[2], l[3]]
}

/// A decoded `kv_get` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetReply<'a> {
    pub status: u8,
    pub slot: u8,
    /// The slot's CLOCK byte when read (the client sets it after a hit if 0).
    pub referenced: u8,
    /// The item's flags (`item::FLAG_*`).
    pub flags: u8,
    /// The server's lookup counter (low 32 bits).
    pub load: u32,
    pub value: &'a [u8],
}

impl<'a> GetReply<'a> {
    pub fn decode(b: &'a [u8]) -> Result<Self, FormatError> {
        if b.len() < GET_HEAD || b[0] > BUSY || (b[0] == HIT && b[1] as usize >= REACH) {
            return Err(FormatError::Malformed {
                what: "kv_get reply",
                reason: format!("{} bytes, head {:?}", b.len(), &b[..b.len().min(GET_HEAD)]),
            });
        }
        Ok(Self {
            status: b[0],
            slot: b[1],
            referenced: b[2],
            flags: b[3],
            load: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            value: &b[GET_HEAD..],
        })
    }
}

/// `kv_stats` reply: one shard's census, from a scan of its index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardStats {
    pub live: u64,
    pub expired: u64,
    pub tombstones: u64,
    pub empty: u64,
    /// Bytes of the size classes live items occupy.
    pub reserved: u64,
    /// Bytes live items need (header, key, value).
    pub requested: u64,
    /// Heap bytes ever carved (the bump pointer, capped at the heap's end).
    pub carved: u64,
    pub heap: u64,
    pub evictions: u64,
}

pub const STATS_LEN: usize = 9 * 8;

impl ShardStats {
    fn fields(&self) -> [u64; 9] {
        [
            self.live,
            self.expired,
            self.tombstones,
            self.empty,
            self.reserved,
            self.requested,
            self.carved,
            self.heap,
            self.evictions,
        ]
    }

    pub fn encode(&self) -> Vec<u8> {
        self.fields().iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        if b.len() != STATS_LEN {
            return Err(FormatError::Malformed {
                what: "kv_stats reply",
                reason: format!("{} bytes, want {STATS_LEN}", b.len()),
            });
        }
        let mut f = [0u64; 9];
        for (i, v) in f.iter_mut().enumerate() {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *v = u64::from_le_bytes(a);
        }
        Ok(Self {
            live: f[0],
            expired: f[1],
            tombstones: f[2],
            empty: f[3],
            reserved: f[4],
            requested: f[5],
            carved: f[6],
            heap: f[7],
            evictions: f[8],
        })
    }

    pub fn add(&mut self, o: &ShardStats) {
        self.live += o.live;
        self.expired += o.expired;
        self.tombstones += o.tombstones;
        self.empty += o.empty;
        self.reserved += o.reserved;
        self.requested += o.requested;
        self.carved += o.carved;
        self.heap += o.heap;
        self.evictions += o.evictions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever a peer sends, the decoders answer with a value or an error.
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = decode_mget(&b);
            let _ = decode_mget_reply(&b);
            let _ = decode_mfind_reply(&b);
            let _ = scan_reply(&b);
            let _ = decode_hot(&b);
            let _ = Lookup::decode(&b);
            let _ = GetReply::decode(&b);
            let _ = FindReply::decode(&b);
            let _ = ShardStats::decode(&b);
            let _ = crate::manifest::Manifest::decode(&b);
            let _ = crate::Descriptor::decode(&b);
        }
    }

    #[test]
    fn mfind_replies_round_trip() {
        let f = FindReply {
            status: HIT,
            slot: Some(3),
            expired: false,
            pair: true,
            generation: 7,
            words: [9; SLOTS + 1],
            refs: [1; 8],
        };
        let mut b = 2u32.to_le_bytes().to_vec();
        b.extend_from_slice(&f.encode());
        b.extend_from_slice(&mfind_moved());
        assert_eq!(
            decode_mfind_reply(&b).expect("decodes"),
            vec![Some(f), None]
        );
        assert!(decode_mfind_reply(&b[..b.len() - 1]).is_err());
        b[0] = 3;
        assert!(decode_mfind_reply(&b).is_err());
    }

    #[test]
    fn mget_args_and_replies_round_trip() {
        let mut a = Vec::new();
        mget_head(&mut a, MODE_VALUE, 42, 2);
        for (i, k) in [&b"one"[..], b""].iter().enumerate() {
            MgetKey {
                tag: i as u16,
                bucket_addr: 1024 + i as u64,
                shard_base: 0,
                refs_addr: 9,
                key: k,
            }
            .encode_into(&mut a);
        }
        let (mode, now, keys) = decode_mget(&a).expect("args");
        assert_eq!(
            (mode, now, keys.len(), keys[0].key, keys[1].bucket_addr),
            (0, 42, 2, &b"one"[..], 1025)
        );
        assert!(decode_mget(&a[..a.len() - 1]).is_err());
        let mut huge = a.clone();
        huge[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_mget(&huge).is_err());

        let mut r = 7u32.to_le_bytes().to_vec();
        r.extend_from_slice(&2u32.to_le_bytes());
        r.extend_from_slice(&[HIT, 1, 0, 0, 3, 0, 0, 0]);
        r.extend_from_slice(b"abc");
        r.extend_from_slice(&[MISS, 0, 0, 0, 0, 0, 0, 0]);
        let (load, e) = decode_mget_reply(&r).expect("reply");
        assert_eq!(
            (load, e.len(), &r[e[0].value.0..e[0].value.1]),
            (7, 2, &b"abc"[..])
        );
        assert_eq!(e[1].status, MISS);
        assert!(decode_mget_reply(&r[..r.len() - 1]).is_err());
    }

    #[test]
    fn wire_round_trips() {
        let l = Lookup {
            mode: MODE_EXISTS,
            tag: 0xabcd,
            now_ms: 5,
            shard_base: 1 << 20,
            refs_addr: 99,
            key: b"k\0y",
        };
        let mut b = Vec::new();
        l.encode_into(&mut b);
        assert_eq!(Lookup::decode(&b), Ok(l));
        assert!(Lookup::decode(&b[..LOOKUP_HEAD - 1]).is_err());

        let f = FindReply {
            status: HIT,
            slot: Some(3),
            expired: true,
            pair: false,
            generation: 77,
            words: [1, 2, 3, 4, 5, 6, 7, 8],
            refs: [1, 0, 1, 0, 0, 0, 0, 0],
        };
        assert_eq!(FindReply::decode(&f.encode()), Ok(f));
        let mut e = f.encode();
        e[1] = 9;
        assert!(FindReply::decode(&e).is_err());
        let mut e = f.encode();
        e[3] = 2;
        assert!(FindReply::decode(&e).is_err(), "pair flag is 0 or 1");
        assert_eq!(f.bucket(6), 6);
        assert_eq!(FindReply { pair: true, ..f }.bucket(6), 7);

        // A find with its item, a bare find (an older server, or a miss), and
        // bytes after a miss or too few of them.
        let mut b = f.encode().to_vec();
        let it = FoundItem {
            flags: 2,
            expires_ms: 42,
            value: b"17",
        };
        it.encode_into(&mut b);
        assert_eq!(FindReply::decode_with_item(&b), Ok((f, Some(it))));
        assert_eq!(FindReply::decode_with_item(&f.encode()), Ok((f, None)));
        let miss = FindReply {
            status: MISS,
            slot: None,
            ..f
        };
        let mut b = miss.encode().to_vec();
        assert_eq!(FindReply::decode_with_item(&b), Ok((miss, None)));
        it.encode_into(&mut b);
        assert!(FindReply::decode_with_item(&b).is_err());
        let mut b = f.encode().to_vec();
        b.extend_from_slice(&[0; FOUND_ITEM_HEAD - 1]);
        assert!(FindReply::decode_with_item(&b).is_err());

        // kv_mfind in MODE_ENTRY: a hit with its item, a miss, a moved key; a
        // plain reply (an older server) reads as finds without items.
        let mut m = 3u32.to_le_bytes().to_vec();
        mfind_entry_into(&mut m, &f, Some(&it));
        mfind_entry_into(&mut m, &miss, None);
        m.extend_from_slice(&mfind_moved());
        m.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            decode_mfind_entries(&m),
            Ok(vec![Some((f, Some(it))), Some((miss, None)), None])
        );
        assert!(decode_mfind_entries(&m[..m.len() - 1]).is_err());
        let mut long = m.clone();
        long.push(0);
        assert!(decode_mfind_entries(&long).is_err());
        let mut plain = 2u32.to_le_bytes().to_vec();
        plain.extend_from_slice(&f.encode());
        plain.extend_from_slice(&mfind_moved());
        assert_eq!(
            decode_mfind_entries(&plain),
            Ok(vec![Some((f, None)), None])
        );
        // An item length past the reply is refused, not read.
        let mut lie = 1u32.to_le_bytes().to_vec();
        lie.extend_from_slice(&f.encode());
        lie.extend_from_slice(&u32::MAX.to_le_bytes());
        lie.extend_from_slice(&[0; 16]);
        assert!(decode_mfind_entries(&lie).is_err());

        let s = ShardStats {
            live: 1,
            evictions: 9,
            ..Default::default()
        };
        assert_eq!(ShardStats::decode(&s.encode()), Ok(s));
        assert!(ShardStats::decode(&[0; 3]).is_err());

        let mut g = get_head(HIT, 2, 1, 0, 9).to_vec();
        g.extend_from_slice(b"val");
        let r = GetReply::decode(&g).expect("reply");
        assert_eq!(
            (r.status, r.slot, r.referenced, r.value),
            (HIT, 2, 1, &b"val"[..])
        );
        assert!(GetReply::decode(&[HIT, 14, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(
            GetReply::decode(&[HIT, 13, 0, 0, 0, 0, 0, 0]).is_ok(),
            "a pair slot"
        );
    }
}
