//! The Redis side of `bench store`: one preloaded `redis-server` per value size, driven
//! by `bench io`'s spinning driver with the store runs' `b` and `q`.

use crate::baseline::driver::{self, LoadOpts};
use crate::baseline::peers::{PeerBaseline, PeerOp, PeerRun};
use crate::baseline::redis::RedisServer;
use crate::baseline::redis_tool_batch;
use crate::baseline::resp::{self, RespCodec, RespMode};
use crate::error::{BenchError, Result};

use super::StoreBenchOptions;
use super::output::RedisSetLatency;

/// Connection counts of every Redis mode (as `bench io`'s peers).
const CONNECTIONS: [usize; 2] = [1, 2];

/// Redis for one value size.
pub(super) struct RedisSize {
    /// MGET / pipelined GET / MSET / pipelined SET runs and the unpipelined GET.
    pub peers: PeerBaseline,
    /// Unpipelined SETs (overwrites), one at a time on one spinning connection.
    pub set_latency: RedisSetLatency,
}

/// Starts Redis with every key loaded from a snapshot, measures the unpipelined GET
/// and SET, then each mode on 1 and 2 connections; stops it.
pub(super) fn baseline(opts: &StoreBenchOptions, size: usize) -> Result<RedisSize> {
    let server = RedisServer::start_preloaded(opts.keys, size)?;
    let port = server.port();
    let samples = opts.latency_samples;
    let get = resp::unpipelined_get_latency(port, opts.keys, size, samples)?;
    let codec = RespCodec::new(RespMode::PipelinedSet, size);
    let (set, errors, first) = driver::run_unpipelined("redis", port, opts.keys, samples, codec)?;
    if errors > 0 {
        return Err(BenchError::Parse {
            what: "redis reply",
            detail: format!("{errors} failed SETs; first: {}", first.unwrap_or_default()),
        });
    }
    let mut runs = Vec::new();
    let modes = [
        (RespMode::Mget, PeerOp::Get),
        (RespMode::PipelinedGet, PeerOp::Get),
        (RespMode::Mset, PeerOp::Set),
        (RespMode::PipelinedSet, PeerOp::Set),
    ];
    for (mode, op) in modes {
        for c in CONNECTIONS {
            let lo = LoadOpts::new(size, opts.keys, opts.batch, opts.depth, c, opts.duration);
            let o = resp::run(port, mode, &lo)?;
            if o.errors > 0 {
                eprintln!(
                    "[farcache-bench] warning: redis {mode:?} c={c}: {} failed keys (first: {})",
                    o.errors,
                    o.first_error.as_deref().unwrap_or("?")
                );
            }
            runs.push(PeerRun {
                peer: format!("redis {} c={c}", mode.label(lo.batch, lo.depth)),
                system: "redis".into(),
                op,
                value_size: size,
                keys: opts.keys,
                connections: c,
                batch: lo.batch,
                depth: lo.depth,
                mops: o.mops,
                p50_us: o.batch_latency.p50_us,
                p99_us: o.batch_latency.p99_us,
                errors: o.errors,
            });
        }
    }
    // Redis's own tool at its best batch (as `bench io`'s peers).
    for op in [PeerOp::Get, PeerOp::Set] {
        runs.push(redis_tool_batch::run(
            port,
            op,
            opts.keys,
            size,
            opts.duration,
        )?);
    }
    Ok(RedisSize {
        peers: PeerBaseline {
            value_size: size,
            keys: opts.keys,
            runs,
            redis_unpipelined_spin: Some(get),
            memcached_unpipelined_spin: None,
        },
        set_latency: RedisSetLatency {
            value_size: size,
            latency: set,
        },
    })
}
