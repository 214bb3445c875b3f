//! Values above the store's small-value limit, erasure coded (InfiniCache's scheme):
//! `d` data chunks and `p` Reed–Solomon parity chunks (`reed-solomon-simd`) on
//! shards of `d + p` different servers, each chunk stored as pieces under placed
//! keys; the manifest is the key's value, with a copy beside every chunk. A GET asks
//! for all `d + p` chunks and decodes from the first `d` that arrive, so a slow or
//! stopped server does not hold it up; any `p` chunks may be lost.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use farcache_client::{OpError, Ticket};
use farcache_kvformat::manifest::{self, Manifest};
use farcache_kvformat::{SlotWord, class, item};

use crate::options::{Condition, PutOptions};
use crate::put::{Entry, Guard, PutResult, PutSpec};
use crate::store::{MAX_ATTEMPTS, Probe, Store};
use crate::{Result, StoreError};

/// Bytes of pieces written per batch.
const WRITE_GROUP: u64 = 8 << 20;
/// Largest value a store takes (Redis's limit too).
pub const MAX_VALUE: u64 = manifest::MAX_LEN;
/// Largest piece of a chunk.
const MAX_PIECE: u64 = 512 << 10;
/// Shards one chunk's pieces spread over (bounds the manifest's size).
const MAX_SHARDS_PER_CHUNK: usize = 64;

static VERSIONS: AtomicU64 = AtomicU64::new(0);

impl Store {
    /// A version no other put of this key uses.
    pub(crate) fn fresh_version(&self, key: &[u8]) -> u64 {
        let n = VERSIONS.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut seed = Vec::with_capacity(key.len() + 24);
        seed.extend_from_slice(&t.to_le_bytes());
        seed.extend_from_slice(&n.to_le_bytes());
        seed.extend_from_slice(&u64::from(self.inner.holder).to_le_bytes());
        seed.extend_from_slice(key);
        manifest::checksum(&seed) | 1
    }

    /// The server holding each shard, from the cache's region table.
    pub(crate) fn shard_servers(&self) -> Vec<Option<u32>> {
        let lay = self.inner.layout;
        let info = self.inner.cache.info();
        (0..lay.0.shards)
            .map(|s| {
                let r = lay.shard_base(s) / info.region_size.max(1);
                info.regions.get(r as usize).copied()
            })
            .collect()
    }

    /// For `n` different servers (none holding a shard in `avoid`), up to `per`
    /// of each one's shards, starting at `key`'s home shard.
    pub(crate) fn placement(
        &self,
        key: &[u8],
        n: usize,
        per: usize,
        avoid: &[u32],
    ) -> Result<Vec<Vec<u32>>> {
        let servers = self.shard_servers();
        let shards = servers.len() as u32;
        let start = self.locate(key).shard;
        let avoid: HashSet<u32> = avoid
            .iter()
            .filter_map(|&s| servers.get(s as usize).copied().flatten())
            .collect();
        let mut order: Vec<u32> = Vec::new();
        let mut by_server: std::collections::HashMap<u32, Vec<u32>> = Default::default();
        for i in 0..shards {
            let s = (start + i) % shards;
            if let Some(srv) = servers[s as usize].filter(|srv| !avoid.contains(srv)) {
                let list = by_server.entry(srv).or_insert_with(|| {
                    order.push(srv);
                    Vec::new()
                });
                if list.len() < per.max(1) {
                    list.push(s);
                }
            }
        }
        if order.len() < n {
            let d = self.inner.layout.0;
            return Err(StoreError::Options(format!(
                "erasure coding {}+{} needs {n} servers holding the store's shards; {} are available",
                d.ec_data,
                d.ec_parity,
                order.len()
            )));
        }
        Ok(order
            .into_iter()
            .take(n)
            .filter_map(|srv| by_server.remove(&srv))
            .collect())
    }

    /// The manifest of `key`'s erasure-coded value (where its chunks are), if its
    /// value is erasure coded.
    pub fn manifest(&self, key: &[u8]) -> Result<Option<Manifest>> {
        Self::check_key(key)?;
        match self.lookup_raw(&[key], Probe::Value).pop() {
            Some(Ok(Some((flags, v)))) if flags & item::FLAG_MANIFEST != 0 => {
                Ok(Some(Manifest::decode(&v)?))
            }
            Some(Ok(_)) | None => Ok(None),
            Some(Err(e)) if self.home_unreadable(&e) => Ok(self.find_copy(key)),
            Some(Err(e)) => Err(e),
        }
    }

    /// Stores `value` erasure coded under `key` (whatever its size).
    pub fn put_large(&self, key: &[u8], value: &[u8], opts: PutOptions) -> PutResult {
        self.put_large_spec(key, value, opts.into(), 0)
    }

    /// [`Store::put_large`] with an absolute expiry and a guard, its `seq` at least
    /// `min_seq` (repair's rewrite, ordered above the copy it was rebuilt from).
    pub(crate) fn put_large_spec(
        &self,
        key: &[u8],
        value: &[u8],
        spec: PutSpec,
        min_seq: u64,
    ) -> PutResult {
        Self::check_key(key)?;
        let desc = self.inner.layout.0;
        let servers = {
            let mut s: Vec<u32> = self.shard_servers().into_iter().flatten().collect();
            s.sort_unstable();
            s.dedup();
            s.len()
        };
        let (d, p) = coding_for(
            usize::from(desc.ec_data),
            usize::from(desc.ec_parity),
            servers,
        )?;
        if (d, p) != (usize::from(desc.ec_data), usize::from(desc.ec_parity)) {
            tracing::debug!(
                servers,
                data = d,
                parity = p,
                "fewer servers than the store's erasure coding needs: this value is coded {d}+{p}"
            );
        }
        let len = value.len() as u64;
        if len > MAX_VALUE {
            return Err(StoreError::ValueTooLarge {
                len,
                limit: MAX_VALUE,
            });
        }
        let chunk_len = Manifest::chunk_len_for(len, d as u8);
        let piece_len = chunk_len.min(self.max_small_value().min(MAX_PIECE) / 64 * 64);
        if piece_len == 0 {
            return Err(StoreError::Options(
                "shards too small for erasure coding".into(),
            ));
        }
        // A chunk's pieces spread over up to this many of its server's shards.
        let pieces = chunk_len.div_ceil(piece_len) as usize;
        let shards = self.placement(key, d + p, pieces.min(MAX_SHARDS_PER_CHUNK), &[])?;
        // What this put replaces, read first: the new manifest's `seq` goes above
        // its, and the swap is guarded by its slot word so that order holds (copies
        // of both may outlive a writer that stops, and only `seq` tells them apart).
        let mut cur = self.current(key)?;
        match (spec.guard, &cur) {
            (Guard::Cond(Condition::IfAbsent), Some(_))
            | (Guard::Cond(Condition::IfPresent), None) => return Ok(false),
            _ => {}
        }
        let mut m = Manifest {
            version: self.fresh_version(key),
            seq: seq_after(cur.as_ref()).max(min_seq),
            len,
            data: d as u8,
            parity: p as u8,
            chunk_len,
            piece_len: piece_len as u32,
            checksum: manifest::checksum(value),
            shards,
        };
        // Readers refuse a manifest with sizes out of bounds: never write one.
        m.check_sizes().map_err(|e| {
            StoreError::Options(format!("shards too small for a value this large: {e}"))
        })?;
        let chunks = encode_stripes(&m, value)?;
        let pieces = PutSpec {
            guard: Guard::Cond(Condition::Always),
            ..spec
        };
        for (c, chunk) in chunks.iter().enumerate() {
            self.write_pieces(key, &m, c, chunk, pieces)?;
            self.write_copy(key, &m, c, pieces)?;
        }
        for _ in 0..MAX_ATTEMPTS {
            let swap = match (spec.guard, &cur) {
                (Guard::Slot(w), _) => Guard::Slot(w),
                (Guard::Cond(_), Some(c)) => Guard::Slot(c.word),
                (Guard::Cond(_), None) => Guard::Cond(Condition::IfAbsent),
            };
            let menc = m.encode();
            let home = Entry {
                key,
                value: &menc,
                flags: item::FLAG_MANIFEST,
            };
            let swapped = self
                .put_entries(
                    &[home],
                    PutSpec {
                        guard: swap,
                        ..spec
                    },
                )
                .pop()
                .unwrap_or(Ok(false));
            match swapped {
                // The replaced object (if coded) was dropped with its slot word.
                Ok(true) => {
                    // A copy write skipped for a newer put's copy that then lost
                    // its race may have left a shard without ours.
                    for c in 0..m.chunks() {
                        if let Err(e) = self.write_copy(key, &m, c, pieces) {
                            tracing::debug!(error = %e, "put: a manifest copy left to repair");
                        }
                    }
                    return Ok(true);
                }
                Ok(false)
                    if matches!(
                        spec.guard,
                        Guard::Cond(Condition::Always | Condition::IfPresent)
                    ) =>
                {
                    // Another put or a delete came first: go after it (an `IfPresent`
                    // put only while the key is still there).
                    cur = self.current(key)?;
                    if cur.is_none() && spec.guard == Guard::Cond(Condition::IfPresent) {
                        self.lost_race(key, &m, pieces);
                        return Ok(false);
                    }
                    let seq = seq_after(cur.as_ref());
                    if seq > m.seq {
                        m.seq = seq;
                        for c in 0..m.chunks() {
                            self.write_copy(key, &m, c, pieces)?;
                        }
                    }
                }
                Ok(false) => {
                    self.lost_race(key, &m, pieces);
                    return Ok(false);
                }
                // The manifest may or may not be in place: leave the chunks (unread
                // pieces are the first to be evicted).
                Err(e) => return Err(e),
            }
        }
        self.lost_race(key, &m, pieces);
        Err(StoreError::Contended {
            attempts: MAX_ATTEMPTS,
        })
    }

    /// Writes chunk `c` of `m`'s pieces.
    fn write_pieces(
        &self,
        key: &[u8],
        m: &Manifest,
        c: usize,
        pieces: &[Vec<u8>],
        spec: PutSpec,
    ) -> Result<()> {
        let keys: Vec<Vec<u8>> = (0..m.pieces())
            .map(|j| manifest::piece_key(m.piece_shard(c, j), m.version, c as u8, j, key))
            .collect();
        let mut group = Vec::new();
        let mut bytes_in = 0;
        for (j, (k, piece)) in keys.iter().zip(pieces).enumerate() {
            group.push(Entry {
                key: k,
                value: piece,
                flags: 0,
            });
            bytes_in += piece.len() as u64;
            if bytes_in >= WRITE_GROUP || j + 1 == keys.len() {
                for r in self.put_entries(&group, spec) {
                    r?;
                }
                group.clear();
                bytes_in = 0;
            }
        }
        Ok(())
    }

    /// Reads the object `m` describes: all chunks asked for at once, decoded from
    /// the first `d` whose pieces all arrive.
    pub(crate) fn get_large(&self, key: &[u8], manifest_bytes: &[u8]) -> Result<Option<Bytes>> {
        self.get_large_as(key, manifest_bytes, false)
    }

    /// [`Store::get`] of an erasure-coded value that waits for all `d + p` chunks
    /// before decoding, as a reader without first-`d` reads would: for comparisons
    /// (`farcache bench store`), not for use. `Ok(None)` if `key` is not coded.
    pub fn get_waiting_for_all_chunks(&self, key: &[u8]) -> Result<Option<Bytes>> {
        Self::check_key(key)?;
        match self.lookup_raw(&[key], Probe::Value).pop() {
            Some(Ok(Some((flags, v)))) if flags & item::FLAG_MANIFEST != 0 => {
                self.get_large_as(key, &v, true)
            }
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        }
    }

    fn get_large_as(
        &self,
        key: &[u8],
        manifest_bytes: &[u8],
        wait_all: bool,
    ) -> Result<Option<Bytes>> {
        let m = Manifest::decode(manifest_bytes)?;
        let d = usize::from(m.data);
        let mut got: Vec<(usize, Vec<u8>)> = Vec::with_capacity(m.chunks());
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(5);
        loop {
            let asked: Vec<usize> = (0..m.chunks())
                .filter(|c| got.iter().all(|(g, _)| g != c))
                .collect();
            let pass = self.read_chunks(key, &m, &asked, &mut got, wait_all);
            if got.len() >= d {
                break;
            }
            if pass.missing > 0 && pass.failed == pass.missing {
                // Pieces evicted or expired: a miss, as for any cached value.
                return Ok(None);
            }
            // A chunk's server failing over or moving its region: ask again for
            // what is still missing, as other store calls retry.
            let transient = pass.first_error.as_ref().is_some_and(|e| e.is_transient());
            if !transient || started.elapsed() + pause >= crate::store::TRANSIENT_BUDGET {
                return Err(StoreError::Unreadable {
                    readable: got.len(),
                    chunks: m.chunks(),
                    data: d,
                    first_error: pass.first_error,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(500));
        }
        let value = decode(&m, got)?;
        Ok(Some(Bytes::from(value)))
    }

    /// One pass over chunks `asked` of the object `m` describes, all asked for at
    /// once: each whose pieces all arrive goes into `got`, until enough are there
    /// to decode (or, with `wait_all`, every chunk asked has answered).
    fn read_chunks(
        &self,
        key: &[u8],
        m: &Manifest,
        asked: &[usize],
        got: &mut Vec<(usize, Vec<u8>)>,
        wait_all: bool,
    ) -> ChunkPass {
        let now = crate::store::now_ms();
        let mut args = Vec::new();
        let mut tickets: Vec<(usize, Ticket)> = asked
            .iter()
            .map(|&c| {
                let mut b = self.inner.cache.batch().with_capacity(m.pieces() as usize);
                for j in 0..m.pieces() {
                    let k = manifest::piece_key(m.piece_shard(c, j), m.version, c as u8, j, key);
                    self.push_lookup(&mut b, Probe::Value, &k, self.locate(&k), now, &mut args);
                }
                (c, b.submit())
            })
            .collect();
        let d = usize::from(m.data);
        let mut pass = ChunkPass::default();
        // Without `wait_all`, done once `d` chunks are here or can no longer be.
        while !tickets.is_empty() && (wait_all || (got.len() < d && got.len() + tickets.len() >= d))
        {
            let mut progressed = false;
            tickets.retain_mut(|(c, t)| {
                let Some(r) = t.try_take() else {
                    return true;
                };
                progressed = true;
                let mut chunk = Vec::with_capacity(m.chunk_len as usize);
                let mut whole = true;
                for j in 0..m.pieces() as usize {
                    match self.get_reply(&r, j) {
                        Ok((farcache_kvformat::wire::HIT, Some((_, _, _, v))))
                            if v.len() as u64 == m.piece_size(j as u32) =>
                        {
                            chunk.extend_from_slice(&v)
                        }
                        Ok(_) => {
                            whole = false;
                            pass.missing += 1;
                            break;
                        }
                        Err(e) => {
                            whole = false;
                            pass.first_error.get_or_insert(Box::new(e));
                            break;
                        }
                    }
                }
                if whole {
                    got.push((*c, chunk));
                } else {
                    pass.failed += 1;
                }
                false
            });
            if !progressed {
                std::thread::yield_now();
            }
        }
        // The rest are not waited for (a stopped server's chunk just stays late).
        pass
    }

    /// The key's home shard failed: look for a manifest copy beside the chunks.
    pub(crate) fn get_large_without_home(
        &self,
        key: &[u8],
        err: StoreError,
    ) -> Result<Option<Bytes>> {
        match self.find_copy(key) {
            Some(m) => self.get_large(key, &m.encode()),
            None => Err(err),
        }
    }

    /// Whether `e` says the key's home shard is gone (its bytes lost with a server).
    pub(crate) fn home_unreadable(&self, e: &StoreError) -> bool {
        let Some(op) = e.op() else {
            return false;
        };
        match op {
            OpError::DataLost { .. } => true,
            OpError::Procedure(msg) => msg.contains("lost with a failed server"),
            _ => e.is_transient(),
        }
    }

    /// Deletes an object's pieces, and its manifest copies still naming this version.
    pub(crate) fn drop_object(&self, key: &[u8], m: &Manifest) {
        for c in 0..m.chunks() {
            for j in 0..m.pieces() {
                let pk = manifest::piece_key(m.piece_shard(c, j), m.version, c as u8, j, key);
                let _ = self.delete_raw(&pk);
            }
            // Only while it still names this version: a newer put's copy there stays.
            let ck = manifest::copy_key(m.copy_shard(c), key);
            if let Ok(Some(cur)) = self.current(&ck)
                && Manifest::decode(&cur.value).is_ok_and(|o| o.version == m.version)
            {
                let _ = self.delete_if(&ck, Some(cur.word));
            }
        }
    }

    /// Recycles an item a slot no longer points at; a manifest's object goes too.
    pub(crate) fn retire(&self, shard: u32, old: SlotWord, generation: u32) {
        if old.is_manifest() {
            let at = self.inner.layout.shard_base(shard) + old.offset();
            let size = u64::from(class::size(old.class()).unwrap_or(0));
            if let Ok(raw) = self.inner.cache.read(at, size)
                && let Ok(it) = item::decode(&raw)
                && let Ok(m) = Manifest::decode(it.value)
                && manifest::copy_owner(it.key).is_none()
            {
                let key = it.key.to_vec();
                self.drop_object(&key, &m);
            }
        }
        if let Err(e) = self.free_item(shard, old.class(), old.offset(), generation) {
            tracing::warn!(error = %e, "old item not recycled");
        }
    }
}

/// The data and parity chunks of a value coded on `servers` servers, for a store
/// asking for `d + p`: all of it when there are enough servers; else one parity
/// chunk (a third of the servers' worth, at least one) and data on the rest; on one
/// server, one data chunk and no parity (the value survives what that server does).
pub(crate) fn coding_for(d: usize, p: usize, servers: usize) -> Result<(usize, usize)> {
    match servers {
        0 => Err(StoreError::Options(
            "no server holds the store's shards".into(),
        )),
        n if n >= d + p => Ok((d, p)),
        1 => Ok((1, 0)),
        n => {
            let parity = p.min((n / 3).max(1));
            Ok((n - parity, parity))
        }
    }
}

/// The `seq` of a put replacing `cur`: above a coded value's, and at least the
/// clock (so puts by different writers still order by time when no read links them).
fn seq_after(cur: Option<&crate::meta::Current>) -> u64 {
    let now = crate::store::now_ms();
    cur.filter(|c| c.flags & item::FLAG_MANIFEST != 0)
        .and_then(|c| Manifest::decode(&c.value).ok())
        .map_or(now, |m| now.max(m.seq.saturating_add(1)))
}

/// The `d + p` chunks of `value` as pieces: stripe `j` (piece `j` of every chunk) is
/// coded on its own, so the codec works on a few hundred KiB at a time (it stays in
/// the CPU caches, and a 100 MiB value never needs a second full copy at once).
fn encode_stripes(m: &Manifest, value: &[u8]) -> Result<Vec<Vec<Vec<u8>>>> {
    let (d, p) = (usize::from(m.data), usize::from(m.parity));
    let mut chunks: Vec<Vec<Vec<u8>>> = (0..d + p)
        .map(|_| Vec::with_capacity(m.pieces() as usize))
        .collect();
    for j in 0..m.pieces() {
        let lo = u64::from(j) * u64::from(m.piece_len);
        let width = m.piece_size(j) as usize;
        let originals: Vec<Vec<u8>> = (0..d as u64)
            .map(|c| {
                let a = (c * m.chunk_len + lo).min(m.len) as usize;
                let b = (c * m.chunk_len + lo + width as u64).min(m.len) as usize;
                let mut piece = value[a..b].to_vec();
                piece.resize(width, 0);
                piece
            })
            .collect();
        // One server: the chunks are stored once, without parity.
        let parity = if p == 0 {
            Vec::new()
        } else {
            reed_solomon_simd::encode(d, p, &originals)
                .map_err(|e| StoreError::Erasure(e.to_string()))?
        };
        for (c, piece) in originals.into_iter().chain(parity).enumerate() {
            chunks[c].push(piece);
        }
    }
    Ok(chunks)
}

/// The value from at least `d` chunks, decoded stripe by stripe; data chunks are
/// copied straight when all are there.
fn decode(m: &Manifest, mut got: Vec<(usize, Vec<u8>)>) -> Result<Vec<u8>> {
    let (d, p) = (usize::from(m.data), usize::from(m.parity));
    got.sort_by_key(|(c, _)| *c);
    let mut value = vec![0u8; (m.chunk_len as usize) * d];
    let have: Vec<bool> = (0..d + p)
        .map(|c| got.iter().any(|(g, _)| *g == c))
        .collect();
    for (c, bytes) in got.iter().filter(|(c, _)| *c < d) {
        let at = c * m.chunk_len as usize;
        value[at..at + bytes.len()].copy_from_slice(bytes);
    }
    if !have[..d].iter().all(|&h| h) {
        for j in 0..m.pieces() {
            let lo = j as usize * m.piece_len as usize;
            let hi = lo + m.piece_size(j) as usize;
            let originals = got
                .iter()
                .filter(|(c, _)| *c < d)
                .map(|(c, v)| (*c, &v[lo..hi]));
            let recovery = got
                .iter()
                .filter(|(c, _)| *c >= d)
                .map(|(c, v)| (*c - d, &v[lo..hi]));
            let restored = reed_solomon_simd::decode(d, p, originals, recovery)
                .map_err(|e| StoreError::Erasure(e.to_string()))?;
            for (c, piece) in restored {
                let at = c * m.chunk_len as usize + lo;
                value[at..at + piece.len()].copy_from_slice(&piece);
            }
        }
    }
    value.truncate(m.len as usize);
    if manifest::checksum(&value) != m.checksum {
        return Err(StoreError::Erasure(
            "decoded value does not match its checksum".into(),
        ));
    }
    Ok(value)
}

/// What one pass over an object's chunks met besides the chunks it read.
#[derive(Default)]
struct ChunkPass {
    /// Chunks that failed: a piece missing, or an error.
    failed: usize,
    /// Of those, the ones with a piece missing (evicted or expired).
    missing: usize,
    first_error: Option<Box<StoreError>>,
}
