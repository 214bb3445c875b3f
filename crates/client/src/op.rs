//! The op vocabulary both sides of the client speak: what a batch holds ([`Kind`],
//! [`BatchOp`]) and what the transport tracks of an op in flight ([`PartRef`]).
//!
//! A leaf: it names no other client module, so the API (`batch`, `cache`, …) and the
//! transport (`lane`, `conn`, `parts`) can both use it without using each other.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
    Cas,
    FetchAdd,
    /// A stored procedure: name at `data_off` (`name_len` bytes, shared by consecutive
    /// calls of one procedure) in the names buffer, `len` bytes of arguments (see
    /// [`BatchOp::args`]).
    Execute,
}

/// Arguments up to this long travel inside the op instead of the data buffer.
pub(crate) const INLINE_ARGS: usize = 16;

#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchOp {
    pub kind: Kind,
    /// EXECUTE: the procedure name's length (saturating).
    pub name_len: u16,
    pub addr: u64,
    pub len: u64,
    /// WRITE payload offset in the data buffer; EXECUTE name offset in the names buffer.
    pub data_off: usize,
    /// CAS expected and new value, FETCH_ADD delta ([`a`](Self::a), [`b`](Self::b));
    /// EXECUTE arguments of up to [`INLINE_ARGS`] bytes, else their offset in the data
    /// buffer as `a`.
    pub ab: [u8; 16],
}

impl BatchOp {
    pub fn new(kind: Kind, addr: u64, len: u64, data_off: usize, a: u64, b: u64) -> Self {
        let mut ab = [0u8; 16];
        ab[..8].copy_from_slice(&a.to_le_bytes());
        ab[8..].copy_from_slice(&b.to_le_bytes());
        Self {
            kind,
            name_len: 0,
            addr,
            len,
            data_off,
            ab,
        }
    }

    pub fn a(&self) -> u64 {
        u64::from_le_bytes(self.ab[..8].try_into().unwrap_or_default())
    }

    pub fn b(&self) -> u64 {
        u64::from_le_bytes(self.ab[8..].try_into().unwrap_or_default())
    }

    /// An EXECUTE's arguments: inline, or in the batch's `data`.
    #[inline]
    pub fn args<'a>(&'a self, data: &'a [u8]) -> &'a [u8] {
        let n = self.len as usize;
        if n <= INLINE_ARGS {
            &self.ab[..n]
        } else {
            let at = self.a() as usize;
            data.get(at..at + n).unwrap_or_default()
        }
    }
}

/// One part of one op, as tracked while in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartRef {
    pub key: u32,
    pub op: u32,
    pub op_off: u64,
    pub addr: u64,
    pub len: u32,
    pub redirects: u8,
    /// `paused` answers in a row, for the backoff (fits the struct's padding).
    pub pauses: u8,
    /// The op's kind, so an answer is matched without reading the batch's ops.
    pub kind: Kind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pause_count_costs_no_space() {
        // Parts travel by the thousand in in-flight frames: keep them at 32 bytes.
        assert!(std::mem::size_of::<PartRef>() <= 32);
    }
}
