//! The body of a successful EXECUTE reply: `tag u8` then
//!
//! | tag | meaning  | rest                                   |
//! |-----|----------|----------------------------------------|
//! | 0   | done     | the result bytes                       |
//! | 1   | continue | `addr u64`, then the state (new args)  |
//! | 2   | failed   | UTF-8 message                          |
//!
//! Servers write it (into the response frame, or into a peer RESULT), clients read it;
//! neither needs the procedure runtime for that.

use crate::DecodeError;

/// Hand-offs plus pulls one invocation may make, on servers and in the client library
/// together: a procedure still moving after this many fails.
pub const MAX_HOPS: u32 = 4096;

pub const TAG_DONE: u8 = 0;
pub const TAG_CONTINUE: u8 = 1;
pub const TAG_FAILED: u8 = 2;

/// A decoded reply body, borrowing from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecReply<'a> {
    Done(&'a [u8]),
    /// Resume the procedure at the owner of `addr` with `state` as its arguments.
    Continue {
        addr: u64,
        state: &'a [u8],
    },
    Failed(&'a str),
}

pub fn push_done(out: &mut Vec<u8>, result: &[u8]) {
    out.reserve(1 + result.len());
    out.push(TAG_DONE);
    out.extend_from_slice(result);
}

pub fn push_continue(out: &mut Vec<u8>, addr: u64, state: &[u8]) {
    out.reserve(9 + state.len());
    out.push(TAG_CONTINUE);
    out.extend_from_slice(&addr.to_le_bytes());
    out.extend_from_slice(state);
}

pub fn push_failed(out: &mut Vec<u8>, message: &str) {
    out.reserve(1 + message.len());
    out.push(TAG_FAILED);
    out.extend_from_slice(message.as_bytes());
}

/// A whole failure body (for callers that hand bodies around as vectors).
pub fn failed(message: &str) -> Vec<u8> {
    let mut b = Vec::new();
    push_failed(&mut b, message);
    b
}

pub fn decode(body: &[u8]) -> Result<ExecReply<'_>, DecodeError> {
    let bad = |m: &str| DecodeError::BadReply(m.to_string());
    let (&tag, rest) = body.split_first().ok_or_else(|| bad("empty body"))?;
    match tag {
        TAG_DONE => Ok(ExecReply::Done(rest)),
        TAG_CONTINUE => {
            let (a, state) = rest
                .split_first_chunk::<8>()
                .ok_or_else(|| bad("continuation without an address"))?;
            Ok(ExecReply::Continue {
                addr: u64::from_le_bytes(*a),
                state,
            })
        }
        TAG_FAILED => std::str::from_utf8(rest)
            .map(ExecReply::Failed)
            .map_err(|_| bad("failure message is not UTF-8")),
        t => Err(DecodeError::BadReply(format!("unknown tag {t}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_rejects() {
        let mut b = Vec::new();
        push_continue(&mut b, 77, &[1, 2, 3]);
        assert_eq!(
            decode(&b),
            Ok(ExecReply::Continue {
                addr: 77,
                state: &[1, 2, 3]
            })
        );
        b.clear();
        push_done(&mut b, b"xy");
        assert_eq!(decode(&b), Ok(ExecReply::Done(b"xy")));
        assert_eq!(decode(&failed("no")), Ok(ExecReply::Failed("no")));
        assert!(decode(&[]).is_err());
        assert!(decode(&[TAG_CONTINUE, 0, 0]).is_err());
        assert!(decode(&[TAG_FAILED, 0xff]).is_err());
        assert!(decode(&[9]).is_err());
    }
}
