//! `Cache`: a handle to one cache, with blocking, async and batch access.

use std::sync::Arc;

use bytes::Bytes;
use farcache_proto::CacheId;
use farcache_proto::control::{CacheInfo, CacheTokens, ControlRequest, ControlResponse};

use crate::batch::Batch;
use crate::error::ClientError;
use crate::lane::RouteTable;
use crate::results::BatchResults;
use crate::ticket::OpFuture;

/// What the handles of one cache share: its route table (which the tickets of its
/// batches hold too) and the tokens `create` returned.
pub(crate) struct CacheShared {
    route: Arc<RouteTable>,
    /// The tokens the manager issued, on a handle from `create`.
    tokens: Option<CacheTokens>,
}

impl CacheShared {
    pub fn new(route: Arc<RouteTable>, tokens: Option<CacheTokens>) -> Arc<Self> {
        Arc::new(Self { route, tokens })
    }
}

/// A cache: the byte array `[0, capacity)`. Cheap to clone and share between threads.
#[derive(Clone)]
pub struct Cache {
    shared: Arc<CacheShared>,
}

fn one(r: BatchResults) -> Result<crate::OpOutput, ClientError> {
    match r.get(0) {
        Some(r) => r.map_err(ClientError::from),
        None => Err(ClientError::InvalidArgument("empty result".into())),
    }
}

fn as_bytes(r: BatchResults) -> Result<Bytes, ClientError> {
    match one(r)? {
        crate::OpOutput::Data(b) => Ok(b),
        other => Err(ClientError::InvalidArgument(format!(
            "expected data, got {other:?}"
        ))),
    }
}

fn as_unit(r: BatchResults) -> Result<(), ClientError> {
    one(r).map(|_| ())
}

fn as_value(r: BatchResults) -> Result<u64, ClientError> {
    match one(r)? {
        crate::OpOutput::Value(v) => Ok(v),
        other => Err(ClientError::InvalidArgument(format!(
            "expected a value, got {other:?}"
        ))),
    }
}

impl Cache {
    /// The read-write and read-only tokens of this cache, on a handle returned by
    /// `create` (the manager issues them once; `Client::issue_token` issues more).
    pub fn tokens(&self) -> Option<&CacheTokens> {
        self.shared.tokens.as_ref()
    }

    pub(crate) fn new(shared: Arc<CacheShared>) -> Self {
        Self { shared }
    }

    pub fn info(&self) -> Arc<CacheInfo> {
        self.shared.route.info()
    }

    /// The SLO this cache was created with and the transport chosen for it.
    pub fn slo(&self) -> Option<farcache_proto::slo::SloChoice> {
        self.shared.route.info().slo.clone()
    }

    /// The transport settings this handle runs with (`connections` = `c`,
    /// `batch_size` = `b`, `queue_depth` = `q`): a cache with an SLO gets those chosen
    /// for it.
    pub fn config(&self) -> &crate::ClientConfig {
        &self.shared.route.transport().config
    }

    pub fn id(&self) -> CacheId {
        self.shared.route.id()
    }

    pub fn name(&self) -> String {
        self.shared.route.info().name.clone()
    }

    pub fn capacity(&self) -> u64 {
        self.shared.route.info().capacity
    }

    /// Re-reads the region table from the manager (done automatically on `wrong server`).
    pub fn refresh(&self) -> Result<Arc<CacheInfo>, ClientError> {
        self.shared.route.refresh()
    }

    /// Registers a WebAssembly procedure (binary or text format) under `name` on every
    /// server of this cache, and on servers the cache grows onto later. Each server
    /// compiles it once, now; code that does not compile or lacks the procedure ABI is
    /// refused with the compiler's message. Call it with [`Cache::execute`].
    pub fn register(&self, name: &str, code: &[u8]) -> Result<(), ClientError> {
        let req = ControlRequest::RegisterProc {
            cache: self.name(),
            proc_name: name.to_string(),
            code: code.to_vec(),
        };
        match self.shared.route.transport().manager.call(&req)? {
            ControlResponse::Ok => Ok(()),
            other => Err(ClientError::InvalidArgument(format!(
                "unexpected manager reply: {other:?}"
            ))),
        }
    }

    /// Grows or shrinks this cache.
    pub fn reshape(&self, capacity: u64) -> Result<(), ClientError> {
        let name = self.name();
        match self
            .shared
            .route
            .transport()
            .manager
            .call(&ControlRequest::ReshapeCache { name, capacity })?
        {
            ControlResponse::Cache(info) => {
                // A refresh may have brought a newer table meanwhile.
                self.shared.route.install(info);
                Ok(())
            }
            other => Err(ClientError::InvalidArgument(format!(
                "unexpected manager reply: {other:?}"
            ))),
        }
    }

    /// Acknowledges that the bytes of `[addr, addr+len)` are gone (see
    /// [`OpError::DataLost`](crate::OpError::DataLost)): from now on they read as zeros
    /// instead of failing. Overwriting the range has the same effect for what is
    /// written. Needs a read-write token or the cluster secret.
    pub fn clear_lost(&self, addr: u64, len: u64) -> Result<(), ClientError> {
        if addr.checked_add(len).is_none() {
            return Err(ClientError::InvalidArgument(format!(
                "range [{addr}, {addr}+{len}) overflows"
            )));
        }
        let req = ControlRequest::ClearLost {
            name: self.name(),
            addr,
            len,
        };
        match self.shared.route.transport().manager.call(&req)? {
            ControlResponse::Ok => Ok(()),
            other => Err(ClientError::InvalidArgument(format!(
                "unexpected manager reply: {other:?}"
            ))),
        }
    }

    /// An empty batch on this cache.
    pub fn batch(&self) -> Batch {
        Batch::new(self.shared.route.clone())
    }

    pub fn read(&self, addr: u64, len: u64) -> Result<Bytes, ClientError> {
        self.read_async(addr, len).wait()
    }

    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), ClientError> {
        self.write_async(addr, data).wait()
    }

    /// Compare-and-swap of the little-endian u64 at `addr`; returns the old value
    /// (the swap happened iff it equals `expected`).
    pub fn cas(&self, addr: u64, expected: u64, new: u64) -> Result<u64, ClientError> {
        self.cas_async(addr, expected, new).wait()
    }

    /// Wrapping add to the little-endian u64 at `addr`; returns the old value.
    pub fn fetch_add(&self, addr: u64, delta: u64) -> Result<u64, ClientError> {
        self.fetch_add_async(addr, delta).wait()
    }

    /// Runs stored procedure `proc` next to `addr`; see [`Batch::execute`].
    pub fn execute(&self, proc: &str, addr: u64, args: &[u8]) -> Result<Bytes, ClientError> {
        self.execute_async(proc, addr, args).wait()
    }

    pub fn execute_async(&self, proc: &str, addr: u64, args: &[u8]) -> OpFuture<Bytes> {
        let mut b = self.batch();
        b.execute(proc, addr, args);
        OpFuture::new(b.submit(), as_bytes)
    }

    pub fn read_async(&self, addr: u64, len: u64) -> OpFuture<Bytes> {
        let mut b = self.batch();
        b.read(addr, len);
        OpFuture::new(b.submit(), as_bytes)
    }

    pub fn write_async(&self, addr: u64, data: &[u8]) -> OpFuture<()> {
        let mut b = self.batch();
        b.write(addr, data);
        OpFuture::new(b.submit(), as_unit)
    }

    pub fn cas_async(&self, addr: u64, expected: u64, new: u64) -> OpFuture<u64> {
        let mut b = self.batch();
        b.cas(addr, expected, new);
        OpFuture::new(b.submit(), as_value)
    }

    pub fn fetch_add_async(&self, addr: u64, delta: u64) -> OpFuture<u64> {
        let mut b = self.batch();
        b.fetch_add(addr, delta);
        OpFuture::new(b.submit(), as_value)
    }
}
