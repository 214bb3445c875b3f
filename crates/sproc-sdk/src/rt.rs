//! What [`procedure!`](crate::procedure) expands to calls into: the `farcache` imports,
//! the argument and output buffers, and the `run` export's body. Not a stable API.

#[cfg(target_arch = "wasm32")]
pub use wasm::{ServerCache, alloc, run};

use crate::{Error, Outcome, TestCache};

/// Only checks, off `wasm32`, that a procedure can be called the way `run` calls it.
pub fn check<F>(f: F)
where
    F: for<'o> FnOnce(&TestCache<'_>, u64, &'o [u8], &'o mut [u8]) -> Result<Outcome<'o>, Error>,
{
    drop(f);
}

#[cfg(target_arch = "wasm32")]
mod wasm {
    use core::arch::wasm32;
    use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

    use crate::{Cache, Error, Outcome, Remote};

    #[link(wasm_import_module = "farcache")]
    unsafe extern "C" {
        /// Copies `len` cache bytes at `addr` to `dst`: 0 = done, 1 = held elsewhere.
        /// Out-of-cache reads do not return.
        #[link_name = "read"]
        fn farcache_read(addr: i64, len: usize, dst: *mut u8) -> i32;
        /// Hands the host the result or state at `[ptr, ptr + len)`.
        #[link_name = "output"]
        fn farcache_output(ptr: *const u8, len: usize);
        /// Where a continuation resumes.
        #[link_name = "continue_at"]
        safe fn farcache_continue_at(addr: i64);
        /// A range to pull here before running again (DFlow).
        #[link_name = "pull"]
        safe fn farcache_pull(addr: i64, len: i32);
    }

    /// The cache of the server running this invocation (the `farcache.read` import).
    #[derive(Debug, Clone, Copy)]
    pub struct ServerCache;

    impl Cache for ServerCache {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Remote> {
            // SAFETY: the host writes at most `buf.len()` bytes at `buf`, which is
            // borrowed mutably for the call; it does not keep the pointer.
            let code = unsafe { farcache_read(addr as i64, buf.len(), buf.as_mut_ptr()) };
            if code == 0 { Ok(()) } else { Err(Remote) }
        }
    }

    const PAGE: usize = 64 << 10;

    /// A buffer of whole pages obtained with `memory.grow`: no Rust value or allocator
    /// owns them, so the only references into them are the ones made below.
    struct Slot {
        base: AtomicUsize,
        cap: AtomicUsize,
    }

    impl Slot {
        const fn new() -> Self {
            Self {
                base: AtomicUsize::new(0),
                cap: AtomicUsize::new(0),
            }
        }

        /// At least `len` bytes at the returned address, growing memory if needed.
        /// Instances are reused, so an earlier call's buffer is kept when it fits.
        fn reserve(&self, len: usize) -> Option<usize> {
            let (base, cap) = (self.base.load(Relaxed), self.cap.load(Relaxed));
            if len <= cap {
                return Some(base);
            }
            let end = wasm32::memory_size::<0>().checked_mul(PAGE)?;
            if cap > 0 && base.checked_add(cap)? == end {
                // Last thing in memory: extend in place.
                let pages = (len - cap).div_ceil(PAGE);
                if wasm32::memory_grow::<0>(pages) == usize::MAX {
                    return None;
                }
                self.cap.store(cap + pages * PAGE, Relaxed);
                return Some(base);
            }
            // Fresh pages, at least doubling so abandoned buffers stay a bounded waste.
            let pages = len.max(cap.saturating_mul(2)).div_ceil(PAGE);
            let prev = wasm32::memory_grow::<0>(pages);
            if prev == usize::MAX {
                return None;
            }
            let base = prev.checked_mul(PAGE)?;
            self.base.store(base, Relaxed);
            self.cap.store(pages * PAGE, Relaxed);
            Some(base)
        }
    }

    static ARGS: Slot = Slot::new();
    static OUT: Slot = Slot::new();
    /// Set while a procedure runs: the buffers are lent to exactly one call.
    static RUNNING: AtomicBool = AtomicBool::new(false);

    /// The `alloc` export: where the host writes `len` bytes of arguments.
    pub fn alloc(len: i32, max_output: usize) -> i32 {
        // The output buffer first, so the argument buffer stays last in memory and
        // can grow in place for larger arguments.
        let ptr = OUT
            .reserve(max_output)
            .and_then(|_| ARGS.reserve(len as u32 as usize));
        // An address past memory makes the host fail the call cleanly.
        ptr.map_or(-1, |p| p as i32)
    }

    /// The `run` export: calls the procedure and reports its outcome to the host.
    pub fn run<F>(addr: i64, args: i32, len: i32, max_output: usize, f: F) -> i32
    where
        F: for<'o> FnOnce(&ServerCache, u64, &'o [u8], &'o mut [u8]) -> Result<Outcome<'o>, Error>,
    {
        if RUNNING.swap(true, Relaxed) {
            return Error::Abi.code();
        }
        let code = run_once(
            addr,
            args as u32 as usize,
            len as u32 as usize,
            max_output,
            f,
        );
        RUNNING.store(false, Relaxed);
        code
    }

    fn run_once<F>(addr: i64, ptr: usize, len: usize, max_output: usize, f: F) -> i32
    where
        F: for<'o> FnOnce(&ServerCache, u64, &'o [u8], &'o mut [u8]) -> Result<Outcome<'o>, Error>,
    {
        let args: &[u8] = if len == 0 {
            &[]
        } else if ptr == ARGS.base.load(Relaxed) && len <= ARGS.cap.load(Relaxed) {
            // SAFETY: `[ptr, ptr + len)` lies inside the argument slot (checked above),
            // pages this module grew and nothing else refers to; the host wrote the
            // arguments there, and RUNNING makes this the slot's only borrow.
            unsafe { core::slice::from_raw_parts(ptr as *const u8, len) }
        } else {
            return Error::Abi.code();
        };
        let Some(base) = OUT.reserve(max_output) else {
            return Error::OutputFull.code();
        };
        let out: &mut [u8] = if max_output == 0 {
            &mut []
        } else {
            // SAFETY: the output slot holds at least `max_output` bytes at `base`, pages
            // no Rust value owns and disjoint from the argument slot (each slot has
            // pages of its own); RUNNING makes this the slot's only borrow.
            unsafe { core::slice::from_raw_parts_mut(base as *mut u8, max_output) }
        };
        match f(&ServerCache, addr as u64, args, out) {
            Ok(o @ Outcome::Done(bytes)) => {
                emit(bytes);
                o.code()
            }
            Ok(o @ Outcome::Continue { addr, state }) => {
                emit(state);
                farcache_continue_at(addr as i64);
                o.code()
            }
            Ok(o @ Outcome::Pull { addr, len, state }) => {
                emit(state);
                farcache_pull(addr as i64, len as i32);
                o.code()
            }
            // The host discards any output of a failed call.
            Err(e) => e.code(),
        }
    }

    fn emit(bytes: &[u8]) {
        // SAFETY: the host only copies `bytes.len()` bytes from `bytes`, a live slice.
        unsafe { farcache_output(bytes.as_ptr(), bytes.len()) }
    }
}
