//! The commands clients rely on beyond GET/SET: SCAN/KEYS/DBSIZE/FLUSHDB/RANDOMKEY, TIME,
//! EXPIRE's NX/XX/GT/LT, EXPIRETIME, GETEX, INCRBYFLOAT, MSETNX, INFO's fields.

mod common;

use std::collections::BTreeSet;

use common::{V, setup};
use farcache_resp::AuthPolicy;

fn int(v: V) -> i64 {
    match v {
        V::Int(n) => n,
        other => panic!("not an integer: {other:?}"),
    }
}

#[test]
fn scan_keys_dbsize_and_flushdb_see_every_key() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    assert_eq!(c.line("FLUSHDB"), V::ok());
    let mut want = BTreeSet::new();
    for i in 0..300 {
        let k = format!("user:{i}");
        assert_eq!(c.line(&format!("SET {k} v")), V::ok());
        want.insert(k.into_bytes());
    }
    for i in 0..20 {
        assert_eq!(c.line(&format!("SET other:{i} v")), V::ok());
    }
    // An expired key is not listed.
    assert_eq!(c.line("SET gone v PX 1"), V::ok());
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(int(c.line("DBSIZE")), 320);
    let mut cursor = b"0".to_vec();
    let mut seen = BTreeSet::new();
    let mut rounds = 0;
    loop {
        let V::Arr(r) = c.cmd(&[b"SCAN", &cursor, b"MATCH", b"user:*", b"COUNT", b"50"]) else {
            panic!("SCAN")
        };
        let (V::Bulk(next), V::Arr(keys)) = (&r[0], &r[1]) else {
            panic!("SCAN reply {r:?}")
        };
        for k in keys {
            let V::Bulk(k) = k else { panic!("key") };
            assert!(k.starts_with(b"user:"), "MATCH let {k:?} through");
            seen.insert(k.clone());
        }
        rounds += 1;
        if next == b"0" {
            break;
        }
        cursor = next.clone();
        assert!(rounds < 1000, "SCAN does not end");
    }
    assert_eq!(seen, want);
    assert!(rounds > 1, "COUNT 50 over 320 keys pages");
    let V::Arr(keys) = c.line("KEYS other:1*") else {
        panic!("KEYS")
    };
    assert_eq!(keys.len(), 11, "other:1 and other:10..19: {keys:?}");
    // RANDOMKEY answers live keys, and more than one of them.
    let mut picked = BTreeSet::new();
    for _ in 0..50 {
        let V::Bulk(k) = c.line("RANDOMKEY") else {
            panic!("RANDOMKEY")
        };
        assert!(k.starts_with(b"user:") || k.starts_with(b"other:"), "{k:?}");
        picked.insert(k);
    }
    assert!(
        picked.len() > 5,
        "RANDOMKEY keeps answering the same keys: {picked:?}"
    );
    assert!(
        c.line("SCAN notanumber")
            .is_err_starting("ERR invalid cursor")
    );
    assert_eq!(c.line("FLUSHDB"), V::ok());
    assert_eq!(int(c.line("DBSIZE")), 0);
    assert_eq!(c.line("GET user:1"), V::Nil);
    assert_eq!(c.line("RANDOMKEY"), V::Nil);
}

#[test]
fn expiry_options_getex_incrbyfloat_msetnx_time_and_info() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    // Absolute expiries are exact, and rewrites keep them to the millisecond
    // (redis-py's test_pexpiretime caught a drift of a few ms).
    let at = 33_177_117_420_123i64;
    assert_eq!(c.line("SET n 1"), V::ok());
    assert_eq!(c.line(&format!("PEXPIREAT n {at}")), V::Int(1));
    assert_eq!(c.line("PEXPIRETIME n"), V::Int(at));
    assert_eq!(c.line("INCR n"), V::Int(2));
    assert_eq!(c.line("APPEND n 0"), V::Int(2));
    assert_eq!(c.line("SETBIT n 0 0"), V::Int(0));
    assert_eq!(c.line("RENAME n m"), V::ok());
    assert_eq!(c.line("PEXPIRETIME m"), V::Int(at));
    assert_eq!(c.line(&format!("SET p v PXAT {at}")), V::ok());
    assert_eq!(c.line("PEXPIRETIME p"), V::Int(at));
    assert_eq!(c.line(&format!("GETEX p PXAT {}", at + 1)), V::bulk(b"v"));
    assert_eq!(c.line("PEXPIRETIME p"), V::Int(at + 1));
    assert_eq!(c.line("EXPIREAT p 33177117420"), V::Int(1));
    assert_eq!(c.line("EXPIRETIME p"), V::Int(33_177_117_420));
    // TIME.
    let V::Arr(t) = c.line("TIME") else {
        panic!("TIME")
    };
    let V::Bulk(secs) = &t[0] else { panic!("secs") };
    let secs: u64 = String::from_utf8(secs.clone()).unwrap().parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2);
    // EXPIRE NX / XX / GT / LT.
    assert_eq!(c.line("SET k v"), V::ok());
    assert_eq!(
        int(c.line("EXPIRE k 100 XX")),
        0,
        "no expiry yet: XX does nothing"
    );
    assert_eq!(
        int(c.line("EXPIRE k 100 GT")),
        0,
        "no expiry is infinite: GT fails"
    );
    assert_eq!(int(c.line("EXPIRE k 100 NX")), 1);
    assert_eq!(int(c.line("EXPIRE k 200 NX")), 0);
    assert_eq!(int(c.line("EXPIRE k 50 GT")), 0);
    assert_eq!(int(c.line("EXPIRE k 300 GT")), 1);
    assert_eq!(int(c.line("EXPIRE k 400 LT")), 0);
    assert_eq!(int(c.line("EXPIRE k 150 LT")), 1);
    assert!((140..=150).contains(&int(c.line("TTL k"))));
    assert!(
        c.line("EXPIRE k 10 NX XX")
            .is_err_starting("ERR NX and XX, GT or LT")
    );
    assert!(c.line("EXPIRE k 10 GT LT").is_err_starting("ERR GT and LT"));
    assert!(
        c.line("EXPIRE k 10 SOON")
            .is_err_starting("ERR Unsupported option")
    );
    // EXPIRETIME / PEXPIRETIME.
    let at = int(c.line("EXPIRETIME k"));
    assert!(at.abs_diff(now as i64 + 150) <= 2, "{at}");
    assert!(int(c.line("PEXPIRETIME k")) / 1000 - at <= 1);
    assert_eq!(c.line("SET p v"), V::ok());
    assert_eq!(int(c.line("EXPIRETIME p")), -1);
    assert_eq!(int(c.line("EXPIRETIME missing")), -2);
    // GETEX.
    assert_eq!(c.line("GETEX p EX 100"), V::bulk(b"v"));
    assert!((99..=100).contains(&int(c.line("TTL p"))));
    assert_eq!(c.line("GETEX p PERSIST"), V::bulk(b"v"));
    assert_eq!(int(c.line("TTL p")), -1);
    assert_eq!(c.line("GETEX p"), V::bulk(b"v"));
    assert_eq!(c.line("GETEX missing EX 10"), V::Nil);
    assert!(
        c.line("GETEX p EX 0")
            .is_err_starting("ERR invalid expire time")
    );
    assert!(
        c.line("GETEX p FOREVER")
            .is_err_starting("ERR syntax error")
    );
    // INCRBYFLOAT, as the Redis docs' example.
    assert_eq!(c.line("SET f 10.50"), V::ok());
    assert_eq!(c.line("INCRBYFLOAT f 0.1"), V::bulk(b"10.6"));
    assert_eq!(c.line("INCRBYFLOAT f -5"), V::bulk(b"5.6"));
    assert_eq!(c.line("SET f 5.0e3"), V::ok());
    assert_eq!(c.line("INCRBYFLOAT f 2.0e2"), V::bulk(b"5200"));
    assert_eq!(c.line("INCRBYFLOAT nf 3"), V::bulk(b"3"));
    assert!(
        c.line("INCRBYFLOAT p 1")
            .is_err_starting("ERR value is not a valid float")
    );
    assert!(
        c.line("INCRBYFLOAT f inf")
            .is_err_starting("ERR value is not a valid float")
    );
    // MSETNX.
    assert_eq!(int(c.line("MSETNX m1 a m2 b")), 1);
    assert_eq!(int(c.line("MSETNX m2 x m3 y")), 0);
    assert_eq!(
        c.line("MGET m1 m2 m3"),
        V::Arr(vec![V::bulk(b"a"), V::bulk(b"b"), V::Nil])
    );
    // INFO has the fields clients read.
    let V::Bulk(info) = c.line("INFO") else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).unwrap();
    for field in [
        "redis_version:",
        "arch_bits:64",
        "run_id:",
        "role:master",
        "used_memory:",
        "loading:0",
        "cluster_enabled:0",
    ] {
        assert!(info.contains(field), "INFO lacks {field}: {info}");
    }
}
