//! Decoding the RESP2 reply a command wrote, for a script's `redis.call` to turn
//! into Lua values (commands run from scripts always answer in RESP2, as in Redis).

/// One decoded reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    /// A bulk string; `None` is the null bulk.
    Bulk(Option<Vec<u8>>),
    /// An array; `None` is the null array.
    Array(Option<Vec<Reply>>),
}

/// Decodes the one reply at the start of `buf`. The bytes come from this front
/// end's own reply writer, so a malformed one is a bug: it decodes as an error.
pub fn decode(buf: &[u8]) -> Reply {
    let mut at = 0;
    match one(buf, &mut at, 0) {
        Some(r) => r,
        None => Reply::Error(b"ERR internal error: a command's reply did not decode".to_vec()),
    }
}

/// Nesting past this is not something our commands write.
const MAX_DEPTH: usize = 32;

fn line<'a>(buf: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let rest = buf.get(*at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    *at += end + 2;
    Some(&rest[..end])
}

fn int(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn one(buf: &[u8], at: &mut usize, depth: usize) -> Option<Reply> {
    if depth > MAX_DEPTH {
        return None;
    }
    let kind = *buf.get(*at)?;
    *at += 1;
    let l = line(buf, at)?;
    Some(match kind {
        b'+' => Reply::Status(l.to_vec()),
        b'-' => Reply::Error(l.to_vec()),
        b':' => Reply::Int(int(l)?),
        b'$' => {
            let n = int(l)?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let n = usize::try_from(n).ok()?;
                let body = buf.get(*at..*at + n)?.to_vec();
                *at += n + 2;
                Reply::Bulk(Some(body))
            }
        }
        b'*' => {
            let n = int(l)?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(one(buf, at, depth + 1)?);
                }
                Reply::Array(Some(items))
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_resp2_kind() {
        assert_eq!(decode(b"+OK\r\n"), Reply::Status(b"OK".to_vec()));
        assert_eq!(decode(b"-ERR no\r\n"), Reply::Error(b"ERR no".to_vec()));
        assert_eq!(decode(b":-7\r\n"), Reply::Int(-7));
        assert_eq!(decode(b"$-1\r\n"), Reply::Bulk(None));
        assert_eq!(
            decode(b"$4\r\na\r\nb\r\n"),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(decode(b"*-1\r\n"), Reply::Array(None));
        assert_eq!(
            decode(b"*2\r\n$1\r\nx\r\n*1\r\n:1\r\n"),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"x".to_vec())),
                Reply::Array(Some(vec![Reply::Int(1)]))
            ]))
        );
        assert!(matches!(decode(b"$5\r\nab\r\n"), Reply::Error(_)));
        assert!(matches!(decode(b""), Reply::Error(_)));
    }
}
