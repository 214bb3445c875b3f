//! Bytes received on a connection that do not yet form a whole frame.
//!
//! A peer can announce a frame of up to the frame limit in 16 bytes and then send a
//! trickle. The buffer grows with what arrives — at most doubling what it holds, and
//! at least [`MIN_GROW`] per read — so its memory stays within twice the bytes the
//! peer sent plus a small constant, whatever the header said.

use std::io::{self, Read};

use farcache_proto::HEADER_LEN;

/// Smallest read into the buffer (and the constant in its memory bound).
pub const MIN_GROW: usize = 16 << 10;
/// Capacity kept after the buffer empties; more is given back.
const RETAIN: usize = 256 << 10;

#[derive(Debug, Default)]
pub struct FrameBuf {
    data: Vec<u8>,
    start: usize,
}

impl FrameBuf {
    pub fn new() -> Self {
        Self::default()
    }

    /// Unconsumed bytes.
    pub fn len(&self) -> usize {
        self.data.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..]
    }

    /// Bytes allocated (for memory accounting and tests).
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// Drops `n` bytes from the front (whole frames that were served).
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.data.len());
        if self.start == self.data.len() {
            self.clear();
        }
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.start = 0;
        if self.data.capacity() > RETAIN {
            self.data = Vec::new();
        }
    }

    /// Keeps bytes read elsewhere (the tail of a shared read buffer).
    pub fn stash(&mut self, b: &[u8]) {
        self.compact();
        self.data.extend_from_slice(b);
    }

    fn compact(&mut self) {
        if self.start > 0 {
            self.data.copy_within(self.start.., 0);
            self.data.truncate(self.data.len() - self.start);
            self.start = 0;
        }
    }

    /// How many more bytes the next read may take: what the frame at the front still
    /// lacks, at least [`MIN_GROW`], at most the larger of what is held and
    /// [`MIN_GROW`]. The buffer always starts at a frame boundary.
    fn next_read(&self, max_frame: u32) -> usize {
        let have = self.len();
        let lacking = match self.bytes().first_chunk::<4>() {
            Some(len) => {
                let len = u32::from_le_bytes(*len).min(max_frame) as usize;
                (HEADER_LEN + len).saturating_sub(have)
            }
            None => MIN_GROW,
        };
        lacking.clamp(MIN_GROW, have.max(MIN_GROW))
    }

    /// Reads once from `r` into the buffer. Returns the bytes read (0 at end of
    /// stream) and how many were asked for (fewer read means the socket is drained).
    pub fn read_from<R: Read + ?Sized>(
        &mut self,
        r: &mut R,
        max_frame: u32,
    ) -> io::Result<(usize, usize)> {
        self.compact();
        let want = self.next_read(max_frame);
        let have = self.data.len();
        self.data.resize(have + want, 0);
        let got = r.read(&mut self.data[have..]);
        let n = *got.as_ref().unwrap_or(&0);
        self.data.truncate(have + n);
        got.map(|n| (n, want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `chunk` bytes per call.
    struct Trickle<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.chunk.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn header(len: u32) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&len.to_le_bytes());
        h
    }

    #[test]
    fn a_big_announcement_commits_nothing() {
        let mut stream = header(64 << 20);
        stream.extend_from_slice(&[7; 100]);
        let mut b = FrameBuf::new();
        let mut r = Trickle {
            data: &stream,
            chunk: 1 << 30,
        };
        let (n, _) = b.read_from(&mut r, 64 << 20).unwrap();
        assert_eq!(n, stream.len());
        assert!(b.capacity() <= 2 * MIN_GROW, "capacity {}", b.capacity());
    }

    #[test]
    fn memory_follows_what_arrives() {
        let len = 8 << 20;
        let mut stream = header(len as u32);
        stream.extend(std::iter::repeat_n(1u8, len));
        let mut r = Trickle {
            data: &stream,
            chunk: 1 << 30,
        };
        let mut b = FrameBuf::new();
        while b.len() < stream.len() {
            let held = b.len();
            b.read_from(&mut r, 64 << 20).unwrap();
            // At most double what was held, plus the constant, whatever the header said.
            assert!(
                b.capacity() <= 2 * (2 * held + MIN_GROW),
                "held {held}, capacity {}",
                b.capacity()
            );
        }
        assert_eq!(b.bytes(), &stream[..]);
        b.consume(stream.len());
        assert!(b.is_empty());
        assert!(b.capacity() <= RETAIN, "big buffers are given back");
    }

    #[test]
    fn frames_split_across_reads_reassemble() {
        let mut stream = Vec::new();
        for i in 0..50u8 {
            stream.extend(header(u32::from(i) * 7));
            stream.extend(std::iter::repeat_n(i, usize::from(i) * 7));
        }
        let mut r = Trickle {
            data: &stream,
            chunk: 13,
        };
        let mut b = FrameBuf::new();
        let mut seen = Vec::new();
        loop {
            let (n, _) = b.read_from(&mut r, 1 << 20).unwrap();
            while let Some(h) = b.bytes().first_chunk::<4>() {
                let total = HEADER_LEN + u32::from_le_bytes(*h) as usize;
                if b.len() < total {
                    break;
                }
                seen.extend_from_slice(&b.bytes()[..total]);
                b.consume(total);
            }
            if n == 0 {
                break;
            }
        }
        assert_eq!(seen, stream);
        b.stash(b"abc");
        b.consume(1);
        b.stash(b"d");
        assert_eq!(b.bytes(), b"bcd");
    }
}
