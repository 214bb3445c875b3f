//! `farcache bench resp`: the Redis-protocol front end vs Redis, one redis-benchmark
//! driving both over the grid SET/GET/INCR/MSET × random keys or one key × P=1 or 16
//! (see `farcache_bench::resp_suite`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use farcache_bench::DEFAULT_RESULTS_DIR;
use farcache_bench::resp_suite::{
    RespBenchOptions, format_resp_table, run_resp_bench, write_resp_json_to,
};

#[derive(clap::Args)]
pub struct RespArgs {
    /// Fewer requests and keys (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Value bytes of SET/GET.
    #[arg(long, default_value_t = 64)]
    value_size: usize,
    /// redis-benchmark connections.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Pipeline depth of the pipelined run.
    #[arg(long, default_value_t = 16)]
    pipeline: usize,
    /// farcache servers behind the front end (3: the README's cluster).
    #[arg(long, default_value_t = 3)]
    servers: usize,
    /// Event-loop threads of the front end, and I/O threads of Redis.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Write the JSON here instead of bench-results/bench-resp.json.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(a: RespArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = RespBenchOptions::new(bin, a.quick);
    o.value_size = a.value_size;
    o.clients = a.clients;
    o.pipeline = a.pipeline;
    o.servers = a.servers;
    o.threads = a.threads;
    let report = run_resp_bench(&o)?;
    out!("{}", format_resp_table(&report))?;
    let path = a
        .json
        .unwrap_or_else(|| PathBuf::from(DEFAULT_RESULTS_DIR).join("bench-resp.json"));
    write_resp_json_to(&report, &path)?;
    outln!("results: {}", path.display())?;
    Ok(())
}
