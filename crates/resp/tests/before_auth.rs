//! What a connection may do before it authenticates (issue 31): Redis 7's limits on
//! frames (10 elements, 16 KiB bulks, short inline lines), refused with its errors and
//! a close; a deadline to authenticate; and neither once authenticated, nor when the
//! front end needs no `AUTH`.

mod common;

use std::time::{Duration, Instant};

use common::{Conn, V, login, setup, setup_with};
use farcache_resp::AuthPolicy;

/// `INFO stats`' count of connections closed before authenticating.
fn rejected_unauthenticated(c: &mut Conn) -> u64 {
    let V::Bulk(info) = c.line("INFO stats") else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).expect("INFO is text");
    info.lines()
        .find_map(|l| l.strip_prefix("rejected_unauthenticated:"))
        .unwrap_or_else(|| panic!("no rejected_unauthenticated in {info}"))
        .parse()
        .expect("a count")
}

#[test]
fn oversized_frames_before_auth_are_refused_and_closed() {
    let s = setup(None);
    // An 11-element multibulk: refused on its header, as Redis 7 does.
    let mut c = s.conn();
    c.send_raw(b"*11\r\n");
    assert_eq!(
        c.reply(),
        V::Err("ERR Protocol error: unauthenticated multibulk length".into())
    );
    assert!(c.closed());
    // A bulk of 16385 bytes: refused on its header, before the bytes come.
    let mut c = s.conn();
    c.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$16385\r\n");
    assert_eq!(
        c.reply(),
        V::Err("ERR Protocol error: unauthenticated bulk length".into())
    );
    assert!(c.closed());
    // A long inline line (no newline yet).
    let mut c = s.conn();
    c.send_raw(&vec![b'a'; (16 << 10) + 100]);
    assert_eq!(
        c.reply(),
        V::Err("ERR Protocol error: too big inline request".into())
    );
    assert!(c.closed());
    // At the limits: answered (not authenticated), and the connection stays open.
    let mut c = s.conn();
    let ten: Vec<&[u8]> = vec![&b"PING"[..]; 10];
    assert!(!c.cmd(&ten).is_err_starting("ERR Protocol error"));
    let pass = vec![b'p'; 16384];
    assert!(c.cmd(&[b"AUTH", &pass]).is_err_starting("WRONGPASS"));
    assert!(c.line("GET k").is_err_starting("NOAUTH"));
    // ... and it may still authenticate.
    login(&s, &mut c);
    assert_eq!(rejected_unauthenticated(&mut c), 3);
}

#[test]
fn after_auth_the_normal_limits_apply() {
    let s = setup(None);
    let t = s.store.cache().tokens().unwrap().clone();
    let big = vec![b'x'; 1 << 20];
    let mut c = s.conn();
    login(&s, &mut c);
    assert_eq!(c.cmd(&[b"SET", b"big", &big]), V::ok());
    assert_eq!(c.cmd(&[b"GET", b"big"]), V::Bulk(big.clone()));
    let mset: Vec<&[u8]> = std::iter::once(&b"MSET"[..])
        .chain((0..10).flat_map(|_| [&b"k"[..], &b"v"[..]]))
        .collect();
    assert_eq!(c.cmd(&mset), V::ok());
    // AUTH pipelined with a big SET in one write: the SET is parsed after the AUTH
    // ran, under the limits it lifted (as Redis parses one command at a time).
    let mut p = s.conn();
    let mut wire = Conn::encode(&[b"AUTH", t.read_write.as_bytes()]);
    wire.extend(Conn::encode(&[b"SET", b"big2", &big]));
    wire.extend(Conn::encode(&[b"GET", b"big2"]));
    p.send_raw(&wire);
    assert_eq!(p.reply(), V::ok());
    assert_eq!(p.reply(), V::ok());
    assert_eq!(p.reply(), V::Bulk(big.clone()));
    // Likewise with HELLO 3 AUTH, and then a half-close: all is still answered.
    let mut h = s.conn();
    let mut wire = Conn::encode(&[b"HELLO", b"3", b"AUTH", b"default", t.read_write.as_bytes()]);
    wire.extend(Conn::encode(&[b"SET", b"big3", &big]));
    h.send_raw(&wire);
    h.w_shutdown();
    assert!(matches!(h.reply(), V::Map(_)));
    assert_eq!(h.reply(), V::ok());
    assert!(h.closed());
    assert_eq!(c.cmd(&[b"STRLEN", b"big3"]), V::Int(1 << 20));
    // A refused AUTH lifts nothing (only the header is sent: the front end closes
    // without reading on, and a body still arriving would reset the connection).
    let mut w = s.conn();
    let mut wire = Conn::encode(&[b"AUTH", b"wrong"]);
    wire.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$4\r\nbig4\r\n$1048576\r\n");
    w.send_raw(&wire);
    assert!(w.reply().is_err_starting("WRONGPASS"));
    assert_eq!(
        w.reply(),
        V::Err("ERR Protocol error: unauthenticated bulk length".into())
    );
    assert!(w.closed());
    assert_eq!(c.line("EXISTS big4"), V::Int(0));
}

#[test]
fn a_long_pipeline_before_auth_runs_one_command_at_a_time() {
    let s = setup(None);
    let t = s.store.cache().tokens().unwrap().clone();
    // More than the 512 KiB an unauthenticated connection may buffer: it is read as
    // its commands run, never refused.
    let n = 100_000;
    let mut wire = b"PING\r\n".repeat(n);
    wire.extend(Conn::encode(&[b"AUTH", t.read_write.as_bytes()]));
    wire.extend(Conn::encode(&[b"SET", b"k", &vec![b'v'; 100_000]]));
    let mut c = s.conn();
    c.send_raw(&wire);
    for _ in 0..n {
        assert_eq!(c.reply(), V::Simple("PONG".into()));
    }
    assert_eq!(c.reply(), V::ok());
    assert_eq!(c.reply(), V::ok());
    assert_eq!(c.line("STRLEN k"), V::Int(100_000));
}

#[test]
fn unauthenticated_connections_are_closed_after_the_timeout() {
    let timeout = Duration::from_millis(300);
    let s = setup_with(None, |cfg| cfg.auth_timeout = timeout);
    let mut authed = s.conn();
    login(&s, &mut authed);
    let t0 = Instant::now();
    let mut idle = s.conn();
    let mut talking = s.conn();
    assert!(talking.line("GET k").is_err_starting("NOAUTH"));
    assert!(idle.closed());
    assert!(talking.closed());
    let waited = t0.elapsed();
    // Not the test's own 30 s read timeout: the front end closed them.
    assert!(
        waited >= timeout && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );
    // The authenticated connection outlives the deadline.
    std::thread::sleep(timeout * 2);
    assert_eq!(authed.line("PING"), V::Simple("PONG".into()));
    assert_eq!(rejected_unauthenticated(&mut authed), 2);
}

#[test]
fn without_auth_nothing_changes() {
    let timeout = Duration::from_millis(300);
    let s = setup_with(Some(AuthPolicy::Open), |cfg| cfg.auth_timeout = timeout);
    let mut c = s.conn();
    let mset: Vec<&[u8]> = std::iter::once(&b"MSET"[..])
        .chain((0..10).flat_map(|_| [&b"k"[..], &b"v"[..]]))
        .collect();
    assert_eq!(c.cmd(&mset), V::ok());
    let value = vec![b'v'; 64 << 10];
    assert_eq!(c.cmd(&[b"SET", b"v", &value]), V::ok());
    let long_inline = format!("ECHO {}\r\n", "e".repeat(20 << 10));
    c.send_raw(long_inline.as_bytes());
    assert_eq!(c.reply(), V::Bulk(vec![b'e'; 20 << 10]));
    // Idle past the (unused) auth timeout: still served.
    std::thread::sleep(timeout * 3);
    assert_eq!(c.cmd(&[b"GET", b"v"]), V::Bulk(value));
    assert_eq!(rejected_unauthenticated(&mut c), 0);
}
