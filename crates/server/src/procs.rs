//! The procedures a server can run: built-ins, plus WebAssembly procedures each cache
//! registered (compiled once when the manager loads them here).

use std::collections::HashMap;
use std::sync::Arc;

use farcache_proto::CacheId;
use farcache_sproc::wasm::{Limits, WasmRuntime};
use farcache_sproc::{Procedure, Registry, SprocError};
use parking_lot::RwLock;

type PerCache = HashMap<CacheId, HashMap<String, Arc<dyn Procedure>>>;

pub struct ProcTable {
    builtins: Registry,
    runtime: Option<WasmRuntime>,
    loaded: RwLock<PerCache>,
}

impl Default for ProcTable {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl ProcTable {
    pub fn new(limits: Limits) -> Self {
        let runtime = WasmRuntime::new(limits)
            .inspect_err(|e| tracing::warn!("WebAssembly procedures disabled: {e}"))
            .ok();
        Self {
            builtins: Registry::with_builtins(),
            runtime,
            loaded: RwLock::new(HashMap::new()),
        }
    }

    /// Compiles `code` and makes it callable as `name` on `cache` (replacing an older one).
    pub fn load(&self, cache: CacheId, name: &str, code: &[u8]) -> Result<(), SprocError> {
        if self.builtins.get(name).is_some() {
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

    pub fn get(&self, cache: CacheId, name: &str) -> Option<Arc<dyn Procedure>> {
        if let Some(p) = self.builtins.get(name) {
            return Some(p.clone());
        }
        self.loaded.read().get(&cache)?.get(name).cloned()
    }

    pub fn drop_cache(&self, cache: CacheId) {
        self.loaded.write().remove(&cache);
    }
}
