//! Fault injection on real processes: a server worker thread that panics, and a manager
//! SIGKILLed between placing a cache's regions and committing it.

mod common;

use std::time::Duration;

use common::{bin, diff, eventually, pattern};
use farcache_client::{ClientConfig, ClientError};
use farcache_proto::control::ServerStats;
use farcache_testkit::{ClusterOptions, ProcessCluster};

const REGION: u64 = 64 << 10;

fn stats(c: &ProcessCluster, i: usize) -> ServerStats {
    common::server_stats(c, i)
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: sending a signal to a child process this test started.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0);
}

/// A worker that panics is replaced: the connection it served gets an error, the
/// server stays up with every byte it held, and later clients are served.
#[test]
fn a_panicking_worker_is_replaced_and_nothing_is_lost() {
    let opts = ClusterOptions::default()
        .servers(1)
        .server_threads(2)
        .region_size(REGION)
        .server_env("FARCACHE_FAULT_INJECTION", "1");
    let c = ProcessCluster::start(bin(), &opts).expect("cluster");
    let pid = c.server_pid(0).expect("pid");
    let admin = c.client().expect("client");
    let cache = admin.create("survives", 4 * REGION).expect("create");
    let img = pattern(11, 4 * REGION as usize);
    cache.write(0, &img).expect("fill");
    for round in 1..=3u64 {
        // A separate client, so only its connection meets the panic.
        let victim = c
            .client_with(ClientConfig::new("").op_timeout(Duration::from_secs(5)))
            .expect("victim client");
        let v = victim.open("survives").expect("open");
        let e = v
            .execute("__panic", 0, b"")
            .expect_err("the invocation that panicked gets an error");
        let text = e.to_string();
        assert!(
            matches!(e, ClientError::Op(_)) && !text.is_empty(),
            "round {round}: {e}"
        );
        assert!(
            std::fs::metadata(format!("/proc/{pid}")).is_ok(),
            "round {round}: the server exited"
        );
        let fresh = c.client().expect("a new client");
        let f = fresh.open("survives").expect("open");
        let got = f.read(0, 4 * REGION).expect("read after the panic");
        assert!(diff(&got, &img).is_none(), "round {round}: data changed");
        eventually(
            "the panic is counted",
            Duration::from_secs(5),
            Duration::from_millis(20),
            || (stats(&c, 0).worker_panics == round).then_some(()),
        );
    }
}

/// The manager dies after a server took a region of a new cache and before the cache
/// was committed. After it restarts, heartbeats show the server holds regions no
/// cache owns, and the manager frees them: servers and catalogue agree again.
#[test]
fn regions_orphaned_by_a_manager_killed_mid_create_are_freed() {
    let opts = ClusterOptions::default()
        .servers(2)
        .region_size(REGION)
        .server_memory(16 << 20);
    let mut c = ProcessCluster::start(bin(), &opts).expect("cluster");
    let client = c.client().expect("client");
    let keep = client.create("keep", 2 * REGION).expect("create");
    let img = pattern(5, 2 * REGION as usize);
    keep.write(0, &img).expect("fill");

    // Placement breaks ties by the lowest id: the new cache's first region goes to
    // that server. The other one stops answering, so the create hangs after it.
    let status = client.status().expect("status");
    let addrs: Vec<String> = (0..2).map(|i| c.server_addr(i).to_string()).collect();
    let index_of = |addr: &str| addrs.iter().position(|a| a == addr).expect("known");
    let first = status
        .servers
        .iter()
        .min_by_key(|s| s.id)
        .map(|s| index_of(&s.addr))
        .expect("servers");
    let stopped = c.server_pid(1 - first).expect("pid");
    signal(stopped, libc::SIGSTOP);
    let creator = {
        let cfg = ClientConfig::new(c.manager_addr())
            .secret(c.secret().clone())
            .op_timeout(Duration::from_secs(5));
        std::thread::spawn(move || {
            let cl = farcache_client::Client::with_config(cfg)?;
            cl.create("orphan", 8 * REGION).map(|_| ())
        })
    };
    eventually(
        "the first server took a region of the new cache",
        Duration::from_secs(10),
        Duration::from_millis(10),
        || (stats(&c, first).regions > 1).then_some(()),
    );
    c.restart_manager().expect("restart manager");
    signal(stopped, libc::SIGCONT);
    let _ = creator.join();

    // Eventually every server holds exactly what the catalogue places on it.
    let admin = c.client().expect("client after restart");
    eventually(
        "servers and catalogue agree",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let status = admin.status().ok()?;
            let agree = status.servers.iter().all(|sv| {
                let placed: usize = status
                    .caches
                    .iter()
                    .map(|cc| cc.regions.iter().filter(|&&r| r == sv.id).count())
                    .sum();
                placed == stats(&c, index_of(&sv.addr)).regions as usize
            });
            agree.then_some(())
        },
    );
    let got = keep.read(0, 2 * REGION).expect("read");
    assert!(
        diff(&got, &img).is_none(),
        "the committed cache is untouched"
    );
}
