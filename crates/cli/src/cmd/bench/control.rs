//! `farcache bench control`: what the control plane costs and how fast it recovers.
//! Cache creation (and deletion) latency with the catalogue in redb (one manager)
//! and in a 3-member etcd (three managers), and leader failover on etcd: the leader
//! is SIGKILLed and the time until a create is answered again is measured, as a
//! user of the cluster sees it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use farcache_bench::{BenchReport, BenchRow};
use farcache_client::{Client, ClientConfig};
use farcache_testkit::{ClusterOptions, ProcessCluster};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};

/// Region of the caches created (small: the manager's work is measured, not the
/// servers' allocation of memory).
const REGION: u64 = 64 << 10;
/// The targets.
const CREATE_P50_ETCD_MS: f64 = 5.0;
const FAILOVER_MS: f64 = 2000.0;

#[derive(clap::Args)]
pub struct ControlArgs {
    /// Caches created (then deleted) on each catalogue.
    #[arg(long, default_value_t = 200)]
    creates: u32,
    /// Leader kills on etcd.
    #[arg(long, default_value_t = 5)]
    failovers: u32,
    /// A catalogue of CACHESxREGIONS (regions per cache) over --catalogue-servers
    /// server records, built in memory and written to etcd record by record, then
    /// read back as a new leader does; `0` skips it.
    #[arg(long, default_value = "10000x100")]
    catalogue: String,
    /// Server records of that catalogue.
    #[arg(long, default_value_t = 100)]
    catalogue_servers: u32,
    /// Directory for JSON and PNG results.
    #[arg(long, default_value = farcache_bench::DEFAULT_RESULTS_DIR)]
    out: PathBuf,
}

pub(super) fn control(a: ControlArgs) -> Result<()> {
    if a.creates == 0 {
        bail!("--creates must be at least 1");
    }
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut report = BenchReport::new("control");
    let base = ClusterOptions::default()
        .servers(2)
        .region_size(REGION)
        .server_memory(u64::from(a.creates) * REGION * 2 + (16 << 20));

    eprintln!("redb: one manager, {} creates and deletes…", a.creates);
    let redb = ProcessCluster::start(&bin, &base).context("starting the redb cluster")?;
    let (create, delete) = creates_and_deletes(&client(&redb)?, a.creates, "redb")?;
    drop(redb);
    let redb_p50 = create.value_at_quantile(0.5) as f64;
    report.rows.push(row(
        "create, redb (1 manager)",
        "create",
        &create,
        a.creates,
    ));
    report.rows.push(row(
        "delete, redb (1 manager)",
        "delete",
        &delete,
        a.creates,
    ));

    eprintln!(
        "etcd: three managers on a 3-member etcd, {} creates and deletes…",
        a.creates
    );
    // The test harness gives the leader an etcd lease of 1 s.
    let mut opts = base.clone().managers(3);
    // Leases that outlast a failover, so the data path never pauses for one.
    opts.heartbeat_timeout = Duration::from_secs(3);
    let mut etcd = ProcessCluster::start(&bin, &opts).context("starting the etcd cluster")?;
    let c = client(&etcd)?;
    let (create, delete) = creates_and_deletes(&c, a.creates, "etcd")?;
    let p50_ms = create.value_at_quantile(0.5) as f64 / 1e3;
    let mut r = row("create, etcd (3 managers)", "create", &create, a.creates).with_target(
        format!("p50 <= {CREATE_P50_ETCD_MS} ms"),
        p50_ms <= CREATE_P50_ETCD_MS,
    );
    r.baseline = Some(format!("create, redb: p50 {redb_p50:.0} µs"));
    report.rows.push(r);
    report.rows.push(row(
        "delete, etcd (3 managers)",
        "delete",
        &delete,
        a.creates,
    ));

    if a.failovers > 0 {
        let took = failovers(&mut etcd, &c, a.failovers)?;
        let worst_ms = took.max() as f64 / 1e3;
        report.rows.push(
            row(
                "leader failover, etcd (kill -> create answered)",
                "failover",
                &took,
                a.failovers,
            )
            .with_target(format!("<= {FAILOVER_MS} ms"), worst_ms <= FAILOVER_MS),
        );
    }
    if let Some((caches, regions)) = parse_catalogue(&a.catalogue)? {
        let endpoints = etcd
            .etcd()
            .context("the etcd cluster has no etcd")?
            .endpoints();
        catalogue_rows(
            &mut report,
            caches,
            regions,
            a.catalogue_servers,
            &endpoints,
        )?;
    }
    drop(etcd);
    report.notes.push(format!(
        "Latency columns are per call as the client sees it (one at a time, on {} B regions, \
         2 servers); mops is calls per second / 1e6. etcd runs 3 members on this machine \
         (50 ms heartbeats), each commit is one etcd transaction; the leader's etcd lease is \
         1 s. A failover sample runs from the leader's SIGKILL until a create is answered \
         by the new leader (lease expiry + campaign + catalogue load + the client finding it); \
         the target is met when the slowest sample is under it. The p99.9 column holds the slowest call.",
        REGION
    ));
    super::finish(&report, &a.out)
}

fn client(c: &ProcessCluster) -> Result<Client> {
    let mut cfg = ClientConfig::new("").op_timeout(Duration::from_secs(10));
    cfg.connect_timeout = Duration::from_secs(1);
    Ok(c.client_with(cfg)?)
}

fn histogram() -> Histogram<u64> {
    // Microseconds, up to a minute.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}") {
        pb.set_style(style);
    }
    pb.set_message(what.to_string());
    pb
}

/// Creates `n` one-region caches one after another, then deletes them.
fn creates_and_deletes(c: &Client, n: u32, what: &str) -> Result<(Histogram<u64>, Histogram<u64>)> {
    let (mut create, mut delete) = (histogram(), histogram());
    let pb = bar(u64::from(n) * 2, what);
    for i in 0..n {
        let t = Instant::now();
        c.create(&format!("bench-control-{i}"), REGION)
            .with_context(|| format!("create {i} on {what}"))?;
        create.saturating_record(micros(t.elapsed()));
        pb.inc(1);
    }
    for i in 0..n {
        let t = Instant::now();
        c.delete(&format!("bench-control-{i}"))
            .with_context(|| format!("delete {i} on {what}"))?;
        delete.saturating_record(micros(t.elapsed()));
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok((create, delete))
}

/// Kills the leader `n` times; each sample runs until a create is answered again.
fn failovers(cluster: &mut ProcessCluster, c: &Client, n: u32) -> Result<Histogram<u64>> {
    let mut took = histogram();
    let pb = bar(u64::from(n), "failovers");
    for k in 0..n {
        let old = cluster.leader().context("no manager leads")?;
        cluster.kill_manager(old)?;
        let t = Instant::now();
        loop {
            match c.create(&format!("bench-failover-{k}"), REGION) {
                Ok(_) => break,
                Err(e) if t.elapsed() > Duration::from_secs(60) => {
                    return Err(e).context("no create answered within 60 s of a leader kill");
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        took.saturating_record(micros(t.elapsed()));
        // The killed manager stands by again; the next kill finds whoever leads.
        cluster.start_manager_again(old)?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    Ok(took)
}

fn row(name: &str, op: &str, h: &Histogram<u64>, n: u32) -> BenchRow {
    let mean_s = h.mean() / 1e6;
    BenchRow {
        name: name.into(),
        system: "farcache".into(),
        op: op.into(),
        distribution: format!("{n} calls"),
        c: Some(1),
        mops: if mean_s > 0.0 {
            1.0 / mean_s / 1e6
        } else {
            0.0
        },
        p50_us: h.value_at_quantile(0.5) as f64,
        p99_us: h.value_at_quantile(0.99) as f64,
        p999_us: h.max() as f64,
        ..BenchRow::default()
    }
}

/// `CACHESxREGIONS`, or `0` for none.
fn parse_catalogue(s: &str) -> Result<Option<(u32, u32)>> {
    if s.trim() == "0" {
        return Ok(None);
    }
    let (c, r) = s
        .split_once(['x', 'X'])
        .context("--catalogue is CACHESxREGIONS, e.g. 10000x100, or 0")?;
    let (c, r): (u32, u32) = (c.trim().parse()?, r.trim().parse()?);
    if c == 0 || r == 0 {
        bail!("--catalogue needs at least one cache of one region");
    }
    Ok(Some((c, r)))
}

/// The catalogue at scale: memory, the upkeep's idle tick against a one-cache
/// catalogue, etcd commit latency as it grows and the new leader's read-back.
fn catalogue_rows(
    report: &mut BenchReport,
    caches: u32,
    regions: u32,
    servers: u32,
    endpoints: &str,
) -> Result<()> {
    use farcache_manager::scale::{ScaleOptions, measure};
    eprintln!(
        "catalogue: {caches} caches × {regions} regions over {servers} servers, written to etcd…"
    );
    let mut etcd =
        farcache_manager::EtcdSettings::new(endpoints.split(',').map(String::from).collect());
    etcd.prefix = "/farcache-bench-catalogue".into();
    etcd.call_timeout = Duration::from_secs(30);
    let r = measure(&ScaleOptions {
        caches,
        regions_per_cache: regions,
        servers,
        etcd: Some(etcd),
    })?;
    let size = format!("{caches}x{regions}");
    let tick = BenchRow {
        name: format!("catalogue {size}: idle upkeep tick"),
        system: "farcache".into(),
        op: "upkeep".into(),
        distribution: format!("{servers} servers"),
        p50_us: r.idle_tick_us,
        baseline: Some(format!("one cache: {:.1} µs", r.idle_tick_us_one_cache)),
        ..BenchRow::default()
    }
    .with_target(
        "<= 2x the one-cache tick",
        r.idle_tick_us <= 2.0 * r.idle_tick_us_one_cache.max(1.0),
    );
    report.rows.push(tick);
    let q = |f: f64| -> f64 {
        let i = ((r.commit_us.len() as f64 - 1.0) * f).round() as usize;
        r.commit_us.get(i).copied().unwrap_or(f64::NAN)
    };
    let p50_ms = q(0.5) / 1e3;
    report.rows.push(
        BenchRow {
            name: format!("catalogue {size}: cache record commit, etcd"),
            system: "farcache".into(),
            op: "commit".into(),
            distribution: format!("{caches} calls"),
            c: Some(1),
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(1.0),
            ..BenchRow::default()
        }
        .with_target(
            format!("p50 <= {CREATE_P50_ETCD_MS} ms"),
            p50_ms <= CREATE_P50_ETCD_MS,
        ),
    );
    if let Some(ms) = r.load_ms {
        report.rows.push(BenchRow {
            name: format!("catalogue {size}: read back by a new leader, etcd"),
            system: "farcache".into(),
            op: "load".into(),
            distribution: format!("{} regions", r.regions),
            p50_us: ms * 1e3,
            ..BenchRow::default()
        });
    }
    report.notes.push(format!(
        "Catalogue {size}: {} regions on {servers} server records (no process holds them), \
         built in {:.0} ms, {:.0} MiB of resident memory in the manager's structures. The idle \
         tick ({:.1} µs; {:.1} µs with one cache) is what the upkeep looks at every heartbeat when nothing changed (heartbeats \
         compared, caches short of copies, placement candidates): it depends on the servers, \
         not on the regions. A new leader's failover at this size is its etcd lease + 0.1 s \
         + the read-back row.",
        r.regions, r.build_ms, r.rss_mib, r.idle_tick_us, r.idle_tick_us_one_cache
    ));
    Ok(())
}
