//! MULTI / EXEC / DISCARD / WATCH against a real 3-server cluster: queued commands
//! apply only at EXEC, a refused command dooms the transaction before anything is
//! applied, WATCH aborts on a change made by another connection, and concurrent
//! check-and-set loops lose no update.

mod common;

use common::{Conn, V, setup};
use farcache_resp::AuthPolicy;

#[test]
fn exec_applies_the_queue_and_discard_drops_it() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    let mut other = s.conn();
    assert_eq!(c.line("MULTI"), V::ok());
    assert!(
        c.line("MULTI")
            .is_err_starting("ERR MULTI calls can not be nested")
    );
    assert_eq!(c.line("SET a 1"), V::Simple("QUEUED".into()));
    assert_eq!(c.line("INCR a"), V::Simple("QUEUED".into()));
    assert_eq!(c.line("GET a"), V::Simple("QUEUED".into()));
    assert_eq!(c.line("MGET a nope"), V::Simple("QUEUED".into()));
    // Nothing is applied before EXEC.
    assert_eq!(other.line("GET a"), V::Nil);
    assert_eq!(
        c.line("EXEC"),
        V::Arr(vec![
            V::ok(),
            V::Int(2),
            V::bulk(b"2"),
            V::Arr(vec![V::bulk(b"2"), V::Nil]),
        ])
    );
    assert_eq!(other.line("GET a"), V::bulk(b"2"));
    // A failing command inside EXEC fails alone, as in Redis.
    assert_eq!(c.line("SET s text"), V::ok());
    assert_eq!(c.line("MULTI"), V::ok());
    c.line("INCR s");
    c.line("SET b 1");
    let V::Arr(r) = c.line("EXEC") else {
        panic!("EXEC")
    };
    assert!(r[0].is_err_starting("ERR value is not an integer"), "{r:?}");
    assert_eq!(r[1], V::ok());
    // DISCARD.
    assert_eq!(c.line("MULTI"), V::ok());
    c.line("SET a 100");
    assert_eq!(c.line("DISCARD"), V::ok());
    assert_eq!(c.line("GET a"), V::bulk(b"2"));
    assert!(c.line("EXEC").is_err_starting("ERR EXEC without MULTI"));
    assert!(
        c.line("DISCARD")
            .is_err_starting("ERR DISCARD without MULTI")
    );
    // Pipelined, the way redis-py's default pipeline sends it.
    let mut batch = Vec::new();
    for args in [
        &[&b"MULTI"[..]][..],
        &[b"INCR", b"p"],
        &[b"INCR", b"p"],
        &[b"GET", b"p"],
        &[b"EXEC"],
    ] {
        batch.extend(Conn::encode(args));
    }
    c.send_raw(&batch);
    assert_eq!(c.reply(), V::ok());
    for _ in 0..3 {
        assert_eq!(c.reply(), V::Simple("QUEUED".into()));
    }
    assert_eq!(c.reply(), V::Arr(vec![V::Int(1), V::Int(2), V::bulk(b"2")]));
}

#[test]
fn a_refused_command_aborts_exec_before_anything_applies() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    assert_eq!(c.line("MULTI"), V::ok());
    assert_eq!(c.line("SET x 1"), V::Simple("QUEUED".into()));
    assert!(c.line("LPUSH l 1").is_err_starting("ERR unknown command"));
    assert!(
        c.line("GET")
            .is_err_starting("ERR wrong number of arguments")
    );
    assert!(
        c.line("FLUSHDB")
            .is_err_starting("ERR 'flushdb' inside MULTI is not supported")
    );
    assert!(
        c.line("EXEC")
            .is_err_starting("EXECABORT Transaction discarded because of previous errors")
    );
    assert_eq!(c.line("GET x"), V::Nil);
    // The connection is out of the transaction.
    assert_eq!(c.line("SET x 2"), V::ok());
}

#[test]
fn watch_aborts_exec_when_another_connection_wrote_the_key() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    let mut other = s.conn();
    assert_eq!(c.line("SET w 1"), V::ok());
    assert_eq!(c.line("WATCH w"), V::ok());
    assert_eq!(other.line("SET w 2"), V::ok());
    assert_eq!(c.line("MULTI"), V::ok());
    assert!(c.line("WATCH w").is_err_starting("ERR WATCH inside MULTI"));
    c.line("SET w mine");
    assert_eq!(c.line("EXEC"), V::Nil, "the watched key changed");
    assert_eq!(c.line("GET w"), V::bulk(b"2"));
    // EXEC forgot the watch: the next transaction applies.
    assert_eq!(c.line("MULTI"), V::ok());
    c.line("SET w mine");
    assert_eq!(c.line("EXEC"), V::Arr(vec![V::ok()]));
    // Unchanged since WATCH: applies. UNWATCH forgets.
    assert_eq!(c.line("WATCH w"), V::ok());
    assert_eq!(c.line("MULTI"), V::ok());
    c.line("GET w");
    assert_eq!(c.line("EXEC"), V::Arr(vec![V::bulk(b"mine")]));
    assert_eq!(c.line("WATCH w"), V::ok());
    other.line("SET w 3");
    assert_eq!(c.line("UNWATCH"), V::ok());
    assert_eq!(c.line("MULTI"), V::ok());
    c.line("GET w");
    assert_eq!(c.line("EXEC"), V::Arr(vec![V::bulk(b"3")]));
}

/// The check-and-set loop redis-py's `transaction()` runs, from several connections
/// on several event loops at once: no update is lost.
#[test]
fn concurrent_check_and_set_loops_lose_no_update() {
    let s = setup(Some(AuthPolicy::Open));
    let addr = s.addr();
    let (threads, per) = (4, 40);
    let aborted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let aborted = aborted.clone();
            std::thread::spawn(move || {
                let mut c = Conn::connect(addr);
                for _ in 0..per {
                    loop {
                        assert_eq!(c.line("WATCH cas"), V::ok());
                        let n: i64 = match c.line("GET cas") {
                            V::Nil => 0,
                            V::Bulk(b) => String::from_utf8(b).unwrap().parse().unwrap(),
                            other => panic!("GET: {other:?}"),
                        };
                        assert_eq!(c.line("MULTI"), V::ok());
                        c.line(&format!("SET cas {}", n + 1));
                        match c.line("EXEC") {
                            V::Arr(r) => {
                                assert_eq!(r, vec![V::ok()]);
                                break;
                            }
                            V::Nil => {
                                aborted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            other => panic!("EXEC: {other:?}"),
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut c = Conn::connect(addr);
    assert_eq!(
        c.line("GET cas"),
        V::Bulk((threads * per).to_string().into_bytes())
    );
    eprintln!(
        "{} check-and-set rounds aborted and retried",
        aborted.load(std::sync::atomic::Ordering::Relaxed)
    );
}
