//! The commands that edit a value where its key lives — the `INCR` family,
//! `APPEND`, `SETRANGE` — as store edits, and their replies: shared by the command
//! that runs alone and the worker's rounds that batch them.

use farcache_store::{Edit, Edited};

use crate::parse::{Args, MAX_BULK, int_arg};
use crate::reply::Out;

/// The edit of `INCR`, `DECR`, `INCRBY`, `DECRBY`, `APPEND` or `SETRANGE` with valid
/// arguments, run where the key lives (alone, or batched with other connections'
/// in a round: see the worker's `run_edits`). `None`: not one of them, or bad
/// arguments (the command runs alone and says why).
pub fn edit_of(a: &Args) -> Option<Edit<'_>> {
    let is = |n: &[u8]| a[0].eq_ignore_ascii_case(n);
    match a.len() {
        2 if is(b"incr") => Some(Edit::Step(1)),
        2 if is(b"decr") => Some(Edit::Step(-1)),
        3 if is(b"incrby") => int_arg(&a[2]).ok().map(Edit::Step),
        3 if is(b"decrby") => int_arg(&a[2]).ok()?.checked_neg().map(Edit::Step),
        3 if is(b"append") => Some(Edit::Append(&a[2])),
        4 if is(b"setrange") => {
            let off = u64::try_from(int_arg(&a[2]).ok()?).ok()?;
            (off.saturating_add(a[3].len() as u64) <= MAX_BULK as u64)
                .then_some(Edit::SetRange(off, &a[3]))
        }
        _ => None,
    }
}

/// The reply to one edit.
pub fn edit_reply(done: Result<Edited, String>, out: &mut Out) {
    match done {
        Ok(Edited::Int(n)) => out.int(n),
        Ok(Edited::Len(n)) => out.int(i64::try_from(n).unwrap_or(i64::MAX)),
        Ok(Edited::NotInteger) => out.error("ERR value is not an integer or out of range"),
        Ok(Edited::Overflow) => out.error("ERR increment or decrement would overflow"),
        Ok(Edited::TooLarge) => {
            out.error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
        }
        Err(e) => out.error(&e),
    }
}
