//! The cache as a procedure sees it: byte ranges by cache address, served only if this
//! server holds them (the paper's `Translate` with its out-of-bounds condition).

/// Why a read was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// Some of the range is held by another server: continue there.
    Remote,
    /// The range lies (partly) outside the cache: an error, not a continuation.
    OutOfRange,
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
}

/// A byte vector standing in for a cache whose regions of `region_size` bytes are held
/// locally where `local[region]` is true. Used by tests and by clients that want to
/// run a procedure against a local copy.
pub struct VecMemory<'a> {
    pub bytes: &'a [u8],
    pub region_size: u64,
    pub local: &'a [bool],
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
}
