//! Model check: random sequences of reads, writes, CAS and FETCH_ADD of random sizes and
//! alignments against a 3-server cluster with small regions, compared byte for byte
//! with an in-memory `Vec<u8>`. Every API style is used: blocking calls, batches
//! (`submit` + `wait`, `.await` on the ticket, `run`) and single-op futures (`wait`,
//! `.await`, in order and in reverse), plus batches whose ticket is dropped unwaited.
//! Invalid ops (out of range, misaligned atomics) must fail with the right error and
//! change nothing. Explicit tests cover region/server spanning, ops over the per-op
//! size limit, zero-length ops, concurrent threads, and handles made stale by reshape.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use common::{as_op_result, block_on, diff, pattern};
use farcache_client::{
    Bytes, Cache, ClientConfig, ClientError, OpError, OpFuture, OpOutput, OpResult,
};
use farcache_testkit::{ClusterOptions, LocalCluster};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rand::{Rng, SeedableRng};

/// Small regions so that many ops span regions (and servers).
const REGION: u64 = 64 << 10;
/// Regions per cache: two per server.
const NREG: u64 = 6;
/// Not a multiple of the region size (the last region is partial) nor of 8 (the last
/// aligned word sticks out of the cache).
const CAPACITY: u64 = (NREG - 1) * REGION + 3004;
/// Aligned words that lie wholly inside the cache.
const WORDS: u64 = CAPACITY / 8;
/// A future whose waker stays silent this long counts as a lost wake-up.
const LOST_WAKEUP: Duration = Duration::from_secs(20);

fn cluster() -> LocalCluster {
    let opts = ClusterOptions::default()
        .servers(3)
        .region_size(REGION)
        .server_memory(64 << 20)
        .server_threads(2);
    LocalCluster::start(&opts).expect("start local cluster")
}

/// A cache of `CAPACITY` bytes with regions on all three servers.
fn spread_cache(cluster: &LocalCluster, cfg: ClientConfig, name: &str) -> Cache {
    let client = cluster.client_with(cfg).expect("client");
    let cache = client.create(name, CAPACITY).expect("create cache");
    let info = cache.info();
    assert_eq!(info.region_size, REGION);
    assert_eq!(info.capacity, CAPACITY);
    assert_eq!(info.regions.len() as u64, NREG);
    let mut servers = info.regions.clone();
    servers.sort_unstable();
    servers.dedup();
    assert_eq!(
        servers.len(),
        3,
        "regions should span all 3 servers: {info:?}"
    );
    // Adjacent regions live on different servers, so region-spanning ops are also
    // server-spanning ops.
    for w in info.regions.windows(2) {
        assert_ne!(
            w[0], w[1],
            "adjacent regions on one server: {:?}",
            info.regions
        );
    }
    cache
}

// ---------------------------------------------------------------------------------
// The model

#[derive(Debug, Clone)]
enum Step {
    Read {
        addr: u64,
        len: u64,
    },
    Write {
        addr: u64,
        len: u64,
        seed: u64,
    },
    /// `hit`: use the current value as `expected` (the swap happens); otherwise use
    /// `expected` as generated (it almost always misses).
    Cas {
        addr: u64,
        hit: bool,
        expected: u64,
        new: u64,
    },
    FetchAdd {
        addr: u64,
        delta: u64,
    },
}

/// A step with its operands fixed against the model at issue time.
#[derive(Debug, Clone)]
enum Concrete {
    Read { addr: u64, len: u64 },
    Write { addr: u64, data: Vec<u8> },
    Cas { addr: u64, expected: u64, new: u64 },
    FetchAdd { addr: u64, delta: u64 },
}

struct Model {
    bytes: Vec<u8>,
}

impl Model {
    fn range_error(addr: u64, len: u64) -> Option<OpError> {
        match addr.checked_add(len) {
            Some(end) if end <= CAPACITY => None,
            _ => Some(OpError::OutOfRange {
                addr,
                len,
                capacity: CAPACITY,
            }),
        }
    }

    fn atomic_error(addr: u64) -> Option<OpError> {
        if !addr.is_multiple_of(8) {
            return Some(OpError::Misaligned(addr));
        }
        Self::range_error(addr, 8)
    }

    fn word(&self, addr: u64) -> u64 {
        let a = addr as usize;
        u64::from_le_bytes(self.bytes[a..a + 8].try_into().expect("8 bytes"))
    }

    fn set_word(&mut self, addr: u64, v: u64) {
        let a = addr as usize;
        self.bytes[a..a + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// Applies `step` in program order: the op to send and the result it must have.
    fn apply(&mut self, step: &Step) -> (Concrete, OpResult) {
        match *step {
            Step::Read { addr, len } => {
                let want = match Self::range_error(addr, len) {
                    Some(e) => Err(e),
                    None => Ok(OpOutput::Data(Bytes::copy_from_slice(
                        &self.bytes[addr as usize..(addr + len) as usize],
                    ))),
                };
                (Concrete::Read { addr, len }, want)
            }
            Step::Write { addr, len, seed } => {
                let data = pattern(seed, len as usize);
                let want = match Self::range_error(addr, len) {
                    Some(e) => Err(e),
                    None => {
                        self.bytes[addr as usize..(addr + len) as usize].copy_from_slice(&data);
                        Ok(OpOutput::Done)
                    }
                };
                (Concrete::Write { addr, data }, want)
            }
            Step::Cas {
                addr,
                hit,
                expected,
                new,
            } => {
                if let Some(e) = Self::atomic_error(addr) {
                    return (
                        Concrete::Cas {
                            addr,
                            expected,
                            new,
                        },
                        Err(e),
                    );
                }
                let old = self.word(addr);
                let expected = if hit { old } else { expected };
                if old == expected {
                    self.set_word(addr, new);
                }
                (
                    Concrete::Cas {
                        addr,
                        expected,
                        new,
                    },
                    Ok(OpOutput::Value(old)),
                )
            }
            Step::FetchAdd { addr, delta } => {
                let want = match Self::atomic_error(addr) {
                    Some(e) => Err(e),
                    None => {
                        let old = self.word(addr);
                        self.set_word(addr, old.wrapping_add(delta));
                        Ok(OpOutput::Value(old))
                    }
                };
                (Concrete::FetchAdd { addr, delta }, want)
            }
        }
    }
}

fn show(r: &OpResult) -> String {
    match r {
        Ok(OpOutput::Data(b)) if b.len() > 32 => format!("Ok(Data({} bytes))", b.len()),
        other => format!("{other:?}"),
    }
}

fn check(ctx: &str, got: &OpResult, want: &OpResult) -> Result<(), TestCaseError> {
    if let (Ok(OpOutput::Data(g)), Ok(OpOutput::Data(w))) = (got, want) {
        return match diff(g, w) {
            None => Ok(()),
            Some(d) => Err(TestCaseError::fail(format!("{ctx}: read data wrong: {d}"))),
        };
    }
    if got == want {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{ctx}: got {}, expected {}",
            show(got),
            show(want)
        )))
    }
}

// ---------------------------------------------------------------------------------
// Issuing ops through the three API styles

fn blocking(cache: &Cache, op: &Concrete) -> OpResult {
    match op {
        Concrete::Read { addr, len } => as_op_result(cache.read(*addr, *len), OpOutput::Data),
        Concrete::Write { addr, data } => {
            as_op_result(cache.write(*addr, data), |()| OpOutput::Done)
        }
        Concrete::Cas {
            addr,
            expected,
            new,
        } => as_op_result(cache.cas(*addr, *expected, *new), OpOutput::Value),
        Concrete::FetchAdd { addr, delta } => {
            as_op_result(cache.fetch_add(*addr, *delta), OpOutput::Value)
        }
    }
}

enum AnyFuture {
    Data(OpFuture<Bytes>),
    Unit(OpFuture<()>),
    Value(OpFuture<u64>),
}

impl AnyFuture {
    fn submit(cache: &Cache, op: &Concrete) -> Self {
        match op {
            Concrete::Read { addr, len } => Self::Data(cache.read_async(*addr, *len)),
            Concrete::Write { addr, data } => Self::Unit(cache.write_async(*addr, data)),
            Concrete::Cas {
                addr,
                expected,
                new,
            } => Self::Value(cache.cas_async(*addr, *expected, *new)),
            Concrete::FetchAdd { addr, delta } => Self::Value(cache.fetch_add_async(*addr, *delta)),
        }
    }

    fn finish(self, awaited: bool) -> OpResult {
        fn get<T>(f: OpFuture<T>, awaited: bool) -> Result<T, ClientError> {
            if awaited {
                block_on(f, LOST_WAKEUP)
            } else {
                f.wait()
            }
        }
        match self {
            Self::Data(f) => as_op_result(get(f, awaited), OpOutput::Data),
            Self::Unit(f) => as_op_result(get(f, awaited), |()| OpOutput::Done),
            Self::Value(f) => as_op_result(get(f, awaited), OpOutput::Value),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum BatchHow {
    SubmitWait,
    AwaitTicket,
    Run,
}

#[derive(Debug, Clone, Copy)]
enum AsyncHow {
    WaitInOrder,
    AwaitInOrder,
    AwaitReversed,
}

#[derive(Debug, Clone)]
enum Action {
    Blocking(Step),
    Batch(Vec<Step>, BatchHow),
    Async(Vec<Step>, AsyncHow),
    /// Submitted, then the ticket is dropped unwaited (`true`: after one poll, which
    /// stores a waker). The ops still run, in program order with later ones.
    Abandon(Vec<Step>, bool),
}

fn build_batch(cache: &Cache, ops: &[Concrete]) -> farcache_client::Batch {
    let mut b = cache.batch();
    for (i, op) in ops.iter().enumerate() {
        let idx = match op {
            Concrete::Read { addr, len } => b.read(*addr, *len),
            Concrete::Write { addr, data } => b.write(*addr, data),
            Concrete::Cas {
                addr,
                expected,
                new,
            } => b.cas(*addr, *expected, *new),
            Concrete::FetchAdd { addr, delta } => b.fetch_add(*addr, *delta),
        };
        assert_eq!(idx, i, "batch op index");
    }
    assert_eq!(b.len(), ops.len());
    b
}

fn run_batch(cache: &Cache, ops: &[Concrete], how: BatchHow) -> Vec<OpResult> {
    let b = build_batch(cache, ops);
    let results = match how {
        BatchHow::SubmitWait => b.submit().wait(),
        BatchHow::AwaitTicket => block_on(b.submit(), LOST_WAKEUP),
        BatchHow::Run => b.run(),
    };
    assert_eq!(results.len(), ops.len(), "one result per batch op");
    results.into_vec()
}

fn run_async(cache: &Cache, ops: &[Concrete], how: AsyncHow) -> Vec<OpResult> {
    // Every future is submitted (in program order) before any is waited for.
    let futures: Vec<AnyFuture> = ops.iter().map(|op| AnyFuture::submit(cache, op)).collect();
    match how {
        AsyncHow::WaitInOrder => futures.into_iter().map(|f| f.finish(false)).collect(),
        AsyncHow::AwaitInOrder => futures.into_iter().map(|f| f.finish(true)).collect(),
        AsyncHow::AwaitReversed => {
            let mut r: Vec<OpResult> = futures.into_iter().rev().map(|f| f.finish(true)).collect();
            r.reverse();
            r
        }
    }
}

/// Runs one action; a multi-op action's expectations are computed in program order
/// before it is issued.
fn run_action(
    cache: &Cache,
    model: &mut Model,
    n: usize,
    action: &Action,
) -> Result<(), TestCaseError> {
    let (steps, kind) = match action {
        Action::Blocking(step) => {
            let (op, want) = model.apply(step);
            let got = blocking(cache, &op);
            return check(&format!("action {n} (blocking {step:?})"), &got, &want);
        }
        Action::Batch(steps, how) => (steps, format!("batch {how:?}")),
        Action::Async(steps, how) => (steps, format!("async {how:?}")),
        Action::Abandon(steps, polled) => {
            let ops: Vec<Concrete> = steps.iter().map(|s| model.apply(s).0).collect();
            let mut ticket = build_batch(cache, &ops).submit();
            if *polled {
                let mut cx = Context::from_waker(Waker::noop());
                let _ = Pin::new(&mut ticket).poll(&mut cx);
            }
            drop(ticket);
            return Ok(());
        }
    };
    let (ops, wants): (Vec<Concrete>, Vec<OpResult>) = steps.iter().map(|s| model.apply(s)).unzip();
    let got = match action {
        Action::Batch(_, how) => run_batch(cache, &ops, *how),
        Action::Async(_, how) => run_async(cache, &ops, *how),
        Action::Blocking(_) | Action::Abandon(..) => unreachable!(),
    };
    for (i, (g, w)) in got.iter().zip(&wants).enumerate() {
        check(&format!("action {n} ({kind}) op {i} {:?}", steps[i]), g, w)?;
    }
    Ok(())
}

fn check_whole_cache(cache: &Cache, model: &Model, ctx: &str) -> Result<(), TestCaseError> {
    let got = cache
        .read(0, CAPACITY)
        .map_err(|e| TestCaseError::fail(format!("{ctx}: whole-cache read failed: {e}")))?;
    match diff(&got, &model.bytes) {
        None => Ok(()),
        Some(d) => Err(TestCaseError::fail(format!(
            "{ctx}: cache differs from the model: {d}"
        ))),
    }
}

// ---------------------------------------------------------------------------------
// Strategies

/// A region boundary (or the capacity) moved by a few bytes.
fn near_boundary() -> impl Strategy<Value = u64> + Clone {
    (1..=NREG, -40i64..=40).prop_map(|(k, d)| {
        let b = if k == NREG { CAPACITY } else { k * REGION };
        b.saturating_add_signed(d).min(CAPACITY)
    })
}

/// A valid range, biased towards region boundaries.
fn in_range() -> impl Strategy<Value = (u64, u64)> + Clone {
    let start = prop_oneof![2 => 0..=CAPACITY, 3 => near_boundary()];
    let len = prop_oneof![
        3 => 0..=16u64,
        3 => 1..=2048u64,
        2 => 1..=2 * REGION + 100,
        1 => Just(CAPACITY),
    ];
    (start, len).prop_map(|(addr, len)| {
        let len = len.min(CAPACITY);
        (addr.min(CAPACITY - len), len)
    })
}

/// A range that is not wholly inside the cache.
fn out_of_range() -> impl Strategy<Value = (u64, u64)> + Clone {
    prop_oneof![
        // Overlaps the end.
        (0..=64u64, 1..=4096u64).prop_map(|(back, extra)| (CAPACITY - back, back + extra)),
        Just((0, CAPACITY + 1)),
        // Starts past the end (including empty ranges there).
        (1..=4 * REGION, 0..=512u64).prop_map(|(past, len)| (CAPACITY + past, len)),
        // The end overflows u64.
        (0..=4096u64, 1..=4096u64).prop_map(|(back, len)| (u64::MAX - back, back + len)),
    ]
}

fn range() -> impl Strategy<Value = (u64, u64)> + Clone {
    prop_oneof![9 => in_range(), 1 => out_of_range()]
}

fn word_addr() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![
        3 => (0..WORDS).prop_map(|w| w * 8),
        // The words on either side of a region boundary.
        2 => (1..NREG, -2i64..2).prop_map(|(k, d)| (k * REGION).saturating_add_signed(d * 8)),
        1 => Just((WORDS - 1) * 8),
    ]
}

fn atomic_addr() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![
        8 => word_addr(),
        1 => (word_addr(), 1..8u64).prop_map(|(a, off)| a + off),
        // Aligned but (partly) past the end.
        1 => prop_oneof![
            Just(WORDS * 8),
            (WORDS + 1..WORDS + 10_000).prop_map(|w| w * 8),
            Just(!7u64),
        ],
    ]
}

fn value() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![any::<u64>(), Just(0), Just(u64::MAX), 0..16u64]
}

fn step() -> impl Strategy<Value = Step> + Clone {
    prop_oneof![
        4 => range().prop_map(|(addr, len)| Step::Read { addr, len }),
        4 => (range(), any::<u64>()).prop_map(|((addr, len), seed)| Step::Write { addr, len, seed }),
        2 => (atomic_addr(), any::<bool>(), value(), value()).prop_map(
            |(addr, hit, expected, new)| Step::Cas { addr, hit, expected, new }
        ),
        2 => (atomic_addr(), value()).prop_map(|(addr, delta)| Step::FetchAdd { addr, delta }),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    let batch_how = prop_oneof![
        Just(BatchHow::SubmitWait),
        Just(BatchHow::AwaitTicket),
        Just(BatchHow::Run)
    ];
    let async_how = prop_oneof![
        Just(AsyncHow::WaitInOrder),
        Just(AsyncHow::AwaitInOrder),
        Just(AsyncHow::AwaitReversed)
    ];
    prop_oneof![
        5 => step().prop_map(Action::Blocking),
        2 => (vec(step(), 1..=8), batch_how).prop_map(|(s, h)| Action::Batch(s, h)),
        2 => (vec(step(), 1..=6), async_how).prop_map(|(s, h)| Action::Async(s, h)),
        1 => (vec(step(), 1..=4), any::<bool>()).prop_map(|(s, p)| Action::Abandon(s, p)),
    ]
}

fn run_model_check(cfg: ClientConfig, name: &str, cases: u32) {
    let cluster = cluster();
    let cache = spread_cache(&cluster, cfg, name);
    // A new cache reads as zeros.
    let fresh = cache.read(0, CAPACITY).expect("read a new cache");
    assert!(fresh.iter().all(|&b| b == 0), "a new cache is not zeroed");

    // PROPTEST_CASES overrides the default, for longer soak runs.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 512,
        ..Config::default()
    });
    let strategy = (any::<u64>(), vec(action(), 1..=40));
    let result = runner.run(&strategy, |(fill, actions)| {
        // Start every case from a known image, written by one op spanning every region.
        let mut model = Model {
            bytes: pattern(fill, CAPACITY as usize),
        };
        cache
            .write(0, &model.bytes)
            .map_err(|e| TestCaseError::fail(format!("initial fill failed: {e}")))?;
        for (n, a) in actions.iter().enumerate() {
            run_action(&cache, &mut model, n, a)?;
        }
        check_whole_cache(&cache, &model, "end of case")
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    cluster.shutdown();
}

#[test]
fn random_ops_match_the_model() {
    run_model_check(ClientConfig::new(""), "model", 64);
}

/// Same, with one-op batches and one batch in flight: every multi-part op and every
/// batch overflows the transport's open batch and queue.
#[test]
fn random_ops_match_the_model_with_tiny_transport_batches() {
    let cfg = ClientConfig::new("").batch_size(1).queue_depth(1);
    run_model_check(cfg, "model-tiny", 64);
}

// ---------------------------------------------------------------------------------
// Explicit cases

fn assert_ok_data(r: &OpResult, want: &[u8], ctx: &str) {
    match r {
        Ok(OpOutput::Data(b)) => {
            if let Some(d) = diff(b, want) {
                panic!("{ctx}: {d}");
            }
        }
        other => panic!("{ctx}: expected data, got {}", show(other)),
    }
}

#[test]
fn region_spanning_ops_reach_every_server() {
    let cluster = cluster();
    let cache = spread_cache(&cluster, ClientConfig::new(""), "spanning");
    let info = cache.info();
    // The region table names the servers of this cluster.
    let ids: Vec<u32> = cluster.servers().iter().map(|s| s.server_id()).collect();
    for s in &info.regions {
        assert!(
            ids.contains(s),
            "region on unknown server {s}; servers {ids:?}"
        );
    }
    let writes_before: Vec<u64> = cluster
        .servers()
        .iter()
        .map(|s| op_count(&s.stats(), "write"))
        .collect();

    // One write covering every region, on every server.
    let mut model = pattern(1, CAPACITY as usize);
    cache.write(0, &model).unwrap();
    for (i, s) in cluster.servers().iter().enumerate() {
        let regions_here = info.regions.iter().filter(|&&r| r == ids[i]).count() as u64;
        assert_eq!(
            op_count(&s.stats(), "write") - writes_before[i],
            regions_here,
            "server {i} should get one write part per region it holds"
        );
    }
    assert_eq!(&cache.read(0, CAPACITY).unwrap()[..], &model[..]);

    // Small ops straddling each boundary by 1..=9 bytes on either side.
    for k in 1..NREG {
        let b = k * REGION;
        for (back, fwd) in [(1, 1), (8, 1), (1, 8), (9, 9), (4096, 3)] {
            let data = pattern(k * 100 + back, (back + fwd) as usize);
            cache.write(b - back, &data).unwrap();
            model[(b - back) as usize..(b + fwd) as usize].copy_from_slice(&data);
            assert_eq!(
                &cache.read(b - back, back + fwd).unwrap()[..],
                &model[(b - back) as usize..(b + fwd) as usize],
                "straddling boundary {k}"
            );
        }
    }
    // Ops spanning three and more regions, starting and ending mid-region.
    for (addr, len) in [
        (REGION - 10, REGION + 20),
        (REGION / 2, 3 * REGION),
        (7, CAPACITY - 14),
        (CAPACITY - 2 * REGION - 1, 2 * REGION + 1),
    ] {
        let data = pattern(addr ^ len, len as usize);
        cache.write(addr, &data).unwrap();
        model[addr as usize..(addr + len) as usize].copy_from_slice(&data);
        assert_eq!(
            &cache.read(addr, len).unwrap()[..],
            &model[addr as usize..(addr + len) as usize]
        );
    }
    // A batch reading every region boundary pair and the whole cache at once.
    let mut b = cache.batch();
    for k in 1..NREG {
        b.read(k * REGION - 100, 200);
    }
    b.read(0, CAPACITY);
    let r = b.submit().wait();
    for k in 1..NREG {
        let at = (k * REGION - 100) as usize;
        assert_ok_data(
            &result_at(&r, (k - 1) as usize),
            &model[at..at + 200],
            "batch",
        );
    }
    assert_ok_data(&result_at(&r, (NREG - 1) as usize), &model, "batch whole");
    // Atomics on the words either side of every boundary.
    for k in 1..NREG {
        for addr in [k * REGION - 8, k * REGION] {
            let a = addr as usize;
            let old = u64::from_le_bytes(model[a..a + 8].try_into().unwrap());
            assert_eq!(cache.fetch_add(addr, 3).unwrap(), old);
            assert_eq!(
                cache.cas(addr, old.wrapping_add(3), 42).unwrap(),
                old.wrapping_add(3)
            );
            assert_eq!(
                cache.cas(addr, 41, 0).unwrap(),
                42,
                "a missed CAS changes nothing"
            );
            model[a..a + 8].copy_from_slice(&42u64.to_le_bytes());
        }
    }
    assert_eq!(&cache.read(0, CAPACITY).unwrap()[..], &model[..]);
    cluster.shutdown();
}

fn op_count(stats: &farcache_proto::control::ServerStats, op: &str) -> u64 {
    stats.ops.iter().find(|o| o.op == op).map_or(0, |o| o.count)
}

fn result_at(r: &farcache_client::BatchResults, i: usize) -> OpResult {
    r.get(i).expect("result index")
}

#[test]
fn out_of_range_and_misaligned_ops_fail_and_change_nothing() {
    let cluster = cluster();
    let cache = spread_cache(&cluster, ClientConfig::new(""), "invalid");
    let image = pattern(7, CAPACITY as usize);
    cache.write(0, &image).unwrap();
    let oor = |addr, len| OpError::OutOfRange {
        addr,
        len,
        capacity: CAPACITY,
    };

    let ranges = [
        (CAPACITY - 1, 2),
        (CAPACITY, 1),
        (0, CAPACITY + 1),
        (CAPACITY + 1, 0),
        (u64::MAX, 1),
        (u64::MAX - 3, 8),
        (u64::MAX, 0),
        (5 * REGION, REGION + 3005),
    ];
    for (addr, len) in ranges {
        let want = Err(oor(addr, len));
        let got = as_op_result(cache.read(addr, len), OpOutput::Data);
        assert_eq!(got, want, "read({addr}, {len})");
        let data = pattern(addr, len.min(1 << 20) as usize);
        if data.len() as u64 == len {
            let got = as_op_result(cache.write(addr, &data), |()| OpOutput::Done);
            assert_eq!(got, want, "write({addr}, {len})");
            let got = as_op_result(cache.write_async(addr, &data).wait(), |()| OpOutput::Done);
            assert_eq!(got, want, "write_async({addr}, {len})");
        }
        let got = as_op_result(
            block_on(cache.read_async(addr, len), LOST_WAKEUP),
            OpOutput::Data,
        );
        assert_eq!(got, want, "read_async({addr}, {len})");
    }
    // Atomics: misaligned anywhere (checked first), or aligned but not wholly inside.
    for addr in [
        1,
        7,
        9,
        REGION - 4,
        REGION + 1,
        CAPACITY - 3,
        CAPACITY + 1,
        u64::MAX,
    ] {
        let want = Err(OpError::Misaligned(addr));
        assert_eq!(as_op_result(cache.cas(addr, 0, 1), OpOutput::Value), want);
        assert_eq!(
            as_op_result(cache.fetch_add(addr, 1), OpOutput::Value),
            want
        );
        let r = block_on(cache.fetch_add_async(addr, 1), LOST_WAKEUP);
        assert_eq!(as_op_result(r, OpOutput::Value), want);
    }
    for addr in [WORDS * 8, CAPACITY + 4, (WORDS + 100) * 8, !7u64] {
        let want = Err(oor(addr, 8));
        assert_eq!(as_op_result(cache.cas(addr, 0, 1), OpOutput::Value), want);
        assert_eq!(
            as_op_result(cache.fetch_add(addr, 1), OpOutput::Value),
            want
        );
    }

    // In a batch, bad ops fail alone; good ops around them run.
    let mut b = cache.batch();
    let w = b.write(REGION - 2, b"abcd");
    let bad_read = b.read(CAPACITY - 1, 2);
    let bad_cas = b.cas(REGION + 3, 0, 0);
    let bad_write = b.write(CAPACITY, b"x");
    let r1 = b.read(REGION - 2, 4);
    let fa = b.fetch_add(2 * REGION, 5);
    let r = b.run();
    assert_eq!(r.get(w), Some(Ok(OpOutput::Done)));
    assert_eq!(r.get(bad_read), Some(Err(oor(CAPACITY - 1, 2))));
    assert_eq!(r.get(bad_cas), Some(Err(OpError::Misaligned(REGION + 3))));
    assert_eq!(r.get(bad_write), Some(Err(oor(CAPACITY, 1))));
    assert_eq!(r.data(r1).unwrap(), &Bytes::from_static(b"abcd"));
    let old = u64::from_le_bytes(image[2 * REGION as usize..][..8].try_into().unwrap());
    assert_eq!(r.value(fa).unwrap(), old);
    assert!(matches!(r.first_error(), Some(OpError::OutOfRange { .. })));

    // Nothing but the two good writes changed anything.
    let mut model = image;
    model[(REGION - 2) as usize..(REGION + 2) as usize].copy_from_slice(b"abcd");
    let a = 2 * REGION as usize;
    model[a..a + 8].copy_from_slice(&old.wrapping_add(5).to_le_bytes());
    let got = cache.read(0, CAPACITY).unwrap();
    if let Some(d) = diff(&got, &model) {
        panic!("invalid ops changed the cache: {d}");
    }
    cluster.shutdown();
}

#[test]
fn zero_length_ops_succeed_anywhere_in_range() {
    let cluster = cluster();
    let cache = spread_cache(&cluster, ClientConfig::new(""), "zero");
    for addr in [
        0,
        1,
        REGION - 1,
        REGION,
        3 * REGION + 17,
        CAPACITY - 1,
        CAPACITY,
    ] {
        assert_eq!(&cache.read(addr, 0).unwrap()[..], b"", "read({addr}, 0)");
        cache.write(addr, b"").unwrap();
    }
    let mut b = cache.batch();
    b.read(CAPACITY, 0);
    b.write(REGION, b"");
    b.read(0, 1);
    let r = b.run();
    assert!(r.first_error().is_none(), "{r:?}");
    cluster.shutdown();
}

/// A cache whose capacity is a whole number of regions: the end address is the start
/// of a region that does not exist, and an empty range there is still in range.
#[test]
fn zero_length_ops_at_the_end_of_a_whole_region_cache() {
    let cluster = cluster();
    let client = cluster.client().unwrap();
    let cache = client.create("whole", 3 * REGION).unwrap();
    cache.write(3 * REGION - 4, b"tail").unwrap();
    assert_eq!(&cache.read(3 * REGION - 4, 4).unwrap()[..], b"tail");
    let r = common::within("zero-length read at the end", Duration::from_secs(20), {
        let cache = cache.clone();
        move || cache.read(3 * REGION, 0)
    });
    assert_eq!(
        r.map(|b| b.len()).map_err(|e| e.to_string()),
        Ok(0),
        "empty read at the end of the cache"
    );
    let r = common::within("zero-length write at the end", Duration::from_secs(20), {
        let cache = cache.clone();
        move || cache.write(3 * REGION, b"")
    });
    assert_eq!(
        r.map_err(|e| e.to_string()),
        Ok(()),
        "empty write at the end"
    );
    cluster.shutdown();
}

/// Ops larger than the protocol's per-op limit are split transparently.
#[test]
fn ops_larger_than_the_op_limit() {
    const BIG_REGION: u64 = 2 << 20;
    let cluster = cluster();
    let client = cluster.client().unwrap();
    let cache = client
        .create_with_region_size("big", 3 * BIG_REGION - 5, Some(BIG_REGION))
        .unwrap();
    let cap = cache.capacity();
    let max_op = u64::from(farcache_proto::MAX_OP_BYTES);
    let data = pattern(99, (cap - 12_345) as usize);
    cache.write(12_345, &data).unwrap();
    let got = cache.read(12_345, data.len() as u64).unwrap();
    if let Some(d) = diff(&got, &data) {
        panic!("large op: {d}");
    }
    // A batch of reads, each well over the op limit, plus one exactly at it.
    let mut b = cache.batch();
    b.read(0, cap);
    b.read(BIG_REGION - max_op / 2, max_op + 3);
    b.read(BIG_REGION, max_op);
    let r = b.run();
    let mut model = vec![0u8; cap as usize];
    model[12_345..].copy_from_slice(&data);
    assert_ok_data(&result_at(&r, 0), &model, "whole");
    let a = (BIG_REGION - max_op / 2) as usize;
    assert_ok_data(
        &result_at(&r, 1),
        &model[a..a + max_op as usize + 3],
        "straddle",
    );
    let a = BIG_REGION as usize;
    assert_ok_data(&result_at(&r, 2), &model[a..a + max_op as usize], "exact");
    cluster.shutdown();
}

/// Threads sharing one client work on disjoint stripes (each crossing a region
/// boundary) and on one shared counter: each stripe matches its thread's model and the
/// counter holds the sum of all increments.
#[test]
fn concurrent_threads_with_disjoint_models() {
    const THREADS: u64 = 4;
    const STRIPE: u64 = (CAPACITY - 8) / THREADS / 8 * 8;
    let cluster = cluster();
    let cfg = ClientConfig::new("").connections(2).batch_size(4);
    let cache = spread_cache(&cluster, cfg, "threads");
    let counter = CAPACITY - 8 - (CAPACITY - 8) % 8; // last aligned word, outside stripes
    assert!(counter >= THREADS * STRIPE);
    let cache = Arc::new(cache);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                let base = t * STRIPE;
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut model = vec![0u8; STRIPE as usize];
                let mut added = 0u64;
                for i in 0..300 {
                    let off = rng.gen_range(0..STRIPE);
                    let len = rng.gen_range(0..=(STRIPE - off).min(3 * 4096));
                    match rng.gen_range(0..4) {
                        0 => {
                            let data = pattern(t << 32 | i, len as usize);
                            cache.write(base + off, &data).unwrap();
                            model[off as usize..(off + len) as usize].copy_from_slice(&data);
                        }
                        1 => {
                            let got = cache.read(base + off, len).unwrap();
                            if let Some(d) = diff(&got, &model[off as usize..(off + len) as usize])
                            {
                                panic!("thread {t} op {i}: {d}");
                            }
                        }
                        2 => {
                            let w = off / 8 * 8;
                            let old = u64::from_le_bytes(
                                model[w as usize..w as usize + 8].try_into().unwrap(),
                            );
                            assert_eq!(cache.fetch_add(base + w, i).unwrap(), old);
                            model[w as usize..w as usize + 8]
                                .copy_from_slice(&old.wrapping_add(i).to_le_bytes());
                        }
                        _ => {
                            let d = rng.gen_range(1..100u64);
                            cache.fetch_add(counter, d).unwrap();
                            added += d;
                        }
                    }
                }
                let got = cache.read(base, STRIPE).unwrap();
                if let Some(d) = diff(&got, &model) {
                    panic!("thread {t} stripe: {d}");
                }
                added
            })
        })
        .collect();
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let word = cache.read(counter, 8).unwrap();
    assert_eq!(u64::from_le_bytes(word[..].try_into().unwrap()), total);
    drop(cache);
    cluster.shutdown();
}

/// Growing a cache: the handle that reshaped sees the new capacity at once; another
/// handle keeps its old table (out of range past the old end) until it refreshes.
#[test]
fn stale_handle_after_grow() {
    let cluster = cluster();
    let client = cluster.client().unwrap();
    let cache = client.create("grow", 3 * REGION).unwrap();
    let stale = client.open("grow").unwrap();
    let img = pattern(3, (3 * REGION) as usize);
    cache.write(0, &img).unwrap();
    cache.reshape(6 * REGION).unwrap();
    assert_eq!(cache.capacity(), 6 * REGION);
    assert_eq!(cache.info().epoch, 2);
    let more = pattern(4, (3 * REGION) as usize);
    cache.write(3 * REGION, &more).unwrap();
    // Old data survives the reshape.
    assert_eq!(&cache.read(0, 3 * REGION).unwrap()[..], &img[..]);
    assert_eq!(&stale.read(0, 3 * REGION).unwrap()[..], &img[..]);
    assert_eq!(
        as_op_result(stale.read(4 * REGION, 8), OpOutput::Data),
        Err(OpError::OutOfRange {
            addr: 4 * REGION,
            len: 8,
            capacity: 3 * REGION
        })
    );
    stale.refresh().unwrap();
    assert_eq!(stale.capacity(), 6 * REGION);
    assert_eq!(
        &stale.read(3 * REGION, 3 * REGION).unwrap()[..],
        &more[..],
        "after refresh"
    );
    cluster.shutdown();
}

/// Shrinking a cache: a handle that still has the old table and addresses a region
/// that no longer exists learns the new table (on `wrong server`) and reports the op
/// as out of range.
#[test]
fn stale_handle_after_shrink() {
    let cluster = cluster();
    let client = cluster.client().unwrap();
    let cache = client.create("shrink", 6 * REGION).unwrap();
    let stale = client.open("shrink").unwrap();
    let img = pattern(5, (6 * REGION) as usize);
    cache.write(0, &img).unwrap();
    assert_eq!(
        &stale.read(5 * REGION, 8).unwrap()[..],
        &img[5 * REGION as usize..][..8]
    );
    cache.reshape(3 * REGION).unwrap();
    // In-range ops on the stale handle are unaffected.
    assert_eq!(
        &stale.read(REGION, 100).unwrap()[..],
        &img[REGION as usize..][..100]
    );
    let r = common::within("stale read past the new end", Duration::from_secs(20), {
        let stale = stale.clone();
        move || stale.read(5 * REGION, 8)
    });
    assert_eq!(
        as_op_result(r, OpOutput::Data),
        Err(OpError::OutOfRange {
            addr: 5 * REGION,
            len: 8,
            capacity: 3 * REGION
        })
    );
    assert_eq!(
        stale.capacity(),
        3 * REGION,
        "the handle learned the new size"
    );
    cluster.shutdown();
}
