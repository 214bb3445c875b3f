//! `farcache demo`: the first thing a newcomer runs. A real 3-server cluster in this
//! process, a cache spanning all servers, a full fill + verify, a mixed workload
//! checked against a local model, a results table, a clean shutdown.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use farcache_client::{ClientConfig, OpOutput};
use farcache_testkit::{ClusterOptions, LocalCluster};
use indicatif::{ProgressBar, ProgressStyle};
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

pub fn run(a: Args) -> Result<()> {
    ensure!(a.servers >= 1, "--servers must be at least 1");
    let per_server = (a.size / a.servers as u64 + a.region_size) * 2;
    println!(
        "starting a local cluster: 1 manager, {} servers ({} each) …",
        a.servers,
        human(per_server)
    );
    let cluster = LocalCluster::start(
        &ClusterOptions::default()
            .servers(a.servers)
            .server_memory(per_server)
            .region_size(a.region_size),
    )?;
    let client = cluster.client_with(ClientConfig::new("").batch_size(64).queue_depth(4))?;
    let cache = client
        .create("demo", a.size)
        .context("creating the demo cache")?;
    let info = cache.info();
    let mut spread: HashMap<u32, usize> = HashMap::new();
    for r in &info.regions {
        *spread.entry(*r).or_default() += 1;
    }
    println!(
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
    );
    let mut rows = Vec::new();

    // Fill: 64 KiB writes, 16 per batch, several batches in flight.
    const CHUNK: u64 = 64 << 10;
    let pb = bar(a.size, "fill");
    let t = Instant::now();
    let mut inflight = std::collections::VecDeque::new();
    let mut addr = 0;
    let mut buf = vec![0u8; CHUNK as usize];
    while addr < a.size {
        let mut b = cache.batch();
        for _ in 0..16 {
            if addr >= a.size {
                break;
            }
            let n = CHUNK.min(a.size - addr);
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
            if let Some(e) = tk.wait().first_error() {
                bail!("fill failed: {e}");
            }
            pb.set_position(done);
        }
    }
    for (tk, _) in inflight {
        if let Some(e) = tk.wait().first_error() {
            bail!("fill failed: {e}");
        }
    }
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    rows.push(Row {
        phase: "fill",
        work: human(a.size),
        secs,
        rate: format!("{}/s", human((a.size as f64 / secs) as u64)),
        note: "64 KiB writes, 16/batch".into(),
    });

    // Verify every byte.
    let pb = bar(a.size, "verify");
    let t = Instant::now();
    let mut addr = 0;
    while addr < a.size {
        let mut b = cache.batch();
        let mut starts = Vec::new();
        for _ in 0..16 {
            if addr >= a.size {
                break;
            }
            let n = CHUNK.min(a.size - addr);
            starts.push((b.read(addr, n), addr));
            addr += n;
        }
        let res = b.run();
        for (i, start) in starts {
            let data = res.data(i)?;
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
        }
        pb.set_position(addr);
    }
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    rows.push(Row {
        phase: "verify",
        work: human(a.size),
        secs,
        rate: format!("{}/s", human((a.size as f64 / secs) as u64)),
        note: "every byte matched".into(),
    });

    // Mixed workload on 8-byte records: 80% reads, 15% writes, 5% fetch-add, checked
    // against a model of what this run wrote.
    let records = a.size / 8;
    let mut model: HashMap<u64, u64> = HashMap::new();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut lat = farcache_bench::histogram::LatencyHistogram::new();
    let (mut ops, mut checked) = (0u64, 0u64);
    let t = Instant::now();
    let until = t + Duration::from_secs_f64(a.seconds);
    let pb = ProgressBar::new_spinner();
    pb.set_message("mixed workload");
    while Instant::now() < until {
        let mut b = cache.batch();
        let mut expect: Vec<(usize, u64, u8)> = Vec::with_capacity(256);
        let mut touched = std::collections::HashSet::new();
        for _ in 0..256 {
            let rec = rng.gen_range(0..records);
            if !touched.insert(rec) {
                continue; // one op per record per batch keeps the model exact
            }
            let addr = rec * 8;
            match rng.gen_range(0..100) {
                0..80 => expect.push((b.read(addr, 8), rec, 0)),
                80..95 => {
                    let v: u64 = rng.r#gen();
                    b.write(addr, &v.to_le_bytes());
                    model.insert(rec, v);
                }
                _ => expect.push((b.fetch_add(addr, 1), rec, 1)),
            }
        }
        let n = b.len() as u64;
        let t0 = Instant::now();
        let res = b.run();
        lat.record_duration(t0.elapsed());
        for (i, rec, kind) in expect {
            let current = model.get(&rec).copied().unwrap_or_else(|| {
                let mut w = [0u8; 8];
                for (j, x) in w.iter_mut().enumerate() {
                    *x = pattern(rec * 8 + j as u64);
                }
                u64::from_le_bytes(w)
            });
            let got = match res.get(i) {
                Some(Ok(OpOutput::Data(d))) => u64::from_le_bytes(d[..8].try_into()?),
                Some(Ok(OpOutput::Value(v))) => *v,
                other => bail!("op failed: {other:?}"),
            };
            ensure!(
                got == current,
                "record {rec}: read {got:#x}, expected {current:#x}"
            );
            if kind == 1 {
                model.insert(rec, current.wrapping_add(1));
            }
            checked += 1;
        }
        ops += n;
        pb.tick();
    }
    pb.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    rows.push(Row {
        phase: "mixed",
        work: format!("{ops} ops"),
        secs,
        rate: format!("{:.2} Mops/s", ops as f64 / secs / 1e6),
        note: {
            let l = lat.summary();
            format!(
                "{checked} results checked; batch of 256: p50 {:.0} µs, p99 {:.0} µs",
                l.p50_us, l.p99_us
            )
        },
    });

    println!(
        "\n{:<8} {:>12} {:>8} {:>14}  notes",
        "phase", "work", "secs", "rate"
    );
    for r in &rows {
        println!(
            "{:<8} {:>12} {:>8.2} {:>14}  {}",
            r.phase, r.work, r.secs, r.rate, r.note
        );
    }
    println!("\nper server:");
    for s in cluster.servers() {
        let st = s.stats();
        let ops: u64 = st.ops.iter().map(|o| o.count).sum();
        let errs: u64 = st.ops.iter().map(|o| o.errors).sum();
        println!(
            "  server {} at {}: {} regions, {} used, {ops} ops, {errs} errors",
            st.server_id,
            s.addr(),
            st.regions,
            human(st.used)
        );
    }
    client.delete("demo")?;
    drop(cache);
    drop(client);
    cluster.shutdown();
    println!("\ncluster stopped cleanly.");
    Ok(())
}
