//! Quick farcache-only throughput/latency probe (no baselines): `cargo run --release -p farcache-bench --example io_quick -- FARCACHE_BIN`.
use std::time::Duration;

use farcache_bench::io::{IoOp, IoSpec, run_latency, run_throughput};
use farcache_bench::workload::KeyDistribution;
use farcache_client::ClientConfig;
use farcache_testkit::{ClusterOptions, ProcessCluster};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bin = std::env::args()
        .nth(1)
        .ok_or("usage: io_quick FARCACHE_BIN [b] [q]")?;
    let b: usize = std::env::args().nth(2).map_or(Ok(1024), |s| s.parse())?;
    let q: usize = std::env::args().nth(3).map_or(Ok(4), |s| s.parse())?;
    let cluster = ProcessCluster::start(
        bin,
        &ClusterOptions::default()
            .servers(1)
            .server_memory(1 << 30)
            .region_size(64 << 20),
    )?;
    let client = cluster.client_with(ClientConfig::new("").batch_size(b).queue_depth(q))?;
    let cache = client.create("io", 256 << 20)?;
    let only = std::env::var("ONLY").unwrap_or_default();
    for (op, size) in [(IoOp::Read, 8), (IoOp::Write, 8), (IoOp::Read, 4096)] {
        if !only.is_empty() && only != format!("{op:?}{size}") {
            continue;
        }
        let spec = IoSpec {
            op,
            record_size: size,
            dist: KeyDistribution::Uniform,
            records: std::env::var("RECORDS")
                .ok()
                .and_then(|r| r.parse().ok())
                .unwrap_or((256 << 20) / size as u64),
            batch: b,
            depth: q,
            duration: Duration::from_secs(2),
        };
        let o = run_throughput(&cache, &spec)?;
        println!(
            "{:?} {size}B b={b} q={q}: {:.2} Mops/s {:.2} GB/s p50 {:.1}us err {}",
            op,
            o.mops,
            o.bytes_per_sec / 1e9,
            o.latency.p50_us,
            o.errors
        );
    }
    let o = run_latency(&cache, IoOp::Read, 8, 1 << 20, 20000)?;
    println!(
        "latency read 8B: p50 {:.1}us p99 {:.1}us",
        o.latency.p50_us, o.latency.p99_us
    );
    Ok(())
}
