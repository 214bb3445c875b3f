//! Lua scripts (EVAL, EVALSHA, SCRIPT) against a real 3-server cluster: Redis's value
//! conversions, the script cache, redis-py's own lock scripts, isolation under
//! concurrent read-modify-write scripts, and the bounds (undeclared keys, read-only
//! scripts, globals, a runaway loop, a memory bomb) with the front end serving on.

mod common;

use std::time::{Duration, Instant};

use common::{Conn, V, setup};
use farcache_resp::AuthPolicy;

fn eval(c: &mut Conn, script: &str, keys: &[&str], argv: &[&str]) -> V {
    let n = keys.len().to_string();
    let mut args: Vec<&[u8]> = vec![b"EVAL", script.as_bytes(), n.as_bytes()];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    args.extend(argv.iter().map(|a| a.as_bytes()));
    c.cmd(&args)
}

#[test]
fn scripts_convert_values_as_redis_does_and_call_commands() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    assert_eq!(eval(&mut c, "return 1", &[], &[]), V::Int(1));
    assert_eq!(eval(&mut c, "return 3.9", &[], &[]), V::Int(3));
    assert_eq!(eval(&mut c, "return 'hi'", &[], &[]), V::bulk(b"hi"));
    assert_eq!(eval(&mut c, "return true", &[], &[]), V::Int(1));
    assert_eq!(eval(&mut c, "return false", &[], &[]), V::Nil);
    assert_eq!(eval(&mut c, "return nil", &[], &[]), V::Nil);
    assert_eq!(
        eval(&mut c, "return {1, 'a', {2}, nil, 5}", &[], &[]),
        V::Arr(vec![V::Int(1), V::bulk(b"a"), V::Arr(vec![V::Int(2)])])
    );
    assert_eq!(
        eval(&mut c, "return redis.status_reply('FINE')", &[], &[]),
        V::Simple("FINE".into())
    );
    assert_eq!(
        eval(&mut c, "return redis.error_reply('MYERR bad')", &[], &[]),
        V::Err("MYERR bad".into())
    );
    assert_eq!(
        eval(
            &mut c,
            "return {KEYS[1], KEYS[2], ARGV[1]}",
            &["k1", "k2"],
            &["a1"]
        ),
        V::Arr(vec![V::bulk(b"k1"), V::bulk(b"k2"), V::bulk(b"a1")])
    );
    // Commands, and their replies turned into Lua values.
    assert_eq!(
        eval(
            &mut c,
            "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])",
            &["s"],
            &["v1"]
        ),
        V::bulk(b"v1")
    );
    assert_eq!(c.line("GET s"), V::bulk(b"v1"));
    assert_eq!(
        eval(
            &mut c,
            "return {redis.call('INCRBY', KEYS[1], 5), redis.call('GET', KEYS[2]) == false, redis.call('SET', KEYS[1], 7).ok}",
            &["n", "missing"],
            &[]
        ),
        V::Arr(vec![V::Int(5), V::Int(1), V::bulk(b"OK")])
    );
    // A number argument goes as Lua prints it.
    assert_eq!(
        eval(
            &mut c,
            "return redis.call('SET', KEYS[1], 10 * 1.5)",
            &["f"],
            &[]
        ),
        V::ok()
    );
    assert_eq!(c.line("GET f"), V::bulk(b"15"));
    // A command's error ends the script with that error; pcall hands it over instead.
    assert!(
        eval(&mut c, "return redis.call('INCR', KEYS[1])", &["s"], &[])
            .is_err_starting("ERR value is not an integer")
    );
    assert_eq!(
        eval(
            &mut c,
            "local r = redis.pcall('INCR', KEYS[1]); return type(r) == 'table' and r.err ~= nil",
            &["s"],
            &[]
        ),
        V::Int(1)
    );
    // A Lua error names the script.
    let V::Err(e) = eval(&mut c, "return nil + 1", &[], &[]) else {
        panic!("want an error")
    };
    assert!(e.starts_with("ERR Error running script"), "{e}");
    assert!(eval(&mut c, "return (", &[], &[]).is_err_starting("ERR Error compiling script"));
    assert!(
        c.line("EVAL x -1")
            .is_err_starting("ERR Number of keys can't be negative")
    );
    assert!(
        c.line("EVAL x 2 a")
            .is_err_starting("ERR Number of keys can't be greater")
    );
    // Inside MULTI a script is queued and runs at EXEC.
    assert_eq!(c.line("MULTI"), V::ok());
    assert_eq!(
        eval(&mut c, "return redis.call('INCR', KEYS[1])", &["n"], &[]),
        V::Simple("QUEUED".into())
    );
    assert_eq!(c.line("EXEC"), V::Arr(vec![V::Int(8)]));
}

#[test]
fn evalsha_runs_loaded_scripts_until_a_flush() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"; // SHA-1 of "return 1"
    assert!(
        c.cmd(&[b"EVALSHA", sha.as_bytes(), b"0"])
            .is_err_starting("NOSCRIPT")
    );
    assert_eq!(
        c.line("SCRIPT EXISTS e0e1f9fabfc9d4800c877a703b823ac0578ff8db nope"),
        V::Arr(vec![V::Int(0), V::Int(0)])
    );
    assert_eq!(
        c.cmd(&[b"SCRIPT", b"LOAD", b"return 1"]),
        V::bulk(sha.as_bytes())
    );
    assert_eq!(c.cmd(&[b"EVALSHA", sha.as_bytes(), b"0"]), V::Int(1));
    // Any connection, any event loop, either case.
    let mut other = s.conn();
    assert_eq!(
        other.cmd(&[b"EVALSHA", sha.to_ascii_uppercase().as_bytes(), b"0"]),
        V::Int(1)
    );
    // EVAL leaves its script for EVALSHA too.
    let V::Bulk(two) = c.cmd(&[b"SCRIPT", b"LOAD", b"return 2"]) else {
        panic!("LOAD")
    };
    assert_eq!(c.line("SCRIPT FLUSH"), V::ok());
    assert!(
        c.cmd(&[b"EVALSHA", sha.as_bytes(), b"0"])
            .is_err_starting("NOSCRIPT")
    );
    assert_eq!(eval(&mut c, "return 2", &[], &[]), V::Int(2));
    assert_eq!(other.cmd(&[b"EVALSHA", &two, b"0"]), V::Int(2));
    assert!(c.line("SCRIPT KILL").is_err_starting("NOTBUSY"));
    assert!(
        c.line("SCRIPT NOPE")
            .is_err_starting("ERR unknown subcommand")
    );
}

/// redis-py's `Lock` scripts (redis/lock.py), byte for byte.
const RELEASE: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        redis.call('del', KEYS[1])
        return 1
    ";
const EXTEND: &str = "
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        local expiration = redis.call('pttl', KEYS[1])
        if not expiration then
            expiration = 0
        end
        if expiration < 0 then
            return 0
        end

        local newttl = ARGV[2]
        if ARGV[3] == \"0\" then
            newttl = ARGV[2] + expiration
        end
        redis.call('pexpire', KEYS[1], newttl)
        return 1
    ";

#[test]
fn redis_py_lock_scripts_release_and_extend_only_the_owners_lock() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    assert_eq!(c.line("SET lock owner-a NX PX 60000"), V::ok());
    assert_eq!(c.line("SET lock owner-b NX PX 60000"), V::Nil);
    // Not the owner: nothing changes.
    assert_eq!(eval(&mut c, RELEASE, &["lock"], &["owner-b"]), V::Int(0));
    assert_eq!(
        eval(&mut c, EXTEND, &["lock"], &["owner-b", "1000", "0"]),
        V::Int(0)
    );
    assert_eq!(c.line("GET lock"), V::bulk(b"owner-a"));
    // The owner extends (adding to the time left) and releases.
    assert_eq!(
        eval(&mut c, EXTEND, &["lock"], &["owner-a", "60000", "0"]),
        V::Int(1)
    );
    let V::Int(ttl) = c.line("PTTL lock") else {
        panic!("PTTL")
    };
    assert!(ttl > 60_000 && ttl <= 120_000, "{ttl}");
    assert_eq!(eval(&mut c, RELEASE, &["lock"], &["owner-a"]), V::Int(1));
    assert_eq!(c.line("GET lock"), V::Nil);
    assert_eq!(c.line("SET lock owner-b NX PX 60000"), V::ok());
}

#[test]
fn concurrent_read_modify_write_scripts_lose_no_update() {
    let s = setup(Some(AuthPolicy::Open));
    const SCRIPT: &str = "local v = tonumber(redis.call('GET', KEYS[1]) or '0') \
                          redis.call('SET', KEYS[1], v + 1) return v + 1";
    let (threads, each) = (4, 150);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let mut c = s.conn();
            scope.spawn(move || {
                for _ in 0..each {
                    let V::Int(_) = eval(&mut c, SCRIPT, &["counter"], &[]) else {
                        panic!("script failed")
                    };
                }
            });
        }
    });
    let mut c = s.conn();
    assert_eq!(
        c.line("GET counter"),
        V::bulk((threads * each).to_string().as_bytes())
    );
}

#[test]
fn scripts_stay_in_bounds_and_the_front_end_serves_on() {
    let s = setup(Some(AuthPolicy::Open));
    let mut c = s.conn();
    assert!(
        eval(&mut c, "return redis.call('GET', 'other')", &["k"], &[])
            .is_err_starting("ERR Script attempted to access key 'other'")
    );
    assert!(
        eval(&mut c, "return redis.call('MULTI')", &[], &[])
            .is_err_starting("ERR This Redis command is not allowed from script")
    );
    assert!(
        eval(&mut c, "return redis.call('FLUSHDB')", &[], &[])
            .is_err_starting("ERR 'flushdb' is not supported in scripts")
    );
    assert!(
        eval(&mut c, "return redis.call('NOPE')", &[], &[]).is_err_starting("ERR unknown command")
    );
    assert!(
        eval(&mut c, "return redis.call({})", &[], &[]).is_err_starting("ERR Error running script")
    );
    let ro = c.cmd(&[
        b"EVAL_RO",
        b"return redis.call('SET', KEYS[1], 1)",
        b"1",
        b"k",
    ]);
    assert!(
        ro.is_err_starting("ERR Write commands are not allowed from read-only scripts"),
        "{ro:?}"
    );
    assert_eq!(
        c.cmd(&[b"EVAL_RO", b"return redis.call('GET', KEYS[1])", b"1", b"k"]),
        V::Nil
    );
    // No globals left behind for the next script, no files, no loading code.
    let V::Err(e) = eval(&mut c, "x = 1", &[], &[]) else {
        panic!("global")
    };
    assert!(
        e.contains("Script attempted to create global variable 'x'"),
        "{e}"
    );
    for code in [
        "return io",
        "return os.exit()",
        "return loadstring('return 1')",
        "return dofile('/etc/passwd')",
    ] {
        assert!(
            eval(&mut c, code, &[], &[]).is_err_starting("ERR Error running script"),
            "{code}"
        );
    }
    // A runaway loop is stopped at the time limit, even one that pcall wraps, and
    // the keys it held are free again.
    for code in [
        "while true do end",
        "while true do pcall(function() while true do end end) end",
    ] {
        let t = Instant::now();
        let V::Err(e) = eval(&mut c, code, &["held"], &[]) else {
            panic!("runaway")
        };
        assert!(e.contains("script killed"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    }
    assert_eq!(c.line("SET held 1"), V::ok());
    // A memory bomb fails alone.
    let V::Err(e) = eval(
        &mut c,
        "local t = {} for i = 1, 1e9 do t[i] = i end",
        &[],
        &[],
    ) else {
        panic!("bomb")
    };
    assert!(e.contains("memory"), "{e}");
    assert_eq!(
        eval(&mut c, "return 'still here'", &[], &[]),
        V::bulk(b"still here")
    );
    assert_eq!(c.line("PING"), V::Simple("PONG".into()));
    let V::Bulk(info) = c.line("INFO memory") else {
        panic!("INFO")
    };
    assert!(String::from_utf8_lossy(&info).contains("number_of_cached_scripts:"));
    let V::Bulk(stats) = c.line("INFO stats") else {
        panic!("INFO")
    };
    let stats = String::from_utf8_lossy(&stats).into_owned();
    assert!(stats.contains("scripts_killed:2\r\n"), "{stats}");
    assert!(
        stats.contains("scripts_returned:2\r\nscripts_failed:12\r\n"),
        "{stats}"
    );
}

#[test]
fn a_read_only_token_runs_read_only_scripts_only() {
    let s = setup(None);
    let mut c = s.conn();
    let ro = s.store.cache().tokens().expect("tokens").read_only.clone();
    assert_eq!(c.cmd(&[b"AUTH", ro.as_bytes()]), V::ok());
    assert!(eval(&mut c, "return 1", &[], &[]).is_err_starting("NOPERM"));
    assert_eq!(c.cmd(&[b"EVAL_RO", b"return 1", b"0"]), V::Int(1));
    assert!(c.line("SCRIPT FLUSH").is_err_starting("NOPERM"));
}

/// On a one-loop front end (both connections on it), `slow` sends `burst`, which
/// runs a script until the 5 s limit; `other` must be served meanwhile. Returns
/// the front end, `slow` (its replies unread) and `other`.
fn other_served_while(burst: &[u8]) -> (common::Setup, Conn, Conn) {
    let s = common::setup_with(Some(AuthPolicy::Open), |cfg| cfg.threads = 1);
    let mut slow = s.conn();
    let mut other = s.conn();
    slow.send_raw(burst);
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    assert_eq!(other.line("SET o 1"), V::ok());
    assert_eq!(other.line("GET o"), V::bulk(b"1"));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "another connection waited {:?} for a running script",
        t.elapsed()
    );
    (s, slow, other)
}

#[test]
fn a_long_script_does_not_hold_up_other_connections() {
    let (_s, mut slow, _other) =
        other_served_while(&Conn::encode(&[b"EVAL", b"while true do end", b"0"]));
    let V::Err(e) = slow.reply() else {
        panic!("runaway")
    };
    assert!(e.contains("script killed"), "{e}");
}

#[test]
fn a_long_script_inside_a_transaction_does_not_hold_up_other_connections() {
    let mut burst = Conn::encode(&[b"MULTI"]);
    burst.extend(Conn::encode(&[b"SET", b"t", b"before"]));
    burst.extend(Conn::encode(&[b"EVAL", b"while true do end", b"0"]));
    burst.extend(Conn::encode(&[b"SET", b"t", b"after"]));
    burst.extend(Conn::encode(&[b"EXEC"]));
    let (_s, mut slow, mut other) = other_served_while(&burst);
    assert_eq!(slow.reply(), V::ok());
    for _ in 0..3 {
        assert_eq!(slow.reply(), V::Simple("QUEUED".into()));
    }
    // As in Redis: the script's error is its slot of the reply, the rest applied.
    let V::Arr(r) = slow.reply() else {
        panic!("EXEC answers an array")
    };
    assert_eq!(r.len(), 3);
    assert_eq!(r[0], V::ok());
    assert!(
        matches!(&r[1], V::Err(e) if e.contains("script killed")),
        "{r:?}"
    );
    assert_eq!(r[2], V::ok());
    assert_eq!(other.line("GET t"), V::bulk(b"after"));
}
