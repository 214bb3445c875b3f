//! The procedures a server can run: built-ins, plus WebAssembly procedures each cache
//! registered (compiled once when the manager loads them here).

use std::collections::HashMap;
use std::sync::Arc;

use farcache_proto::CacheId;
use farcache_sproc::builtin;
use farcache_sproc::wasm::{Limits, WasmRuntime};
use farcache_sproc::{Procedure, SprocError};
use parking_lot::RwLock;

type PerCache = HashMap<CacheId, HashMap<String, Arc<dyn Procedure>>>;

pub struct ProcTable {
    runtime: Option<WasmRuntime>,
    loaded: RwLock<PerCache>,
    /// Fault injection on (tests only): `__panic` is callable.
    faults: bool,
}

impl Default for ProcTable {
    fn default() -> Self {
        Self::new(Limits::default(), false)
    }
}

/// The fault-injection procedure: panics the worker thread that runs it, so tests can
/// check that a failing worker is replaced and its connections told.
struct Panic;

static PANIC: Panic = Panic;

impl Procedure for Panic {
    fn name(&self) -> &str {
        "__panic"
    }

    fn run(
        &self,
        _mem: &dyn farcache_sproc::Memory,
        _addr: u64,
        _args: &[u8],
    ) -> Result<farcache_sproc::Outcome, SprocError> {
        panic!("fault injection: the __panic procedure ran");
    }
}

impl ProcTable {
    pub fn new(limits: Limits, faults: bool) -> Self {
        let runtime = WasmRuntime::new(limits)
            .inspect_err(|e| tracing::warn!("WebAssembly procedures disabled: {e}"))
            .ok();
        if faults {
            tracing::warn!("fault injection is on (FARCACHE_FAULT_INJECTION=1): for tests only");
        }
        Self {
            runtime,
            loaded: RwLock::new(HashMap::new()),
            faults,
        }
    }

    /// Compiles `code` and makes it callable as `name` on `cache` (replacing an older one).
    pub fn load(&self, cache: CacheId, name: &str, code: &[u8]) -> Result<(), SprocError> {
        if builtin::by_name(name).is_some() {
            return Err(SprocError::Compile(format!(
                "{name} is a built-in procedure; pick another name"
            )));
        }
        let rt = self
            .runtime
            .as_ref()
            .ok_or_else(|| SprocError::Compile("WebAssembly is disabled on this server".into()))?;
        let p: Arc<dyn Procedure> = Arc::new(rt.compile(name, code)?);
        self.loaded
            .write()
            .entry(cache)
            .or_default()
            .insert(name.to_string(), p);
        Ok(())
    }

    pub fn get(&self, cache: CacheId, name: &str) -> Option<ProcRef> {
        if let Some(p) = builtin::by_name(name) {
            return Some(ProcRef::Builtin(p));
        }
        if self.faults && name == PANIC.name() {
            return Some(ProcRef::Builtin(&PANIC));
        }
        let p = self.loaded.read().get(&cache)?.get(name).cloned()?;
        Some(ProcRef::Loaded(p))
    }

    pub fn drop_cache(&self, cache: CacheId) {
        self.loaded.write().remove(&cache);
    }
}

/// A procedure found for one EXECUTE: built-ins are static, loaded ones shared.
pub enum ProcRef {
    Builtin(&'static dyn Procedure),
    Loaded(Arc<dyn Procedure>),
}

impl std::ops::Deref for ProcRef {
    type Target = dyn Procedure;

    fn deref(&self) -> &Self::Target {
        match self {
            Self::Builtin(p) => *p,
            Self::Loaded(p) => &**p,
        }
    }
}
