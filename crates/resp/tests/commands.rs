//! The front end against a real 3-server cluster, spoken to over TCP: every command
//! of the issue with Redis's replies, RESP3, tokens, malformed frames, pipelines,
//! concurrent INCRs and a random sequence checked against a model.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Conn, V, login, setup, setup_with};
use farcache_resp::AuthPolicy;
use rand::{Rng, SeedableRng};

#[test]
fn string_and_key_commands_answer_as_redis_does() {
    let s = setup(None);
    let mut c = s.conn();
    login(&s, &mut c);
    assert_eq!(c.line("PING"), V::Simple("PONG".into()));
    assert_eq!(c.line("SET k v1"), V::ok());
    assert_eq!(c.line("GET k"), V::bulk(b"v1"));
    assert_eq!(c.line("GET missing"), V::Nil);
    assert_eq!(c.line("SET k v2 NX"), V::Nil);
    assert_eq!(c.line("SET k v2 XX GET"), V::bulk(b"v1"));
    assert_eq!(c.line("SET fresh x XX"), V::Nil);
    assert_eq!(c.line("EXISTS k fresh k"), V::Int(2));
    assert_eq!(c.line("STRLEN k"), V::Int(2));
    assert_eq!(c.line("STRLEN missing"), V::Int(0));
    assert_eq!(c.line("MSET a 1 b 2"), V::ok());
    assert_eq!(
        c.line("MGET a b missing"),
        V::Arr(vec![V::bulk(b"1"), V::bulk(b"2"), V::Nil])
    );
    assert_eq!(c.line("INCR a"), V::Int(2));
    assert_eq!(c.line("INCRBY a 40"), V::Int(42));
    assert_eq!(c.line("DECRBY a 2"), V::Int(40));
    assert_eq!(c.line("INCR newcounter"), V::Int(1));
    assert!(
        c.line("INCR k")
            .is_err_starting("ERR value is not an integer")
    );
    assert_eq!(c.line("SET big 9223372036854775807"), V::ok());
    assert!(
        c.line("INCR big")
            .is_err_starting("ERR increment or decrement would overflow")
    );
    assert_eq!(c.line("SETRANGE s 3 hi"), V::Int(5));
    assert_eq!(c.line("GET s"), V::bulk(b"\0\0\0hi"));
    assert_eq!(c.line("GETRANGE s 3 -1"), V::bulk(b"hi"));
    assert_eq!(c.line("GETRANGE s 10 20"), V::bulk(b""));
    assert_eq!(c.line("APPEND s !"), V::Int(6));
    assert_eq!(c.line("DEL a b missing"), V::Int(2));
    assert_eq!(c.line("GET a"), V::Nil);
    assert_eq!(c.line("TYPE k"), V::Simple("string".into()));
    assert_eq!(c.line("TYPE a"), V::Simple("none".into()));
    // Expiry.
    assert_eq!(c.line("TTL k"), V::Int(-1));
    assert_eq!(c.line("TTL missing"), V::Int(-2));
    assert_eq!(c.line("EXPIRE k 100"), V::Int(1));
    let V::Int(t) = c.line("TTL k") else {
        panic!("TTL")
    };
    assert!((99..=100).contains(&t), "ttl {t}");
    assert_eq!(c.line("INCR s2"), V::Int(1));
    assert_eq!(c.line("PEXPIRE s2 60000"), V::Int(1));
    assert_eq!(c.line("INCR s2"), V::Int(2));
    let V::Int(pt) = c.line("PTTL s2") else {
        panic!("PTTL")
    };
    assert!(pt > 50_000 && pt <= 60_000, "INCR keeps the TTL: {pt}");
    assert_eq!(c.line("PERSIST s2"), V::Int(1));
    assert_eq!(c.line("TTL s2"), V::Int(-1));
    // The value is there before its TTL ends (checked only if the GET came back in
    // time: a slow machine must not fail this) and gone after (always checked).
    let t = std::time::Instant::now();
    assert_eq!(c.line("SET e v PX 1000"), V::ok());
    let got = c.line("GET e");
    if t.elapsed() < Duration::from_millis(900) {
        assert_eq!(got, V::bulk(b"v"));
    }
    std::thread::sleep(Duration::from_millis(1100).saturating_sub(t.elapsed()));
    assert_eq!(c.line("GET e"), V::Nil);
    assert_eq!(c.line("SET e2 v EX 100"), V::ok());
    assert_eq!(c.line("EXPIRE e2 0"), V::Int(1));
    assert_eq!(c.line("EXISTS e2"), V::Int(0));
    assert_eq!(c.line("EXPIRE missing 10"), V::Int(0));
    assert!(
        c.line("SET x y EX 0")
            .is_err_starting("ERR invalid expire time")
    );
    assert!(
        c.line("SET x y EX 10 PX 10")
            .is_err_starting("ERR syntax error")
    );
    assert!(c.line("SET x y NX XX").is_err_starting("ERR syntax error"));
    assert_eq!(c.line("SETEX sx 100 v"), V::ok());
    assert_eq!(c.line("SETNX sx other"), V::Int(0));
    assert_eq!(c.line("GETDEL sx"), V::bulk(b"v"));
    assert_eq!(c.line("GETDEL sx"), V::Nil);
    // Errors keep the connection.
    assert!(
        c.line("NOSUCHCMD a b")
            .is_err_starting("ERR unknown command 'NOSUCHCMD'")
    );
    assert!(
        c.line("GET")
            .is_err_starting("ERR wrong number of arguments for 'get'")
    );
    assert!(
        c.line("SELECT 3")
            .is_err_starting("ERR DB index is out of range")
    );
    // The empty key is a key, as in Redis.
    assert_eq!(c.cmd(&[b"SET", b"", b"empty"]), V::ok());
    assert_eq!(c.cmd(&[b"GET", b""]), V::bulk(b"empty"));
    assert!(
        c.cmd(&[b"GET", b"\xff\xfeFC!"])
            .is_err_starting("ERR invalid key")
    );
    assert_eq!(c.line("ECHO hi"), V::bulk(b"hi"));
    // Binary keys and values.
    assert_eq!(c.cmd(&[b"SET", b"\x00\xff\r\n", b"\r\n\x00"]), V::ok());
    assert_eq!(c.cmd(&[b"GET", b"\x00\xff\r\n"]), V::bulk(b"\r\n\x00"));
    // Connection commands.
    assert_eq!(c.line("CLIENT SETNAME app-1"), V::ok());
    assert_eq!(c.line("CLIENT GETNAME"), V::bulk(b"app-1"));
    assert!(
        c.line("CLIENT SETNAME has\nnewline")
            .is_err_starting("ERR Client names")
    );
    let V::Bulk(info) = c.line("INFO") else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).unwrap();
    assert!(
        info.contains("redis_version:") && info.contains("db0:keys="),
        "{info}"
    );
    assert_eq!(c.line("QUIT"), V::ok());
    assert!(c.closed());
}

#[test]
fn resp3_hello_and_tokens() {
    let s = setup(None);
    let t = s.store.cache().tokens().unwrap().clone();
    let mut c = s.conn();
    assert!(c.line("GET k").is_err_starting("NOAUTH"));
    assert!(c.line("AUTH wrong").is_err_starting("WRONGPASS"));
    assert!(c.line("HELLO 3").is_err_starting("NOAUTH"));
    let hello = c.cmd(&[b"HELLO", b"3", b"AUTH", b"default", t.read_write.as_bytes()]);
    let V::Map(fields) = hello else {
        panic!("HELLO 3 answers a map: {hello:?}")
    };
    assert!(fields.contains(&(V::bulk(b"proto"), V::Int(3))));
    assert_eq!(c.line("GET missing"), V::Nil);
    assert!(c.line("HELLO 4").is_err_starting("NOPROTO"));
    // Read-only token: reads yes, writes no.
    let mut ro = s.conn();
    assert_eq!(ro.cmd(&[b"AUTH", t.read_only.as_bytes()]), V::ok());
    assert!(ro.line("SET k v").is_err_starting("NOPERM"));
    assert!(ro.line("INCR k").is_err_starting("NOPERM"));
    assert_eq!(c.line("SET k v"), V::ok());
    assert_eq!(ro.line("GET k"), V::bulk(b"v"));
    // Every command that writes is refused, and nothing it names changes.
    assert_eq!(c.line("SET n 10"), V::ok());
    for w in [
        "SETNX k2 v",
        "SETEX k 10 v",
        "PSETEX k 10000 v",
        "MSET k v2 k2 v",
        "MSETNX k2 v",
        "INCR n",
        "INCRBY n 2",
        "DECR n",
        "DECRBY n 2",
        "INCRBYFLOAT n 1.5",
        "APPEND k x",
        "SETRANGE k 0 x",
        "SETBIT k 0 1",
        "GETSET k x",
        "GETDEL k",
        "GETEX k EX 100",
        "DEL k",
        "UNLINK k",
        "EXPIRE k 100",
        "PEXPIRE k 100000",
        "EXPIREAT k 1",
        "PERSIST k",
        "RENAME k k2",
        "RENAMENX k k2",
        "COPY k k2",
        "FLUSHDB",
        "FLUSHALL",
    ] {
        assert!(ro.line(w).is_err_starting("NOPERM"), "{w}");
    }
    assert_eq!(c.line("GET k"), V::bulk(b"v"));
    assert_eq!(c.line("GET n"), V::bulk(b"10"));
    assert_eq!(c.line("EXISTS k2"), V::Int(0));
    assert_eq!(c.line("TTL k"), V::Int(-1));
    // Pipelined SETs from a read-only connection are refused one by one too.
    ro.send_raw(
        &[
            Conn::encode(&[b"SET", b"a", b"1"]),
            Conn::encode(&[b"SET", b"b", b"2"]),
        ]
        .concat(),
    );
    assert!(ro.reply().is_err_starting("NOPERM"));
    assert!(ro.reply().is_err_starting("NOPERM"));
    assert_eq!(c.line("EXISTS a b"), V::Int(0));
}

#[test]
fn malformed_frames_close_only_their_connection() {
    let s = setup(Some(AuthPolicy::Open));
    let mut good = s.conn();
    assert_eq!(good.line("SET k v"), V::ok());
    for bad in [
        &b"*1\r\n$-5\r\n"[..],
        b"*2\r\n$3\r\nGET\r\n+k\r\n",
        b"*1\r\n$3\r\nGETxx",
        b"*99999999999\r\n",
        b"\"unbalanced\r\n",
    ] {
        let mut c = s.conn();
        c.send_raw(bad);
        let r = c.reply();
        assert!(r.is_err_starting("ERR Protocol error"), "{bad:?}: {r:?}");
        assert!(c.closed(), "{bad:?} leaves the connection open");
    }
    // Random garbage from many connections.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..50 {
        let mut c = s.conn();
        let junk: Vec<u8> = (0..rng.gen_range(1..400)).map(|_| rng.r#gen()).collect();
        c.send_raw(&junk);
        drop(c);
    }
    // A command sent before a half-close is still answered.
    let mut c = s.conn();
    c.send_raw(b"GET k\r\n");
    c.w_shutdown();
    assert_eq!(c.reply(), V::bulk(b"v"));
    assert_eq!(good.line("GET k"), V::bulk(b"v"));
}

#[test]
fn pipelines_keep_order_and_values() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    let n = 2000;
    let mut wire = Vec::new();
    for i in 0..n {
        wire.extend(Conn::encode(&[
            b"SET",
            format!("p{}", i % 500).as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
    }
    for i in 0..500 {
        wire.extend(Conn::encode(&[b"GET", format!("p{i}").as_bytes()]));
    }
    wire.extend(Conn::encode(&[b"INCR", b"ctr"]));
    wire.extend(Conn::encode(&[b"GET", b"ctr"]));
    c.send_raw(&wire);
    for _ in 0..n {
        assert_eq!(c.reply(), V::ok());
    }
    // The same key set four times in one pipeline keeps the last value.
    for i in 0..500 {
        assert_eq!(c.reply(), V::Bulk(format!("v{}", n - 500 + i).into_bytes()));
    }
    assert_eq!(c.reply(), V::Int(1));
    assert_eq!(c.reply(), V::bulk(b"1"));
    // The pipeline ran as a few large rounds, not one store call per command.
    let V::Bulk(info) = c.line("INFO stats") else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).unwrap();
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {info}"))
    };
    let (rounds, ops) = (field("batched_rounds"), field("batched_ops"));
    assert!(
        ops >= 2500 && ops >= 50 * rounds,
        "{ops} ops in {rounds} rounds"
    );
}

#[test]
fn concurrent_incr_loses_no_increment() {
    let s = setup(Some(AuthPolicy::Open));
    let addr = s.addr();
    let per = 150;
    let threads: Vec<_> = (0..6)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = Conn::connect(addr);
                for i in 0..per {
                    // Mix in plain SETs and GETs of other keys so batches form.
                    if i % 3 == 0 {
                        c.send_raw(&Conn::encode(&[b"SET", format!("o{t}").as_bytes(), b"x"]));
                        assert_eq!(c.reply(), V::ok());
                    }
                    let V::Int(_) = c.line("INCR shared") else {
                        panic!("INCR")
                    };
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = Conn::connect(addr);
    assert_eq!(
        c.line("GET shared"),
        V::Bulk((6 * per).to_string().into_bytes())
    );
}

#[test]
fn random_commands_match_a_model() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for step in 0..3000 {
        let k = format!("k{}", rng.gen_range(0..40));
        match rng.gen_range(0..7) {
            0 => {
                let v: Vec<u8> = (0..rng.gen_range(0..300)).map(|_| rng.r#gen()).collect();
                assert_eq!(c.cmd(&[b"SET", k.as_bytes(), &v]), V::ok());
                model.insert(k, v);
            }
            1 => {
                let want = model.get(&k).map_or(V::Nil, |v| V::Bulk(v.clone()));
                assert_eq!(c.cmd(&[b"GET", k.as_bytes()]), want, "step {step} GET {k}");
            }
            2 if step % 2 == 0 => {
                let had = model.remove(&k).is_some();
                assert_eq!(c.cmd(&[b"DEL", k.as_bytes()]), V::Int(i64::from(had)));
            }
            2 => {
                // Many keys, one maybe named twice (counted once, as Redis does).
                let keys: Vec<String> = (0..rng.gen_range(1..8))
                    .map(|_| format!("k{}", rng.gen_range(0..40)))
                    .collect();
                let mut args: Vec<&[u8]> = vec![b"DEL"];
                args.extend(keys.iter().map(|k| k.as_bytes()));
                let had = keys.iter().filter(|k| model.remove(*k).is_some()).count();
                assert_eq!(c.cmd(&args), V::Int(had as i64), "step {step} {args:?}");
            }
            3 => {
                let tail: Vec<u8> = (0..rng.gen_range(0..20)).map(|_| rng.r#gen()).collect();
                let v = model.entry(k.clone()).or_default();
                v.extend_from_slice(&tail);
                let n = v.len() as i64;
                assert_eq!(c.cmd(&[b"APPEND", k.as_bytes(), &tail]), V::Int(n));
            }
            4 => {
                let off = rng.gen_range(0..50usize);
                let patch: Vec<u8> = (0..rng.gen_range(1..10)).map(|_| rng.r#gen()).collect();
                let v = model.entry(k.clone()).or_default();
                if v.len() < off + patch.len() {
                    v.resize(off + patch.len(), 0);
                }
                v[off..off + patch.len()].copy_from_slice(&patch);
                let n = v.len() as i64;
                let r = c.cmd(&[
                    b"SETRANGE",
                    k.as_bytes(),
                    off.to_string().as_bytes(),
                    &patch,
                ]);
                assert_eq!(r, V::Int(n), "step {step}");
            }
            5 => {
                let keys: Vec<String> = (0..rng.gen_range(1..8))
                    .map(|_| format!("k{}", rng.gen_range(0..40)))
                    .collect();
                let mut args: Vec<&[u8]> = vec![b"MGET"];
                args.extend(keys.iter().map(|k| k.as_bytes()));
                let want = V::Arr(
                    keys.iter()
                        .map(|k| model.get(k).map_or(V::Nil, |v| V::Bulk(v.clone())))
                        .collect(),
                );
                assert_eq!(c.cmd(&args), want, "step {step}");
            }
            _ => {
                let want = model.get(&k).map_or(0, |v| v.len() as i64);
                assert_eq!(c.cmd(&[b"STRLEN", k.as_bytes()]), V::Int(want));
            }
        }
    }
}

#[test]
fn fcall_runs_a_procedure_next_to_the_data() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    // Sum of the first eight u64 words at address 0 (the store's descriptor): the
    // same answer through FCALL as through the native client.
    let mut args = vec![0u8; 9];
    args[1..5].copy_from_slice(&8u32.to_le_bytes());
    args[5..9].copy_from_slice(&8u32.to_le_bytes());
    let native = s
        .store
        .cache()
        .execute("aggregate", 0, &args)
        .expect("native execute");
    assert_eq!(
        c.cmd(&[b"FCALL", b"aggregate", b"1", b"0", &args]),
        V::Bulk(native.to_vec())
    );
    assert!(
        c.cmd(&[b"FCALL", b"no_such_proc", b"0"])
            .is_err_starting("ERR")
    );
    assert!(
        c.cmd(&[b"FCALL", b"aggregate", b"1", b"notanaddress", &args])
            .is_err_starting("ERR the key of FCALL")
    );
    assert!(
        c.cmd(&[b"FCALL", b"aggregate", b"2", b"0", b"1"])
            .is_err_starting("ERR numkeys")
    );
    assert_eq!(c.line("PING"), V::Simple("PONG".into()));
}

#[test]
fn connections_past_the_cap_are_refused_and_others_go_on() {
    let s = setup_with(Some(AuthPolicy::Open), |c| c.max_clients = 2);
    let mut a = s.conn();
    let mut b = s.conn();
    assert_eq!(a.line("PING"), V::Simple("PONG".into()));
    assert_eq!(b.line("PING"), V::Simple("PONG".into()));
    let mut third = s.conn();
    assert!(
        third
            .reply()
            .is_err_starting("ERR max number of clients reached")
    );
    assert!(third.closed());
    drop(b);
    // The slot frees once the server sees the close.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = s.conn();
        c.send_raw(&Conn::encode(&[b"PING"]));
        if c.reply() == V::Simple("PONG".into()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the closed connection's slot never freed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(a.line("SET k v"), V::ok());
}

/// Pipelined INCR-family commands from two connections on shared keys, one with an
/// expiry, one not a number, one at the edge of overflow: the final values are the
/// sums, a failed step changes nothing, exactly one step reaches the edge, and the
/// expiry survives.
#[test]
fn pipelined_counters_step_in_order_and_keep_expiry() {
    let s = setup(Some(AuthPolicy::Open));
    let mut a = s.conn();
    let mut b = s.conn();
    assert_eq!(a.line("SET ttl 10"), V::ok());
    assert_eq!(a.line("EXPIRE ttl 100"), V::Int(1));
    assert_eq!(a.line("SET text abc"), V::ok());
    assert_eq!(a.line("SET edge 9223372036854775806"), V::ok());
    let cmds: Vec<Vec<&[u8]>> = vec![
        vec![b"INCR", b"n"],
        vec![b"INCRBY", b"n", b"5"],
        vec![b"DECR", b"ttl"],
        vec![b"INCR", b"text"],
        vec![b"INCR", b"edge"],
        vec![b"INCR", b"edge"],
        vec![b"DECRBY", b"n", b"2"],
        vec![b"INCRBY", b"n", b"x"],
    ];
    let mut raw = Vec::new();
    for _ in 0..50 {
        for c in &cmds {
            raw.extend(Conn::encode(c));
        }
    }
    a.send_raw(&raw);
    b.send_raw(&raw);
    let mut edge_ok = 0;
    for c in [&mut a, &mut b] {
        for _ in 0..50 {
            for i in 0..cmds.len() {
                let r = c.reply();
                match i {
                    0..=2 | 6 => assert!(matches!(r, V::Int(_)), "{i}: {r:?}"),
                    3 | 7 => assert!(r.is_err_starting("ERR value is not an integer"), "{r:?}"),
                    _ => match r {
                        V::Int(i64::MAX) => edge_ok += 1,
                        r => assert!(
                            r.is_err_starting("ERR increment or decrement would overflow"),
                            "{r:?}"
                        ),
                    },
                }
            }
        }
    }
    assert_eq!(a.line("GET n"), V::bulk(b"400"), "2 × 50 × (1 + 5 − 2)");
    assert_eq!(a.line("GET ttl"), V::bulk(b"-90"));
    let V::Int(t) = a.line("TTL ttl") else {
        panic!("TTL")
    };
    assert!((90..=100).contains(&t), "the expiry survives: {t}");
    assert_eq!(a.line("GET text"), V::bulk(b"abc"));
    assert_eq!(edge_ok, 1, "exactly one INCR reaches i64::MAX");
    assert_eq!(a.line("GET edge"), V::bulk(b"9223372036854775807"));
}

#[test]
fn bit_rename_and_copy_commands_answer_as_redis_does() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    // Bits (the Redis docs' examples).
    assert_eq!(c.line("SETBIT b 7 1"), V::Int(0));
    assert_eq!(c.line("SETBIT b 7 0"), V::Int(1));
    assert_eq!(c.line("GET b"), V::bulk(b"\0"));
    assert_eq!(c.line("GETBIT b 100"), V::Int(0));
    assert!(c.line("SETBIT b -1 1").is_err_starting("ERR bit offset"));
    assert!(c.line("SETBIT b 1 2").is_err_starting("ERR bit is not"));
    assert_eq!(c.line("SET f foobar"), V::ok());
    assert_eq!(c.line("BITCOUNT f"), V::Int(26));
    assert_eq!(c.line("BITCOUNT f 1 1"), V::Int(6));
    assert_eq!(c.line("BITCOUNT f 5 30 BIT"), V::Int(17));
    assert!(c.line("BITCOUNT f 1").is_err_starting("ERR syntax error"));
    assert_eq!(c.line("BITCOUNT missing"), V::Int(0));
    assert_eq!(c.cmd(&[b"SET", b"p", b"\xff\xf0\x00"]), V::ok());
    assert_eq!(c.line("BITPOS p 0"), V::Int(12));
    assert_eq!(c.cmd(&[b"SET", b"p", b"\x00\xff\xf0"]), V::ok());
    assert_eq!(c.line("BITPOS p 1 0"), V::Int(8));
    assert_eq!(c.line("BITPOS p 1 2 -1 BYTE"), V::Int(16));
    assert_eq!(c.line("BITPOS p 1 7 15 BIT"), V::Int(8));
    assert_eq!(c.cmd(&[b"SET", b"ones", b"\xff\xff"]), V::ok());
    assert_eq!(c.line("BITPOS ones 0"), V::Int(16));
    assert_eq!(c.line("BITPOS ones 0 0 -1"), V::Int(-1));
    assert_eq!(c.line("BITPOS missing 0"), V::Int(0));
    assert_eq!(c.line("BITPOS missing 1"), V::Int(-1));
    // BITOP: shorter sources padded with zeros, a missing one empty; the result has
    // no expiry; an empty result deletes the destination.
    assert_eq!(c.cmd(&[b"SET", b"x1", b"\xf0\x0f\xff"]), V::ok());
    assert_eq!(c.cmd(&[b"SET", b"x2", b"\x3c"]), V::ok());
    assert_eq!(c.line("BITOP AND d x1 x2"), V::Int(3));
    assert_eq!(c.line("GET d"), V::bulk(b"\x30\x00\x00"));
    assert_eq!(c.line("BITOP OR d x1 x2 none"), V::Int(3));
    assert_eq!(c.line("GET d"), V::bulk(b"\xfc\x0f\xff"));
    assert_eq!(c.line("BITOP XOR d x1 x2"), V::Int(3));
    assert_eq!(c.line("GET d"), V::bulk(b"\xcc\x0f\xff"));
    assert_eq!(c.line("SET d old EX 100"), V::ok());
    assert_eq!(c.line("BITOP NOT d x2"), V::Int(1));
    assert_eq!(c.line("GET d"), V::bulk(b"\xc3"));
    assert_eq!(c.line("TTL d"), V::Int(-1));
    assert_eq!(c.line("BITOP AND d none nothing"), V::Int(0));
    assert_eq!(c.line("EXISTS d"), V::Int(0));
    assert!(
        c.line("BITOP NOT d x1 x2")
            .is_err_starting("ERR BITOP NOT must be called")
    );
    assert!(
        c.line("BITOP NAND d x1")
            .is_err_starting("ERR syntax error")
    );
    // RENAME keeps the value and the expiry; RENAMENX and COPY refuse to overwrite.
    assert_eq!(c.line("SET src v EX 100"), V::ok());
    assert_eq!(c.line("RENAME src dst"), V::ok());
    assert_eq!(c.line("GET src"), V::Nil);
    assert_eq!(c.line("GET dst"), V::bulk(b"v"));
    let V::Int(t) = c.line("TTL dst") else {
        panic!("TTL")
    };
    assert!((90..=100).contains(&t), "{t}");
    assert!(c.line("RENAME src dst").is_err_starting("ERR no such key"));
    assert_eq!(c.line("SET other o"), V::ok());
    assert_eq!(c.line("RENAMENX dst other"), V::Int(0));
    assert_eq!(c.line("GET dst"), V::bulk(b"v"));
    assert_eq!(c.line("COPY dst other"), V::Int(0));
    assert_eq!(c.line("COPY dst other REPLACE"), V::Int(1));
    assert_eq!(c.line("GET other"), V::bulk(b"v"));
    assert_eq!(c.line("GET dst"), V::bulk(b"v"));
    assert_eq!(c.line("COPY nothere x"), V::Int(0));
    assert!(c.line("COPY dst x DB 1").is_err_starting("ERR DB index"));
    assert_eq!(c.line("RENAMENX dst fresh"), V::Int(1));
    assert_eq!(c.line("EXISTS dst fresh"), V::Int(1));
    // LCS (the Redis docs' example).
    assert_eq!(c.line("MSET key1 ohmytext key2 mynewtext"), V::ok());
    assert_eq!(c.line("LCS key1 key2"), V::bulk(b"mytext"));
    assert_eq!(c.line("LCS key1 key2 LEN"), V::Int(6));
    let range = |a: i64, b: i64, c: i64, d: i64| {
        V::Arr(vec![
            V::Arr(vec![V::Int(a), V::Int(b)]),
            V::Arr(vec![V::Int(c), V::Int(d)]),
        ])
    };
    assert_eq!(
        c.line("LCS key1 key2 IDX"),
        V::Arr(vec![
            V::bulk(b"matches"),
            V::Arr(vec![range(4, 7, 5, 8), range(2, 3, 0, 1)]),
            V::bulk(b"len"),
            V::Int(6),
        ])
    );
    let V::Arr(r) = c.line("LCS key1 key2 IDX MINMATCHLEN 4 WITHMATCHLEN") else {
        panic!("LCS IDX")
    };
    assert_eq!(
        r[1],
        V::Arr(vec![V::Arr(vec![
            V::Arr(vec![V::Int(4), V::Int(7)]),
            V::Arr(vec![V::Int(5), V::Int(8)]),
            V::Int(4)
        ])])
    );
    assert!(
        c.line("LCS key1 key2 LEN IDX")
            .is_err_starting("ERR If you want both")
    );
    assert_eq!(c.line("LCS key1 nothere"), V::bulk(b""));
}

/// A big MSET, GET, DEL and EXISTS pipelined on one connection of a one-loop front
/// end run off the loop: while the MSET waits (the test holds one of its keys'
/// stripes), another connection on the same loop is served its reads; then the
/// first connection's replies arrive complete and in order.
#[test]
fn big_commands_run_off_the_event_loop_and_keep_their_order() {
    let s = setup_with(Some(AuthPolicy::Open), |cfg| cfg.threads = 1);
    let mut a = s.conn();
    let mut b = s.conn();
    let n = 5_000;
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("big{i}").into_bytes()).collect();
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for k in &keys {
        mset.push(k);
        mset.push(b"v");
    }
    let mut del: Vec<&[u8]> = vec![b"DEL"];
    del.extend(keys.iter().map(|k| &k[..]));
    let mut exists: Vec<&[u8]> = vec![b"EXISTS"];
    exists.extend(keys.iter().map(|k| &k[..]));
    let held = s.fe.shared().lock_keys([&keys[0]]);
    let mut raw = Conn::encode(&mset);
    raw.extend(Conn::encode(&[b"GET", &keys[n - 1]]));
    raw.extend(Conn::encode(&exists));
    raw.extend(Conn::encode(&del));
    raw.extend(Conn::encode(&exists));
    a.send_raw(&raw);
    // The MSET is stuck on the stripe the test holds; the loop is not. (Writes to
    // the stripes the MSET holds would wait for it, as they would in Redis.)
    for i in 0..20 {
        assert_eq!(b.line(&format!("GET other{i}")), V::Nil);
        assert_eq!(b.line("PING"), V::Simple("PONG".into()));
    }
    drop(held);
    assert_eq!(a.reply(), V::ok());
    assert_eq!(a.reply(), V::bulk(b"v"));
    assert_eq!(a.reply(), V::Int(n as i64));
    assert_eq!(a.reply(), V::Int(n as i64));
    assert_eq!(a.reply(), V::Int(0));
    let V::Bulk(info) = a.line("INFO stats") else {
        panic!("INFO")
    };
    let info = String::from_utf8(info).expect("utf-8");
    let offloaded: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("offloaded_commands:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("offloaded_commands in INFO");
    assert_eq!(offloaded, 4, "{info}");
}
