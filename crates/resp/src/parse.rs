//! Request parsing: RESP arrays of bulk strings (what every client library sends)
//! and inline commands (what a human types into `telnet`). Replies are written by
//! [`crate::reply`]; a server never has to parse them.

use bytes::{Buf, Bytes, BytesMut};

/// Redis's own limits (`proto-max-bulk-len`, and the element count it accepts).
pub const MAX_BULK: usize = 512 << 20;
pub const MAX_ARGS: usize = 1 << 20;
/// Longest inline command or header line.
pub const MAX_INLINE: usize = 64 << 10;

/// What one connection may send, by whether it has authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most elements of a multibulk.
    pub max_args: usize,
    /// Longest bulk string.
    pub max_bulk: usize,
    /// Longest inline command or header line.
    pub max_inline: usize,
    /// Most unparsed bytes the connection may hold (enforced by the event loop).
    pub max_query: usize,
}

impl Limits {
    /// After `AUTH` (or when none is required): Redis's limits.
    pub const AUTHENTICATED: Self = Self {
        max_args: MAX_ARGS,
        max_bulk: MAX_BULK,
        max_inline: MAX_INLINE,
        max_query: 1 << 30,
    };

    /// Before `AUTH`: Redis 7's 10 elements and 16 KiB bulks; the 16 KiB lines and
    /// 512 KiB buffer are ours. A stranger cannot make a connection hold more.
    pub const UNAUTHENTICATED: Self = Self {
        max_args: 10,
        max_bulk: 16 << 10,
        max_inline: 16 << 10,
        max_query: 512 << 10,
    };

    pub fn new(authenticated: bool) -> Self {
        if authenticated {
            Self::AUTHENTICATED
        } else {
            Self::UNAUTHENTICATED
        }
    }
}

// The query cap must hold the largest frame the pre-auth limits admit, or a valid
// frame could never complete.
const _: () = {
    let u = Limits::UNAUTHENTICATED;
    assert!(u.max_query > (u.max_args + 1) * (u.max_inline + 2 + u.max_bulk + 2));
};

/// A request that can never become valid: the connection is answered and closed,
/// as Redis does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

/// One command: its arguments, the name first.
pub type Args = Vec<Bytes>;

/// Takes the next complete command off `buf`; `Ok(None)` when more bytes are needed
/// (nothing is consumed then). An empty inline line is skipped, as Redis does.
/// Lengths are checked against `limits` as soon as their header line is in, before
/// the bytes they announce.
pub fn next_command(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Args>, ProtocolError> {
    loop {
        let Some(&first) = buf.first() else {
            return Ok(None);
        };
        if first == b'*' {
            return multibulk(buf, limits);
        }
        match inline(buf, limits)? {
            Some(args) if args.is_empty() => continue,
            other => return Ok(other),
        }
    }
}

/// Position of the `\r\n` ending the line starting at `from`, within `max`.
fn line_end(
    buf: &[u8],
    from: usize,
    max: usize,
    what: &str,
) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[from..buf.len().min(from + max + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(from + i)),
        None if window.len() >= max + 2 => Err(ProtocolError(format!("too big {what}"))),
        None => Ok(None),
    }
}

fn number(line: &[u8], what: &str) -> Result<i64, ProtocolError> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| ProtocolError(format!("invalid {what}")))
}

fn multibulk(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Args>, ProtocolError> {
    let Some(end) = line_end(buf, 0, limits.max_inline, "mbulk count string")? else {
        return Ok(None);
    };
    let n = number(&buf[1..end], "multibulk length")?;
    // Checked in Redis's order: the absolute limit, then the one before AUTH (the
    // only limits stricter than Redis's own).
    if n > MAX_ARGS as i64 {
        return Err(ProtocolError("invalid multibulk length".into()));
    }
    if n > limits.max_args as i64 {
        return Err(ProtocolError("unauthenticated multibulk length".into()));
    }
    if n <= 0 {
        // `*0` and `*-1` are no command at all.
        buf.advance(end + 2);
        return Ok(Some(Vec::new()));
    }
    // Walk the elements without consuming until all are here. The count is the
    // peer's word: reserve for what a small frame needs, grow with what arrives.
    let mut at = end + 2;
    let mut spans = Vec::with_capacity((n as usize).min(64));
    for _ in 0..n {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                char::from(buf[at]).escape_default()
            )));
        }
        let Some(e) = line_end(buf, at, limits.max_inline, "bulk count string")? else {
            return Ok(None);
        };
        let len = number(&buf[at + 1..e], "bulk length")?;
        if len < 0 || len as usize > MAX_BULK {
            return Err(ProtocolError("invalid bulk length".into()));
        }
        if len as usize > limits.max_bulk {
            return Err(ProtocolError("unauthenticated bulk length".into()));
        }
        let start = e + 2;
        let stop = start + len as usize;
        if buf.len() < stop + 2 {
            return Ok(None);
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return Err(ProtocolError("bulk string not followed by CRLF".into()));
        }
        spans.push((start, stop));
        at = stop + 2;
    }
    let frame = buf.split_to(at).freeze();
    Ok(Some(
        spans.into_iter().map(|(a, b)| frame.slice(a..b)).collect(),
    ))
}

fn inline(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Args>, ProtocolError> {
    // Inline commands may end with a bare `\n` (netcat, telnet in some modes).
    let window = &buf[..buf.len().min(limits.max_inline + 1)];
    let Some(nl) = window.iter().position(|&c| c == b'\n') else {
        if window.len() > limits.max_inline {
            return Err(ProtocolError("too big inline request".into()));
        }
        return Ok(None);
    };
    let line = buf.split_to(nl + 1).freeze();
    let text = line.slice(..line.len() - 1);
    let text = text
        .strip_suffix(b"\r")
        .map_or(text.clone(), |t| text.slice_ref(t));
    split_inline(&text).map(Some)
}

/// Splits an inline line on spaces, honouring "double" and 'single' quotes with
/// the escapes `redis-cli` understands.
fn split_inline(line: &Bytes) -> Result<Args, ProtocolError> {
    let unbalanced = || ProtocolError("unbalanced quotes in request".into());
    let mut args = Vec::new();
    let mut i = 0;
    let b = &line[..];
    while i < b.len() {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == b.len() {
            break;
        }
        let mut cur = Vec::new();
        match b[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                loop {
                    let Some(&c) = b.get(i) else {
                        return Err(unbalanced());
                    };
                    i += 1;
                    if c == q {
                        // A closing quote must end the argument.
                        if b.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                            return Err(unbalanced());
                        }
                        break;
                    }
                    if c == b'\\' && q == b'"' {
                        let Some(&e) = b.get(i) else {
                            return Err(unbalanced());
                        };
                        i += 1;
                        match e {
                            b'n' => cur.push(b'\n'),
                            b'r' => cur.push(b'\r'),
                            b't' => cur.push(b'\t'),
                            b'b' => cur.push(8),
                            b'a' => cur.push(7),
                            b'x' => {
                                let hex = b.get(i..i + 2).and_then(|h| {
                                    std::str::from_utf8(h)
                                        .ok()
                                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                                });
                                match hex {
                                    Some(v) => {
                                        cur.push(v);
                                        i += 2;
                                    }
                                    None => cur.extend_from_slice(b"x"),
                                }
                            }
                            other => cur.push(other),
                        }
                    } else if c == b'\\' && q == b'\'' && b.get(i) == Some(&b'\'') {
                        cur.push(b'\'');
                        i += 1;
                    } else {
                        cur.push(c);
                    }
                }
                args.push(Bytes::from(cur));
            }
            _ => {
                let start = i;
                while i < b.len() && !b[i].is_ascii_whitespace() {
                    i += 1;
                }
                args.push(line.slice(start..i));
            }
        }
    }
    Ok(args)
}

/// Parses a decimal integer argument as Redis does.
pub(crate) fn int_arg(b: &[u8]) -> Result<i64, &'static str> {
    std::str::from_utf8(b)
        .ok()
        .filter(|s| !(s.starts_with('+') || (s.len() > 1 && s.starts_with('0'))))
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or("ERR value is not an integer or out of range")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Args>, ProtocolError> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(a) = next_command(&mut buf, &Limits::AUTHENTICATED)? {
            out.push(a);
        }
        Ok(out)
    }

    #[test]
    fn multibulk_and_inline() {
        let got = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nset \"a b\" 'c'\n").unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], vec![Bytes::from("GET"), Bytes::from("k")]);
        assert_eq!(got[1], vec![Bytes::from("PING")]);
        assert_eq!(
            got[2],
            vec![Bytes::from("set"), Bytes::from("a b"), Bytes::from("c")]
        );
    }

    #[test]
    fn partial_input_waits_and_consumes_nothing() {
        let full = b"*2\r\n$3\r\nGET\r\n$5\r\nhello\r\n";
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(
                next_command(&mut buf, &Limits::AUTHENTICATED),
                Ok(None),
                "cut at {cut}"
            );
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn binary_values_survive() {
        let got = parse_all(b"*2\r\n$3\r\nSET\r\n$4\r\n\r\n\0\xff\r\n").unwrap();
        assert_eq!(&got[0][1][..], b"\r\n\0\xff");
    }

    #[test]
    fn malformed_frames_are_refused() {
        for bad in [
            &b"*1\r\n+GET\r\n"[..],
            b"*1\r\n$-5\r\n",
            b"*1\r\n$3\r\nGETxx",
            b"*x\r\n",
            b"*99999999999\r\n",
            b"*1\r\n$999999999999\r\n",
            b"\"unclosed\r\n",
        ] {
            assert!(parse_all(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn unauthenticated_limits_refuse_at_the_header() {
        let u = Limits::UNAUTHENTICATED;
        let refuse = |input: &[u8], msg: &str| {
            let mut buf = BytesMut::from(input);
            assert_eq!(
                next_command(&mut buf, &u),
                Err(ProtocolError(msg.into())),
                "{input:?}"
            );
        };
        // No body needed: the header alone is refused.
        refuse(b"*11\r\n", "unauthenticated multibulk length");
        refuse(b"*1\r\n$16385\r\n", "unauthenticated bulk length");
        refuse(b"*99999999999\r\n", "invalid multibulk length");
        refuse(&[b'a'; (16 << 10) + 1], "too big inline request");
        refuse(&[b'*'; (16 << 10) + 2], "too big mbulk count string");
        // At the limits: accepted.
        let mut ten = b"*10\r\n".to_vec();
        for _ in 0..10 {
            ten.extend_from_slice(b"$1\r\nx\r\n");
        }
        let mut buf = BytesMut::from(&ten[..]);
        assert_eq!(
            next_command(&mut buf, &u).map(|a| a.map(|a| a.len())),
            Ok(Some(10))
        );
        let mut big = b"*1\r\n$16384\r\n".to_vec();
        big.extend(std::iter::repeat_n(b'v', 16384));
        big.extend_from_slice(b"\r\n");
        let mut buf = BytesMut::from(&big[..]);
        assert!(matches!(next_command(&mut buf, &u), Ok(Some(a)) if a[0].len() == 16384));
        // The same frames pass once authenticated.
        let mut buf = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(next_command(&mut buf, &Limits::AUTHENTICATED), Ok(None));
        let mut buf = BytesMut::from(&b"*1\r\n$16385\r\n"[..]);
        assert_eq!(next_command(&mut buf, &Limits::AUTHENTICATED), Ok(None));
    }

    #[test]
    fn hex_escapes_in_inline() {
        let got = parse_all(b"SET k \"\\x00\\xffa\\n\"\r\n").unwrap();
        assert_eq!(&got[0][2][..], b"\0\xffa\n");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(input in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = parse_all(&input);
        }

        #[test]
        fn encoded_commands_round_trip(cmds in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..40), 1..6), 1..8)) {
            let mut wire = Vec::new();
            for c in &cmds {
                wire.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
                for a in c {
                    wire.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                    wire.extend_from_slice(a);
                    wire.extend_from_slice(b"\r\n");
                }
            }
            let got = parse_all(&wire).unwrap();
            let want: Vec<Args> = cmds.into_iter().map(|c| c.into_iter().map(Bytes::from).collect()).collect();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
