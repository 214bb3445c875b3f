//! The executor's ceiling for `bench io`: the same request batches the client sends,
//! run in this process by the server's batch executor (`farcache_server::inproc`), with
//! no sockets, no client and no response decoding. What one server thread could
//! answer if the network and the client cost nothing.

use std::time::{Duration, Instant};

use farcache_proto::{HEADER_LEN, Op, RequestEncoder};
use farcache_server::inproc::InProcess;

use crate::error::{BenchError, Result};
use crate::io::IoOp;
use crate::workload::{KeyDistribution, KeyGen};

/// Region size of the in-process cache (the one `bench io` asks its cluster for).
const REGION: u64 = 64 << 20;
/// At most this many request bytes are pre-encoded: enough for every address a client
/// replays when the records are small, and for more distinct records than the L3 holds
/// when they are large.
const RING_BYTES: usize = 64 << 20;
/// Bytes of a READ or WRITE op's head in a request batch.
const OP_HEAD: usize = 17;
/// Seed of the first client thread in `crate::io` (same addresses).
const SEED: u64 = 42;
/// Filled into every byte by the prefill (reads return it).
pub const PREFILL_BYTE: u8 = 0x11;
/// Every WRITE carries this byte (as `crate::io`'s writes do).
pub const WRITE_BYTE: u8 = 0xA5;

#[derive(Debug, Clone)]
pub struct CeilingSpec {
    pub op: IoOp,
    pub record_size: usize,
    pub dist: KeyDistribution,
    /// Records in the address space; the cache holds `records * record_size` bytes.
    pub records: u64,
    /// Ops per batch.
    pub batch: usize,
    /// Measured time, after a 100 ms warm-up.
    pub duration: Duration,
}

#[derive(Debug, Clone)]
pub struct CeilingOutcome {
    pub ops: u64,
    pub secs: f64,
    pub mops: f64,
    pub ns_per_op: f64,
}

/// A prefilled in-process cache and the request payloads to replay against it.
pub(crate) struct Prepared {
    pub(crate) cache: InProcess,
    /// Payloads (what follows the frame header), each `batch` ops.
    pub(crate) ring: Vec<Vec<u8>>,
}

pub(crate) fn prepare(spec: &CeilingSpec) -> Result<Prepared> {
    if spec.batch == 0 || spec.record_size == 0 {
        return Err(BenchError::InvalidArgument(
            "the ceiling needs a batch and a record size of at least 1".into(),
        ));
    }
    let bytes = spec
        .records
        .checked_mul(spec.record_size as u64)
        .ok_or_else(|| BenchError::InvalidArgument("records * record_size overflows".into()))?;
    let capacity = bytes.div_ceil(REGION).max(1) * REGION;
    let mut cache =
        InProcess::new(capacity, REGION).map_err(|e| BenchError::Cluster(e.to_string()))?;
    prefill(&mut cache, capacity)?;

    // The client's addresses: drawn up front, replayed cyclically.
    let mut g = KeyGen::new(spec.dist, spec.records, spec.record_size, SEED)?;
    let n = (spec.records as usize).clamp(1024, 1 << 20);
    let addrs: Vec<u64> = (0..n).map(|_| g.next_offset()).collect();
    let op_bytes = OP_HEAD
        + match spec.op {
            IoOp::Read => 0,
            IoOp::Write => spec.record_size,
        };
    let batch_bytes = op_bytes * spec.batch;
    let batches = n
        .div_ceil(spec.batch)
        .min((RING_BYTES / batch_bytes).max(1));
    let data = vec![WRITE_BYTE; spec.record_size];
    let id = cache.cache_id();
    let mut next = 0;
    let mut ring = Vec::with_capacity(batches);
    for _ in 0..batches {
        let mut req = Vec::with_capacity(HEADER_LEN + 4 + batch_bytes);
        let mut e = RequestEncoder::begin(&mut req, 0);
        for _ in 0..spec.batch {
            let addr = addrs[next];
            next = if next + 1 == addrs.len() { 0 } else { next + 1 };
            let op = match spec.op {
                IoOp::Read => Op::Read {
                    cache: id,
                    addr,
                    len: spec.record_size as u32,
                },
                IoOp::Write => Op::Write {
                    cache: id,
                    addr,
                    data: &data,
                },
            };
            e.push(&mut req, &op);
        }
        e.finish(&mut req);
        ring.push(req.split_off(HEADER_LEN));
    }
    Ok(Prepared { cache, ring })
}

/// Writes every byte once (1 MiB writes, 16 to a batch), so no page faults are timed.
fn prefill(cache: &mut InProcess, capacity: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let buf = vec![PREFILL_BYTE; CHUNK as usize];
    let id = cache.cache_id();
    let mut out = Vec::new();
    let mut addr = 0;
    while addr < capacity {
        let mut req = Vec::new();
        let mut e = RequestEncoder::begin(&mut req, 0);
        let mut ops = 0;
        while ops < 16 && addr < capacity {
            let n = CHUNK.min(capacity - addr);
            e.push(
                &mut req,
                &Op::Write {
                    cache: id,
                    addr,
                    data: &buf[..n as usize],
                },
            );
            addr += n;
            ops += 1;
        }
        e.finish(&mut req);
        out.clear();
        cache
            .execute(&req[HEADER_LEN..], 0, &mut out)
            .map_err(|e| BenchError::Cluster(format!("prefill: {e}")))?;
    }
    if cache.errors() != 0 {
        return Err(BenchError::Cluster(format!(
            "prefill: {} writes failed",
            cache.errors()
        )));
    }
    Ok(())
}

/// Replays the batches the client would send for `spec` through the server's executor
/// in this thread for `spec.duration` (after a 100 ms warm-up), discarding responses.
pub fn run_ceiling(spec: &CeilingSpec) -> Result<CeilingOutcome> {
    measure(spec).map(|(o, _)| o)
}

/// Nanoseconds this thread has run on a CPU (Linux; `None` elsewhere): unlike the wall
/// clock, not inflated by other processes taking turns on the same core.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// One procedure call of a [`run_call_ceiling`]: the EXECUTE address and arguments.
pub struct Call<'a> {
    pub addr: u64,
    pub args: &'a [u8],
}

/// The procedure a [`run_call_ceiling`] calls: a built-in by name, or WebAssembly
/// registered under `name` first.
#[derive(Clone, Copy)]
pub enum CallProc<'a> {
    Builtin(&'a str),
    Wasm { name: &'a str, code: &'a [u8] },
}

/// The ceiling of a procedure row: `calls` to `proc`, `batch` to a batch in the order
/// given (replayed cyclically), against a cache of `bytes` bytes holding `fill(i)` as
/// its `i`th little-endian u64, run by the server's executor in this thread for
/// `duration`. A call answered with anything but OK fails the run.
pub fn run_call_ceiling(
    bytes: u64,
    fill: impl Fn(u64) -> u64,
    proc: CallProc<'_>,
    calls: &[Call<'_>],
    batch: usize,
    duration: Duration,
) -> Result<CeilingOutcome> {
    if batch == 0 || calls.is_empty() {
        return Err(BenchError::InvalidArgument(
            "a call ceiling needs calls and a batch of at least 1".into(),
        ));
    }
    let capacity = bytes.div_ceil(REGION).max(1) * REGION;
    let mut cache =
        InProcess::new(capacity, REGION).map_err(|e| BenchError::Cluster(e.to_string()))?;
    prefill(&mut cache, capacity)?;
    fill_words(&mut cache, bytes, fill)?;
    let proc_name = match proc {
        CallProc::Builtin(name) => name,
        CallProc::Wasm { name, code } => {
            cache
                .register(name, code)
                .map_err(|e| BenchError::Cluster(format!("register {name}: {e}")))?;
            name
        }
    };
    let id = cache.cache_id();
    let batches = calls.len().div_ceil(batch);
    let mut ring = Vec::with_capacity(batches);
    let mut next = 0;
    for _ in 0..batches {
        let mut req = Vec::new();
        let mut e = RequestEncoder::begin(&mut req, 0);
        let picked: Vec<&Call<'_>> = (0..batch)
            .map(|_| {
                let c = &calls[next];
                next = if next + 1 == calls.len() { 0 } else { next + 1 };
                c
            })
            .collect();
        // As the client sends them: calls with arguments of one length in one run.
        let args_len = picked[0].args.len();
        let run = picked.iter().all(|c| c.args.len() == args_len)
            && e.push_executes(
                &mut req,
                id,
                proc_name,
                args_len as u32,
                picked.iter().map(|c| (c.addr, c.args)),
            );
        for c in picked.iter().filter(|_| !run) {
            e.push(
                &mut req,
                &Op::Execute {
                    cache: id,
                    addr: c.addr,
                    proc_name,
                    args: c.args,
                },
            );
        }
        e.finish(&mut req);
        ring.push(req.split_off(HEADER_LEN));
    }
    check_calls(&mut cache, &ring)?;
    measure_prepared(Prepared { cache, ring }, duration).map(|(o, _)| o)
}

/// Runs every batch of `ring` once and checks that each call finished here: a
/// procedure that fails answers OK with a failure inside, which the op counts miss.
fn check_calls(cache: &mut InProcess, ring: &[Vec<u8>]) -> Result<()> {
    use farcache_proto::reply::{self, ExecReply};
    use farcache_proto::{ReplyBody, ResponseDecoder};
    let mut out = Vec::new();
    for (i, payload) in ring.iter().enumerate() {
        out.clear();
        cache
            .execute(payload, 0, &mut out)
            .map_err(|e| BenchError::Cluster(format!("batch rejected: {e}")))?;
        let bad = |what: String| BenchError::Cluster(format!("batch {i}: {what}"));
        let replies = ResponseDecoder::new(&out[HEADER_LEN..]).map_err(|e| bad(e.to_string()))?;
        for r in replies {
            let r = r.map_err(|e| bad(e.to_string()))?;
            let body = match r.body {
                ReplyBody::Done(_) => continue,
                ReplyBody::Data(body) => body,
                _ => return Err(bad(format!("{:?} {:?}", r.op, r.status))),
            };
            match reply::decode(body).map_err(|e| bad(e.to_string()))? {
                ExecReply::Done(_) => {}
                other => return Err(bad(format!("the call did not finish here: {other:?}"))),
            }
        }
    }
    Ok(())
}

/// Writes `fill(i)` as the `i`th u64 of the first `bytes` bytes.
fn fill_words(cache: &mut InProcess, bytes: u64, fill: impl Fn(u64) -> u64) -> Result<()> {
    const WORDS: u64 = 1 << 17;
    let id = cache.cache_id();
    let mut out = Vec::new();
    let mut at = 0u64;
    while at < bytes / 8 {
        let n = WORDS.min(bytes / 8 - at);
        let data: Vec<u8> = (at..at + n).flat_map(|i| fill(i).to_le_bytes()).collect();
        let mut req = Vec::new();
        let mut e = RequestEncoder::begin(&mut req, 0);
        e.push(
            &mut req,
            &Op::Write {
                cache: id,
                addr: at * 8,
                data: &data,
            },
        );
        e.finish(&mut req);
        out.clear();
        cache
            .execute(&req[HEADER_LEN..], 0, &mut out)
            .map_err(|e| BenchError::Cluster(format!("fill: {e}")))?;
        at += n;
    }
    if cache.errors() != 0 {
        return Err(BenchError::Cluster("fill: a write failed".into()));
    }
    Ok(())
}

/// [`run_ceiling`], plus the CPU time the measured loop took in this thread (seconds).
fn measure(spec: &CeilingSpec) -> Result<(CeilingOutcome, Option<f64>)> {
    measure_prepared(prepare(spec)?, spec.duration)
}

fn measure_prepared(
    Prepared { mut cache, ring }: Prepared,
    duration: Duration,
) -> Result<(CeilingOutcome, Option<f64>)> {
    let mut out = Vec::with_capacity(64 << 10);
    let mut seq = 0u64;
    let mut at = 0;
    let mut run = |cache: &mut InProcess, out: &mut Vec<u8>| -> Result<u64> {
        out.clear();
        seq += 1;
        let n = cache
            .execute(&ring[at], seq, out)
            .map_err(|e| BenchError::Cluster(format!("batch rejected: {e}")))?;
        at = if at + 1 == ring.len() { 0 } else { at + 1 };
        Ok(u64::from(n))
    };
    let warm = Instant::now() + Duration::from_millis(100);
    while Instant::now() < warm {
        run(&mut cache, &mut out)?;
    }
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    let end = start + duration;
    let mut ops = 0;
    loop {
        ops += run(&mut cache, &mut out)?;
        if Instant::now() >= end {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu0
        .zip(thread_cpu_ns())
        .map(|(a, b)| b.saturating_sub(a) as f64 / 1e9);
    // The prefill checked for none: any now came from the replayed batches.
    if cache.errors() != 0 {
        return Err(BenchError::Cluster(format!(
            "{} ops failed",
            cache.errors()
        )));
    }
    let out = CeilingOutcome {
        ops,
        secs,
        mops: ops as f64 / secs / 1e6,
        ns_per_op: secs * 1e9 / ops as f64,
    };
    Ok((out, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;
    use farcache_proto::{OpCode, ReplyBody, ResponseDecoder, Status};

    fn spec(op: IoOp, record_size: usize, records: u64, duration: Duration) -> CeilingSpec {
        CeilingSpec {
            op,
            record_size,
            dist: KeyDistribution::Uniform,
            records,
            batch: 64,
            duration,
        }
    }

    /// Prints the ceiling of `aggregate` over 1, 2 and 3 records (100 000 records,
    /// b = 1024): `cargo test --release -p farcache-bench ceiling::tests::print_calls
    /// -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, run by hand in release"]
    fn print_calls_ceiling() {
        use farcache_sproc::builtin::{AggFn, Aggregate};
        let secs: f64 = std::env::var("FARCACHE_CEILING_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0);
        let records: u64 = std::env::var("FARCACHE_CEILING_RECORDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(100_000);
        // `FARCACHE_CEILING_ONLY=wasm` runs the WebAssembly row alone.
        let only_wasm = std::env::var("FARCACHE_CEILING_ONLY").is_ok_and(|o| o == "wasm");
        for k in (1..=3u32).filter(|_| !only_wasm) {
            let mut g = KeyGen::new(KeyDistribution::Uniform, records, 8, SEED).unwrap();
            let args: Vec<([u8; 9], u64)> = (0..65_536)
                .map(|_| {
                    let first = g.next_offset() / 8 % (records - 2 * u64::from(k));
                    (Aggregate::call(AggFn::Sum, k, 16), first * 8)
                })
                .collect();
            let calls: Vec<Call<'_>> = args
                .iter()
                .map(|(a, addr)| Call {
                    addr: *addr,
                    args: a,
                })
                .collect();
            let o = run_call_ceiling(
                records * 8,
                |i| i,
                CallProc::Builtin(Aggregate::NAME),
                &calls,
                1024,
                Duration::from_secs_f64(secs),
            )
            .unwrap();
            println!(
                "ceiling aggregate k={k} records={records} b=1024: {:6.2} M calls/s {:6.1} ns/call",
                o.mops, o.ns_per_op
            );
        }
        // `sum.wat` over one record, as the WebAssembly verify row calls it.
        let sum = include_str!("../../sproc/procs/sum.wat").as_bytes();
        let mut g = KeyGen::new(KeyDistribution::Uniform, records, 8, SEED).unwrap();
        let args: Vec<[u8; 24]> = (0..65_536)
            .map(|_| {
                let mut a = [0u8; 24];
                a[..8].copy_from_slice(&g.next_offset().to_le_bytes());
                a[8..12].copy_from_slice(&1u32.to_le_bytes());
                a
            })
            .collect();
        let calls: Vec<Call<'_>> = args
            .iter()
            .map(|a| Call {
                addr: u64::from_le_bytes(a[..8].try_into().unwrap()),
                args: a,
            })
            .collect();
        let wasm = CallProc::Wasm {
            name: "sum",
            code: sum,
        };
        let o = run_call_ceiling(
            records * 8,
            |i| i,
            wasm,
            &calls,
            1024,
            Duration::from_secs_f64(secs),
        )
        .unwrap();
        println!(
            "ceiling sum.wat 1 record records={records} b=1024: {:6.2} M calls/s {:6.1} ns/call",
            o.mops, o.ns_per_op
        );
    }

    #[test]
    fn call_ceilings_run_calls_and_refuse_failing_ones() {
        use farcache_sproc::builtin::{AggFn, Aggregate};
        let args = Aggregate::call(AggFn::Sum, 2, 64);
        let good: Vec<Call<'_>> = (0..100)
            .map(|i| Call {
                addr: i * 8,
                args: &args,
            })
            .collect();
        let d = Duration::from_millis(50);
        let agg = CallProc::Builtin(Aggregate::NAME);
        let o = run_call_ceiling(8_000, |i| i, agg, &good, 16, d).unwrap();
        assert!(o.ops > 0 && o.mops > 0.0, "{o:?}");
        // A call past the end of the cache answers OUT_OF_RANGE: the run fails.
        let bad = [Call {
            addr: 64 << 20,
            args: &args,
        }];
        assert!(run_call_ceiling(8_000, |i| i, agg, &bad, 4, d).is_err());
        let none = CallProc::Builtin("no-such-proc");
        assert!(run_call_ceiling(8_000, |i| i, none, &good, 4, d).is_err());
        assert!(run_call_ceiling(8_000, |i| i, agg, &[], 4, d).is_err());
        // A WebAssembly procedure is registered first; one that does not compile
        // fails the run.
        let sum = include_str!("../../sproc/procs/sum.wat").as_bytes();
        let mut wasm_args = [0u8; 24];
        wasm_args[8..12].copy_from_slice(&2u32.to_le_bytes());
        let wasm_calls = [Call {
            addr: 64,
            args: &wasm_args,
        }];
        let wasm = CallProc::Wasm {
            name: "sum",
            code: sum,
        };
        assert!(run_call_ceiling(8_000, |i| i, wasm, &wasm_calls, 8, d).is_ok());
        let broken = CallProc::Wasm {
            name: "sum",
            code: b"(module",
        };
        assert!(run_call_ceiling(8_000, |i| i, broken, &wasm_calls, 8, d).is_err());
        // A call the procedure refuses answers OK with a failure inside: still caught.
        let refused = Aggregate::call(AggFn::Sum, 2, 4);
        let refused = [Call {
            addr: 0,
            args: &refused,
        }];
        let e = run_call_ceiling(8_000, |i| i, agg, &refused, 4, d).unwrap_err();
        assert!(e.to_string().contains("did not finish"), "{e}");
    }

    #[test]
    fn replays_batches_the_executor_answers() {
        for op in [IoOp::Read, IoOp::Write] {
            let out = run_ceiling(&spec(op, 8, 10_000, Duration::from_millis(50))).unwrap();
            assert!(out.mops > 0.0 && out.ops > 0, "{op:?}: {out:?}");
            assert!(out.secs >= 0.05);
        }
    }

    #[test]
    fn one_batch_answers_every_op_with_the_right_bytes() {
        let s = spec(IoOp::Read, 24, 5_000, Duration::ZERO);
        let Prepared { mut cache, ring } = prepare(&s).unwrap();
        assert_eq!(ring.len(), 5_000usize.div_ceil(s.batch));
        let mut out = Vec::new();
        assert_eq!(cache.execute(&ring[0], 7, &mut out).unwrap(), 64);
        let mut d = ResponseDecoder::new(&out[HEADER_LEN..]).unwrap();
        let mut n = 0;
        for r in d.by_ref() {
            let r = r.unwrap();
            assert_eq!((r.op, r.status), (OpCode::Read, Status::Ok));
            assert_eq!(r.body, ReplyBody::Data(&[PREFILL_BYTE; 24]));
            n += 1;
        }
        d.finish().unwrap();
        assert_eq!(n, s.batch);

        // Writes: every op OK, and the bytes are there afterwards.
        let s = spec(IoOp::Write, 16, 5_000, Duration::ZERO);
        let Prepared { mut cache, ring } = prepare(&s).unwrap();
        out.clear();
        assert_eq!(cache.execute(&ring[0], 8, &mut out).unwrap(), 64);
        let replies: Vec<_> = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(replies.len(), 64);
        assert!(
            replies
                .iter()
                .all(|r| (r.op, r.status) == (OpCode::Write, Status::Ok))
        );
        let Some(Ok(Op::Write { addr, .. })) = farcache_proto::RequestDecoder::new(&ring[0])
            .unwrap()
            .next()
        else {
            panic!("the ring starts with a write");
        };
        let mut req = Vec::new();
        let mut e = RequestEncoder::begin(&mut req, 9);
        e.push(
            &mut req,
            &Op::Read {
                cache: cache.cache_id(),
                addr,
                len: 16,
            },
        );
        e.finish(&mut req);
        out.clear();
        cache.execute(&req[HEADER_LEN..], 9, &mut out).unwrap();
        let r = ResponseDecoder::new(&out[HEADER_LEN..])
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(r.body, ReplyBody::Data(&[WRITE_BYTE; 16]));
    }

    /// Prints the ceiling for 8 B ops, b = 1024, uniform, in and beyond the L3:
    /// `cargo test --release -p farcache-bench ceiling::tests::print -- --ignored --nocapture`
    /// (`FARCACHE_CEILING_SECS` sets the measured time, 2 s by default; see below to
    /// pick rows).
    #[test]
    #[ignore = "a measurement, run by hand in release"]
    fn print_ceiling_8b() {
        let secs: f64 = std::env::var("FARCACHE_CEILING_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0);
        // `FARCACHE_CEILING_ONLY=read` (or `write`, `100000`, `read16000000`...) picks
        // rows by substring of `{op}{records}`.
        let only = std::env::var("FARCACHE_CEILING_ONLY").unwrap_or_default();
        for records in [100_000u64, 16_000_000] {
            for op in [IoOp::Read, IoOp::Write] {
                if !format!("{}{records}", op.name()).contains(&only) {
                    continue;
                }
                let s = CeilingSpec {
                    batch: 1024,
                    ..spec(op, 8, records, Duration::from_secs_f64(secs))
                };
                let (o, cpu) = measure(&s).unwrap();
                // On a shared machine the CPU-time rate is the steadier number.
                let cpu_mops = cpu.map_or(f64::NAN, |c| o.ops as f64 / c / 1e6);
                println!(
                    "ceiling {:5} 8B uniform records={records:>10} b=1024: {:6.2} Mops {:6.1} ns/op (per CPU second: {cpu_mops:6.2} Mops)",
                    op.name(),
                    o.mops,
                    o.ns_per_op
                );
            }
        }
    }
}
