//! `kv_medit`: changes to values where their shards live — a counter's steps (Redis
//! `INCR`, `DECRBY` …), appends and range overwrites (`APPEND`, `SETRANGE`) — for
//! many keys of one server in one run. Each key's edits apply in order to its value,
//! the result is written once as a new item its slot swings to, keeping the key's
//! expiry. The same rules ([`apply_edits`]) serve the client's read-modify-write road
//! for the keys a run cannot finish.

use super::put::{PUT_REPLY_LEN, PutReply, count_head};
use crate::FormatError;

pub const KV_MEDIT: &str = "kv_medit";

/// One change to a key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edit<'a> {
    /// Adds to the value read as a decimal integer; an absent key counts as 0.
    Step(i64),
    /// Appends bytes; an absent key counts as empty (and is created, even by none).
    Append(&'a [u8]),
    /// Overwrites from `offset`, padding with zero bytes; no bytes change nothing
    /// and create nothing.
    SetRange(u64, &'a [u8]),
}

/// What one edit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edited {
    /// A step's value after it.
    Int(i64),
    /// A byte edit's value length after it.
    Len(u64),
    /// The value is not a decimal integer: the step changed nothing.
    NotInteger,
    /// The step would overflow: it changed nothing.
    Overflow,
    /// The value would grow past the limit: the edit changed nothing.
    TooLarge,
}

const STEP: u8 = 0;
const APPEND: u8 = 1;
const SET_RANGE: u8 = 2;

/// A value as Redis reads an integer: optional `-`, digits without leading zeros,
/// within i64.
pub fn parse_integer(v: &[u8]) -> Option<i64> {
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    let plain = match digits {
        [b'0'] => v.len() == 1,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    match plain {
        true => std::str::from_utf8(v).ok()?.parse().ok(),
        false => None,
    }
}

/// Applies `edits` in order to `value` (`None`: absent), no value growing past
/// `limit` bytes. Returns what each did and whether the value changed.
pub fn apply_edits(
    value: &mut Option<Vec<u8>>,
    edits: &[Edit<'_>],
    limit: u64,
) -> (Vec<Edited>, bool) {
    let mut changed = false;
    let out = edits
        .iter()
        .map(|e| match *e {
            Edit::Step(d) => {
                let cur = match value.as_deref() {
                    None => 0,
                    Some(v) => match parse_integer(v) {
                        Some(n) => n,
                        None => return Edited::NotInteger,
                    },
                };
                let Some(next) = cur.checked_add(d) else {
                    return Edited::Overflow;
                };
                *value = Some(next.to_string().into_bytes());
                changed = true;
                Edited::Int(next)
            }
            Edit::Append(b) => {
                let len = value.as_ref().map_or(0, Vec::len) as u64;
                let Some(end) = len.checked_add(b.len() as u64).filter(|&e| e <= limit) else {
                    return Edited::TooLarge;
                };
                value.get_or_insert_with(Vec::new).extend_from_slice(b);
                changed = true;
                Edited::Len(end)
            }
            Edit::SetRange(offset, b) => {
                let len = value.as_ref().map_or(0, Vec::len) as u64;
                if b.is_empty() {
                    return Edited::Len(len);
                }
                let Some(end) = offset
                    .checked_add(b.len() as u64)
                    .filter(|&e| e <= limit && usize::try_from(e).is_ok())
                else {
                    return Edited::TooLarge;
                };
                let v = value.get_or_insert_with(Vec::new);
                let (at, end) = (offset as usize, end as usize);
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[at..end].copy_from_slice(b);
                changed = true;
                Edited::Len(v.len() as u64)
            }
        })
        .collect();
    (out, changed)
}

/// Appends a key's edits: `[limit u64][count u32]`, then per edit `[kind u8]` and a
/// step's i64, or `[offset u64]` (a range overwrite's only) `[len u32][bytes]`. No
/// value may grow past `limit` bytes where they run (the client's own road writes
/// longer ones).
pub fn encode_edits(out: &mut Vec<u8>, limit: u64, edits: &[Edit<'_>]) {
    out.extend_from_slice(&limit.to_le_bytes());
    out.extend_from_slice(&(edits.len() as u32).to_le_bytes());
    for e in edits {
        match *e {
            Edit::Step(d) => {
                out.push(STEP);
                out.extend_from_slice(&d.to_le_bytes());
            }
            Edit::Append(b) => {
                out.push(APPEND);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            Edit::SetRange(offset, b) => {
                out.push(SET_RANGE);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
}

fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = b.split_at_checked(n)?;
    *b = rest;
    Some(head)
}

fn take_u64(b: &mut &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))
}

fn take_u32(b: &mut &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?))
}

/// A key's limit and edits, as [`encode_edits`] wrote them.
pub fn decode_edits(mut b: &[u8]) -> Result<(u64, Vec<Edit<'_>>), FormatError> {
    let bad = |reason: String| FormatError::Malformed {
        what: "kv_medit edits",
        reason,
    };
    let limit = take_u64(&mut b).ok_or_else(|| bad("no limit".into()))?;
    let (n, mut rest) = count_head(b).ok_or_else(|| bad("no count".into()))?;
    // Each edit takes at least five bytes: a count past that is a lie.
    if n == 0 || n > rest.len() / 5 {
        return Err(bad(format!("{n} edits in {} bytes", rest.len())));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let short = || bad(format!("edit {i} is cut short"));
        let kind = take(&mut rest, 1).ok_or_else(short)?[0];
        let e = match kind {
            STEP => Edit::Step(take_u64(&mut rest).ok_or_else(short)? as i64),
            APPEND => {
                let len = take_u32(&mut rest).ok_or_else(short)? as usize;
                Edit::Append(take(&mut rest, len).ok_or_else(short)?)
            }
            SET_RANGE => {
                let offset = take_u64(&mut rest).ok_or_else(short)?;
                let len = take_u32(&mut rest).ok_or_else(short)? as usize;
                Edit::SetRange(offset, take(&mut rest, len).ok_or_else(short)?)
            }
            k => return Err(bad(format!("edit {i} of kind {k}"))),
        };
        out.push(e);
    }
    match rest.is_empty() {
        true => Ok((limit, out)),
        false => Err(bad(format!("{} bytes after the edits", rest.len()))),
    }
}

/// One key's outcome in a `kv_medit` reply: the put's ([`PutStatus::Written`] when
/// the value changed, [`PutStatus::Skipped`] when no edit changed it; others as for
/// `kv_put`, with no edit applied), the word class of the item it holds (for the
/// caller to keep or free), the caller's item if it was too small and a fresh one
/// was taken instead (or `NO_ITEM`; for the caller to keep), and what each edit did.
///
/// [`PutStatus::Written`]: super::PutStatus::Written
/// [`PutStatus::Skipped`]: super::PutStatus::Skipped
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditReply {
    pub put: PutReply,
    pub word_class: u8,
    pub spare: u64,
    pub edits: Vec<Edited>,
}

const EDITED_LEN: usize = 9;
/// Bytes of an [`EditReply`] before its edits.
pub const EDIT_REPLY_HEAD: usize = PUT_REPLY_LEN + 1 + 8 + 4;

impl EditReply {
    /// `[len u32]` then the reply: the put, `[word class u8][spare u64][count u32]`,
    /// and per edit `[kind u8][value u64]`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let len = EDIT_REPLY_HEAD + self.edits.len() * EDITED_LEN;
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&self.put.encode());
        out.push(self.word_class);
        out.extend_from_slice(&self.spare.to_le_bytes());
        out.extend_from_slice(&(self.edits.len() as u32).to_le_bytes());
        for e in &self.edits {
            let (kind, v) = match *e {
                Edited::Int(n) => (0u8, n as u64),
                Edited::Len(n) => (1, n),
                Edited::NotInteger => (2, 0),
                Edited::Overflow => (3, 0),
                Edited::TooLarge => (4, 0),
            };
            out.push(kind);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn decode(b: &[u8]) -> Result<Self, FormatError> {
        let bad = || FormatError::Malformed {
            what: "kv_medit reply",
            reason: format!("a key's outcome of {} bytes", b.len()),
        };
        let put = PutReply::decode(b.get(..PUT_REPLY_LEN).ok_or_else(bad)?)?;
        let (&word_class, mut rest) = b[PUT_REPLY_LEN..].split_first().ok_or_else(bad)?;
        let spare = take_u64(&mut rest).ok_or_else(bad)?;
        let (n, rest) = count_head(rest).ok_or_else(bad)?;
        if rest.len() != n.checked_mul(EDITED_LEN).ok_or_else(bad)? {
            return Err(bad());
        }
        let edits = rest
            .chunks_exact(EDITED_LEN)
            .map(|e| {
                let mut v = [0u8; 8];
                v.copy_from_slice(&e[1..]);
                let v = u64::from_le_bytes(v);
                Ok(match e[0] {
                    0 => Edited::Int(v as i64),
                    1 => Edited::Len(v),
                    2 => Edited::NotInteger,
                    3 => Edited::Overflow,
                    4 => Edited::TooLarge,
                    _ => return Err(bad()),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            put,
            word_class,
            spare,
            edits,
        })
    }
}

/// A `kv_medit` reply: `[count u32]`, then each key's [`EditReply`].
pub fn decode_medit_reply(b: &[u8]) -> Result<Vec<EditReply>, FormatError> {
    let bad = |reason: String| FormatError::Malformed {
        what: "kv_medit reply",
        reason,
    };
    let (n, mut rest) = count_head(b).ok_or_else(|| bad("no count".into()))?;
    if n > rest.len() / (4 + EDIT_REPLY_HEAD) {
        return Err(bad(format!("{n} keys in {} bytes", rest.len())));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let len = take_u32(&mut rest).ok_or_else(|| bad(format!("key {i} is cut short")))?;
        let one =
            take(&mut rest, len as usize).ok_or_else(|| bad(format!("key {i} is cut short")))?;
        out.push(EditReply::decode(one)?);
    }
    match rest.is_empty() {
        true => Ok(out),
        false => Err(bad(format!("{} bytes after the keys", rest.len()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::PutStatus;
    use proptest::prelude::*;

    #[test]
    fn edits_follow_redis() {
        let mut v = None;
        let (r, changed) = apply_edits(&mut v, &[Edit::SetRange(3, b"")], 100);
        assert_eq!((r, changed, &v), (vec![Edited::Len(0)], false, &None));
        let (r, _) = apply_edits(
            &mut v,
            &[
                Edit::Step(5),
                Edit::Append(b"x"),
                Edit::Step(1),
                Edit::SetRange(1, b"7"),
                Edit::Step(-80),
                Edit::SetRange(7, b"ab"),
            ],
            8,
        );
        assert_eq!(
            r,
            vec![
                Edited::Int(5),
                Edited::Len(2),
                Edited::NotInteger,
                Edited::Len(2),
                Edited::Int(-23),
                Edited::TooLarge
            ]
        );
        assert_eq!(v.as_deref(), Some(&b"-23"[..]));
        let mut v = Some(b"9223372036854775807".to_vec());
        let (r, changed) = apply_edits(&mut v, &[Edit::Step(1)], 100);
        assert_eq!((r, changed), (vec![Edited::Overflow], false));
        let mut v = None;
        let (r, changed) = apply_edits(&mut v, &[Edit::Append(b"")], 100);
        assert_eq!((r, changed, v), (vec![Edited::Len(0)], true, Some(vec![])));
        for bad in [
            &b"+1"[..],
            b"01",
            b" 1",
            b"-",
            b"",
            b"1.0",
            b"-0x1",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_integer(bad), None, "{bad:?}");
        }
        assert_eq!(parse_integer(b"-0"), None);
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn replies_round_trip_and_refuse_lies() {
        let r = EditReply {
            put: PutReply {
                status: PutStatus::Written,
                old: 7,
                generation: 3,
                item: 64,
            },
            word_class: 5,
            spare: 4096,
            edits: vec![Edited::Int(-4), Edited::Len(9), Edited::TooLarge],
        };
        let mut b = 2u32.to_le_bytes().to_vec();
        r.encode_into(&mut b);
        r.encode_into(&mut b);
        assert_eq!(decode_medit_reply(&b).expect("decode"), vec![r.clone(), r]);
        assert!(decode_medit_reply(&b[..b.len() - 1]).is_err());
        let mut lie = b.clone();
        lie[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_medit_reply(&lie).is_err());
    }

    proptest! {
        #[test]
        fn edits_round_trip(steps in proptest::collection::vec((0u8..3, any::<i64>(), proptest::collection::vec(any::<u8>(), 0..20)), 1..8)) {
            let edits: Vec<Edit<'_>> = steps
                .iter()
                .map(|(k, n, b)| match k {
                    0 => Edit::Step(*n),
                    1 => Edit::Append(b),
                    _ => Edit::SetRange(*n as u64 >> 40, b),
                })
                .collect();
            let mut out = Vec::new();
            encode_edits(&mut out, 77, &edits);
            prop_assert_eq!(decode_edits(&out).expect("decode"), (77, edits));
            for cut in 0..out.len() {
                prop_assert!(decode_edits(&out[..cut]).is_err());
            }
        }

        #[test]
        fn decoding_garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_edits(&b);
            let _ = decode_medit_reply(&b);
        }
    }
}
