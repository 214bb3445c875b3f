//! Building a batch of ops and reading its results.

use std::sync::Arc;

use crate::lane::RouteTable;
use crate::op::{BatchOp, INLINE_ARGS, Kind};
use crate::results::BatchResults;
use crate::ticket::Ticket;

/// A group of ops submitted together; results come back in the order ops were added.
/// Ops in a batch (and across batches of one thread) execute in program order on each
/// server.
pub struct Batch {
    /// The cache's route table: what its lane routes the ops by.
    route: Arc<RouteTable>,
    ops: Vec<BatchOp>,
    data: Vec<u8>,
    /// Procedure names, kept as a `str` so sending one needs no UTF-8 check.
    names: String,
    /// The last EXECUTE's name (offset, length) in `names`, reused by repeats.
    last_proc: Option<(usize, usize)>,
}

impl Batch {
    pub(crate) fn new(route: Arc<RouteTable>) -> Self {
        Self {
            route,
            ops: Vec::new(),
            data: Vec::new(),
            names: String::new(),
            last_proc: None,
        }
    }

    pub fn with_capacity(mut self, ops: usize) -> Self {
        self.ops.reserve(ops);
        self
    }

    fn push(&mut self, op: BatchOp) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    /// Adds a read of `len` bytes at `addr`; returns the op's index in the results.
    pub fn read(&mut self, addr: u64, len: u64) -> usize {
        self.push(BatchOp::new(Kind::Read, addr, len, 0, 0, 0))
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) -> usize {
        let data_off = self.data.len();
        self.data.extend_from_slice(data);
        let len = data.len() as u64;
        self.push(BatchOp::new(Kind::Write, addr, len, data_off, 0, 0))
    }

    /// Atomic compare-and-swap of the little-endian u64 at `addr` (8-byte aligned).
    pub fn cas(&mut self, addr: u64, expected: u64, new: u64) -> usize {
        self.push(BatchOp::new(Kind::Cas, addr, 8, 0, expected, new))
    }

    /// Atomic wrapping add to the little-endian u64 at `addr` (8-byte aligned).
    pub fn fetch_add(&mut self, addr: u64, delta: u64) -> usize {
        self.push(BatchOp::new(Kind::FetchAdd, addr, 8, 0, delta, 0))
    }

    /// Runs stored procedure `proc` at the server holding `addr` with `args`; the
    /// result is its output bytes. A procedure that needs data held by another server
    /// continues there transparently (each hop is one more server round trip).
    #[inline]
    pub fn execute(&mut self, proc: &str, addr: u64, args: &[u8]) -> usize {
        // A batch usually calls one procedure many times: keep its name once.
        let name_off = match self.last_proc {
            Some((at, len))
                if farcache_proto::op::same_name(
                    &self.names.as_bytes()[at..at + len],
                    proc.as_bytes(),
                ) =>
            {
                at
            }
            _ => {
                let at = self.names.len();
                self.names.push_str(proc);
                self.last_proc = Some((at, proc.len()));
                at
            }
        };
        let mut op = BatchOp {
            kind: Kind::Execute,
            name_len: u16::try_from(proc.len()).unwrap_or(u16::MAX),
            addr,
            len: args.len() as u64,
            data_off: name_off,
            ab: [0; 16],
        };
        if args.len() > INLINE_ARGS {
            op.ab[..8].copy_from_slice(&(self.data.len() as u64).to_le_bytes());
            self.data.extend_from_slice(args);
        }
        let i = self.push(op);
        if args.len() <= INLINE_ARGS
            && let Some(op) = self.ops.last_mut()
        {
            // Straight into the op: bytes copied into a local array and then moved
            // would be read back before their stores retire (a store-forwarding stall).
            farcache_proto::op::copy_short(&mut op.ab, args);
        }
        i
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Sends the batch without waiting; the ticket yields the results (`wait` or `.await`).
    pub fn submit(self) -> Ticket {
        let Self {
            route,
            ops,
            data,
            names,
            ..
        } = self;
        let transport = route.transport().clone();
        let (lane, key, id) = transport.submit(route, ops, data, names);
        Ticket::new(transport, lane, key, id)
    }

    /// Submits and waits.
    pub fn run(self) -> BatchResults {
        self.submit().wait()
    }
}
