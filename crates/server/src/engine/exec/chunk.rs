//! Ops decoded in chunks, each chunk's records prefetched while the one before it
//! runs, so their cache misses overlap with work.

use super::*;

/// Starts loading the region memory of ops before they run, so that random record
/// addresses (a cache miss each) overlap instead of stalling one after another. Only a
/// hint: ops whose cache or region is not here prefetch nothing, and every check still
/// happens when the op runs (see [`Chunk::decode`]).
pub(super) struct Prefetcher<'m> {
    pub(super) map: &'m StoreMap,
    pub(super) access: Access,
    pub(super) last: Option<(CacheId, &'m CacheRegions)>,
}

impl<'m> Prefetcher<'m> {
    #[inline(always)]
    pub(super) fn op(&mut self, op: &Op<'_>) {
        // Not even a hint for a cache the credential does not reach.
        if !self.access.is_cluster() && !permitted(&self.access, op) {
            return;
        }
        let (cache, addr, write) = match *op {
            Op::Read { cache, addr, .. } => (cache, addr, false),
            Op::Write { cache, addr, .. }
            | Op::Cas { cache, addr, .. }
            | Op::FetchAdd { cache, addr, .. } => (cache, addr, true),
            Op::Execute { .. } | Op::Tag(_) | Op::Answer { .. } | Op::Ping => return,
        };
        let c = match self.last {
            Some((id, c)) if id == cache => c,
            _ => {
                let Some(c) = self.map.caches.get(&cache) else {
                    return;
                };
                self.last = Some((cache, c));
                c
            }
        };
        let (idx, off) = region_split(addr, c.region_size);
        if let Some(Some(r)) = c.regions.get(idx as usize) {
            r.prefetch(off as usize, write);
        }
    }
}

/// Ops decoded (and their memory requested) at a time. The ops of one chunk run
/// while the next chunk's memory is on its way; two chunks of cache lines (8 KiB)
/// stay in the L1 until used. Requests issued in a burst overlap far better than one
/// issued a few ops ahead of each op (measured with `farcache_bench::ceiling`: 16 to
/// 256 ops per chunk did alike; one prefetch 4, 8 or 16 ops ahead gave under half).
pub(super) const CHUNK: usize = 64;

/// Up to [`CHUNK`] decoded ops. Left uninitialized until decoded into: a batch of a few
/// ops does not pay for clearing room for a whole chunk.
pub(super) struct Chunk<'a> {
    pub(super) ops: [MaybeUninit<Op<'a>>; CHUNK],
    /// `ops[..len]` are initialized.
    pub(super) len: usize,
}

impl<'a> Chunk<'a> {
    pub(super) fn new() -> Self {
        Self {
            ops: [const { MaybeUninit::uninit() }; CHUNK],
            len: 0,
        }
    }

    /// Decodes up to [`CHUNK`] ops of a validated batch, replacing what it held, and
    /// starts loading each op's memory. The only place the op loop decodes, so the
    /// decoder is inlined here once.
    #[inline]
    pub(super) fn decode(
        &mut self,
        d: &mut RequestDecoder<'a>,
        pf: &mut Prefetcher<'_>,
    ) -> Result<(), DecodeError> {
        self.len = 0;
        while self.len < CHUNK {
            let Some(op) = d.next() else { break };
            let op = op?;
            pf.op(&op);
            self.ops[self.len].write(op);
            self.len += 1;
        }
        Ok(())
    }

    #[inline]
    pub(super) fn ops(&self) -> &[Op<'a>] {
        // SAFETY: `ops[..len]` were written by `decode` (`len` only grows past an
        // element once it is written), and `MaybeUninit<T>` has the layout of `T`.
        unsafe { std::slice::from_raw_parts(self.ops.as_ptr().cast::<Op<'a>>(), self.len) }
    }
}
