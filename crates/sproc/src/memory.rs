//! The cache as a procedure sees it: byte ranges by cache address, served only if this
//! server holds them (the paper's `Translate` with its out-of-bounds condition).
//!
//! Every run of a procedure is bounded by a step budget of memory reads, charged by
//! the [`Memory`] implementation (see [`Steps`]), so no arguments can keep a server
//! worker busy indefinitely, whether the procedure is built in or WebAssembly.

use std::cell::Cell;

/// Memory reads one run of a procedure on one server may make by default (one
/// `Procedure::run`/`run_into` call; a continuation elsewhere starts afresh).
pub const DEFAULT_STEP_BUDGET: u64 = 1 << 24;

/// Why a read was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Some of the range is held by another server: continue there.
    Remote,
    /// The range lies (partly) outside the cache: an error, not a continuation.
    OutOfRange,
    /// This run used up its step budget ([`Memory::step_limit`] reads): an error.
    Budget,
    /// The bytes were lost with a failed server (they are not zeros): an error.
    Lost,
}

pub trait Memory {
    /// Copies the `out.len()` bytes at cache address `addr` into `out`.
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss>;

    fn read_u64(&self, addr: u64) -> Result<u64, Miss> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn read_u32(&self, addr: u64) -> Result<u32, Miss> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads the u64s at `base + i * stride` for `i < out.len()` if this memory can
    /// serve every one of them at once (all held here, budget left for each); returns
    /// false otherwise, having charged nothing and leaving nothing in `out` to use.
    /// Only a fast path: callers fall back to [`Memory::read_u64`] per word, which
    /// says what stopped them.
    #[inline]
    fn read_u64s(&self, _base: u64, _stride: u64, _out: &mut [u64]) -> bool {
        false
    }

    /// Asks for the cache line at `addr` to be brought close (a hint; free to ignore).
    /// Procedures that look up many independent addresses issue these first, so the
    /// memory latencies overlap instead of adding up.
    #[inline]
    fn prefetch(&self, _addr: u64) {}

    /// The step budget behind [`Miss::Budget`], for the error a procedure reports.
    /// Implementations enforcing another limit say so here.
    fn step_limit(&self) -> u64 {
        DEFAULT_STEP_BUDGET
    }
}

/// The memory a writing procedure runs on (see [`crate::Procedure::writes`]): the one
/// region its address is in, to read and to change. The server notes every change
/// for the region's backups and for a migration copying it, as for a client's op.
pub trait WriteMemory: Memory {
    /// Copies `data` to cache address `addr`.
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Miss>;

    /// Compare-and-swap of the aligned word at `addr`: the value found (the swap
    /// happened iff it equals `expected`).
    fn cas(&self, addr: u64, expected: u64, new: u64) -> Result<u64, Miss>;

    /// Fetch-and-add of the aligned word at `addr` (wrapping): the value before.
    fn fetch_add(&self, addr: u64, delta: u64) -> Result<u64, Miss>;
}

/// A run's step counter: a [`Memory`] holds one per run and charges a step per read.
#[derive(Debug)]
pub struct Steps {
    used: Cell<u64>,
    limit: u64,
}

impl Steps {
    pub const fn new(limit: u64) -> Self {
        Self {
            used: Cell::new(0),
            limit,
        }
    }

    /// Counts one read; [`Miss::Budget`] once `limit` reads were counted.
    #[inline]
    pub fn charge(&self) -> Result<(), Miss> {
        let used = self.used.get();
        if used >= self.limit {
            return Err(Miss::Budget);
        }
        // `used < limit`, so this cannot overflow.
        self.used.set(used + 1);
        Ok(())
    }

    /// Whether `n` more reads fit in the budget.
    #[inline]
    pub fn has_room(&self, n: u64) -> bool {
        self.limit.saturating_sub(self.used.get()) >= n
    }

    /// Counts `n` reads if all `n` fit in the budget; counts nothing otherwise.
    #[inline]
    pub fn charge_n(&self, n: u64) -> bool {
        if !self.has_room(n) {
            return false;
        }
        self.used.set(self.used.get() + n);
        true
    }

    pub fn used(&self) -> u64 {
        self.used.get()
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }
}

impl Default for Steps {
    fn default() -> Self {
        Self::new(DEFAULT_STEP_BUDGET)
    }
}

/// A byte vector standing in for a cache whose regions of `region_size` bytes are held
/// locally where `local[region]` is true. Used by tests and by clients that want to
/// run a procedure against a local copy. It has no step budget of its own: wrap it
/// with [`VecMemory::with_limit`] to get one.
pub struct VecMemory<'a> {
    pub bytes: &'a [u8],
    pub region_size: u64,
    pub local: &'a [bool],
}

impl VecMemory<'_> {
    /// This memory, serving at most `limit` reads (one run's worth).
    pub fn with_limit(self, limit: u64) -> Budgeted<Self> {
        Budgeted::new(self, limit)
    }
}

impl Memory for VecMemory<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        let end = addr.checked_add(out.len() as u64).ok_or(Miss::OutOfRange)?;
        if end > self.bytes.len() as u64 {
            return Err(Miss::OutOfRange);
        }
        if !out.is_empty() {
            let first = addr / self.region_size;
            let last = (end - 1) / self.region_size;
            if !(first..=last).all(|r| self.local.get(r as usize).copied().unwrap_or(false)) {
                return Err(Miss::Remote);
            }
        }
        out.copy_from_slice(&self.bytes[addr as usize..end as usize]);
        Ok(())
    }

    fn read_u64s(&self, base: u64, stride: u64, out: &mut [u64]) -> bool {
        let mut words = Vec::with_capacity(out.len());
        for i in 0..out.len() as u64 {
            let Some(at) = stride.checked_mul(i).and_then(|d| base.checked_add(d)) else {
                return false;
            };
            match self.read_u64(at) {
                Ok(v) => words.push(v),
                Err(_) => return false,
            }
        }
        out.copy_from_slice(&words);
        true
    }
}

/// Any [`Memory`] with a step budget: each read charges one step first.
pub struct Budgeted<M> {
    inner: M,
    steps: Steps,
}

impl<M: Memory> Budgeted<M> {
    pub fn new(inner: M, limit: u64) -> Self {
        Self {
            inner,
            steps: Steps::new(limit),
        }
    }

    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    pub fn inner(&self) -> &M {
        &self.inner
    }
}

impl<M: Memory> Memory for Budgeted<M> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Miss> {
        self.steps.charge()?;
        self.inner.read(addr, out)
    }

    // Forwarded so the inner memory's fast paths still apply.
    fn read_u64(&self, addr: u64) -> Result<u64, Miss> {
        self.steps.charge()?;
        self.inner.read_u64(addr)
    }

    fn read_u32(&self, addr: u64) -> Result<u32, Miss> {
        self.steps.charge()?;
        self.inner.read_u32(addr)
    }

    fn read_u64s(&self, base: u64, stride: u64, out: &mut [u64]) -> bool {
        // All or nothing: the budget must hold every word before the inner memory reads.
        self.steps.has_room(out.len() as u64)
            && self.inner.read_u64s(base, stride, out)
            && self.steps.charge_n(out.len() as u64)
    }

    fn step_limit(&self) -> u64 {
        self.steps.limit
    }

    fn prefetch(&self, addr: u64) {
        self.inner.prefetch(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_allow_exactly_the_limit() {
        let s = Steps::new(3);
        for _ in 0..3 {
            assert_eq!(s.charge(), Ok(()));
        }
        assert_eq!(s.charge(), Err(Miss::Budget));
        assert_eq!(s.charge(), Err(Miss::Budget));
        assert_eq!(s.used(), 3);
        // The largest limit never overflows the counter.
        let s = Steps::new(u64::MAX);
        s.used.set(u64::MAX - 1);
        assert_eq!(s.charge(), Ok(()));
        assert_eq!(s.charge(), Err(Miss::Budget));
    }

    #[test]
    fn budgeted_memory_charges_every_kind_of_read() {
        let bytes = [7u8; 64];
        let m = VecMemory {
            bytes: &bytes,
            region_size: 64,
            local: &[true],
        }
        .with_limit(3);
        let mut b = [0u8; 2];
        assert_eq!(m.read(0, &mut b), Ok(()));
        assert_eq!(m.read_u64(8), Ok(0x0707_0707_0707_0707));
        assert_eq!(m.read_u32(8), Ok(0x0707_0707));
        assert_eq!(m.read_u64(8), Err(Miss::Budget));
        assert_eq!(m.step_limit(), 3);
        assert_eq!(m.steps().used(), 3);
    }
}
