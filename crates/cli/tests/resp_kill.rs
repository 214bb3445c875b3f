//! `farcache resp` as a process in front of a store with two copies of every region:
//! a farcache server is SIGKILLed under it, and every key written through the front
//! end is read back through it, intact (after the backups take over); the front end
//! never drops its clients meanwhile. A second front end on a one-copy store keeps
//! answering too, with clear errors (not nils, not a closed connection) for the keys
//! whose only copy died.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns: a failure is the test failing

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use farcache_testkit::{ClusterOptions, ProcessCluster};

struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

#[derive(Debug, PartialEq)]
enum V {
    Ok(String),
    Err(String),
    Bulk(Option<Vec<u8>>),
    Int(i64),
}

impl Resp {
    fn connect(addr: &str) -> Self {
        let s = TcpStream::connect(addr).expect("connect front end");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Self {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }

    fn cmd(&mut self, args: &[&[u8]]) -> V {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&out).expect("send");
        self.read_reply()
    }
}

struct Frontend(Child);

impl Drop for Frontend {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn frontend(cl: &ProcessCluster, store: &str, replicas: u32, dir: &Path) -> (Frontend, String) {
    let addr_file = dir.join(format!("{store}.addr"));
    // A front end started again on the store must not be found at the old address.
    let _ = std::fs::remove_file(&addr_file);
    let child = Command::new(common::bin())
        .args([
            "resp",
            "--manager",
            cl.manager_addr(),
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--secret-file")
        .arg(cl.secret_path())
        .args([
            "--store",
            store,
            "--capacity",
            "6MiB",
            "--no-auth",
            "--threads",
            "2",
        ])
        .args(["--replicas", &replicas.to_string()])
        .arg("--addr-file")
        .arg(&addr_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start farcache resp");
    let fe = Frontend(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(a) = std::fs::read_to_string(&addr_file)
            && a.ends_with('\n')
        {
            return (fe, a.trim().to_string());
        }
        assert!(Instant::now() < deadline, "front end did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn value(i: usize) -> Vec<u8> {
    format!("value-{i}-").repeat(1 + i % 7).into_bytes()
}

#[test]
fn a_killed_server_loses_no_key_written_through_the_front_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = ClusterOptions::default()
        .servers(3)
        .region_size(1 << 20)
        .server_memory(32 << 20);
    opts.heartbeat_timeout = Duration::from_secs(2);
    let mut cl = ProcessCluster::start(common::bin(), &opts).expect("cluster");
    let (_fe2, addr2) = frontend(&cl, "copies", 2, dir.path());
    let (_fe1, addr1) = frontend(&cl, "single", 1, dir.path());
    let mut c2 = Resp::connect(&addr2);
    let mut c1 = Resp::connect(&addr1);
    let n = 400;
    for i in 0..n {
        let k = format!("k{i}");
        assert_eq!(
            c2.cmd(&[b"SET", k.as_bytes(), &value(i)]),
            V::Ok("OK".into())
        );
        assert_eq!(
            c1.cmd(&[b"SET", k.as_bytes(), &value(i)]),
            V::Ok("OK".into())
        );
    }
    assert_eq!(c2.cmd(&[b"INCRBY", b"ctr", b"7"]), V::Int(7));

    cl.kill_server(0).expect("SIGKILL server 0");

    // Two copies: every key comes back whole once the backups own the regions.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<usize> = (0..n).collect();
    while !pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} keys still unreadable, e.g. k{}",
            pending.len(),
            pending[0]
        );
        pending.retain(|&i| {
            let k = format!("k{i}");
            match c2.cmd(&[b"GET", k.as_bytes()]) {
                V::Bulk(Some(v)) => {
                    assert_eq!(v, value(i), "k{i} came back different");
                    false
                }
                V::Err(e) => {
                    assert!(e.starts_with("TRYAGAIN") || e.starts_with("ERR"), "{e}");
                    true
                }
                other => panic!("k{i}: a written key answered {other:?}"),
            }
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert_eq!(c2.cmd(&[b"INCR", b"ctr"]), V::Int(8));

    // One copy: the front end answers every key, with the value or an error naming
    // the loss; never a nil for a key that was written.
    let mut lost = 0;
    for i in 0..n {
        let k = format!("k{i}");
        match c1.cmd(&[b"GET", k.as_bytes()]) {
            V::Bulk(Some(v)) => assert_eq!(v, value(i)),
            V::Err(_) => lost += 1,
            other => panic!("k{i} on the one-copy store answered {other:?}"),
        }
    }
    eprintln!("one-copy store: {lost} of {n} keys reported lost or unavailable");
    assert_eq!(c1.cmd(&[b"PING"]), V::Ok("PONG".into()));
}

/// Sends every command of `cmds` at once (a pipeline) and reads their replies.
fn pipeline(c: &mut Resp, cmds: &[Vec<Vec<u8>>]) -> Vec<V> {
    let mut out = Vec::new();
    for args in cmds {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }
    c.w.write_all(&out).expect("send");
    cmds.iter().map(|_| c.read_reply()).collect()
}

impl Resp {
    fn read_reply(&mut self) -> V {
        let mut line = String::new();
        self.r.read_line(&mut line).expect("reply");
        let body = line.trim_end().get(1..).unwrap_or("").to_string();
        match line.as_bytes().first() {
            Some(b'+') => V::Ok(body),
            Some(b'-') => V::Err(body),
            Some(b':') => V::Int(body.parse().unwrap()),
            Some(b'$') => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    return V::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                V::Bulk(Some(b))
            }
            other => panic!("unexpected reply {other:?}: {line:?}"),
        }
    }
}

fn args(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// `n` keys `{prefix}{i}` set to `value(i)`, 1,000 to an `MSET`.
fn fill(c: &mut Resp, prefix: &str, n: usize) {
    for lo in (0..n).step_by(1000) {
        let mut cmd = args(&[b"MSET"]);
        for i in lo..(lo + 1000).min(n) {
            cmd.push(format!("{prefix}{i}").into_bytes());
            cmd.push(value(i));
        }
        assert_eq!(pipeline(c, &[cmd]), vec![V::Ok("OK".into())]);
    }
}

/// After a big `DEL` and a run of `RENAME`s were cut off (by a killed server or a
/// killed front end): a `DEL` sent again finishes the job and every deleted key
/// reads nil; every renamed value is whole under one of its two names (under both
/// only if the rename did not answer OK); the keys nobody touched are intact.
fn check_after_cut(c: &mut Resp, dels: usize, renames: &[V], kept: usize) {
    let mut del = args(&[b"DEL"]);
    del.extend((0..dels).map(|i| format!("d{i}").into_bytes()));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match pipeline(c, std::slice::from_ref(&del)).pop() {
            Some(V::Int(_)) => break,
            Some(V::Err(e)) if Instant::now() < deadline => {
                eprintln!("DEL again: {e}");
                std::thread::sleep(Duration::from_millis(300));
            }
            other => panic!("DEL sent again answered {other:?}"),
        }
    }
    let gets: Vec<Vec<Vec<u8>>> = (0..dels)
        .map(|i| vec![b"GET".to_vec(), format!("d{i}").into_bytes()])
        .collect();
    for (i, r) in pipeline(c, &gets).into_iter().enumerate() {
        assert_eq!(r, V::Bulk(None), "d{i} is still there after DEL");
    }
    for (i, answered) in renames.iter().enumerate() {
        let r = pipeline(
            c,
            &[
                vec![b"GET".to_vec(), format!("r{i}").into_bytes()],
                vec![b"GET".to_vec(), format!("r{i}-moved").into_bytes()],
            ],
        );
        let whole = V::Bulk(Some(value(i)));
        match (&r[0], &r[1], answered) {
            (V::Bulk(None), w, _) if *w == whole => {}
            (s, V::Bulk(None), V::Err(_)) if *s == whole => {}
            (s, w, V::Err(_)) if *s == whole && *w == whole => {}
            _ => panic!("r{i} after RENAME answered {answered:?}: source {r:?}"),
        }
    }
    let gets: Vec<Vec<Vec<u8>>> = (0..kept)
        .map(|i| vec![b"GET".to_vec(), format!("k{i}").into_bytes()])
        .collect();
    for (i, r) in pipeline(c, &gets).into_iter().enumerate() {
        assert_eq!(r, V::Bulk(Some(value(i))), "k{i}, never touched, changed");
    }
}

/// A big `DEL` (offloaded, deleted a chunk at a time) and a pipeline of `RENAME`s,
/// each on its own connection; `cut` runs once both are under way. Returns what
/// the `DEL` and every `RENAME` answered (an error where the cut broke them; a
/// closed connection reads as an error for every reply left).
fn cut_mid_way(addr: &str, dels: usize, renames: usize, cut: impl FnOnce()) -> (V, Vec<V>) {
    let addr_d = addr.to_string();
    let start = Instant::now();
    let del = std::thread::spawn(move || {
        let mut c = Resp::connect(&addr_d);
        let mut del = args(&[b"DEL"]);
        del.extend((0..dels).map(|i| format!("d{i}").into_bytes()));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pipeline(&mut c, &[del]).pop()
        }));
        let v = match r {
            Ok(Some(v)) => v,
            _ => V::Err("connection closed".into()),
        };
        (v, start.elapsed())
    });
    let addr_r = addr.to_string();
    let ren = std::thread::spawn(move || {
        let mut c = Resp::connect(&addr_r);
        let mut out = Vec::new();
        for i in 0..renames {
            let cmd = vec![
                b"RENAME".to_vec(),
                format!("r{i}").into_bytes(),
                format!("r{i}-moved").into_bytes(),
            ];
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pipeline(&mut c, &[cmd]).pop()
            }));
            match r {
                Ok(Some(v)) => out.push(v),
                _ => break,
            }
        }
        out.resize_with(renames, || V::Err("connection closed".into()));
        out
    });
    // A counter stepped one INCR at a time: each answer is the last one plus one,
    // plus at most the INCRs that failed in between (an INCR applied twice, say
    // retried after a failover, would skip ahead).
    let addr_i = addr.to_string();
    let incr = std::thread::spawn(move || {
        let mut c = Resp::connect(&addr_i);
        // The last answer, and the INCRs failed (or cut off) since it.
        let (mut last, mut unsure) = (0i64, 0i64);
        for _ in 0..renames {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pipeline(&mut c, &[args(&[b"INCR", b"ctr"])]).pop()
            }));
            match r {
                Ok(Some(V::Int(n))) => {
                    assert!(
                        n > last && n <= last + 1 + unsure,
                        "INCR answered {n} after {last} and {unsure} failed"
                    );
                    (last, unsure) = (n, 0);
                }
                Ok(Some(V::Err(_))) => unsure += 1,
                Ok(other) => panic!("INCR answered {other:?}"),
                // The connection closed: the last INCR may or may not have landed.
                Err(_) => {
                    unsure += 1;
                    break;
                }
            }
        }
        (last, unsure)
    });
    std::thread::sleep(Duration::from_millis(10));
    let cut_at = start.elapsed();
    cut();
    let (del, took) = del.join().expect("DEL");
    // The DEL must still have been running when the cut came.
    assert!(
        took > cut_at,
        "the DEL ({took:?}) was over before the cut ({cut_at:?})"
    );
    eprintln!("cut at {cut_at:?}; the DEL answered after {took:?}");
    let counted = incr.join().expect("INCRs");
    INCRS.with(|c| c.set(counted));
    (del, ren.join().expect("RENAMEs"))
}

thread_local! {
    /// The INCRs of the last `cut_mid_way`: the last answer, and the INCRs failed or
    /// cut off after it.
    static INCRS: std::cell::Cell<(i64, i64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The counter `cut_mid_way` stepped: it holds its last answer, plus at most the
/// INCRs that failed after it.
fn check_counter(c: &mut Resp) {
    let (last, unsure) = INCRS.with(|c| c.get());
    let v = match pipeline(c, &[args(&[b"GET", b"ctr"])]).pop() {
        Some(V::Bulk(Some(v))) => String::from_utf8(v).unwrap().parse::<i64>().unwrap(),
        Some(V::Bulk(None)) => 0,
        other => panic!("GET ctr answered {other:?}"),
    };
    eprintln!("ctr = {v}: last answer {last}, {unsure} INCRs failed or cut after it");
    assert!(
        (last..=last + unsure).contains(&v),
        "ctr = {v} after the answer {last} and {unsure} failed INCRs"
    );
}

#[test]
fn a_server_killed_mid_del_and_rename_leaves_every_key_whole_or_gone() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = ClusterOptions::default()
        .servers(3)
        .region_size(1 << 20)
        .server_memory(64 << 20);
    opts.heartbeat_timeout = Duration::from_secs(2);
    let cl = std::sync::Arc::new(std::sync::Mutex::new(
        ProcessCluster::start(common::bin(), &opts).expect("cluster"),
    ));
    let (_fe, addr) = {
        let g = cl.lock().unwrap();
        frontend(&g, "copies", 2, dir.path())
    };
    let mut c = Resp::connect(&addr);
    let (dels, renames, kept) = (20_000, 2_000, 2_000);
    fill(&mut c, "d", dels);
    fill(&mut c, "r", renames);
    fill(&mut c, "k", kept);
    let victim = cl.clone();
    let (del, ren) = cut_mid_way(&addr, dels, renames, move || {
        victim
            .lock()
            .unwrap()
            .kill_server(1)
            .expect("SIGKILL server 1");
    });
    let broken = ren.iter().filter(|r| matches!(r, V::Err(_))).count();
    eprintln!("DEL answered {del:?}; {broken} of {renames} RENAMEs failed");
    check_after_cut(&mut c, dels, &ren, kept);
    check_counter(&mut c);
}

#[test]
fn a_front_end_killed_mid_del_and_rename_leaves_every_key_whole_or_gone() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(1 << 20)
        .server_memory(64 << 20);
    let cl = ProcessCluster::start(common::bin(), &opts).expect("cluster");
    let (fe, addr) = frontend(&cl, "cut", 1, dir.path());
    let mut c = Resp::connect(&addr);
    let (dels, renames, kept) = (20_000, 2_000, 2_000);
    fill(&mut c, "d", dels);
    fill(&mut c, "r", renames);
    fill(&mut c, "k", kept);
    drop(c);
    let fe = std::sync::Mutex::new(Some(fe));
    let (del, ren) = cut_mid_way(&addr, dels, renames, || {
        // SIGKILL: the front end's `Drop` kills and reaps it.
        drop(fe.lock().unwrap().take());
    });
    let done = ren.iter().filter(|r| matches!(r, V::Ok(_))).count();
    eprintln!("DEL answered {del:?}; {done} of {renames} RENAMEs answered OK before the kill");
    assert!(
        done < renames,
        "every RENAME finished before the kill: the test cut nothing"
    );
    // A new front end on the same store sees what the old one left.
    let (_fe2, addr2) = frontend(&cl, "cut", 1, dir.path());
    let mut c = Resp::connect(&addr2);
    check_after_cut(&mut c, dels, &ren, kept);
    check_counter(&mut c);
}
