//! Reply encoding for RESP2 and RESP3 (the connection's `HELLO` picks one). RESP3
//! adds real nulls, maps and doubles; under RESP2 a map is a flat array and a null
//! is `$-1`.

use std::io::Write as _;

/// Protocol version of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Resp2,
    Resp3,
}

/// Appends replies to a connection's output buffer.
pub struct Out<'a> {
    pub buf: &'a mut Vec<u8>,
    pub proto: Proto,
}

impl Out<'_> {
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error: `msg` starts with its code (`ERR`, `WRONGTYPE`, `NOAUTH` ...).
    pub fn error(&mut self, msg: &str) {
        self.buf.push(b'-');
        // A line break would end the reply early.
        for &c in msg.as_bytes() {
            self.buf
                .push(if c == b'\r' || c == b'\n' { b' ' } else { c });
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn int(&mut self, v: i64) {
        let _ = write!(self.buf, ":{v}\r\n");
    }

    pub fn bulk(&mut self, b: &[u8]) {
        let _ = write!(self.buf, "${}\r\n", b.len());
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn null(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    pub fn opt_bulk(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }

    /// The null array (`EXEC` of a transaction whose watched keys changed).
    pub fn null_array(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"*-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    pub fn array(&mut self, n: usize) {
        let _ = write!(self.buf, "*{n}\r\n");
    }

    /// A map of `n` pairs; the caller writes `2n` elements after it.
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.array(2 * n),
            Proto::Resp3 => {
                let _ = write!(self.buf, "%{n}\r\n");
            }
        }
    }

    /// A verbatim text (RESP3) or a bulk string (RESP2), as `INFO` replies.
    pub fn text(&mut self, s: &str) {
        match self.proto {
            Proto::Resp2 => self.bulk(s.as_bytes()),
            Proto::Resp3 => {
                let _ = write!(self.buf, "={}\r\ntxt:", s.len() + 4);
                self.buf.extend_from_slice(s.as_bytes());
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_map_follow_the_protocol() {
        let mut b = Vec::new();
        let mut o = Out {
            buf: &mut b,
            proto: Proto::Resp2,
        };
        o.null();
        o.map(1);
        o.error("ERR bad\r\nthing");
        assert_eq!(b, b"$-1\r\n*2\r\n-ERR bad  thing\r\n");
        let mut b = Vec::new();
        let mut o = Out {
            buf: &mut b,
            proto: Proto::Resp3,
        };
        o.null();
        o.map(1);
        o.text("a");
        assert_eq!(b, b"_\r\n%1\r\n=5\r\ntxt:a\r\n");
    }
}
