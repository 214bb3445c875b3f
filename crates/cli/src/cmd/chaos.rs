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
    /// Silence after which the manager declares a server dead (leases are 0.8 of it).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    dead_after: std::time::Duration,
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

#[derive(Debug, Serialize)]
struct Report {
    duration_s: f64,
    replicas: u32,
    servers: usize,
    reclaims: u32,
    kills: u32,
    added: u32,
    ops: u64,
    wrong_reads: u64,
    acked_writes_lost: u64,
    acked_writes_lost_reported: u64,
    op_errors: u64,
    max_unavailable_ms: u64,
    /// Servers heartbeat this often; failover should take under three intervals.
    heartbeat_interval_ms: u64,
    /// Backups that took a region over from a killed owner.
    promotions: usize,
    /// Longest wait, before a kill, for every region to have all its copies again.
    max_rereplication_wait_ms: u64,
    migrations: usize,
    migrated_gib: f64,
    migration_gib_per_s: f64,
    max_write_pause_ms: f64,
    lost_regions: usize,
    /// Network faults (with --lab).
    partitions: u32,
    vanishes: u32,
    /// The lab's own round trip, client to manager (0 without --lab).
    lab_rtt_us: f64,
    /// The history check over every op (reads and writes of slots never lost).
    checked_ops: u64,
    stale_reads: u64,
    /// Reads of bytes no write put there, or of a write not yet invoked.
    history_wrong_reads: u64,
    reads_back_in_time: u64,
    /// Longest unavailability of a region, by the kind of the last event before it.
    max_unavailable_ms_by_kind: BTreeMap<String, u64>,
    /// Total time two servers acknowledged writes to one region at once, from the
    /// servers' own acknowledgement windows (polled every second): must be 0.
    split_brain_ms: f64,
    /// Acknowledgement windows compared (server, region, ownership period).
    ack_windows: usize,
    /// With two copies or more: fetch-adds on counters in a cache of their own,
    /// each checked to count once (no add applied twice, none acknowledged lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    counters: Option<farcache_testkit::counters::CounterReport>,
    events: Vec<Event>,
    /// Ops per 100 ms.
    timeline: Vec<u64>,
    samples: Vec<String>,
}

pub fn run(a: Args) -> Result<()> {
    if !a.lab && (a.partitions > 0 || a.vanishes > 0) {
        bail!("--partitions and --vanishes need --lab (links can only be cut in the lab)");
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
        .region_size(a.region_size)
        .server_memory(per_server)
        .server_args(["--grace".to_string(), format!("{}ms", a.grace.as_millis())])
        // For `split_brain_ms`.
        .server_args(["--ack-windows"]);
    opts.heartbeat_timeout = a.dead_after;
    opts.heartbeat_interval = (a.dead_after / 10).max(Duration::from_millis(10));
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
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let mut plan: Vec<&'static str> = std::iter::repeat_n("reclaim", a.reclaims as usize)
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
        if *kind != "reclaim" && a.replicas > 1 {
            max_wait = max_wait.max(await_copies(&client, Duration::from_secs(30)));
        }
        let st = client.status()?;
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
    let st = client.status()?;
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
    match farcache_bench::write_chaos_chart(&png, &title, &report.timeline, bucket, &marks) {
        Ok(()) => outln!("chart: {}", png.display())?,
        Err(e) => eprintln!("warning: could not draw the chart {}: {e}", png.display()),
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

/// The servers' acknowledgement windows, polled: per (server address, cache, region,
/// first acknowledgement) the latest last acknowledgement seen.
struct Acks {
    secret: farcache_client::ClusterSecret,
    windows: BTreeMap<(String, u32, u32, u64), u64>,
    polled: Instant,
}

impl Acks {
    fn new(secret: farcache_client::ClusterSecret) -> Self {
        Self {
            secret,
            windows: BTreeMap::new(),
            polled: Instant::now(),
        }
    }

    /// Polls at most once a second.
    fn poll(&mut self, cluster: &mut ProcessCluster) {
        if self.polled.elapsed() >= Duration::from_secs(1) {
            self.poll_now(cluster);
        }
    }

    /// Asks every running server for its windows (one that does not answer within
    /// 300 ms, cut off or vanished, is asked again next time).
    fn poll_now(&mut self, cluster: &mut ProcessCluster) {
        self.polled = Instant::now();
        for i in 0..cluster.server_count() {
            if !cluster.server_running(i) {
                continue;
            }
            let addr = cluster.server_addr(i).to_owned();
            let Ok(stats) = server_stats(&addr, &self.secret) else {
                continue;
            };
            for w in stats.ack_windows {
                let last = self
                    .windows
                    .entry((addr.clone(), w.cache, w.region, w.first_us))
                    .or_default();
                *last = (*last).max(w.last_us);
            }
        }
    }

    /// Time two servers' windows for one region overlapped, summed over pairs.
    fn split_brain_ms(&self) -> f64 {
        // (server, first, last) per (cache, region).
        type Windows<'a> = Vec<(&'a str, u64, u64)>;
        let mut by_region: BTreeMap<(u32, u32), Windows<'_>> = BTreeMap::new();
        for ((server, cache, region, first), &last) in &self.windows {
            by_region
                .entry((*cache, *region))
                .or_default()
                .push((server.as_str(), *first, last));
        }
        let mut us = 0u64;
        for w in by_region.values() {
            for (k, a) in w.iter().enumerate() {
                for b in &w[k + 1..] {
                    if a.0 != b.0 {
                        us += a.2.min(b.2).saturating_sub(a.1.max(b.1));
                    }
                }
            }
        }
        us as f64 / 1e3
    }
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

/// The longest unavailability per kind of event: each stretch of failing ops is
/// put down to the last event at or before its start.
fn unavailable_by_kind(v: &VerifyReport, events: &[Event]) -> BTreeMap<String, u64> {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for &(start, len) in &v.unavailable {
        let kind = events
            .iter()
            .rev()
            .find(|e| e.at_ms <= start + 50)
            .map_or("none".to_string(), partition_class);
        let m = by.entry(kind).or_default();
        *m = (*m).max(len);
    }
    by
}

/// An event's kind, a partition's with the link it cut: only one from the manager
/// can be failed over (the manager alone moves regions); one from the client or
/// between servers lasts as long as the cut, plus TCP's retransmission backoff.
fn partition_class(e: &Event) -> String {
    if e.kind != "partition" {
        return e.kind.to_string();
    }
    let class = if e.what.contains("manager") {
        "manager"
    } else if e.what.contains("client") {
        "client"
    } else {
        "servers"
    };
    format!("partition:{class}")
}

fn build(
    a: &Args,
    took: Duration,
    v: &VerifyReport,
    st: &ClusterStatus,
    events: Vec<Event>,
    added: u32,
) -> Report {
    let bytes: u64 = st.migrations.iter().map(|m| m.bytes).sum();
    let copy_s: f64 = st.migrations.iter().map(|m| m.copy_us as f64 / 1e6).sum();
    let gib = bytes as f64 / f64::from(1u32 << 30);
    Report {
        duration_s: took.as_secs_f64(),
        replicas: a.replicas,
        servers: a.servers,
        reclaims: events.iter().filter(|e| e.kind == "reclaim").count() as u32,
        kills: events.iter().filter(|e| e.kind == "kill").count() as u32,
        partitions: events.iter().filter(|e| e.kind == "partition").count() as u32,
        vanishes: events.iter().filter(|e| e.kind == "vanish").count() as u32,
        lab_rtt_us: 0.0,
        checked_ops: 0,
        stale_reads: 0,
        history_wrong_reads: 0,
        reads_back_in_time: 0,
        max_unavailable_ms_by_kind: unavailable_by_kind(v, &events),
        split_brain_ms: 0.0,
        ack_windows: 0,
        counters: None,
        added,
        ops: v.reads + v.writes,
        wrong_reads: v.wrong_reads,
        acked_writes_lost: v.acked_writes_lost,
        acked_writes_lost_reported: v.acked_writes_lost_reported,
        op_errors: v.op_errors,
        max_unavailable_ms: v.max_unavailable_ms,
        heartbeat_interval_ms: 0,
        promotions: st.promotions.len(),
        max_rereplication_wait_ms: 0,
        migrations: st.migrations.len(),
        migrated_gib: gib,
        migration_gib_per_s: if copy_s > 0.0 { gib / copy_s } else { 0.0 },
        max_write_pause_ms: st
            .migrations
            .iter()
            .map(|m| m.max_pause_us as f64 / 1e3)
            .fold(0.0, f64::max),
        lost_regions: st.lost.len(),
        events,
        timeline: v.timeline.clone(),
        samples: v.samples.clone(),
    }
}

fn print(r: &Report) -> Result<()> {
    outln!(
        "chaos: {:.0} s, {} servers, {} replica(s)",
        r.duration_s,
        r.servers,
        r.replicas
    )?;
    outln!(
        "  events      {} reclaims, {} kills, {} partitions, {} vanishes, {} servers added",
        r.reclaims,
        r.kills,
        r.partitions,
        r.vanishes,
        r.added
    )?;
    if r.lab_rtt_us > 0.0 {
        outln!(
            "  lab         round trip client -> manager {:.0} µs",
            r.lab_rtt_us
        )?;
    }
    outln!(
        "  ops         {} ({} failed: unreachable servers)",
        r.ops,
        r.op_errors
    )?;
    outln!("  wrong reads {}", r.wrong_reads)?;
    outln!(
        "  split brain {:.1} ms with two servers acknowledging writes to one region ({} \
         acknowledgement windows compared)",
        r.split_brain_ms,
        r.ack_windows
    )?;
    outln!(
        "  history     {} ops checked as linearizable registers: {} stale reads, {} reads of \
         bytes no write put there, {} reads back in time",
        r.checked_ops,
        r.stale_reads,
        r.history_wrong_reads,
        r.reads_back_in_time
    )?;
    outln!(
        "  acknowledged writes lost: {} silently, {} reported as DataLost ({} regions lost)",
        r.acked_writes_lost,
        r.acked_writes_lost_reported,
        r.lost_regions
    )?;
    outln!(
        "  longest unavailability of a region: {} ms (heartbeats every {} ms); by the last \
         event before it: {:?}",
        r.max_unavailable_ms,
        r.heartbeat_interval_ms,
        r.max_unavailable_ms_by_kind
    )?;
    if r.replicas > 1 {
        outln!(
            "  promotions  {} (backups that took over from killed owners); longest wait for \
             re-replication before a kill: {} ms",
            r.promotions,
            r.max_rereplication_wait_ms
        )?;
    }
    outln!(
        "  migrations  {} ({:.2} GiB at {:.2} GiB/s, longest write pause {:.1} ms)",
        r.migrations,
        r.migrated_gib,
        r.migration_gib_per_s,
        r.max_write_pause_ms
    )?;
    if let Some(c) = &r.counters {
        outln!(
            "  fetch-adds  {} acknowledged, {} of unknown outcome on {} counters: {} applied              twice, {} acknowledged and lost, {} counters unreadable",
            c.adds,
            c.adds_unknown,
            c.counters,
            c.double_adds,
            c.lost_adds,
            c.unreadable
        )?;
    }
    for s in r.samples.iter().take(5) {
        outln!("  sample: {s}")?;
    }
    Ok(())
}
