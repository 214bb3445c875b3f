//! Runs the Redis and sockperf baselines and writes a report.
//!
//! ```text
//! cargo run -p farcache-bench --example baselines -- [--full] [--sizes 64,4096] [OUT_DIR]
//! ```
//!
//! Quick mode (default) takes roughly half a minute; OUT_DIR defaults to a
//! fresh directory under the system temp dir.

use std::path::PathBuf;

use farcache_bench::{
    BenchReport, RedisBaselineOpts, SockperfOpts, print_table, redis_baseline, sockperf_baseline,
    write_chart, write_json,
};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut quick = true;
    let mut sizes = vec![64usize];
    let mut out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--full" => quick = false,
            "--sizes" => {
                let list = args.next().ok_or("--sizes needs a value, e.g. 64,4096")?;
                sizes = list
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<Result<_, _>>()?;
            }
            _ => out = Some(PathBuf::from(a)),
        }
    }
    let out = out.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("farcache-bench-baselines-{}", std::process::id()))
    });

    let mut report = BenchReport::new("baselines");
    report.baselines.sockperf = Some(sockperf_baseline(&SockperfOpts::new(quick))?);
    for &size in &sizes {
        report
            .baselines
            .redis
            .push(redis_baseline(&RedisBaselineOpts::new(size, quick))?);
    }
    let rtt = report.baselines.raw_rtt_p50_us();
    report.rows = report
        .baselines
        .rows()
        .into_iter()
        .map(|row| match rtt {
            // Compare unpipelined Redis latency with a raw TCP round trip.
            Some(rtt) if row.system == "redis" && row.q == Some(1) => {
                row.with_latency_baseline(rtt)
            }
            _ => row,
        })
        .collect();

    print_table(&report);
    let s = report
        .baselines
        .sockperf
        .as_ref()
        .ok_or("sockperf missing")?;
    for r in &report.baselines.redis {
        println!(
            "redis {}B: best GET {:.3} Mops/s ({}), best SET {:.3} Mops/s ({}), unpipelined GET p50 {:.1} µs",
            r.value_size,
            r.best_get_mops(),
            r.best_get.label(),
            r.best_set_mops(),
            r.best_set.label(),
            r.unpipelined_get_p50_us(),
        );
    }
    println!(
        "sockperf: {}B half-RTT p50 {:.2} µs (RTT p50 {:.2} µs, avg {:.2} µs); {}B throughput {:.2} Gbit/s ({:.0} msg/s)",
        s.pingpong.msg_size,
        s.pingpong.half_rtt_p50_us,
        s.pingpong.rtt_p50_us,
        s.pingpong.rtt_avg_us,
        s.throughput.msg_size,
        s.throughput.gbps,
        s.throughput.msgs_per_sec,
    );
    println!("json:  {}", write_json(&report, &out)?.display());
    println!("chart: {}", write_chart(&report, &out)?.display());
    Ok(())
}
