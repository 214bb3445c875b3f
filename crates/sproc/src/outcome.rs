//! The body of a successful EXECUTE reply: `tag u8` then
//!
//! | tag | meaning  | rest                                   |
//! |-----|----------|----------------------------------------|
//! | 0   | done     | the result bytes                       |
//! | 1   | continue | `addr u64`, then the state (new args)  |
//! | 2   | failed   | UTF-8 message                          |

use crate::SprocError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done(Vec<u8>),
    /// Resume this procedure at the owner of `addr` with `state` as its args.
    Continue {
        addr: u64,
        state: Vec<u8>,
    },
    /// DFlow: bring these `(addr, len)` ranges to this server, then run again at the
    /// same address with `state`; the ranges read as if they were local. Servers
    /// handle it; it never reaches a client.
    Pull {
        ranges: Vec<(u64, u32)>,
        state: Vec<u8>,
    },
}

pub const TAG_DONE: u8 = 0;
pub const TAG_CONTINUE: u8 = 1;
pub const TAG_FAILED: u8 = 2;

/// A decoded reply body, borrowing from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    Done(&'a [u8]),
    Continue { addr: u64, state: &'a [u8] },
    Failed(&'a str),
}

impl Outcome {
    /// The reply body for a client (a `Pull` the server could not serve is a failure).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Self::Done(r) => {
                out.push(TAG_DONE);
                out.extend_from_slice(r);
            }
            Self::Continue { addr, state } => {
                out.push(TAG_CONTINUE);
                out.extend_from_slice(&addr.to_le_bytes());
                out.extend_from_slice(state);
            }
            Self::Pull { ranges, .. } => {
                let (addr, len) = ranges.first().copied().unwrap_or_default();
                let e = SprocError::Reply(format!(
                    "the procedure needs {len} bytes at {addr} pulled from another server (DFlow), which this path does not serve"
                ));
                encode_failure(&e, out);
            }
        }
    }
}

pub fn encode_failure(e: &SprocError, out: &mut Vec<u8>) {
    out.push(TAG_FAILED);
    out.extend_from_slice(e.to_string().as_bytes());
}

pub fn decode(body: &[u8]) -> Result<Reply<'_>, SprocError> {
    let bad = |m: &str| SprocError::Reply(m.to_string());
    let (&tag, rest) = body.split_first().ok_or_else(|| bad("empty body"))?;
    match tag {
        TAG_DONE => Ok(Reply::Done(rest)),
        TAG_CONTINUE => {
            let (a, state) = rest
                .split_first_chunk::<8>()
                .ok_or_else(|| bad("continuation without an address"))?;
            Ok(Reply::Continue {
                addr: u64::from_le_bytes(*a),
                state,
            })
        }
        TAG_FAILED => std::str::from_utf8(rest)
            .map(Reply::Failed)
            .map_err(|_| bad("failure message is not UTF-8")),
        t => Err(SprocError::Reply(format!("unknown tag {t}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut b = Vec::new();
        Outcome::Continue {
            addr: 77,
            state: vec![1, 2, 3],
        }
        .encode_into(&mut b);
        assert_eq!(
            decode(&b),
            Ok(Reply::Continue {
                addr: 77,
                state: &[1, 2, 3]
            })
        );
        b.clear();
        Outcome::Done(b"xy".to_vec()).encode_into(&mut b);
        assert_eq!(decode(&b), Ok(Reply::Done(b"xy")));
        b.clear();
        encode_failure(&SprocError::bad("gather", "no"), &mut b);
        assert!(matches!(decode(&b), Ok(Reply::Failed(m)) if m.contains("gather")));
        assert!(decode(&[]).is_err());
        assert!(decode(&[1, 0, 0]).is_err());
        assert!(decode(&[9]).is_err());
    }
}
