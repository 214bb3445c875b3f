//! The real tools against the front end: a `redis-cli` session (its own parser and
//! RESP3 handling) and `redis-benchmark` (pipelined SET/GET from 50 connections,
//! with AUTH), checked by reading the data back through the native store API.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::setup;

fn tool(name: &str) -> String {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "{name} is not installed: `apt-get install -y redis-tools` (scripts/env.sh does it as root)"
    );
    name.to_string()
}

#[test]
fn redis_cli_session() {
    let s = setup(None);
    let token = s.store.cache().tokens().unwrap().read_write.clone();
    let port = s.addr().port().to_string();
    let script = "PING\nSET greeting \"hello world\"\nGET greeting\nAPPEND greeting !\nGETRANGE greeting 0 4\nINCRBY visits 5\nMSET a 1 b 2\nMGET a b nothere\nEXPIRE a 100\nTTL a\nDEL a b\nEXISTS a b\nHELLO 3\nGET nothere\nNOSUCHCMD x\nGET greeting\n";
    let mut child = Command::new(tool("redis-cli"))
        .args(["-p", &port, "-a", &token, "--no-auth-warning"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redis-cli");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("redis-cli output");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    // redis-cli without a terminal prints raw values, one per line.
    let want_prefix = [
        "PONG",
        "OK",
        "hello world",
        "12",
        "hello",
        "5",
        "OK",
        "1",
        "2",
        "",
        "1",
    ];
    assert_eq!(&lines[..want_prefix.len()], &want_prefix, "{text}");
    let rest = &lines[want_prefix.len()..];
    let ttl: i64 = rest[0].parse().expect("TTL is a number");
    assert!((99..=100).contains(&ttl), "{text}");
    assert_eq!(rest[1], "2", "DEL: {text}");
    assert_eq!(rest[2], "0", "EXISTS: {text}");
    assert!(text.contains("proto 3"), "HELLO 3 map: {text}");
    assert!(text.contains("ERR unknown command 'NOSUCHCMD'"), "{text}");
    assert!(lines.contains(&"hello world!"), "{text}");
    // What redis-cli wrote is what the store holds.
    assert_eq!(
        s.store.get(b"greeting").unwrap().as_deref(),
        Some(&b"hello world!"[..])
    );
    assert_eq!(s.store.get(b"visits").unwrap().as_deref(), Some(&b"5"[..]));
}

#[test]
fn redis_benchmark_runs_and_its_writes_land() {
    let s = setup(None);
    let token = s.store.cache().tokens().unwrap().read_write.clone();
    let port = s.addr().port().to_string();
    let out = Command::new(tool("redis-benchmark"))
        .args([
            "-p", &port, "-a", &token, "-t", "set,get", "-n", "20000", "-P", "8", "-r", "1000",
            "-d", "64", "-q",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
    assert!(out.status.success(), "{text}");
    for t in ["SET:", "GET:"] {
        let line = text
            .lines()
            .rfind(|l| l.starts_with(t) && l.contains("requests per second"))
            .unwrap_or_else(|| panic!("no {t} result: {text}"));
        let rps: f64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(rps > 0.0, "{line}");
    }
    // redis-benchmark writes 64 bytes of 'x' under key:000000000NNN.
    let v = s
        .store
        .get(b"key:000000000042")
        .unwrap()
        .expect("a key redis-benchmark set");
    assert_eq!(v.len(), 64);
}

/// Values of 1 MiB + 1, 5 MiB and 100 MiB through `redis-cli -x SET` and `GET`, on
/// a 1-server and a 3-server cluster, with the store's default coding (4+2, more
/// servers than either has): stored with the coding that fits, read back intact.
#[test]
fn big_values_round_trip_through_redis_cli_on_small_clusters() {
    use farcache_resp::{AuthPolicy, Frontend, FrontendConfig};
    use farcache_store::{StoreExt, StoreOptions};
    use farcache_testkit::{ClusterOptions, LocalCluster};
    let dir = tempfile::tempdir().expect("tempdir");
    for servers in [1usize, 3] {
        let opts = ClusterOptions::default()
            .servers(servers)
            .region_size(64 << 20)
            .server_memory(if servers == 1 { 448 << 20 } else { 192 << 20 })
            .server_threads(2);
        let cluster = LocalCluster::start(&opts).expect("cluster");
        let store = cluster
            .client()
            .expect("client")
            .create_store("big", 384 << 20, &StoreOptions::default())
            .expect("store");
        let fe = Frontend::start(
            store.clone(),
            FrontendConfig::new("127.0.0.1:0", AuthPolicy::Open),
        )
        .expect("front end");
        let port = fe.local_addr().port().to_string();
        for (i, len) in [(1usize << 20) + 1, 5 << 20, 100 << 20]
            .into_iter()
            .enumerate()
        {
            // Printable bytes: redis-cli -x sends the file as is, and prints the
            // value back followed by a newline.
            let value: Vec<u8> = (0..len).map(|j| b'a' + ((j * 7 + i) % 26) as u8).collect();
            let file = dir.path().join(format!("v{servers}-{i}"));
            std::fs::write(&file, &value).expect("value file");
            let key = format!("big{i}");
            let set = Command::new(tool("redis-cli"))
                .args(["-p", &port, "-x", "SET", &key])
                .stdin(std::fs::File::open(&file).expect("open"))
                .output()
                .expect("redis-cli SET");
            let said = String::from_utf8_lossy(&set.stdout);
            assert_eq!(said.trim(), "OK", "{servers} servers, {len} bytes: {said}");
            let get = Command::new("redis-cli")
                .args(["-p", &port, "GET", &key])
                .output()
                .expect("redis-cli GET");
            let mut got = get.stdout;
            assert_eq!(got.pop(), Some(b'\n'));
            if got != value {
                // Say what came back, and what the store itself reads now.
                let first = got.iter().zip(&value).position(|(a, b)| a != b);
                let direct = match store.get(key.as_bytes()) {
                    Ok(Some(v)) => format!("{} bytes, equal: {}", v.len(), v[..] == value[..]),
                    other => format!("{other:?}"),
                };
                panic!(
                    "{servers} servers, {len} bytes came back different: {} bytes, first \
                     difference at {first:?}, starting {:?}; redis-cli said on stderr {:?}; \
                     the store reads {direct}; store stats {:?}",
                    got.len(),
                    String::from_utf8_lossy(&got[..got.len().min(200)]),
                    String::from_utf8_lossy(&get.stderr),
                    store.stats()
                );
            }
            let m = store
                .manifest(key.as_bytes())
                .expect("manifest")
                .expect("erasure coded");
            let want = if servers == 1 { (1, 0) } else { (2, 1) };
            assert_eq!((m.data, m.parity), want);
        }
    }
}
