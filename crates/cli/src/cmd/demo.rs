//! `farcache demo`: the first thing a newcomer runs. A real 3-server cluster in this
//! process, a cache spanning all servers, a full fill + verify, a mixed workload
//! checked against a local model, a results table, a clean shutdown.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use farcache_client::{Batch, BatchResults, Cache, ClientConfig, OpOutput, Ticket};
use farcache_testkit::{ClusterOptions, LocalCluster};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::size::{human, parse_size};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Cache capacity.
    #[arg(long, default_value = "192MiB", value_parser = parse_size)]
    size: u64,
    /// Region size (regions are spread over the servers).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    region_size: u64,
    /// Seconds of mixed workload.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

/// The byte stored at `addr` by the fill: cheap to recompute when verifying.
fn pattern(addr: u64) -> u8 {
    let x = addr.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (addr as u8)
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

struct Row {
    phase: &'static str,
    work: String,
    secs: f64,
    rate: String,
    note: String,
}

impl Row {
    /// A phase that moved `bytes` bytes in `secs`.
    fn bandwidth(phase: &'static str, bytes: u64, secs: f64, note: &str) -> Self {
        Row {
            phase,
            work: human(bytes),
            secs,
            rate: format!("{}/s", human((bytes as f64 / secs) as u64)),
            note: note.into(),
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    ensure!(a.servers >= 1, "--servers must be at least 1");
    let cluster = start_cluster(&a)?;
    let client = cluster.client_with(ClientConfig::new("").batch_size(64).queue_depth(4))?;
    let cache = client
        .create("demo", a.size)
        .context("creating the demo cache")?;
    print_layout(&cache)?;
    let rows = [
        fill(&cache, a.size)?,
        verify(&cache, a.size)?,
        mixed(&cache, a.size, a.seconds)?,
        tenant(&cluster, &cache)?,
    ];
    print_rows(&rows)?;
    print_servers(&cluster)?;
    client.delete("demo")?;
    drop(cache);
    drop(client);
    cluster.shutdown();
    outln!("\ncluster stopped cleanly.")?;
    Ok(())
}

/// A second client holding only the cache's read-only token: it reads what the fill
/// wrote, and its writes are refused by the servers.
fn tenant(cluster: &LocalCluster, cache: &Cache) -> Result<Row> {
    let tokens = cache.tokens().context("create hands out tokens")?;
    let token = tokens.read_only.parse()?;
    let started = Instant::now();
    let reader = cluster.client_with(ClientConfig::new("").token(token))?;
    let view = reader.open(&cache.info().name)?;
    let probe = 4096u64;
    let got = view.read(probe, 64)?;
    ensure!(
        got.iter()
            .enumerate()
            .all(|(i, &b)| b == pattern(probe + i as u64)),
        "the read-only tenant reads other bytes than the fill wrote"
    );
    let write = view.write(probe, b"not allowed");
    ensure!(write.is_err(), "a read-only token wrote to the cache");
    // A token client may not see the whole cluster either: the manager's trust tests
    // check that refusal; probing it here would print the manager's warning about it.
    ensure!(
        cache.read(probe, 64)?[..] == got[..],
        "the refused write changed the cache"
    );
    Ok(Row {
        phase: "tenant",
        work: "1 read, 1 write".into(),
        secs: started.elapsed().as_secs_f64(),
        rate: "-".into(),
        note: "read-only token: read ok, write refused".into(),
    })
}

/// One manager and `a.servers` servers, each with room for twice its share of the cache.
fn start_cluster(a: &Args) -> Result<LocalCluster> {
    let per_server = (a.size / a.servers as u64 + a.region_size) * 2;
    outln!(
        "starting a local cluster: 1 manager, {} servers ({} each) …",
        a.servers,
        human(per_server)
    )?;
    Ok(LocalCluster::start(
        &ClusterOptions::default()
            .servers(a.servers)
            .server_memory(per_server)
            .region_size(a.region_size),
    )?)
}

/// The cache's size, regions and how many regions each server holds.
fn print_layout(cache: &Cache) -> Result<()> {
    let info = cache.info();
    let mut spread: HashMap<u32, usize> = HashMap::new();
    for r in &info.regions {
        *spread.entry(*r).or_default() += 1;
    }
    outln!(
        "cache 'demo': {} in {} regions of {} over {} servers {:?}",
        human(info.capacity),
        info.regions.len(),
        human(info.region_size),
        spread.len(),
        {
            let mut v: Vec<_> = spread.iter().collect();
            v.sort();
            v
        }
    )?;
    Ok(())
}

/// Fill and verify move the cache in 64 KiB ops, 16 per batch.
const CHUNK: u64 = 64 << 10;

/// Writes the pattern over the whole cache, several batches in flight.
fn fill(cache: &Cache, size: u64) -> Result<Row> {
    let pb = bar(size, "fill");
    let t = Instant::now();
    let mut inflight = VecDeque::new();
    let mut addr = 0;
    let mut buf = vec![0u8; CHUNK as usize];
    while addr < size {
        let mut b = cache.batch();
        for _ in 0..16 {
            if addr >= size {
                break;
            }
            let n = CHUNK.min(size - addr);
            for (i, byte) in buf[..n as usize].iter_mut().enumerate() {
                *byte = pattern(addr + i as u64);
            }
            b.write(addr, &buf[..n as usize]);
            addr += n;
        }
        inflight.push_back((b.submit(), addr));
        if inflight.len() >= 4
            && let Some((tk, done)) = inflight.pop_front()
        {
            wait_fill(tk)?;
            pb.set_position(done);
        }
    }
    for (tk, _) in inflight {
        wait_fill(tk)?;
    }
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    Ok(Row::bandwidth(
        "fill",
        size,
        secs,
        "64 KiB writes, 16/batch",
    ))
}

fn wait_fill(tk: Ticket) -> Result<()> {
    if let Some(e) = tk.wait().first_error() {
        bail!("fill failed: {e}");
    }
    Ok(())
}

/// Reads the whole cache back, one batch at a time, and checks every byte.
fn verify(cache: &Cache, size: u64) -> Result<Row> {
    let pb = bar(size, "verify");
    let t = Instant::now();
    let mut addr = 0;
    while addr < size {
        let mut b = cache.batch();
        let mut starts = Vec::new();
        for _ in 0..16 {
            if addr >= size {
                break;
            }
            let n = CHUNK.min(size - addr);
            starts.push((b.read(addr, n), addr));
            addr += n;
        }
        let res = b.run();
        for (i, start) in starts {
            check_pattern(start, res.data(i)?)?;
        }
        pb.set_position(addr);
    }
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    Ok(Row::bandwidth("verify", size, secs, "every byte matched"))
}

/// `data`, read at `start`, must hold the fill pattern.
fn check_pattern(start: u64, data: &[u8]) -> Result<()> {
    if let Some(off) = data
        .iter()
        .enumerate()
        .position(|(j, v)| *v != pattern(start + j as u64))
    {
        bail!(
            "verify failed at address {}: read {:#04x}, wrote {:#04x}",
            start + off as u64,
            data[off],
            pattern(start + off as u64)
        );
    }
    Ok(())
}

/// What this run wrote to each 8-byte record; the others still hold the fill pattern.
#[derive(Default)]
struct Model(HashMap<u64, u64>);

impl Model {
    fn current(&self, rec: u64) -> u64 {
        self.0.get(&rec).copied().unwrap_or_else(|| {
            let mut w = [0u8; 8];
            for (j, x) in w.iter_mut().enumerate() {
                *x = pattern(rec * 8 + j as u64);
            }
            u64::from_le_bytes(w)
        })
    }
}

/// An op of a mixed batch whose answer is checked: its index in the batch, its record,
/// and whether it was a fetch-add (else a read).
struct Expect {
    op: usize,
    rec: u64,
    adds: bool,
}

/// Mixed workload on 8-byte records: 80% reads, 15% writes, 5% fetch-add, checked
/// against a model of what this run wrote.
fn mixed(cache: &Cache, size: u64, seconds: f64) -> Result<Row> {
    let records = size / 8;
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(7);
    // Batch latencies in µs (1 µs .. 60 s, 3 significant digits).
    let mut lat =
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).context("latency histogram bounds")?;
    let (mut ops, mut checked) = (0u64, 0u64);
    let t = Instant::now();
    let until = t + Duration::from_secs_f64(seconds);
    let pb = ProgressBar::new_spinner();
    pb.set_message("mixed workload");
    while Instant::now() < until {
        let (b, expect) = mixed_batch(cache, &mut rng, &mut model, records);
        let n = b.len() as u64;
        let t0 = Instant::now();
        let res = b.run();
        lat.saturating_record(t0.elapsed().as_micros() as u64);
        checked += check_mixed(&res, expect, &mut model)?;
        ops += n;
        pb.tick();
    }
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    let (p50, p99) = (lat.value_at_quantile(0.5), lat.value_at_quantile(0.99));
    Ok(Row {
        phase: "mixed",
        work: format!("{ops} ops"),
        secs,
        rate: format!("{:.2} Mops/s", ops as f64 / secs / 1e6),
        note: format!("{checked} results checked; batch of 256: p50 {p50} µs, p99 {p99} µs"),
    })
}

/// Up to 256 ops on distinct records; writes go into the model as they are added.
fn mixed_batch(
    cache: &Cache,
    rng: &mut StdRng,
    model: &mut Model,
    records: u64,
) -> (Batch, Vec<Expect>) {
    let mut b = cache.batch();
    let mut expect = Vec::with_capacity(256);
    let mut touched = HashSet::new();
    for _ in 0..256 {
        let rec = rng.gen_range(0..records);
        if !touched.insert(rec) {
            continue; // one op per record per batch keeps the model exact
        }
        let addr = rec * 8;
        match rng.gen_range(0..100) {
            0..80 => expect.push(Expect {
                op: b.read(addr, 8),
                rec,
                adds: false,
            }),
            80..95 => {
                let v: u64 = rng.r#gen();
                b.write(addr, &v.to_le_bytes());
                model.0.insert(rec, v);
            }
            _ => expect.push(Expect {
                op: b.fetch_add(addr, 1),
                rec,
                adds: true,
            }),
        }
    }
    (b, expect)
}

/// Checks the reads and fetch-adds of a batch against the model (fetch-adds then
/// update it) and returns how many were checked.
fn check_mixed(res: &BatchResults, expect: Vec<Expect>, model: &mut Model) -> Result<u64> {
    let mut checked = 0;
    for Expect { op, rec, adds } in expect {
        let current = model.current(rec);
        let got = match res.get(op) {
            Some(Ok(OpOutput::Data(d))) => u64::from_le_bytes(d[..8].try_into()?),
            Some(Ok(OpOutput::Value(v))) => v,
            other => bail!("op failed: {other:?}"),
        };
        ensure!(
            got == current,
            "record {rec}: read {got:#x}, expected {current:#x}"
        );
        if adds {
            model.0.insert(rec, current.wrapping_add(1));
        }
        checked += 1;
    }
    Ok(checked)
}

fn print_rows(rows: &[Row]) -> Result<()> {
    outln!(
        "\n{:<8} {:>12} {:>8} {:>14}  notes",
        "phase",
        "work",
        "secs",
        "rate"
    )?;
    for r in rows {
        outln!(
            "{:<8} {:>12} {:>8.2} {:>14}  {}",
            r.phase,
            r.work,
            r.secs,
            r.rate,
            r.note
        )?;
    }
    Ok(())
}

fn print_servers(cluster: &LocalCluster) -> Result<()> {
    outln!("\nper server:")?;
    for s in cluster.servers() {
        let st = s.stats();
        let ops: u64 = st.ops.iter().map(|o| o.count).sum();
        // Refused ops by name: the read-only token's refused write shows here.
        let refused: Vec<String> = st
            .ops
            .iter()
            .filter(|o| o.errors > 0)
            .map(|o| format!("{} {}", o.op, o.errors))
            .collect();
        let refused = match refused.is_empty() {
            true => "none refused".to_string(),
            false => format!("refused: {}", refused.join(", ")),
        };
        outln!(
            "  server {} at {}: {} regions, {} used, {ops} ops, {refused}",
            st.server_id,
            s.addr(),
            st.regions,
            human(st.used)
        )?;
    }
    Ok(())
}
