//! WebAssembly procedures: user code compiled once at registration (wasmtime,
//! Cranelift) and run sandboxed per invocation — a fuel budget bounds its time, a
//! store limiter bounds its memory, and a trap ends only that invocation. Bytes copied
//! by `read` and `output` cost fuel too (1 + len/8 units per call), and `read` counts against the
//! run's step budget like a built-in's reads ([`SprocError::Budget`] once used up).
//!
//! Guest ABI (module `farcache`, all integers little-endian):
//!
//! | export / import | signature | meaning |
//! |---|---|---|
//! | export `memory` | memory | the guest's linear memory |
//! | export `alloc` | `(len i32) -> i32` | room for `len` bytes of arguments |
//! | export `run` | `(addr i64, args i32, args_len i32) -> i32` | 0 = done, 1 = continue (FFlow), 6 = pull (DFlow) |
//! | import `read` | `(addr i64, len i32, dst i32) -> i32` | copy cache bytes to `dst`: 0 = ok, 1 = held by another server |
//! | import `output` | `(ptr i32, len i32)` | the result (done) or the saved state (continue) |
//! | import `continue_at` | `(addr i64)` | where a continuation resumes |
//! | import `pull` | `(addr i64, len i32)` | a range to bring here before running again (DFlow); call once per range |
//!
//! Each worker thread instantiates a procedure once and reuses the instance for later
//! invocations (fuel is reset per call; a trap discards the instance), so globals and
//! memory persist between calls: `alloc` must not assume a fresh instance.
//! A read outside the cache ends the invocation with an error. On `1` from `read` a
//! procedure saves what it needs with `output`, names the address with
//! `continue_at` and returns 1; it is called again at the owner with that state as
//! its arguments. Or it names ranges with `pull`, saves its state with `output` and
//! returns 6: the server fetches the ranges and runs it again at the same address with
//! that state, the pulled bytes now readable.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::{
    Caller, Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder, Trap, TypedFunc,
};

/// Largest output a sandboxed procedure may return (the SDK's `HOST_MAX_OUTPUT`).
const MAX_OUTPUT: usize = 1 << 20;
use crate::{Memory, Miss, Outcome, Procedure, SprocError};

/// Limits every invocation runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wasm instructions (roughly) one invocation may execute.
    pub fuel: u64,
    /// Largest linear memory a guest may grow to.
    pub memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: 50_000_000,
            memory: 16 << 20,
        }
    }
}

/// Compiles modules; one per server, shared by every worker thread.
#[derive(Clone)]
pub struct WasmRuntime {
    engine: Engine,
    limits: Limits,
}

impl WasmRuntime {
    pub fn new(limits: Limits) -> Result<Self, SprocError> {
        let mut cfg = Config::new();
        cfg.consume_fuel(true);
        // Small reservations: many small guests, not a few 4 GiB ones.
        cfg.memory_reservation(limits.memory as u64);
        cfg.memory_guard_size(64 << 10);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_memories(256)
            .total_core_instances(256)
            .total_tables(256)
            .max_memory_size(limits.memory);
        let mut pooled = cfg.clone();
        pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        // The pool reserves its address space up front; hosts that refuse get the
        // on-demand allocator (slower instantiation, same limits).
        let engine = match Engine::new(&pooled) {
            Ok(e) => e,
            Err(_) => Engine::new(&cfg).map_err(|e| SprocError::Compile(e.to_string()))?,
        };
        Ok(Self { engine, limits })
    }

    /// Compiles `code` (binary WebAssembly or text) into a procedure named `name`.
    pub fn compile(&self, name: &str, code: &[u8]) -> Result<WasmProcedure, SprocError> {
        let module = Module::new(&self.engine, code)
            .map_err(|e| SprocError::Compile(format!("{name}: {e:#}")))?;
        let mut linker: Linker<Host> = Linker::new(&self.engine);
        let link = |e: wasmtime::Error| SprocError::Compile(format!("{name}: {e:#}"));
        linker
            .func_wrap("farcache", "read", host_read)
            .map_err(link)?;
        linker
            .func_wrap("farcache", "output", host_output)
            .map_err(link)?;
        linker
            .func_wrap(
                "farcache",
                "continue_at",
                |mut c: Caller<'_, Host>, addr: i64| {
                    c.data_mut().resume_at = Some(addr as u64);
                },
            )
            .map_err(link)?;
        linker
            .func_wrap(
                "farcache",
                "pull",
                |mut c: Caller<'_, Host>, addr: i64, len: i32| -> Result<(), wasmtime::Error> {
                    let pulls = &mut c.data_mut().pulls;
                    if pulls.len() >= MAX_PULLS {
                        return Err(wasmtime::Error::msg(format!(
                            "more than {MAX_PULLS} pulls in one run"
                        )));
                    }
                    pulls.push((addr as u64, len as u32));
                    Ok(())
                },
            )
            .map_err(link)?;
        for export in ["memory", "alloc", "run"] {
            if module.get_export(export).is_none() {
                return Err(SprocError::Compile(format!(
                    "{name}: the module does not export `{export}`"
                )));
            }
        }
        let pre = linker.instantiate_pre(&module).map_err(link)?;
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        live().insert(id);
        Ok(WasmProcedure {
            id,
            name: name.to_string(),
            pre,
            engine: self.engine.clone(),
            limits: self.limits,
        })
    }
}

/// Per-invocation host state.
struct Host {
    /// The memory of the invocation in progress (see `WasmProcedure::run`).
    mem: *const (dyn Memory + 'static),
    out: Vec<u8>,
    resume_at: Option<u64>,
    /// Ranges the guest asked to pull (DFlow) during this invocation.
    pulls: Vec<(u64, u32)>,
    limits: StoreLimits,
    /// The guest's exported memory, found once at instantiation (a lookup by name on
    /// every host call costs more than the call).
    memory: Option<wasmtime::Memory>,
}

fn guest_memory(c: &mut Caller<'_, Host>) -> Result<wasmtime::Memory, wasmtime::Error> {
    if let Some(m) = c.data().memory {
        return Ok(m);
    }
    c.get_export("memory")
        .and_then(|e| e.into_memory())
        .ok_or_else(|| wasmtime::Error::msg("module exports no memory"))
}

fn host_read(
    mut c: Caller<'_, Host>,
    addr: i64,
    len: i32,
    dst: i32,
) -> Result<i32, wasmtime::Error> {
    let mem = guest_memory(&mut c)?;
    let (len, dst) = (len as u32 as usize, dst as u32 as usize);
    charge_copy(&mut c, len)?;
    let cache = c.data().mem;
    let buf = mem
        .data_mut(&mut c)
        .get_mut(dst..dst.saturating_add(len))
        .ok_or_else(|| wasmtime::Error::msg("read destination outside guest memory"))?;
    // SAFETY: `mem` points at the `&dyn Memory` borrowed by `WasmProcedure::run` for the
    // whole call; the store (and so this host function) cannot outlive that call.
    let cache = unsafe { &*cache };
    match cache.read(addr as u64, buf) {
        Ok(()) => Ok(0),
        Err(Miss::Remote) => Ok(1),
        Err(Miss::OutOfRange) => Err(wasmtime::Error::msg(format!(
            "read [{}, {}+{len}) outside the cache",
            addr as u64, addr as u64
        ))),
        Err(Miss::Budget) => Err(wasmtime::Error::new(StepBudget(cache.step_limit()))),
        Err(Miss::Lost) => Err(wasmtime::Error::msg(format!(
            "read [{}, {}+{len}) whose data was lost with a failed server",
            addr as u64, addr as u64
        ))),
    }
}

/// Ends an invocation whose memory answered [`Miss::Budget`]; `trapped` reports it as
/// [`SprocError::Budget`].
#[derive(Debug)]
struct StepBudget(u64);

impl std::fmt::Display for StepBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped after its step budget of {} reads", self.0)
    }
}

impl std::error::Error for StepBudget {}

/// Host calls that copy bytes do work no guest instruction pays for. Charge about what
/// a guest loop moving the bytes a word at a time would burn (a unit per 8 bytes), plus
/// one for the call, so large copies in a loop run into the time limit like any loop.
fn charge_copy(c: &mut Caller<'_, Host>, len: usize) -> Result<(), wasmtime::Error> {
    let cost = 1 + len as u64 / 8;
    let fuel = c.get_fuel()?;
    if fuel < cost {
        c.set_fuel(0)?;
        return Err(wasmtime::Error::new(Trap::OutOfFuel));
    }
    c.set_fuel(fuel - cost)?;
    Ok(())
}

fn host_output(mut c: Caller<'_, Host>, ptr: i32, len: i32) -> Result<(), wasmtime::Error> {
    let mem = guest_memory(&mut c)?;
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    if len > MAX_OUTPUT {
        return Err(wasmtime::Error::msg(format!(
            "output above {MAX_OUTPUT} bytes"
        )));
    }
    charge_copy(&mut c, len)?;
    let (data, host) = mem.data_and_store_mut(&mut c);
    let bytes = data
        .get(ptr..ptr.saturating_add(len))
        .ok_or_else(|| wasmtime::Error::msg("output outside guest memory"))?;
    // Reuses the buffer of earlier calls instead of allocating one per output.
    host.out.clear();
    host.out.extend_from_slice(bytes);
    Ok(())
}

pub struct WasmProcedure {
    /// Distinguishes this compilation in the per-thread instance cache.
    id: u64,
    name: String,
    pre: InstancePre<Host>,
    engine: Engine,
    limits: Limits,
}

impl WasmProcedure {
    fn trapped(&self, e: &wasmtime::Error) -> SprocError {
        if let Some(StepBudget(limit)) = e.downcast_ref::<StepBudget>() {
            return SprocError::Budget {
                proc: self.name.clone(),
                limit: *limit,
            };
        }
        let reason = match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => format!("exceeded its time limit ({} fuel)", self.limits.fuel),
            Some(t) => format!("trapped: {t}"),
            None => format!("{e:#}"),
        };
        SprocError::Trapped {
            proc: self.name.clone(),
            reason,
        }
    }
}

impl Procedure for WasmProcedure {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        crate::procedure::run_by_into(self, mem, addr, args)
    }

    fn run_into(
        &self,
        mem: &dyn Memory,
        addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, SprocError> {
        let short: *const (dyn Memory + '_) = mem;
        // SAFETY: only the lifetime is erased. Host functions dereference the pointer
        // only while `run.call` below executes, inside this borrow of `mem`; between
        // invocations the stale pointer is never read.
        let mem_ptr: *const (dyn Memory + 'static) = unsafe { std::mem::transmute(short) };
        WARM.with(|w| {
            let mut w = w.borrow_mut();
            purge_retired(&mut w);
            let i = match w.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    w.push((self.id, self.instantiate(mem_ptr)?));
                    w.len() - 1
                }
            };
            let r = self.call(&mut w[i].1, mem_ptr, addr, args, out);
            if matches!(r, Err(Failure::Trap(_))) {
                // A trapped instance may be half-way through anything: start afresh.
                w.swap_remove(i);
            }
            r.map_err(|f| match f {
                Failure::Trap(e) | Failure::Abi(e) => e,
            })
        })
    }
}

/// Instances kept per worker thread and procedure: instantiating costs far more than
/// a typical call, so each thread instantiates a procedure once and reuses it.
struct Warm {
    store: Store<Host>,
    alloc: TypedFunc<i32, i32>,
    run: TypedFunc<(i64, i32, i32), i32>,
    memory: wasmtime::Memory,
    /// Where `alloc` last placed arguments and for how many bytes: shorter or equal
    /// arguments go there again without calling `alloc` (one guest call per
    /// invocation instead of two).
    args_at: Option<(i32, usize)>,
}

thread_local! {
    // A thread holds few procedures: a scan beats hashing the id on every call.
    static WARM: RefCell<Vec<(u64, Warm)>> = const { RefCell::new(Vec::new()) };
    /// The value of [`DROPPED_GEN`] this thread's instances were last checked against.
    static SEEN_GEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Ids of the compiled procedures not yet dropped (re-registered, or their cache
/// dropped), and a counter bumped with each drop: threads drop their instances of
/// procedures no longer live at their next call, so instances do not outlive their
/// procedure in threads that never run it again. The set holds live procedures only.
static LIVE: std::sync::Mutex<BTreeSet<u64>> = std::sync::Mutex::new(BTreeSet::new());
static DROPPED_GEN: AtomicU64 = AtomicU64::new(0);

fn live() -> std::sync::MutexGuard<'static, BTreeSet<u64>> {
    // The set stays consistent whatever panicked while holding it.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for WasmProcedure {
    fn drop(&mut self) {
        live().remove(&self.id);
        DROPPED_GEN.fetch_add(1, Ordering::Release);
    }
}

/// Drops this thread's instances of procedures dropped since the last look (one
/// atomic load when none was).
fn purge_retired(warm: &mut Vec<(u64, Warm)>) {
    let now = DROPPED_GEN.load(Ordering::Acquire);
    if SEEN_GEN.get() == now {
        return;
    }
    SEEN_GEN.set(now);
    let live = live();
    warm.retain(|(id, _)| live.contains(id));
}

/// Instances of procedures this thread holds (for tests of the purge).
pub fn warm_instances() -> usize {
    WARM.with(|w| {
        let mut w = w.borrow_mut();
        purge_retired(&mut w);
        w.len()
    })
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Ranges one run may ask to pull.
const MAX_PULLS: usize = 1 << 16;
/// `run`'s answer for a pull (DFlow); 2–5 and 256+ are the SDK's failure codes.
pub const RUN_PULL: i32 = 6;

enum Failure {
    /// The instance trapped: discard it.
    Trap(SprocError),
    /// The guest answered wrongly but the instance is intact.
    Abi(SprocError),
}

impl WasmProcedure {
    fn instantiate(&self, mem: *const (dyn Memory + 'static)) -> Result<Warm, SprocError> {
        let host = Host {
            mem,
            out: Vec::new(),
            resume_at: None,
            pulls: Vec::new(),
            memory: None,
            limits: StoreLimitsBuilder::new()
                .memory_size(self.limits.memory)
                .trap_on_grow_failure(true)
                .build(),
        };
        let mut store = Store::new(&self.engine, host);
        store.limiter(|h| &mut h.limits);
        let inst = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| self.trapped(&e))?;
        let alloc = inst
            .get_typed_func::<i32, i32>(&mut store, "alloc")
            .map_err(|e| self.trapped(&e))?;
        let run = inst
            .get_typed_func::<(i64, i32, i32), i32>(&mut store, "run")
            .map_err(|e| self.trapped(&e))?;
        let memory = inst
            .get_memory(&mut store, "memory")
            .ok_or_else(|| self.trapped(&wasmtime::Error::msg("no memory export")))?;
        store.data_mut().memory = Some(memory);
        Ok(Warm {
            store,
            alloc,
            run,
            memory,
            args_at: None,
        })
    }

    fn call(
        &self,
        w: &mut Warm,
        mem: *const (dyn Memory + 'static),
        addr: u64,
        args: &[u8],
        done: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, Failure> {
        let trap = |e: &wasmtime::Error| Failure::Trap(self.trapped(e));
        let h = w.store.data_mut();
        h.mem = mem;
        h.out.clear();
        h.resume_at = None;
        h.pulls.clear();
        w.store.set_fuel(self.limits.fuel).map_err(|e| trap(&e))?;
        let len = i32::try_from(args.len()).map_err(|_| {
            Failure::Abi(SprocError::TooLarge {
                proc: "wasm",
                limit: i32::MAX as usize,
            })
        })?;
        let ptr = match w.args_at {
            Some((at, room)) if args.len() <= room => at,
            _ => {
                w.args_at = None;
                w.alloc.call(&mut w.store, len).map_err(|e| trap(&e))?
            }
        };
        w.memory
            .write(&mut w.store, ptr as u32 as usize, args)
            .map_err(|_| {
                Failure::Abi(
                    self.trapped(&wasmtime::Error::msg("alloc returned memory out of bounds")),
                )
            })?;
        if w.args_at.is_none() {
            w.args_at = Some((ptr, args.len()));
        }
        let code = w
            .run
            .call(&mut w.store, (addr as i64, ptr, len))
            .map_err(|e| trap(&e))?;
        let h = w.store.data_mut();
        if code == 0 {
            // The host buffer keeps its capacity for the next call.
            done.extend_from_slice(&h.out);
            return Ok(None);
        }
        let out = std::mem::take(&mut h.out);
        match (code, h.resume_at) {
            (1, Some(at)) => Ok(Some(Outcome::Continue {
                addr: at,
                state: out,
            })),
            (1, None) => Err(Failure::Abi(SprocError::Trapped {
                proc: self.name.clone(),
                reason: "returned 1 (continue) without continue_at".into(),
            })),
            (RUN_PULL, _) if !h.pulls.is_empty() => Ok(Some(Outcome::Pull {
                ranges: std::mem::take(&mut h.pulls),
                state: out,
            })),
            (RUN_PULL, _) => Err(Failure::Abi(SprocError::Trapped {
                proc: self.name.clone(),
                reason: format!("returned {RUN_PULL} (pull) without calling pull"),
            })),
            (c, _) => Err(Failure::Abi(SprocError::Trapped {
                proc: self.name.clone(),
                reason: format!("returned {c} (0 = done, 1 = continue, {RUN_PULL} = pull)"),
            })),
        }
    }
}
