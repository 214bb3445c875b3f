//! A small RESP client for the tests (replies parsed strictly, so a malformed reply
//! fails the test) and a cluster with a front end in front of a store.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // test helpers: a failure is the test failing

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use farcache_resp::{AuthPolicy, Frontend, FrontendConfig};
use farcache_store::{Store, StoreExt, StoreOptions};
use farcache_testkit::{ClusterOptions, LocalCluster};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<V>),
    Map(Vec<(V, V)>),
    Text(String),
}

impl V {
    pub fn bulk(b: &[u8]) -> Self {
        V::Bulk(b.to_vec())
    }
    pub fn ok() -> Self {
        V::Simple("OK".into())
    }
    pub fn is_err_starting(&self, prefix: &str) -> bool {
        matches!(self, V::Err(e) if e.starts_with(prefix))
    }
}

pub struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).expect("connect to front end");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Self {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }

    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).expect("send");
    }

    pub fn cmd(&mut self, args: &[&[u8]]) -> V {
        self.send_raw(&Self::encode(args));
        self.reply()
    }

    /// `cmd` from a space-separated line (no quoting).
    pub fn line(&mut self, line: &str) -> V {
        let parts: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.cmd(&parts)
    }

    fn header(&mut self) -> Option<(u8, String)> {
        let mut l = Vec::new();
        let n = self.r.read_until(b'\n', &mut l).ok()?;
        if n == 0 {
            return None;
        }
        assert!(l.ends_with(b"\r\n"), "reply line without CRLF: {l:?}");
        let body = String::from_utf8(l[1..l.len() - 2].to_vec()).expect("utf-8 header");
        Some((l[0], body))
    }

    /// The next reply, or `None` at end of stream.
    pub fn try_reply(&mut self) -> Option<V> {
        let (kind, body) = self.header()?;
        let n = |b: &str| b.parse::<i64>().expect("number in reply header");
        Some(match kind {
            b'+' => V::Simple(body),
            b'-' => V::Err(body),
            b':' => V::Int(n(&body)),
            b'_' => V::Nil,
            b'$' if n(&body) < 0 => V::Nil,
            b'$' | b'=' => {
                let mut b = vec![0; n(&body) as usize + 2];
                self.r.read_exact(&mut b).expect("bulk body");
                assert_eq!(&b[b.len() - 2..], b"\r\n");
                b.truncate(b.len() - 2);
                if kind == b'=' {
                    V::Text(String::from_utf8(b[4..].to_vec()).expect("utf-8 text"))
                } else {
                    V::Bulk(b)
                }
            }
            b'*' if n(&body) < 0 => V::Nil,
            b'*' => V::Arr(
                (0..n(&body))
                    .map(|_| self.try_reply().expect("array element"))
                    .collect(),
            ),
            b'%' => V::Map(
                (0..n(&body))
                    .map(|_| {
                        (
                            self.try_reply().expect("map key"),
                            self.try_reply().expect("map value"),
                        )
                    })
                    .collect(),
            ),
            other => panic!("unknown reply type {:?}", char::from(other)),
        })
    }

    pub fn reply(&mut self) -> V {
        self.try_reply().expect("a reply before end of stream")
    }

    /// Closes the sending side (the server still answers what came before).
    pub fn w_shutdown(&mut self) {
        let _ = self.w.shutdown(std::net::Shutdown::Write);
    }

    /// True once the server closed the connection.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0) | Err(_))
    }
}

pub struct Setup {
    pub cluster: LocalCluster,
    pub store: Store,
    pub fe: Frontend,
}

impl Setup {
    pub fn addr(&self) -> SocketAddr {
        self.fe.local_addr()
    }
    pub fn conn(&self) -> Conn {
        Conn::connect(self.addr())
    }
}

/// A 3-server in-process cluster, a store, and a front end serving it.
pub fn setup(auth: Option<AuthPolicy>) -> Setup {
    setup_with(auth, |_| {})
}

/// [`setup`] with the front end's configuration adjusted by `tweak`.
pub fn setup_with(auth: Option<AuthPolicy>, tweak: impl FnOnce(&mut FrontendConfig)) -> Setup {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(1 << 20)
        .server_memory(64 << 20)
        .server_threads(2);
    let cluster = LocalCluster::start(&opts).expect("cluster");
    let client = cluster.client().expect("client");
    let store = client
        .create_store("resp-test", 16 << 20, &StoreOptions::default())
        .expect("store");
    let auth = auth.unwrap_or_else(|| {
        let t = store.cache().tokens().expect("tokens of a new cache");
        AuthPolicy::Tokens {
            read_write: t.read_write.clone(),
            read_only: Some(t.read_only.clone()),
        }
    });
    // Several event loops, so commands of different connections really race.
    let mut cfg = FrontendConfig::new("127.0.0.1:0", auth);
    cfg.threads = 3;
    tweak(&mut cfg);
    let fe = Frontend::start(store.clone(), cfg).expect("front end");
    Setup { cluster, store, fe }
}

/// Authenticates `c` with the store's read-write token.
pub fn login(s: &Setup, c: &mut Conn) {
    let t = s.store.cache().tokens().expect("tokens").read_write.clone();
    assert_eq!(c.cmd(&[b"AUTH", t.as_bytes()]), V::ok());
}
