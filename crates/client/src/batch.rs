//! Building a batch of ops and reading its results.

use std::sync::Arc;

use bytes::Bytes;

use crate::cache::CacheShared;
use crate::error::{ClientError, OpError};
use crate::ticket::Ticket;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    Cas,
    FetchAdd,
    /// A stored procedure: name at `data_off` (`a` bytes, shared by consecutive
    /// calls of one procedure), args at `b` (`len` bytes) in the data buffer.
    Execute,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchOp {
    pub kind: Kind,
    pub addr: u64,
    pub len: u64,
    /// Write payload offset in the batch's data buffer.
    pub data_off: usize,
    /// CAS expected / FETCH_ADD delta.
    pub a: u64,
    /// CAS new value; EXECUTE args offset.
    pub b: u64,
}

/// The outcome of one op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutput {
    /// Bytes read.
    Data(Bytes),
    /// A write completed.
    Done,
    /// The old value returned by CAS / FETCH_ADD.
    Value(u64),
}

pub type OpResult = Result<OpOutput, OpError>;

/// A group of ops submitted together; results come back in the order ops were added.
/// Ops in a batch (and across batches of one thread) execute in program order on each
/// server.
pub struct Batch {
    pub(crate) cache: Arc<CacheShared>,
    pub(crate) ops: Vec<BatchOp>,
    pub(crate) data: Vec<u8>,
    /// The last EXECUTE's name (offset, length) in `data`, reused by repeats.
    last_proc: Option<(usize, usize)>,
}

impl Batch {
    pub(crate) fn new(cache: Arc<CacheShared>) -> Self {
        Self {
            cache,
            ops: Vec::new(),
            data: Vec::new(),
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
        self.push(BatchOp {
            kind: Kind::Read,
            addr,
            len,
            data_off: 0,
            a: 0,
            b: 0,
        })
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) -> usize {
        let data_off = self.data.len();
        self.data.extend_from_slice(data);
        self.push(BatchOp {
            kind: Kind::Write,
            addr,
            len: data.len() as u64,
            data_off,
            a: 0,
            b: 0,
        })
    }

    /// Atomic compare-and-swap of the little-endian u64 at `addr` (8-byte aligned).
    pub fn cas(&mut self, addr: u64, expected: u64, new: u64) -> usize {
        self.push(BatchOp {
            kind: Kind::Cas,
            addr,
            len: 8,
            data_off: 0,
            a: expected,
            b: new,
        })
    }

    /// Atomic wrapping add to the little-endian u64 at `addr` (8-byte aligned).
    pub fn fetch_add(&mut self, addr: u64, delta: u64) -> usize {
        self.push(BatchOp {
            kind: Kind::FetchAdd,
            addr,
            len: 8,
            data_off: 0,
            a: delta,
            b: 0,
        })
    }

    /// Runs stored procedure `proc` at the server holding `addr` with `args`; the
    /// result is its output bytes. A procedure that needs data held by another server
    /// continues there transparently (each hop is one more server round trip).
    pub fn execute(&mut self, proc: &str, addr: u64, args: &[u8]) -> usize {
        // A batch usually calls one procedure many times: keep its name once.
        let name_off = match self.last_proc {
            Some((at, len))
                if farcache_proto::op::same_name(&self.data[at..at + len], proc.as_bytes()) =>
            {
                at
            }
            _ => {
                let at = self.data.len();
                self.data.extend_from_slice(proc.as_bytes());
                self.last_proc = Some((at, proc.len()));
                at
            }
        };
        let args_off = self.data.len();
        farcache_proto::op::extend_short(&mut self.data, args);
        self.push(BatchOp {
            kind: Kind::Execute,
            addr,
            len: args.len() as u64,
            data_off: name_off,
            a: proc.len() as u64,
            b: args_off as u64,
        })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Sends the batch without waiting; the ticket yields the results (`wait` or `.await`).
    pub fn submit(self) -> Ticket {
        crate::lane::submit(self)
    }

    /// Submits and waits.
    pub fn run(self) -> BatchResults {
        self.submit().wait()
    }
}

/// Results of a batch, index-aligned with the ops added.
#[derive(Debug, Clone)]
pub struct BatchResults {
    pub(crate) results: Vec<OpResult>,
}

impl BatchResults {
    pub fn len(&self) -> usize {
        self.results.len()
    }

    pub fn is_empty(&self) -> bool {
        self.results.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&OpResult> {
        self.results.get(i)
    }

    pub fn iter(&self) -> impl Iterator<Item = &OpResult> {
        self.results.iter()
    }

    pub fn into_vec(self) -> Vec<OpResult> {
        self.results
    }

    /// The first failed op, if any.
    pub fn first_error(&self) -> Option<&OpError> {
        self.results.iter().find_map(|r| r.as_ref().err())
    }

    /// Bytes read by op `i`.
    pub fn data(&self, i: usize) -> Result<&Bytes, ClientError> {
        match self.results.get(i) {
            Some(Ok(OpOutput::Data(b))) => Ok(b),
            Some(Err(e)) => Err(e.clone().into()),
            _ => Err(ClientError::InvalidArgument(format!(
                "op {i} is not a read"
            ))),
        }
    }

    /// Old value returned by CAS / FETCH_ADD op `i`.
    pub fn value(&self, i: usize) -> Result<u64, ClientError> {
        match self.results.get(i) {
            Some(Ok(OpOutput::Value(v))) => Ok(*v),
            Some(Err(e)) => Err(e.clone().into()),
            _ => Err(ClientError::InvalidArgument(format!(
                "op {i} is not an atomic"
            ))),
        }
    }
}
