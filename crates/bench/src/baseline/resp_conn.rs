//! The bench's one blocking RESP2 client: commands encoded as arrays of bulk
//! strings, replies read as a [`Reply`] tree (or a bulk reply straight into the
//! caller's buffer, for values of 100 MiB), pipelined sends with one flush. It does
//! set-up and checks (populate, `SCRIPT LOAD`, `INFO`, `DBSIZE`) and `bench
//! store-large`'s Redis side; the spinning load drivers keep their own zero-copy
//! codecs ([`super::resp`]).

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use crate::error::{Result, parse_err};

const WHAT: &str = "redis reply";

/// Largest bulk string accepted (Redis's own `proto-max-bulk-len` default).
const MAX_BULK: i64 = 512 << 20;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// Appends a command's array header `*n\r\n` (its `n` arguments follow).
pub(crate) fn push_array_head(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(format!("*{n}\r\n").as_bytes());
}

/// Appends one argument as the bulk string `$len\r\n<arg>\r\n`.
pub(crate) fn push_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// A blocking connection to a RESP server on 127.0.0.1.
pub(crate) struct RespConn {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
    line: Vec<u8>,
}

impl RespConn {
    /// Connects; reads and writes taking longer than `timeout` fail (the server is
    /// gone) rather than hang.
    pub(crate) fn connect(port: u16, timeout: Duration) -> Result<Self> {
        let s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        Ok(Self {
            r: BufReader::with_capacity(1 << 16, s.try_clone()?),
            w: BufWriter::with_capacity(1 << 16, s),
            line: Vec::new(),
        })
    }

    /// Queues a command (sent on [`Self::flush`] or when the buffer fills; a long
    /// argument goes straight to the socket).
    pub(crate) fn send(&mut self, args: &[&[u8]]) -> Result<()> {
        write!(self.w, "*{}\r\n", args.len())?;
        for a in args {
            write!(self.w, "${}\r\n", a.len())?;
            self.w.write_all(a)?;
            self.w.write_all(b"\r\n")?;
        }
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<()> {
        Ok(self.w.flush()?)
    }

    /// Sends one command and reads its reply; an error reply is an error.
    pub(crate) fn call(&mut self, args: &[&[u8]]) -> Result<Reply> {
        self.send(args)?;
        self.flush()?;
        match self.read()? {
            Reply::Error(e) => Err(parse_err("redis", e)),
            r => Ok(r),
        }
    }

    /// Sends one command and expects `+OK`.
    pub(crate) fn call_ok(&mut self, args: &[&[u8]]) -> Result<()> {
        self.send(args)?;
        self.flush()?;
        self.expect_ok()
    }

    /// Reads one reply and expects `+OK`.
    pub(crate) fn expect_ok(&mut self) -> Result<()> {
        match self.read_line()? {
            b"+OK" => Ok(()),
            other => Err(parse_err(WHAT, String::from_utf8_lossy(other))),
        }
    }

    /// The next reply line, without its CRLF.
    fn read_line(&mut self) -> Result<&[u8]> {
        self.line.clear();
        self.r.read_until(b'\n', &mut self.line)?;
        match self.line.strip_suffix(b"\r\n") {
            Some(l) => Ok(l),
            None => Err(parse_err(WHAT, "connection closed mid-reply")),
        }
    }

    /// The length after a `$` or `*` header (`-1` for nil).
    fn header_len(what: u8, rest: &[u8]) -> Result<i64> {
        std::str::from_utf8(rest)
            .ok()
            .and_then(|n| n.parse::<i64>().ok())
            .ok_or_else(|| {
                parse_err(
                    WHAT,
                    format!(
                        "bad {} length {:?}",
                        char::from(what),
                        String::from_utf8_lossy(rest)
                    ),
                )
            })
    }

    /// A bulk string's `len` bytes and their CRLF into `out`.
    fn read_bulk_body(&mut self, len: i64, out: &mut Vec<u8>) -> Result<()> {
        if !(0..=MAX_BULK).contains(&len) {
            return Err(parse_err(WHAT, format!("bulk of {len} bytes")));
        }
        let n = len as usize;
        out.resize(n + 2, 0);
        self.r.read_exact(out)?;
        if !out.ends_with(b"\r\n") {
            return Err(parse_err(WHAT, "bulk string without its CRLF"));
        }
        out.truncate(n);
        Ok(())
    }

    /// Reads one reply.
    pub(crate) fn read(&mut self) -> Result<Reply> {
        let line = self.read_line()?;
        let (&ty, rest) = line
            .split_first()
            .ok_or_else(|| parse_err(WHAT, "empty reply line"))?;
        let text = || String::from_utf8_lossy(rest).into_owned();
        Ok(match ty {
            b'+' => Reply::Simple(text()),
            b'-' => Reply::Error(text()),
            b':' => Reply::Int(Self::header_len(ty, rest)?),
            b'$' => match Self::header_len(ty, rest)? {
                -1 => Reply::Bulk(None),
                len => {
                    let mut b = Vec::new();
                    self.read_bulk_body(len, &mut b)?;
                    Reply::Bulk(Some(b))
                }
            },
            b'*' => match Self::header_len(ty, rest)? {
                n if n < 0 => Reply::Array(None),
                n => Reply::Array(Some((0..n).map(|_| self.read()).collect::<Result<_>>()?)),
            },
            _ => {
                let l = String::from_utf8_lossy(line);
                return Err(parse_err(WHAT, format!("bad reply line {l:?}")));
            }
        })
    }

    /// Reads a bulk reply into `out` (reusing its allocation): false for nil.
    pub(crate) fn read_bulk_into(&mut self, out: &mut Vec<u8>) -> Result<bool> {
        let line = self.read_line()?;
        let Some(rest) = line.strip_prefix(b"$") else {
            return Err(parse_err(WHAT, String::from_utf8_lossy(line)));
        };
        match Self::header_len(b'$', rest)? {
            -1 => Ok(false),
            len => self.read_bulk_body(len, out).map(|()| true),
        }
    }

    /// `INFO <section>` as text.
    pub(crate) fn info(&mut self, section: &str) -> Result<String> {
        match self.call(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
            other => Err(parse_err("redis INFO", format!("unexpected {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::thread;

    use super::*;

    /// A one-shot server: reads `expect` bytes, answers `reply`.
    fn serve(expect: usize, reply: &'static [u8]) -> (u16, thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = l.local_addr().expect("addr").port();
        let h = thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let mut got = vec![0u8; expect];
            s.read_exact(&mut got).expect("request");
            s.write_all(reply).expect("reply");
            got
        });
        (port, h)
    }

    #[test]
    fn encodes_commands() {
        let mut out = Vec::new();
        push_array_head(&mut out, 2);
        for a in [&b"GET"[..], b"key:1"] {
            push_bulk(&mut out, a);
        }
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$5\r\nkey:1\r\n");
    }

    #[test]
    fn reads_every_reply_shape() {
        let replies: &[u8] =
            b"+OK\r\n-ERR no\r\n:-7\r\n$4\r\na\r\nb\r\n$-1\r\n*2\r\n:1\r\n$0\r\n\r\n*-1\r\n$3\r\nxyz\r\n";
        let req = b"*1\r\n$4\r\nPING\r\n";
        let (port, h) = serve(req.len(), replies);
        let mut c = RespConn::connect(port, Duration::from_secs(5)).expect("connect");
        c.send(&[b"PING"]).expect("send");
        c.flush().expect("flush");
        assert_eq!(c.read().expect("+"), Reply::Simple("OK".into()));
        assert_eq!(c.read().expect("-"), Reply::Error("ERR no".into()));
        assert_eq!(c.read().expect(":"), Reply::Int(-7));
        assert_eq!(c.read().expect("$"), Reply::Bulk(Some(b"a\r\nb".to_vec())));
        assert_eq!(c.read().expect("nil"), Reply::Bulk(None));
        let arr = Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(Some(Vec::new()))]));
        assert_eq!(c.read().expect("*"), arr);
        assert_eq!(c.read().expect("nil *"), Reply::Array(None));
        let mut buf = vec![9u8; 100];
        assert!(c.read_bulk_into(&mut buf).expect("into"));
        assert_eq!(buf, b"xyz");
        assert!(c.read().is_err(), "closed mid-reply");
        assert_eq!(h.join().expect("server"), req);
    }

    #[test]
    fn errors_are_errors() {
        let (port, _h) = serve(14, b"-NOSCRIPT x\r\n+PONG\r\n");
        let mut c = RespConn::connect(port, Duration::from_secs(5)).expect("connect");
        assert!(c.call(&[b"PING"]).is_err());
        assert!(c.expect_ok().is_err(), "+PONG is not +OK");
    }
}
