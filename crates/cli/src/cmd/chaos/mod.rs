//! `farcache chaos`: a local cluster under a verifying load while servers are
//! reclaimed with notice (SIGTERM), killed without notice (SIGKILL) and replaced by
//! new ones. Reports what a user of the cache would care about: wrong reads,
//! acknowledged writes lost (silently, or reported as `DataLost`), how long regions
//! were unavailable, migrations and their speed, and (with `--replicas 2` or more)
//! how backups took over from killed owners.
//!
//! With backups, a kill waits until every region has all its copies again (the
//! guarantee covers `replicas - 1` servers dying *at once*, not one after another
//! faster than re-replication); the report says how long those waits were.
//!
//! With `--lab` the cluster runs in the network lab (a namespace per process behind
//! one switch) and the run adds partitions (manager–server, client–server,
//! server–server; one way or both), vanishing hosts (silence, no RST) and heals. Every
//! op is recorded and the history is checked as linearizable registers
//! (testkit's `history`): stale reads, reads of bytes no write put there, reads back
//! in time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use farcache_client::{Client, ClientConfig, CreateOptions};
use farcache_proto::control::{ClusterStatus, ServerState};
use farcache_testkit::history::{self, History};
use farcache_testkit::{ClusterOptions, Lab, ProcessCluster, Verifier, VerifyReport};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::size::{parse_duration, parse_size};

mod acks;
mod control;
mod report;

use acks::Acks;
use report::{build, print};

#[derive(clap::Args)]
pub struct Args {
    /// How long the run lasts.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    duration: std::time::Duration,
    /// Servers at the start (each replaced when it leaves).
    #[arg(long, default_value_t = 4)]
    servers: usize,
    /// Reclamations with notice (SIGTERM) over the run.
    #[arg(long, default_value_t = 20)]
    reclaims: u32,
    /// Kills without notice (SIGKILL) over the run.
    #[arg(long, default_value_t = 10)]
    kills: u32,
    /// Copies of each region. With 1, data on a killed server is lost and must be
    /// reported as such; with 2 or more no acknowledged write may be lost.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    region_size: u64,
    #[arg(long, default_value = "32MiB", value_parser = parse_size)]
    cache_size: u64,
    /// Grace given to reclaimed servers.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    grace: std::time::Duration,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the JSON report goes.
    #[arg(long, default_value = "chaos.json")]
    json: PathBuf,
    /// Run in the network lab (root): each process on a host of its own, so links
    /// can be cut and hosts can vanish.
    #[arg(long)]
    lab: bool,
    /// Partitions over the run (with --lab): a link cut one way or both, healed after
    /// --fault-for.
    #[arg(long, default_value_t = 0)]
    partitions: u32,
    /// Hosts that vanish over the run (with --lab): silent, no RST, back after
    /// --fault-for.
    #[arg(long, default_value_t = 0)]
    vanishes: u32,
    /// How long a partition or a vanished host lasts.
    #[arg(long, default_value = "2500ms", value_parser = parse_duration)]
    fault_for: std::time::Duration,
    /// Managers: with 2 or more they share a 3-member etcd on loopback (one leads,
    /// the others stand by) and the leader is SIGKILLed --leader-kills times.
    #[arg(long, default_value_t = 1)]
    managers: usize,
    /// Leader kills over the run (with --managers 2 or more; default 3 then). The
    /// killed manager starts again as a standby once another leads.
    #[arg(long)]
    leader_kills: Option<u32>,
    /// Silence after which the manager declares a server dead (leases are 0.8 of it).
    /// Default 1s; 3s with several managers, so leases outlast a change of leader
    /// (the test etcd's lease is 1 s).
    #[arg(long, value_parser = parse_duration)]
    dead_after: Option<std::time::Duration>,
}

#[derive(Debug, Serialize)]
struct Event {
    at_ms: u64,
    kind: &'static str,
    server: u32,
    /// For partitions: which link, e.g. "manager <-/-> s2" or "s1 -/-> manager".
    #[serde(skip_serializing_if = "String::is_empty")]
    what: String,
}

pub fn run(a: Args) -> Result<()> {
    if !a.lab && (a.partitions > 0 || a.vanishes > 0) {
        bail!("--partitions and --vanishes need --lab (links can only be cut in the lab)");
    }
    if a.managers == 0 {
        bail!("--managers must be at least 1");
    }
    if a.managers > 1 && a.lab {
        bail!("--managers 2 or more runs etcd on loopback, which the lab's hosts do not reach");
    }
    if a.managers < 2 && a.leader_kills.is_some_and(|k| k > 0) {
        bail!("--leader-kills needs --managers 2 or more (a standby to take over)");
    }
    if a.lab {
        Lab::check().context("`farcache chaos --lab` cannot run here")?;
        let lab = Arc::new(Lab::create(&["client"])?);
        let l = lab.clone();
        return lab.run_on("client", move || run_in(a, Some(l)))?;
    }
    run_in(a, None)
}

fn run_in(a: Args, lab: Option<Arc<Lab>>) -> Result<()> {
    if a.replicas == 0 || a.replicas as usize > a.servers.saturating_sub(1) {
        bail!(
            "--replicas {} needs at least {} servers (a copy per server, plus room to move)",
            a.replicas,
            a.replicas + 1
        );
    }
    if a.servers < 2 {
        bail!("--servers must be at least 2 (regions need somewhere to go)");
    }
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    // Room for the cache thrice over (moves, new copies), and the counters' cache.
    let per_server = (a.cache_size * u64::from(a.replicas) / a.servers as u64 * 3)
        .max(a.region_size * 4)
        + a.region_size * u64::from(a.replicas) * 2;
    let mut opts = ClusterOptions::default()
        .servers(a.servers)
        .managers(a.managers)
        .region_size(a.region_size)
        .server_memory(per_server)
        .server_args(["--grace".to_string(), format!("{}ms", a.grace.as_millis())])
        // For `split_brain_ms`.
        .server_args(["--ack-windows"]);
    let dead_after = a.dead_after.unwrap_or(if a.managers > 1 {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(1)
    });
    opts.heartbeat_timeout = dead_after;
    opts.heartbeat_interval = (dead_after / 10).max(Duration::from_millis(10));
    eprintln!("starting {} servers…", a.servers);
    let mut cluster = match &lab {
        Some(l) => ProcessCluster::start_in_lab(bin, &opts, l.clone()),
        None => ProcessCluster::start(bin, &opts),
    }
    .context("starting the cluster")?;
    let lab_rtt_us = match &lab {
        Some(l) => l.rtt("client", "manager", 200)?.as_secs_f64() * 1e6,
        None => 0.0,
    };
    let client = cluster.client_with(ClientConfig::new("").op_timeout(Duration::from_secs(5)))?;
    let heartbeat_interval_ms = opts.heartbeat_interval.as_millis() as u64;
    let create = CreateOptions {
        replicas: a.replicas,
        ..CreateOptions::default()
    };
    let cache = client.create_with("chaos", a.cache_size, &create)?;
    let mut acks = Acks::new(cluster.secret().clone());
    let history = Arc::new(History::default());
    let verifier = Verifier::start_recording(&cache, a.cache_size / 8, history.clone());
    // With backups, a fetch-add in flight at a failover is sent again: it must count
    // once. (With one copy a dead owner's counters are lost, as `DataLost`.)
    let counters = if a.replicas > 1 {
        let c = client.create_with("chaos-counters", a.region_size * a.servers as u64, &create)?;
        Some(farcache_testkit::counters::Counters::start(&c))
    } else {
        None
    };
    let leader_kills = if a.managers > 1 {
        a.leader_kills.unwrap_or(3)
    } else {
        0
    };
    let control = control::Prober::start(&cluster)?;
    let mut failovers = control::Failovers::default();
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut plan: Vec<&'static str> = std::iter::repeat_n("reclaim", a.reclaims as usize)
        .chain(std::iter::repeat_n("leader_kill", leader_kills as usize))
        .chain(std::iter::repeat_n("kill", a.kills as usize))
        .chain(std::iter::repeat_n("partition", a.partitions as usize))
        .chain(std::iter::repeat_n("vanish", a.vanishes as usize))
        .collect();
    // Shuffle so kills and reclaims interleave.
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.gen_range(0..=i));
    }
    let gap = a.duration / (plan.len() as u32 + 1);
    let bar = ProgressBar::new(plan.len() as u64);
    bar.set_style(ProgressStyle::with_template(
        "{elapsed_precise} [{bar:30}] {pos}/{len} events  {msg}",
    )?);
    let (mut events, mut added) = (Vec::new(), 0u32);
    let mut max_wait = Duration::ZERO;
    let mut leaving: Vec<usize> = Vec::new();
    for (n, kind) in plan.iter().enumerate() {
        let due = gap * (n as u32 + 1);
        while started.elapsed() < due {
            reap(&mut cluster, &mut leaving);
            acks.poll(&mut cluster);
            std::thread::sleep(Duration::from_millis(20));
            bar.set_message(format!("{} ops", verifier.ops()));
        }
        if *kind == "leader_kill" {
            let at_ms = started.elapsed().as_millis() as u64;
            let e = failovers.kill_leader(&mut cluster, &client, at_ms)?;
            bar.println(format!("leader killed: {}", e.what));
            events.push(e);
            bar.inc(1);
            continue;
        }
        if *kind != "reclaim" && a.replicas > 1 {
            max_wait = max_wait.max(await_copies(&client, Duration::from_secs(30)));
        }
        let st = control::status(&client)?;
        let Some((i, id)) = pick(&mut cluster, &st, &leaving, &mut rng) else {
            bar.println("no server to act on; skipped");
            continue;
        };
        let at_ms = started.elapsed().as_millis() as u64;
        match (*kind, &lab) {
            ("kill", _) => {
                // What it acknowledged up to now is all it ever will.
                acks.poll_now(&mut cluster);
                cluster.kill_server(i)?
            }
            ("partition" | "vanish", Some(l)) => {
                let host = ProcessCluster::server_host(i);
                let what = if *kind == "vanish" {
                    l.vanish(&host)?;
                    String::new()
                } else {
                    cut_link(l, &cluster, &host, &mut rng)?
                };
                events.push(Event {
                    at_ms,
                    kind,
                    server: id,
                    what,
                });
                // The fault lasts, the load goes on; then the links come back.
                let until = Instant::now() + a.fault_for;
                while Instant::now() < until {
                    reap(&mut cluster, &mut leaving);
                    acks.poll(&mut cluster);
                    std::thread::sleep(Duration::from_millis(20));
                    bar.set_message(format!("{} ops", verifier.ops()));
                }
                l.heal()?;
                events.push(Event {
                    at_ms: started.elapsed().as_millis() as u64,
                    kind: "heal",
                    server: id,
                    what: String::new(),
                });
                bar.inc(1);
                // The server comes back (fenced if it was declared dead): no new one.
                continue;
            }
            (_, _) if *kind == "reclaim" => {
                cluster.terminate_server(i)?;
                leaving.push(i);
            }
            _ => bail!("{kind} needs --lab"),
        }
        events.push(Event {
            at_ms,
            kind,
            server: id,
            what: String::new(),
        });
        // Keep the cluster's size: a new server joins.
        cluster.add_server(&[])?;
        added += 1;
        bar.inc(1);
    }
    while started.elapsed() < a.duration {
        reap(&mut cluster, &mut leaving);
        acks.poll(&mut cluster);
        std::thread::sleep(Duration::from_millis(50));
    }
    bar.finish_with_message(format!("{} ops", verifier.ops()));
    // Let the last drains finish before the final check.
    let settle = Instant::now();
    while !leaving.is_empty() && settle.elapsed() < a.grace + Duration::from_secs(5) {
        reap(&mut cluster, &mut leaving);
        std::thread::sleep(Duration::from_millis(50));
    }
    let lost_slots: std::collections::BTreeSet<u64> =
        verifier.lost_slots().into_iter().map(|s| s * 8).collect();
    let v = verifier.stop();
    let counted = counters.map(|c| c.stop());
    acks.poll_now(&mut cluster);
    let control = control.stop();
    let mut st = control::status(&client)?;
    failovers.merge_into(&mut st);
    let events_checked: Vec<history::Event> = history
        .events()
        .into_iter()
        .filter(|e| !lost_slots.contains(&e.addr))
        .collect();
    let verdict = history::check(&events_checked, 0);
    let mut report = build(&a, started.elapsed(), &v, &st, events, added);
    report.lab_rtt_us = lab_rtt_us;
    report.checked_ops = events_checked.len() as u64;
    report.stale_reads = verdict.stale_reads;
    report.history_wrong_reads = verdict.wrong_reads;
    report.reads_back_in_time = verdict.reads_back_in_time;
    report.ack_windows = acks.windows.len();
    report.split_brain_ms = acks.split_brain_ms();
    report.samples.extend(verdict.samples.iter().cloned());
    report.heartbeat_interval_ms = heartbeat_interval_ms;
    report.max_rereplication_wait_ms = max_wait.as_millis() as u64;
    report.counters = counted;
    report.managers = a.managers;
    report.leader_kills = leader_kills;
    report.manager_failovers = failovers.count;
    report.max_failover_ms = failovers.max_ms;
    report.max_control_unavailable_ms = control.max_unavailable_ms;
    report.control_probes = control.probes;
    print(&report)?;
    std::fs::write(&a.json, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", a.json.display()))?;
    outln!("report: {}", a.json.display())?;
    // The chart is a by-product of the JSON: failing to draw it only warns.
    let mut png = a.json.with_extension("png");
    if png == a.json {
        png = a.json.with_extension("chart.png");
    }
    let title = format!(
        "farcache chaos: {} servers, {} replica(s) — {} reclaims, {} kills, {} partitions, {} vanishes",
        report.servers,
        report.replicas,
        report.reclaims,
        report.kills,
        report.partitions,
        report.vanishes
    );
    let marks: Vec<(f64, &str)> = report
        .events
        .iter()
        .map(|e| (e.at_ms as f64 / 1e3, e.kind))
        .collect();
    let bucket = farcache_testkit::verify::BUCKET;
    #[cfg(feature = "bench")]
    match farcache_bench::write_chaos_chart(&png, &title, &report.timeline, bucket, &marks) {
        Ok(()) => outln!("chart: {}", png.display())?,
        Err(e) => eprintln!("warning: could not draw the chart {}: {e}", png.display()),
    }
    #[cfg(not(feature = "bench"))]
    {
        let _ = (&png, &title, &marks, bucket);
        eprintln!(
            "note: built without the bench feature: no chart (the JSON report has the timeline)"
        );
    }
    Ok(())
}

/// Waits (up to `limit`) until every region of the chaos cache has all its copies;
/// returns how long that took.
fn await_copies(client: &Client, limit: Duration) -> Duration {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        let Ok(st) = client.status() else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let full = st.caches.iter().all(|c| {
            (0..c.regions.len())
                .all(|i| 1 + c.backups.get(i).map_or(0, Vec::len) >= c.replicas as usize)
        });
        if full {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

/// Forgets reclaimed servers that have exited.
fn reap(cluster: &mut ProcessCluster, leaving: &mut Vec<usize>) {
    leaving.retain(|&i| cluster.server_running(i));
}

/// A running server that is alive in the manager's view and not leaving.
fn pick(
    cluster: &mut ProcessCluster,
    st: &ClusterStatus,
    leaving: &[usize],
    rng: &mut StdRng,
) -> Option<(usize, u32)> {
    let running: Vec<usize> = (0..cluster.server_count())
        .filter(|i| !leaving.contains(i))
        .filter(|&i| cluster.server_running(i))
        .collect();
    let mut live: Vec<(usize, u32)> = running
        .into_iter()
        .filter_map(|i| {
            let addr = cluster.server_addr(i).to_owned();
            st.servers
                .iter()
                .find(|s| s.addr == addr && s.state == ServerState::Alive)
                .map(|s| (i, s.id))
        })
        .collect();
    if live.len() < 2 {
        return None;
    }
    let k = rng.gen_range(0..live.len());
    Some(live.swap_remove(k))
}

fn server_stats(
    addr: &str,
    secret: &farcache_client::ClusterSecret,
) -> Result<farcache_proto::control::ServerStats> {
    use farcache_proto::blocking::{control_call, handshake};
    use farcache_proto::control::{ControlRequest, ControlResponse};
    use std::net::ToSocketAddrs;
    let sa = addr
        .to_socket_addrs()?
        .next()
        .context("server address resolves to nothing")?;
    let limit = Duration::from_millis(300);
    let mut s = std::net::TcpStream::connect_timeout(&sa, limit)?;
    s.set_read_timeout(Some(limit))?;
    s.set_write_timeout(Some(limit))?;
    let cred = farcache_proto::Credential::Cluster(secret.clone());
    handshake(&mut s, farcache_proto::Role::Client, 0, "", &cred)?;
    match control_call(&mut s, &ControlRequest::ServerStats)? {
        ControlResponse::Stats(st) => Ok(st),
        other => bail!("server stats: {other:?}"),
    }
}

/// Cuts a link of server host `host`, one way or both: with the manager, with the
/// client, or with another server. Returns which.
fn cut_link(lab: &Lab, cluster: &ProcessCluster, host: &str, rng: &mut StdRng) -> Result<String> {
    let others: Vec<String> = (0..cluster.server_count())
        .map(ProcessCluster::server_host)
        .filter(|h| h != host)
        .collect();
    let peer = match rng.gen_range(0..3) {
        0 => "manager".to_string(),
        1 => "client".to_string(),
        _ => others
            .get(rng.gen_range(0..others.len().max(1)))
            .cloned()
            .unwrap_or_else(|| "manager".into()),
    };
    Ok(match rng.gen_range(0..3) {
        0 => {
            lab.partition(host, &peer)?;
            format!("{host} <-/-> {peer}")
        }
        1 => {
            lab.cut(host, &peer)?;
            format!("{host} -/-> {peer}")
        }
        _ => {
            lab.cut(&peer, host)?;
            format!("{peer} -/-> {host}")
        }
    })
}
