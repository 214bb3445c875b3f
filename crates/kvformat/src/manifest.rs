//! Erasure-coded objects. A value above the store's threshold is cut into `d` data
//! chunks (zero-padded to equal length) and `p` Reed–Solomon parity chunks, each on
//! a shard of a different server; a chunk is stored as pieces (ordinary items under
//! placed keys, so they are indexed, evicted and migrated like any item). The
//! manifest says where: it is the value under the user's key (flagged as a manifest)
//! and a copy sits beside every chunk, so losing the key's home shard loses nothing.

use xxhash_rust::xxh3::xxh3_64;

use crate::FormatError;
use crate::hash::PLACED;

/// 2 added [`Manifest::seq`].
const MAGIC: [u8; 4] = *b"FCM2";
const HEAD: usize = 4 + 2 + 8 + 8 + 8 + 4 + 8 + 8;

/// Kinds of placed keys.
const PIECE: u8 = b'P';
const COPY: u8 = b'M';
const HOT: u8 = b'H';

/// Largest object a manifest may describe (Redis's value limit too). Readers size
/// buffers from a manifest read out of the cache, which any read-write token holder
/// can write: every size in it is bounded before anything is allocated.
pub const MAX_LEN: u64 = 512 << 20;
/// Most pieces one chunk may be cut into (real ones: a few hundred; one lookup each).
pub const MAX_PIECES: u64 = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Distinguishes this put's pieces from any other put's of the same key.
    pub version: u64,
    /// Orders the puts of one key: above the `seq` of the manifest the put replaced
    /// (and at least its writer's clock in ms). Manifest copies outlive their object
    /// when a writer stops half way, so a reader without the home takes the highest.
    pub seq: u64,
    /// The value's length.
    pub len: u64,
    pub data: u8,
    pub parity: u8,
    pub chunk_len: u64,
    pub piece_len: u32,
    /// xxh3-64 of the whole value, checked after decoding.
    pub checksum: u64,
    /// The shards of each chunk (data chunks first, then parity), all on one server
    /// when written; piece `j` of chunk `c` is in `shards[c][j % shards[c].len()]`,
    /// and the manifest copy beside the chunk in `shards[c][0]`.
    pub shards: Vec<Vec<u32>>,
}

impl Manifest {
    pub fn chunks(&self) -> usize {
        usize::from(self.data) + usize::from(self.parity)
    }

    /// The shard holding piece `j` of chunk `c`.
    pub fn piece_shard(&self, c: usize, j: u32) -> u32 {
        let s = &self.shards[c];
        s[j as usize % s.len().max(1)]
    }

    /// The shard holding chunk `c`'s manifest copy.
    pub fn copy_shard(&self, c: usize) -> u32 {
        self.shards[c][0]
    }

    pub fn pieces(&self) -> u32 {
        self.chunk_len.div_ceil(u64::from(self.piece_len.max(1))) as u32
    }

    /// Length of piece `i` of a chunk.
    pub fn piece_size(&self, i: u32) -> u64 {
        let start = u64::from(i) * u64::from(self.piece_len);
        self.chunk_len
            .saturating_sub(start)
            .min(u64::from(self.piece_len))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEAD + 4 * self.shards.len());
        b.extend_from_slice(&MAGIC);
        b.push(self.data);
        b.push(self.parity);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&self.chunk_len.to_le_bytes());
        b.extend_from_slice(&self.piece_len.to_le_bytes());
        b.extend_from_slice(&self.checksum.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        for c in &self.shards {
            b.extend_from_slice(&(c.len() as u16).to_le_bytes());
            for s in c {
                b.extend_from_slice(&s.to_le_bytes());
            }
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, FormatError> {
        let bad = |r: String| FormatError::Malformed {
            what: "manifest",
            reason: r,
        };
        if b.len() < HEAD || b[..4] != MAGIC {
            return Err(bad(format!("{} bytes, no manifest header", b.len())));
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let (data, parity) = (b[4], b[5]);
        let n = usize::from(data) + usize::from(parity);
        let mut shards = Vec::with_capacity(n);
        let mut rest = &b[HEAD..];
        for c in 0..n {
            if rest.len() < 2 {
                return Err(bad(format!("chunk {c}: no shard list")));
            }
            let k = usize::from(u16::from_le_bytes([rest[0], rest[1]]));
            if k == 0 || rest.len() < 2 + 4 * k {
                return Err(bad(format!(
                    "chunk {c}: {k} shards in {} bytes",
                    rest.len()
                )));
            }
            shards.push(
                rest[2..2 + 4 * k]
                    .chunks_exact(4)
                    .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
                    .collect(),
            );
            rest = &rest[2 + 4 * k..];
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} trailing bytes", rest.len())));
        }
        let m = Self {
            data,
            parity,
            version: u64_at(6),
            len: u64_at(14),
            chunk_len: u64_at(22),
            piece_len: u32::from_le_bytes([b[30], b[31], b[32], b[33]]),
            checksum: u64_at(34),
            seq: u64_at(42),
            shards,
        };
        m.check_sizes().map_err(bad)?;
        Ok(m)
    }

    /// Ok if the sizes are ones a writer produces: the value at most [`MAX_LEN`],
    /// chunks just long enough for it (whole 64-byte words), at most [`MAX_PIECES`]
    /// pieces per chunk.
    pub fn check_sizes(&self) -> Result<(), String> {
        let d = u64::from(self.data);
        if d == 0 {
            return Err("no data chunks".into());
        }
        if self.len > MAX_LEN {
            return Err(format!(
                "{} bytes: above the {MAX_LEN}-byte limit",
                self.len
            ));
        }
        let chunk = Self::chunk_len_for(self.len, self.data);
        if self.chunk_len == 0 || self.chunk_len > chunk || self.chunk_len * d < self.len {
            return Err(format!(
                "chunk of {} bytes for {} bytes in {d} chunks (expected at most {chunk})",
                self.chunk_len, self.len
            ));
        }
        if self.piece_len == 0 || self.chunk_len.div_ceil(u64::from(self.piece_len)) > MAX_PIECES {
            return Err(format!(
                "pieces of {} bytes: more than {MAX_PIECES} per {}-byte chunk",
                self.piece_len, self.chunk_len
            ));
        }
        Ok(())
    }

    /// A chunk's length when `len` bytes are cut into `data` chunks: zero-padded to
    /// whole 64-byte words (the erasure coder's unit), at least one word.
    pub fn chunk_len_for(len: u64, data: u8) -> u64 {
        len.div_ceil(u64::from(data.max(1))).div_ceil(64).max(1) * 64
    }
}

/// xxh3-64 of a value (the manifest's end-to-end check).
pub fn checksum(value: &[u8]) -> u64 {
    xxh3_64(value)
}

fn placed(shard: u32, kind: u8, extra: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + extra.len() + key.len());
    k.extend_from_slice(&PLACED);
    k.extend_from_slice(&shard.to_le_bytes());
    k.push(kind);
    k.extend_from_slice(extra);
    k.extend_from_slice(key);
    k
}

/// The key of piece `piece` of chunk `chunk` of `key`'s object `version`, in `shard`.
pub fn piece_key(shard: u32, version: u64, chunk: u8, piece: u32, key: &[u8]) -> Vec<u8> {
    let mut extra = [0u8; 13];
    extra[..8].copy_from_slice(&version.to_le_bytes());
    extra[8] = chunk;
    extra[9..].copy_from_slice(&piece.to_le_bytes());
    placed(shard, PIECE, &extra, key)
}

/// The key of the manifest copy of `key` kept in `shard`.
pub fn copy_key(shard: u32, key: &[u8]) -> Vec<u8> {
    placed(shard, COPY, &[], key)
}

/// The key of `key`'s hot-key copy, kept in `shard` (its second home).
pub fn hot_key(shard: u32, key: &[u8]) -> Vec<u8> {
    placed(shard, HOT, &[], key)
}

/// The user key a manifest copy's key belongs to.
pub fn copy_owner(placed_key: &[u8]) -> Option<&[u8]> {
    (placed_key.len() > 9 && placed_key[..4] == PLACED && placed_key[8] == COPY)
        .then(|| &placed_key[9..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::placed_shard;

    #[test]
    fn manifests_and_keys_round_trip() {
        let m = Manifest {
            version: 7,
            seq: 1_795_000_000_000,
            len: 1000,
            data: 4,
            parity: 2,
            chunk_len: 256,
            piece_len: 100,
            checksum: checksum(b"x"),
            shards: vec![
                vec![1, 7],
                vec![2],
                vec![3],
                vec![4],
                vec![5],
                vec![6, 8, 9],
            ],
        };
        assert_eq!(
            (m.piece_shard(0, 3), m.piece_shard(5, 2), m.copy_shard(5)),
            (7, 9, 6)
        );
        assert_eq!(Manifest::decode(&m.encode()), Ok(m.clone()));
        assert_eq!(m.pieces(), 3);
        assert_eq!(
            (m.piece_size(0), m.piece_size(2), m.piece_size(3)),
            (100, 56, 0)
        );
        let mut e = m.encode();
        e.pop();
        assert!(Manifest::decode(&e).is_err());
        assert!(Manifest::decode(b"FCM1").is_err());
        let k = piece_key(9, 7, 3, 2, b"user");
        assert_eq!(placed_shard(&k), Some(9));
        let c = copy_key(4, b"user");
        assert_eq!(
            (placed_shard(&c), copy_owner(&c)),
            (Some(4), Some(&b"user"[..]))
        );
        assert_eq!(copy_owner(&k), None);
    }

    #[test]
    fn sizes_a_reader_would_allocate_from_are_bounded() {
        let ok = Manifest {
            version: 1,
            seq: 1,
            len: MAX_LEN,
            data: 4,
            parity: 2,
            chunk_len: Manifest::chunk_len_for(MAX_LEN, 4),
            piece_len: 512 << 10,
            checksum: 0,
            shards: vec![vec![1]; 6],
        };
        assert_eq!(Manifest::decode(&ok.encode()), Ok(ok.clone()));
        let forged = [
            Manifest {
                len: MAX_LEN + 1,
                chunk_len: MAX_LEN,
                ..ok.clone()
            },
            Manifest {
                len: 10,
                chunk_len: u64::MAX / 2,
                ..ok.clone()
            },
            Manifest {
                chunk_len: u64::MAX,
                ..ok.clone()
            },
            Manifest {
                len: u64::MAX,
                chunk_len: u64::MAX / 3,
                ..ok.clone()
            },
            Manifest {
                piece_len: 1,
                ..ok.clone()
            },
            Manifest {
                piece_len: 0,
                ..ok.clone()
            },
            Manifest {
                chunk_len: 64,
                ..ok.clone()
            },
            Manifest {
                data: 0,
                shards: vec![vec![1]; 2],
                ..ok.clone()
            },
        ];
        for m in forged {
            assert!(Manifest::decode(&m.encode()).is_err(), "{m:?}");
        }
        assert_eq!(Manifest::chunk_len_for(0, 4), 64);
        assert_eq!(Manifest::chunk_len_for(1000, 4), 256);
        assert_eq!(Manifest::chunk_len_for(1 << 20, 0), 1 << 20);
    }
}
