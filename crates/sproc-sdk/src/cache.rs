//! What a procedure may read: the bytes of the cache this server holds.

/// The bytes asked for are (partly) held by another server: the procedure should save
/// its state and continue there (see [`Outcome::Continue`](crate::Outcome::Continue)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote;

/// Cache memory as a procedure sees it.
///
/// A read of bytes outside the cache does not return: on a server it ends the
/// invocation with an error (an argument bug, not a reason to move elsewhere).
pub trait Cache {
    /// Copies the `buf.len()` bytes at cache address `addr` into `buf`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Remote>;

    /// The `N` bytes at `addr`.
    fn read_array<const N: usize>(&self, addr: u64) -> Result<[u8; N], Remote> {
        let mut b = [0u8; N];
        self.read(addr, &mut b)?;
        Ok(b)
    }

    /// The little-endian u64 at `addr`.
    fn read_u64(&self, addr: u64) -> Result<u64, Remote> {
        self.read_array(addr).map(u64::from_le_bytes)
    }

    /// The little-endian u32 at `addr`.
    fn read_u32(&self, addr: u64) -> Result<u32, Remote> {
        self.read_array(addr).map(u32::from_le_bytes)
    }
}

/// An in-memory cache for testing procedures off the server: `bytes` cut into regions
/// of `region_size` bytes, of which those with `local[region]` true are held here
/// (the same model as `farcache_sproc::memory::VecMemory`).
#[derive(Debug, Clone, Copy)]
pub struct TestCache<'a> {
    pub bytes: &'a [u8],
    pub region_size: u64,
    pub local: &'a [bool],
}

impl Cache for TestCache<'_> {
    /// # Panics
    /// On a read outside `bytes`, as a server ends such an invocation.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Remote> {
        let len = buf.len() as u64;
        let range = addr
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len() as u64)
            .and_then(|end| self.bytes.get(addr as usize..end as usize));
        let Some(src) = range else {
            panic!("read [{addr}, {addr}+{len}) outside the cache");
        };
        if !buf.is_empty() {
            let size = self.region_size.max(1);
            let (first, last) = (addr / size, (addr + len - 1) / size);
            let here = |r: u64| self.local.get(r as usize).copied().unwrap_or(false);
            if !(first..=last).all(here) {
                return Err(Remote);
            }
        }
        buf.copy_from_slice(src);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes() -> [u8; 64] {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn serves_local_regions_and_reports_remote_ones() {
        let b = bytes();
        let c = TestCache {
            bytes: &b,
            region_size: 16,
            local: &[true, true, false, true],
        };
        assert_eq!(c.read_u32(0), Ok(u32::from_le_bytes([0, 1, 2, 3])));
        assert_eq!(
            c.read_u64(24),
            Ok(u64::from_le_bytes(core::array::from_fn(|i| 24 + i as u8)))
        );
        // Straddles region 1 (local) and 2 (remote).
        assert_eq!(c.read_u64(28), Err(Remote));
        assert_eq!(c.read_u64(40), Err(Remote));
        assert_eq!(c.read_array::<2>(62), Ok([62, 63]));
        assert_eq!(c.read(64, &mut []), Ok(()));
        // Regions past `local` count as remote.
        let short = TestCache {
            local: &[true],
            ..c
        };
        assert_eq!(short.read_u32(16), Err(Remote));
    }

    #[test]
    #[should_panic(expected = "outside the cache")]
    fn out_of_range_ends_the_invocation() {
        let b = bytes();
        let c = TestCache {
            bytes: &b,
            region_size: 16,
            local: &[true; 4],
        };
        let _ = c.read_u64(60);
    }

    #[test]
    #[should_panic(expected = "outside the cache")]
    fn address_overflow_is_out_of_range() {
        let b = bytes();
        let c = TestCache {
            bytes: &b,
            region_size: 16,
            local: &[true; 4],
        };
        let _ = c.read_u64(u64::MAX - 3);
    }
}
