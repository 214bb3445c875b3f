//! Little-endian arguments in, results and states out.

use crate::Error;

/// Reads little-endian fields from the front of an argument buffer. Arguments come
/// from the caller (or from this procedure's own earlier state), so every read checks
/// the length and fails with [`Error::Args`] instead of panicking.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let (head, tail) = self.buf.split_at_checked(n).ok_or(Error::Args)?;
        self.buf = tail;
        Ok(head)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let (head, tail) = self.buf.split_first_chunk::<N>().ok_or(Error::Args)?;
        self.buf = tail;
        Ok(*head)
    }

    pub fn u8(&mut self) -> Result<u8, Error> {
        self.array().map(u8::from_le_bytes)
    }

    pub fn u16(&mut self) -> Result<u16, Error> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, Error> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, Error> {
        self.array().map(u64::from_le_bytes)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.buf)
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Fails if bytes are left over: the caller used another layout.
    pub fn end(&self) -> Result<(), Error> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(Error::Args)
        }
    }
}

/// Appends little-endian fields to an output buffer, by chaining:
/// `Writer::new(out).u64(a).u32(b).finish()?`. Writing past the end is recorded
/// rather than reported at each field; [`finish`](Self::finish) then fails with
/// [`Error::OutputFull`].
#[derive(Debug)]
pub struct Writer<'o> {
    buf: &'o mut [u8],
    len: usize,
    overflow: bool,
}

impl<'o> Writer<'o> {
    pub fn new(buf: &'o mut [u8]) -> Self {
        Self {
            buf,
            len: 0,
            overflow: false,
        }
    }

    #[must_use]
    pub fn bytes(mut self, v: &[u8]) -> Self {
        let end = self.len.saturating_add(v.len());
        match self.buf.get_mut(self.len..end) {
            Some(dst) if !self.overflow => {
                dst.copy_from_slice(v);
                self.len = end;
            }
            _ => self.overflow = true,
        }
        self
    }

    #[must_use]
    pub fn u8(self, v: u8) -> Self {
        self.bytes(&[v])
    }

    #[must_use]
    pub fn u16(self, v: u16) -> Self {
        self.bytes(&v.to_le_bytes())
    }

    #[must_use]
    pub fn u32(self, v: u32) -> Self {
        self.bytes(&v.to_le_bytes())
    }

    #[must_use]
    pub fn u64(self, v: u64) -> Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written, for [`Outcome`](crate::Outcome).
    pub fn finish(self) -> Result<&'o [u8], Error> {
        if self.overflow {
            return Err(Error::OutputFull);
        }
        let Self { buf, len, .. } = self;
        Ok(&buf[..len])
    }
}

/// `base + index * stride`, or [`Error::Overflow`] when that leaves the 64-bit address
/// space (arguments are untrusted).
pub fn offset(base: u64, index: u64, stride: u64) -> Result<u64, Error> {
    index
        .checked_mul(stride)
        .and_then(|o| base.checked_add(o))
        .ok_or(Error::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_in_order_and_checks_lengths() {
        let mut b = [0u8; 19];
        b[..8].copy_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        b[8..12].copy_from_slice(&7u32.to_le_bytes());
        b[12..14].copy_from_slice(&513u16.to_le_bytes());
        b[14] = 9;
        b[15..].copy_from_slice(b"tail");
        let mut r = Reader::new(&b);
        assert_eq!(r.u64(), Ok(0x0102_0304_0506_0708));
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.u16(), Ok(513));
        assert_eq!(r.u8(), Ok(9));
        assert_eq!(r.remaining(), 4);
        assert_eq!(r.end(), Err(Error::Args));
        assert_eq!(r.clone().rest(), b"tail");
        assert_eq!(r.u64(), Err(Error::Args), "too short");
        assert_eq!(r.bytes(5), Err(Error::Args));
        assert_eq!(r.array::<4>(), Ok(*b"tail"));
        assert_eq!(r.end(), Ok(()));
        assert_eq!(r.u8(), Err(Error::Args));
        assert_eq!(r.bytes(0), Ok(&[][..]));
    }

    #[test]
    fn writes_until_full_then_reports() {
        let mut out = [0u8; 16];
        let w = Writer::new(&mut out).u64(1).u32(2).u16(3).u8(4);
        assert_eq!(w.len(), 15);
        let got = w.finish().map(<[u8]>::to_vec);
        let mut want = 1u64.to_le_bytes().to_vec();
        want.extend_from_slice(&2u32.to_le_bytes());
        want.extend_from_slice(&3u16.to_le_bytes());
        want.push(4);
        assert_eq!(got, Ok(want));

        let w = Writer::new(&mut out).u64(1).u64(2).u8(3);
        assert_eq!(w.len(), 16);
        assert_eq!(w.finish(), Err(Error::OutputFull));
        // A field that did not fit is not followed by a smaller one that would.
        let w = Writer::new(&mut out).bytes(&[0; 12]).u64(5).u32(6);
        assert_eq!(w.finish(), Err(Error::OutputFull));
        assert_eq!(Writer::new(&mut []).finish(), Ok(&[][..]));
        assert!(Writer::new(&mut out).is_empty());
    }

    #[test]
    fn offset_checks_overflow() {
        assert_eq!(offset(100, 3, 8), Ok(124));
        assert_eq!(offset(u64::MAX - 7, 1, 8), Err(Error::Overflow));
        assert_eq!(offset(0, u64::MAX, 2), Err(Error::Overflow));
        assert_eq!(offset(u64::MAX, 0, 8), Ok(u64::MAX));
    }
}
