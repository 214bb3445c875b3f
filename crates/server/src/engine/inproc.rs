//! The server's data path without sockets: one cache held by this process and the
//! batch executor the workers run, for measuring what the executor alone can do.
//!
//! The cache is placed through the same [`RegionStore`] calls the control requests
//! make (`AllocRegion` for every region, then `SetRoutes` naming this server the
//! owner of each), and batches go through the same `execute_batch` a worker runs for
//! a connection holding the cluster secret (what the benchmark client holds), so
//! lookups, lost-byte and pause checks, op counts and the written-range list all run
//! as they would in the server.

use farcache_proto::{Access, CacheId, DecodeError, HEADER_LEN, MAX_FRAME_DEFAULT};

use crate::engine::exec::Written;
use crate::engine::exec::{BatchCtx, execute_batch};
use crate::engine::procs::ProcTable;
use crate::engine::step::Spawned;
use crate::engine::store::{Arrival, RegionStore};
use crate::error::ServerError;
use crate::metrics::{Metrics, Tally};

/// The address this process answers as (it never appears in a reply: every region is
/// held here).
const ME: &str = "in-process";

/// One cache of `capacity` bytes in `region_size` regions, all held by this process,
/// and the server's batch executor over it, for measuring the data path without
/// sockets.
pub struct InProcess {
    store: RegionStore,
    procs: ProcTable,
    completions: crate::engine::completions::Completions,
    metrics: Metrics,
    cache: CacheId,
    max_frame: usize,
    spawned: Vec<Spawned>,
    written: Vec<Written>,
}

impl InProcess {
    /// Places every region of a cache of `capacity` bytes (`region_size` a positive
    /// multiple of 4096). Region memory is mapped, not touched: the first write to a
    /// page faults it in, so write every page once before timing anything.
    pub fn new(capacity: u64, region_size: u64) -> Result<Self, ServerError> {
        let capacity = capacity.max(1);
        if region_size == 0 {
            return Err(crate::error::StoreError::BadRegionSize(0).into());
        }
        let regions = capacity.div_ceil(region_size);
        let n = u32::try_from(regions)
            .map_err(|_| ServerError::Config(format!("{regions} regions are too many")))?;
        let store = RegionStore::new(regions.saturating_mul(region_size));
        let cache: CacheId = 1;
        let epoch = 1;
        for region in 0..n {
            store.alloc(
                cache,
                region,
                region_size,
                capacity,
                epoch,
                Arrival::default(),
            )?;
        }
        store.set_routes(
            cache,
            epoch,
            vec![ME.to_owned(); n as usize],
            &[],
            capacity,
            ME,
        );
        Ok(Self {
            store,
            procs: ProcTable::default(),
            completions: crate::engine::completions::Completions::default(),
            metrics: Metrics::default(),
            cache,
            max_frame: MAX_FRAME_DEFAULT as usize,
            spawned: Vec::new(),
            written: Vec::new(),
        })
    }

    /// Compiles a WebAssembly procedure and makes it callable as `name` on this
    /// cache, as a `LoadProc` from the manager does on a server.
    pub fn register(&self, name: &str, code: &[u8]) -> Result<(), farcache_sproc::SprocError> {
        self.procs.load(self.cache, name, code)
    }

    /// The cache requests must name.
    pub fn cache_id(&self) -> CacheId {
        self.cache
    }

    /// Largest response payload a batch may produce (the server's default
    /// `max_frame`); replies past it answer `TOO_LARGE`, as in the server.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Runs one request batch payload (what follows the frame header in a request
    /// frame, exactly as `RequestEncoder` builds it) and appends the response frame,
    /// header included, to `out`; returns the number of ops answered. A malformed
    /// batch runs no op and appends nothing.
    pub fn execute(
        &mut self,
        payload: &[u8],
        seq: u64,
        out: &mut Vec<u8>,
    ) -> Result<u32, DecodeError> {
        // As a worker serves a request: one table snapshot per batch, counts published
        // once per batch.
        let map = self.store.snapshot();
        let cx = BatchCtx {
            map: &map,
            procs: &self.procs,
            access: Access::Cluster,
            me: ME,
            from_server: false,
            replica_of: None,
            completions: &self.completions,
            note_acks: false,
            max_frame: self.max_frame,
        };
        let mut tally = Tally::default();
        let start = out.len();
        let r = execute_batch(
            &cx,
            payload,
            seq,
            out,
            &mut tally,
            &mut self.spawned,
            &mut self.written,
            &mut crate::engine::exec::Touched::default(),
        );
        self.metrics.publish(&tally);
        r?;
        // Every region is held here and none has backups, so neither list grows;
        // cleared anyway so a long run cannot accumulate them.
        self.spawned.clear();
        self.written.clear();
        let at = start + HEADER_LEN;
        let count = out
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes);
        Ok(count)
    }

    /// Ops answered so far, all kinds (what the server would report as its op count).
    pub fn ops(&self) -> u64 {
        self.metrics.ops().iter().map(|o| o.count).sum()
    }

    /// Ops answered with a status other than OK so far.
    pub fn errors(&self) -> u64 {
        self.metrics.ops().iter().map(|o| o.errors).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use farcache_proto::response::ReplyBody;
    use farcache_proto::{Op, RequestEncoder, ResponseDecoder, Status};

    fn payload(ops: &[Op<'_>]) -> Vec<u8> {
        let mut req = Vec::new();
        let mut e = RequestEncoder::begin(&mut req, 3);
        for op in ops {
            e.push(&mut req, op);
        }
        e.finish(&mut req);
        req.split_off(HEADER_LEN)
    }

    #[test]
    fn writes_then_reads_back_through_the_executor() {
        let region = 1 << 16;
        let mut p = InProcess::new(3 * region + 100, region).unwrap();
        let c = p.cache_id();
        let big: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        // One write per region, one crossing no boundary near the end of capacity.
        let writes = [
            (0u64, &b"abcdefgh"[..]),
            (region + 8, &big[..]),
            (2 * region + 4, &b"xyz"[..]),
            (3 * region + 92, &b"12345678"[..]),
        ];
        let ops: Vec<Op<'_>> = writes
            .iter()
            .map(|&(addr, data)| Op::Write {
                cache: c,
                addr,
                data,
            })
            .collect();
        let mut out = Vec::new();
        assert_eq!(p.execute(&payload(&ops), 1, &mut out).unwrap(), 4);
        let replies: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(replies.iter().all(|r| r.status == Status::Ok));

        let mut reads: Vec<Op<'_>> = writes
            .iter()
            .map(|&(addr, data)| Op::Read {
                cache: c,
                addr,
                len: data.len() as u32,
            })
            .collect();
        // Past the capacity, and a cache that does not exist.
        reads.push(Op::Read {
            cache: c,
            addr: 3 * region + 96,
            len: 8,
        });
        reads.push(Op::Read {
            cache: c + 1,
            addr: 0,
            len: 8,
        });
        out.clear();
        assert_eq!(p.execute(&payload(&reads), 2, &mut out).unwrap(), 6);
        let hdr = farcache_proto::FrameHeader::decode(&out, u32::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(hdr.seq, 2);
        assert_eq!(hdr.frame_len(), out.len());
        let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
        let got: Vec<_> = d.by_ref().map(Result::unwrap).collect();
        d.finish().unwrap();
        for (r, &(_, data)) in got.iter().zip(&writes) {
            assert_eq!(r.body, ReplyBody::Data(data));
        }
        assert_eq!(got[4].status, Status::OutOfRange);
        assert_eq!(got[5].status, Status::NoSuchCache);
        assert_eq!((p.ops(), p.errors()), (10, 2));
    }

    #[test]
    fn a_malformed_batch_runs_nothing() {
        let mut p = InProcess::new(4096, 4096).unwrap();
        let mut bad = payload(&[Op::Read {
            cache: p.cache_id(),
            addr: 0,
            len: 8,
        }]);
        bad.pop();
        let mut out = Vec::new();
        assert!(p.execute(&bad, 1, &mut out).is_err());
        assert!(out.is_empty());
        assert!(InProcess::new(4096, 100).is_err());
    }
}
