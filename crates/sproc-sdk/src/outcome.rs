//! How an invocation ends.

/// What a procedure returns when it does not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'o> {
    /// Finished: `result` goes back to the caller.
    Done(&'o [u8]),
    /// The bytes at `addr` are held by another server: invoke this procedure again on
    /// that server with `state` as its arguments.
    Continue { addr: u64, state: &'o [u8] },
    /// DFlow: bring the `len` bytes at `addr` to this server, then invoke this
    /// procedure again here (same address) with `state` as its arguments; those bytes
    /// then read as if they were local.
    Pull {
        addr: u64,
        len: u32,
        state: &'o [u8],
    },
}

impl Outcome<'_> {
    /// The `run` return code the host expects: 0 = done, 1 = continue, 6 = pull.
    pub const fn code(&self) -> i32 {
        match self {
            Self::Done(_) => 0,
            Self::Continue { .. } => 1,
            Self::Pull { .. } => 6,
        }
    }
}

/// Why a procedure fails. The host ends the invocation with
/// `procedure NAME returned CODE (0 = done, 1 = continue, 6 = pull)`, CODE being [`Error::code`];
/// the instance stays usable for the next invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The arguments do not match the procedure's layout (code 2).
    Args,
    /// The result or state does not fit the output buffer (code 3).
    OutputFull,
    /// Address arithmetic on the arguments overflowed (code 4).
    Overflow,
    /// The host called `run` without the arguments `alloc` placed, or re-entered it
    /// (code 5); procedures do not return this themselves.
    Abi,
    /// A procedure-specific failure, reported as code `256 + n`.
    Failed(u16),
}

impl Error {
    pub const fn code(self) -> i32 {
        match self {
            Self::Args => 2,
            Self::OutputFull => 3,
            Self::Overflow => 4,
            Self::Abi => 5,
            Self::Failed(n) => 256 + n as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_host_abi() {
        assert_eq!(Outcome::Done(b"x").code(), 0);
        let p = Outcome::Pull {
            addr: 1,
            len: 8,
            state: b"",
        };
        assert_eq!(p.code(), 6, "the host's RUN_PULL");
        let c = Outcome::Continue {
            addr: 8,
            state: b"",
        };
        assert_eq!(c.code(), 1);
        let errors = [
            Error::Args,
            Error::OutputFull,
            Error::Overflow,
            Error::Abi,
            Error::Failed(0),
            Error::Failed(u16::MAX),
        ];
        // Every failure is neither 0 nor 1, and distinct.
        for (i, e) in errors.iter().enumerate() {
            assert!(e.code() >= 2, "{e:?}");
            for f in &errors[i + 1..] {
                assert_ne!(e.code(), f.code(), "{e:?} {f:?}");
            }
        }
        assert_eq!(Error::Failed(7).code(), 263);
    }
}
