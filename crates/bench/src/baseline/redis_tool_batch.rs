//! Redis at its best batch as measured by its own tool: `redis-benchmark` sending
//! `MGET`/`MSET` of many random keys (`-r`) on several connections, pipelined. On a
//! 2-core machine this outran our spinning driver's MGET by up to 2.7× (4.3 M against
//! 1.6 M keys/s), so every peer comparison takes the better of the two and names it.

use std::time::Duration;

use super::peer_run::{PeerOp, PeerRun};
use super::redis::{RedisOpts, Workload, run_benchmark_at};
use crate::error::{BenchError, Result};

/// Keys per `MGET`/`MSET` (the batch the issue measured Redis at).
pub const BATCH: usize = 1000;
/// redis-benchmark connections and pipeline depth.
pub const CLIENTS: usize = 4;
pub const PIPELINE: usize = 4;
/// Bytes of arguments per command: argv must fit the OS limit, so big values get
/// fewer keys per `MSET`.
const MAX_COMMAND: usize = 512 << 10;
/// Roughly what Redis serves per second at this batch on a small machine; sizes
/// `-n` so that a run lasts about as long as asked.
const EXPECTED_KEYS_PER_SEC: f64 = 4e6;

/// Keys per command for `op` with values of `value_size` bytes.
pub fn batch_for(op: PeerOp, value_size: usize) -> usize {
    match op {
        PeerOp::Get => BATCH,
        PeerOp::Set => (MAX_COMMAND / (value_size + 24)).clamp(1, BATCH),
    }
}

/// One redis-benchmark run of `op` over `keys` preloaded keys (`key:%012d`, the
/// spelling of its `__rand_int__`) on Redis at `port`, lasting about `duration`.
pub fn run(
    port: u16,
    op: PeerOp,
    keys: u64,
    value_size: usize,
    duration: Duration,
) -> Result<PeerRun> {
    let batch = batch_for(op, value_size);
    let value = "x".repeat(value_size);
    let mut args = vec![match op {
        PeerOp::Get => "MGET".to_string(),
        PeerOp::Set => "MSET".to_string(),
    }];
    for _ in 0..batch {
        args.push("key:__rand_int__".into());
        if op == PeerOp::Set {
            args.push(value.clone());
        }
    }
    let requests = ((EXPECTED_KEYS_PER_SEC * duration.as_secs_f64()) / batch as f64)
        .max((CLIENTS * PIPELINE * 8) as f64) as u64;
    let opts = RedisOpts {
        value_size,
        clients: CLIENTS,
        pipeline: PIPELINE,
        requests,
        keyspace: keys,
        threads: 1,
    };
    let r = run_benchmark_at(port, &opts, &Workload::Custom(&args), None)?;
    let r = r.first().ok_or_else(|| BenchError::Parse {
        what: "redis-benchmark",
        detail: "no result line".into(),
    })?;
    Ok(PeerRun {
        peer: format!(
            "redis redis-benchmark {} b={batch} P={PIPELINE} c={CLIENTS}",
            args[0]
        ),
        system: "redis".into(),
        op,
        value_size,
        keys,
        connections: CLIENTS,
        batch,
        depth: PIPELINE,
        mops: r.ops_per_sec * batch as f64 / 1e6,
        p50_us: r.p50_us,
        p99_us: r.p99_us,
        errors: 0,
    })
}
