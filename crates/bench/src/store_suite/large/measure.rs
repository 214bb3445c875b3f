//! The farcache side of `bench store-large`: one store per object size, every object
//! put erasure coded, GETs first-d and waiting for all chunks, then the same with one
//! server stopped.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use farcache_client::{Bytes, Client};
use farcache_store::{Manifest, PutOptions, Store, StoreError, StoreExt, StoreOptions, StoreStats};
use farcache_testkit::ProcessCluster;
use indicatif::ProgressBar;

use super::{
    EC_DATA, EC_PARITY, Objects, REGION, Run, Sampler, StoreLargeOptions, cluster_err,
    store_capacity, timed_gets,
};
use crate::error::Result;

/// Progress steps per size: put, GET first-d, GET wait-all, the stopped server's two,
/// the stopped home's one.
pub(super) const PHASES: usize = 6;

/// Everything measured for one object size.
#[derive(Debug, Clone)]
pub(super) struct SizeOutcome {
    pub capacity: u64,
    pub put: Run,
    pub get: Run,
    pub get_all: Run,
    /// `Err`: why the stopped-server runs did not happen.
    pub stopped: std::result::Result<Stopped, String>,
    /// `Err`: why the stopped-home run did not happen.
    pub home_stopped: std::result::Result<HomeStopped, String>,
    /// Objects whose manifest says RS(d+p) with this bench's d and p.
    pub coded: u64,
    /// The census right after the puts.
    pub stats: std::result::Result<StoreStats, String>,
    /// Reads of every object once more after the stopped server resumed.
    pub after: Run,
}

/// The runs with one server stopped.
#[derive(Debug, Clone)]
pub(super) struct Stopped {
    /// The stopped server's id and its index in the cluster.
    pub server: u32,
    pub process: usize,
    /// Objects with a data chunk on it and their home elsewhere: the ones read.
    pub readable: Vec<u64>,
    pub get: Run,
    pub get_all: Run,
}

/// The run with the objects' home server stopped: `Store::get` hedges past it.
#[derive(Debug, Clone)]
pub(super) struct HomeStopped {
    pub server: u32,
    pub process: usize,
    /// Objects whose home (manifest) is on it: the ones read.
    pub homed: Vec<u64>,
    pub get: Run,
}

/// Creates a store for `objects`, runs every phase, deletes it.
pub(super) fn run_size(
    cluster: &ProcessCluster,
    client: &Client,
    opts: &StoreLargeOptions,
    objects: &Objects,
    pb: &ProgressBar,
) -> Result<SizeOutcome> {
    let size = objects.size;
    let mib = size >> 20;
    let name = format!("bench-store-large-{size}");
    let capacity = store_capacity(objects.count, size as u64);
    pb.set_message(format!("{mib} MiB: store of {} MiB", capacity >> 20));
    let store = client
        .create_store(
            &name,
            capacity,
            &StoreOptions {
                // Pieces and small manifest copies: a roomy index keeps buckets from
                // filling (a put into a full bucket pair evicts).
                avg_value_size: 4096,
                region_size: Some(REGION),
                ec_data: EC_DATA,
                ec_parity: EC_PARITY,
                ..StoreOptions::default()
            },
        )
        .map_err(cluster_err)?;

    pb.set_message(format!("{mib} MiB: put {} objects", objects.count));
    let put = put_all(&store, objects);
    pb.inc(1);
    let manifests: Vec<Option<Manifest>> = (0..objects.count)
        .map(|i| store.manifest(&Objects::key(i)).ok().flatten())
        .collect();
    let coded = manifests
        .iter()
        .flatten()
        .filter(|m| (m.data, m.parity) == (EC_DATA, EC_PARITY))
        .count() as u64;
    let stats = store.stats().map_err(|e| e.to_string());

    let all: Vec<u64> = (0..objects.count).collect();
    // One untimed read: the first GET of a size pays for growing the client's buffers.
    let _ = store.get(&Objects::key(0));
    pb.set_message(format!("{mib} MiB: GET first-d"));
    let get = timed_gets(opts, &all, size, u64::MAX, |i| {
        get_once(|k| store.get(k), objects, i)
    });
    pb.inc(1);
    pb.set_message(format!("{mib} MiB: GET waiting for all chunks"));
    let get_all = timed_gets(opts, &all, size, u64::MAX, |i| {
        get_once(|k| store.get_waiting_for_all_chunks(k), objects, i)
    });
    pb.inc(1);

    pb.set_message(format!("{mib} MiB: one server stopped"));
    let stopped = stopped_runs(cluster, &store, &name, &manifests, opts, objects);
    pb.inc(2);
    pb.set_message(format!("{mib} MiB: home server stopped"));
    let home_stopped = home_stopped_run(cluster, &store, &name, &manifests, opts, objects);
    pb.inc(1);
    // Everything reads back once the server runs again.
    let after = timed_gets(
        &StoreLargeOptions {
            duration: Duration::ZERO,
            min_gets: objects.count,
            ..opts.clone()
        },
        &all,
        size,
        objects.count,
        |i| get_once(|k| store.get(k), objects, i),
    );
    // The handle returns the items it kept for reuse when dropped: before the delete.
    drop(store);
    client.delete(&name).map_err(cluster_err)?;
    Ok(SizeOutcome {
        capacity,
        put,
        get,
        get_all,
        stopped,
        home_stopped,
        coded,
        stats,
        after,
    })
}

/// `put_large` of every object, one at a time (`put` would store a value of exactly
/// the 1 MiB threshold whole).
fn put_all(store: &Store, objects: &Objects) -> Run {
    let mut buf = objects.buffer();
    let mut s = Sampler::default();
    for i in 0..objects.count {
        Objects::stamp(i, &mut buf);
        let key = Objects::key(i);
        let t = Instant::now();
        let r = store.put_large(&key, &buf, PutOptions::default());
        let took = t.elapsed();
        s.record(
            took,
            match r {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!("object {i}: not stored")),
                Err(e) => Err(format!("object {i}: {e}")),
            },
        );
    }
    s.finish(objects.size)
}

/// Times one read of object `i`; its value is checked after the clock stopped.
fn get_once(
    read: impl FnOnce(&[u8]) -> std::result::Result<Option<Bytes>, StoreError>,
    objects: &Objects,
    i: u64,
) -> (Duration, std::result::Result<(), String>) {
    let key = Objects::key(i);
    let t = Instant::now();
    let r = read(&key);
    let took = t.elapsed();
    let outcome = match r {
        Ok(Some(v)) => objects.check(i, &v),
        Ok(None) => Err(format!("object {i}: missing")),
        Err(e) => Err(format!("object {i}: {e}")),
    };
    (took, outcome)
}

/// The server (id) holding each shard's region.
fn shard_server(store: &Store, shard: u32) -> Option<u32> {
    let info = store.cache().info();
    let at = u64::from(shard) * store.descriptor().shard_size;
    info.regions
        .get((at / info.region_size.max(1)) as usize)
        .copied()
}

/// The server to stop and the objects to read while it is: the server holding a data
/// chunk (other than chunk 0, whose first shard is the key's home) of the most
/// objects, and those objects. A stopped home would stall the manifest read itself,
/// which first-d reads do not cover (docs/store.md).
fn pick_victim(store: &Store, manifests: &[Option<Manifest>]) -> Option<(u32, Vec<u64>)> {
    let mut by_server: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (i, m) in manifests.iter().enumerate() {
        let Some(m) = m else { continue };
        let server = |c: usize| {
            m.shards
                .get(c)
                .and_then(|s| s.first())
                .and_then(|&s| shard_server(store, s))
        };
        let Some(home) = server(0) else { continue };
        let holders: std::collections::BTreeSet<u32> = (1..usize::from(m.data))
            .filter_map(server)
            .filter(|&s| s != home)
            .collect();
        for s in holders {
            by_server.entry(s).or_default().push(i as u64);
        }
    }
    // Most objects first, the lowest id on a tie.
    by_server
        .into_iter()
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)))
}

/// The server that is home (chunk 0's server, where the manifest lives) of the most
/// objects, and those objects.
fn pick_home(store: &Store, manifests: &[Option<Manifest>]) -> Option<(u32, Vec<u64>)> {
    let mut by_server: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for (i, m) in manifests.iter().enumerate() {
        if let Some(home) = m
            .as_ref()
            .and_then(|m| m.shards.first())
            .and_then(|s| s.first())
            .and_then(|&s| shard_server(store, s))
        {
            by_server.entry(home).or_default().push(i as u64);
        }
    }
    by_server
        .into_iter()
        .max_by(|a, b| a.1.len().cmp(&b.1.len()).then(b.0.cmp(&a.0)))
}

/// The server process holding `server`'s id, and its pid.
fn process_of(
    cluster: &ProcessCluster,
    store: &Store,
    server: u32,
) -> std::result::Result<(usize, libc::pid_t), String> {
    let info = store.cache().info();
    let addr = info
        .servers
        .iter()
        .find(|s| s.id == server)
        .map(|s| s.addr.clone())
        .ok_or_else(|| format!("server {server} missing from the region table"))?;
    let process = (0..cluster.server_count())
        .find(|&i| cluster.server_addr(i) == addr)
        .ok_or_else(|| format!("no server process listens on {addr}"))?;
    let pid = cluster
        .server_pid(process)
        .ok_or_else(|| format!("server process {process} is not running"))?;
    Ok((
        process,
        libc::pid_t::try_from(pid).map_err(|e| e.to_string())?,
    ))
}

/// First-d GETs of the objects homed on one server while it is stopped.
fn home_stopped_run(
    cluster: &ProcessCluster,
    store: &Store,
    name: &str,
    manifests: &[Option<Manifest>],
    opts: &StoreLargeOptions,
    objects: &Objects,
) -> std::result::Result<HomeStopped, String> {
    let (server, homed) = pick_home(store, manifests).ok_or("no object has a home")?;
    let (process, pid) = process_of(cluster, store, server)?;
    let get = stop_and_read(cluster, name, pid, &homed, opts, objects, false)?;
    Ok(HomeStopped {
        server,
        process,
        homed,
        get,
    })
}

/// The stopped-server runs: first-d, then waiting for all chunks, each in a stop of
/// its own seen from its start by a fresh client.
fn stopped_runs(
    cluster: &ProcessCluster,
    store: &Store,
    name: &str,
    manifests: &[Option<Manifest>],
    opts: &StoreLargeOptions,
    objects: &Objects,
) -> std::result::Result<Stopped, String> {
    let (server, readable) =
        pick_victim(store, manifests).ok_or("no server holds a data chunk away from a home")?;
    let (process, pid) = process_of(cluster, store, server)?;
    let get = stop_and_read(cluster, name, pid, &readable, opts, objects, false)?;
    let get_all = stop_and_read(cluster, name, pid, &readable, opts, objects, true)?;
    Ok(Stopped {
        server,
        process,
        readable,
        get,
        get_all,
    })
}

/// One stop: a client with the short op timeout reaches every server (a connection
/// opened to a stopped server would stall in its handshake instead), the server is
/// stopped, `readable` are read for the run's duration, and the server continues.
fn stop_and_read(
    cluster: &ProcessCluster,
    name: &str,
    pid: libc::pid_t,
    readable: &[u64],
    opts: &StoreLargeOptions,
    objects: &Objects,
    wait_all: bool,
) -> std::result::Result<Run, String> {
    let client = cluster
        .client_with(opts.client_config().op_timeout(opts.op_timeout))
        .map_err(|e| e.to_string())?;
    let store = client.open_store(name).map_err(|e| e.to_string())?;
    for &i in readable {
        get_once(|k| store.get(k), objects, i).1?;
    }
    let read = |k: &[u8]| {
        if wait_all {
            store.get_waiting_for_all_chunks(k)
        } else {
            store.get(k)
        }
    };
    let stop = StoppedProcess::stop(pid).map_err(|e| format!("SIGSTOP {pid}: {e}"))?;
    let run = timed_gets(opts, readable, objects.size, u64::MAX, |i| {
        get_once(read, objects, i)
    });
    drop(stop);
    Ok(run)
}

/// A server process stopped with SIGSTOP, continued (SIGCONT) when dropped.
struct StoppedProcess {
    pid: libc::pid_t,
}

impl StoppedProcess {
    fn stop(pid: libc::pid_t) -> std::io::Result<Self> {
        signal(pid, libc::SIGSTOP)?;
        let p = Self { pid };
        // The signal is delivered asynchronously: wait until the kernel says stopped.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !is_stopped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(p)
    }
}

impl Drop for StoppedProcess {
    fn drop(&mut self) {
        if let Err(e) = signal(self.pid, libc::SIGCONT) {
            eprintln!("[farcache-bench] SIGCONT {}: {e}", self.pid);
        }
    }
}

fn signal(pid: libc::pid_t, sig: libc::c_int) -> std::io::Result<()> {
    // SAFETY: kill(2) only signals a process (a server this bench started); no memory
    // is shared with it.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether /proc says `pid` is stopped (state `T`).
fn is_stopped(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // The state follows the parenthesised command name.
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|st| st == "T"))
        })
        .unwrap_or(false)
}
