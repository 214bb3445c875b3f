//! Little-endian argument reading and writing for procedures.

use crate::SprocError;

/// Reads fields from an argument buffer; every read names the procedure on failure.
pub struct ArgReader<'a> {
    proc: &'static str,
    buf: &'a [u8],
}

impl<'a> ArgReader<'a> {
    pub fn new(proc: &'static str, buf: &'a [u8]) -> Self {
        Self { proc, buf }
    }

    #[inline]
    pub fn bytes(&mut self, n: usize, what: &str) -> Result<&'a [u8], SprocError> {
        if self.buf.len() < n {
            return Err(self.short(n, what));
        }
        let (h, t) = self.buf.split_at(n);
        self.buf = t;
        Ok(h)
    }

    // Arguments are read on every call: keep the error path out of line.
    #[cold]
    #[inline(never)]
    fn short(&self, n: usize, what: &str) -> SprocError {
        SprocError::bad(
            self.proc,
            format!("{what}: need {n} bytes, {} left", self.buf.len()),
        )
    }

    #[inline]
    pub fn u8(&mut self, what: &str) -> Result<u8, SprocError> {
        Ok(self.bytes(1, what)?[0])
    }

    #[inline]
    pub fn u32(&mut self, what: &str) -> Result<u32, SprocError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.bytes(4, what)?);
        Ok(u32::from_le_bytes(a))
    }

    #[inline]
    pub fn u64(&mut self, what: &str) -> Result<u64, SprocError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8, what)?);
        Ok(u64::from_le_bytes(a))
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Errors if bytes are left over (catches callers using the wrong layout).
    #[inline]
    pub fn end(&self) -> Result<(), SprocError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(SprocError::bad(
                self.proc,
                format!("{} unexpected trailing bytes", self.buf.len()),
            ))
        }
    }
}

/// Appends little-endian fields.
#[derive(Default)]
pub struct ArgWriter(pub Vec<u8>);

impl ArgWriter {
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}
