//! Bounded resources: a run's step budget of memory reads (built-ins and WebAssembly),
//! fuel for bytes a WebAssembly procedure reads, and hostile counters in arguments
//! (these tests run in the dev profile, where arithmetic overflow panics).

use std::time::{Duration, Instant};

use farcache_sproc::args::ArgWriter;
use farcache_sproc::builtin::{AggFn, Aggregate, Chase, Cmp, Flow, Gather, KHop, Scan};
use farcache_sproc::memory::{DEFAULT_STEP_BUDGET, VecMemory};
use farcache_sproc::wasm::{Limits, WasmRuntime};
use farcache_sproc::{Memory, Outcome, Procedure, Registry, SprocError};
use proptest::prelude::*;

fn builtin(name: &str) -> std::sync::Arc<dyn Procedure> {
    Registry::with_builtins()
        .get(name)
        .expect("builtin")
        .clone()
}

fn put(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Two 16-byte nodes whose `next` (offset 8) point at each other.
fn cycle() -> Vec<u8> {
    let mut bytes = vec![0u8; 64];
    put(&mut bytes, 8, 16);
    put(&mut bytes, 24, 0);
    bytes
}

fn all_local(bytes: &[u8]) -> VecMemory<'_> {
    VecMemory {
        bytes,
        region_size: bytes.len().max(1) as u64,
        local: &[true],
    }
}

#[test]
fn cyclic_chase_ends_at_its_step_budget() {
    let bytes = cycle();
    let mem = all_local(&bytes).with_limit(1000);
    let t = Instant::now();
    let e = builtin(Chase::NAME)
        .run(&mem, 0, &Chase::args(0, 8, u32::MAX))
        .expect_err("a cycle with u32::MAX hops cannot finish");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(
        e,
        SprocError::Budget {
            proc: "chase".into(),
            limit: 1000
        }
    );
    assert!(
        e.to_string()
            .contains("chase stopped after its step budget of 1000 reads"),
        "{e}"
    );
    assert_eq!(mem.steps().used(), 1000);
}

/// The default budget bounds the same cycle: 2^24 reads, not 4·10^9.
#[test]
fn cyclic_chase_ends_at_the_default_budget() {
    let bytes = cycle();
    let mem = all_local(&bytes).with_limit(DEFAULT_STEP_BUDGET);
    let t = Instant::now();
    let e = builtin(Chase::NAME)
        .run(&mem, 0, &Chase::args(0, 8, u32::MAX))
        .expect_err("cycle");
    assert_eq!(
        e,
        SprocError::Budget {
            proc: "chase".into(),
            limit: DEFAULT_STEP_BUDGET
        }
    );
    assert_eq!(mem.steps().used(), DEFAULT_STEP_BUDGET);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    // A chain that fits the budget is unaffected by it.
    let mem = all_local(&bytes).with_limit(DEFAULT_STEP_BUDGET);
    let r = builtin(Chase::NAME)
        .run(&mem, 0, &Chase::args(0, 8, 1001))
        .expect("1001 hops");
    let Outcome::Done(r) = r else { panic!("{r:?}") };
    assert_eq!(Chase::result(&r).expect("result"), (16, 1001));
}

/// Every built-in turns a used-up budget into `SprocError::Budget`, whichever read
/// (and whichever `match` on the miss) hit it.
#[test]
fn every_builtin_reports_its_budget() {
    // A CSR graph: 4 vertices at 0 (vertex 0 → 1, 2, 3), edges at 64.
    let mut graph = vec![0u8; 128];
    put(&mut graph, 0, 0);
    graph[8..12].copy_from_slice(&3u32.to_le_bytes());
    for (i, v) in [1u32, 2, 3].into_iter().enumerate() {
        graph[64 + 4 * i..68 + 4 * i].copy_from_slice(&v.to_le_bytes());
    }
    let records = vec![1u8; 1024];
    let cyc = cycle();
    let cases: Vec<(&str, &[u8], Vec<u8>)> = vec![
        (
            Gather::NAME,
            &records,
            Gather::args(&[(0, 8), (8, 8), (16, 8)]),
        ),
        (
            Aggregate::NAME,
            &records,
            Aggregate::args(AggFn::Sum, 0, 100, 8),
        ),
        (
            Aggregate::NAME,
            &records,
            Aggregate::call(AggFn::Count, 100, 8).to_vec(),
        ),
        // Few enough records for the all-at-once read, which must not bypass the budget.
        (
            Aggregate::NAME,
            &records,
            Aggregate::call(AggFn::Sum, 3, 8).to_vec(),
        ),
        (
            Scan::NAME,
            &records,
            Scan::args(0, 100, 8, 0, Cmp::Ne, 0, 0),
        ),
        (Chase::NAME, &cyc, Chase::args(0, 8, u32::MAX)),
        (
            Chase::NAME,
            &cyc,
            Chase::args_with(0, 8, u32::MAX, Flow::Return),
        ),
        (KHop::NAME, &graph, KHop::args(0, 64, 4, 0, 2)),
        // DFlow plans its pulls first: the budget runs out there.
        (
            KHop::NAME,
            &graph,
            KHop::args_with(0, 64, 4, 0, 2, Flow::Pull),
        ),
    ];
    for (name, bytes, args) in cases {
        let p = builtin(name);
        // Each finishes without a budget (but the cycle, which never would)...
        if name != Chase::NAME {
            assert!(
                matches!(p.run(&all_local(bytes), 0, &args), Ok(Outcome::Done(_))),
                "{name}"
            );
        }
        // ...and none with a budget of one read.
        let mem = all_local(bytes).with_limit(1);
        match p.run(&mem, 0, &args) {
            Err(SprocError::Budget { proc, limit }) => {
                assert_eq!((proc.as_str(), limit), (name, 1));
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

fn agg_state(f: AggFn, n: u32, i: u32, acc: u64) -> Vec<u8> {
    ArgWriter::default()
        .u8(f as u8)
        .u64(0)
        .u32(n)
        .u32(8)
        .u32(i)
        .u64(acc)
        .finish()
}

fn done(r: Result<Outcome, SprocError>) -> Vec<u8> {
    match r {
        Ok(Outcome::Done(r)) => r,
        other => panic!("{other:?}"),
    }
}

fn bad_args(r: Result<Outcome, SprocError>, name: &str) {
    match r {
        Err(e @ SprocError::BadArgs { .. }) => {
            assert!(e.to_string().contains(name), "{e}");
            assert!(e.to_string().contains("overflow"), "{e}");
        }
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn hostile_counters_in_state_are_errors_not_panics() {
    let ones = vec![1u8; 256];
    let mem = all_local(&ones);

    let agg = builtin(Aggregate::NAME);
    // Room for exactly the records left is fine...
    let r = done(agg.run(&mem, 0, &agg_state(AggFn::Count, 10, 0, u64::MAX - 10)));
    assert_eq!(Aggregate::result(&r).expect("result"), u64::MAX);
    let r = done(agg.run(&mem, 0, &agg_state(AggFn::Count, 10, 7, u64::MAX - 3)));
    assert_eq!(Aggregate::result(&r).expect("result"), u64::MAX);
    // ...one less is refused before reading anything.
    bad_args(
        agg.run(&mem, 0, &agg_state(AggFn::Count, 10, 0, u64::MAX - 9)),
        "aggregate",
    );
    bad_args(
        agg.run(&mem, 0, &agg_state(AggFn::Count, u32::MAX, 0, u64::MAX)),
        "aggregate",
    );
    // The sum is documented to wrap.
    let r = done(agg.run(&mem, 0, &agg_state(AggFn::Sum, 2, 0, u64::MAX)));
    assert_eq!(
        Aggregate::result(&r).expect("result"),
        0x0101_0101_0101_0101u64
            .wrapping_mul(2)
            .wrapping_add(u64::MAX)
    );

    // chase: next_off, remaining, node, followed, flow.
    let chase = builtin(Chase::NAME);
    let chase_state = |remaining: u32, followed: u32| {
        ArgWriter::default()
            .u32(8)
            .u32(remaining)
            .u64(0)
            .u32(followed)
            .u8(0)
            .finish()
    };
    let bytes = cycle();
    let cyc = all_local(&bytes);
    let r = done(chase.run(&cyc, 0, &chase_state(1, u32::MAX - 1)));
    assert_eq!(Chase::result(&r).expect("result"), (16, u32::MAX));
    bad_args(chase.run(&cyc, 0, &chase_state(2, u32::MAX - 1)), "chase");
    bad_args(
        chase.run(&cyc, 0, &chase_state(u32::MAX, u32::MAX)),
        "chase",
    );

    // scan: base, rows, width, filter_off, cmp, constant, agg_off, row, count, sum.
    let scan = builtin(Scan::NAME);
    let scan_state = |count: u64, sum: u64| {
        ArgWriter::default()
            .u64(0)
            .u32(4)
            .u32(8)
            .u32(0)
            .u8(Cmp::Ne as u8)
            .u64(0)
            .u32(0)
            .u32(0)
            .u64(count)
            .u64(sum)
            .finish()
    };
    let r = done(scan.run(&mem, 0, &scan_state(u64::MAX - 4, u64::MAX)));
    assert_eq!(
        Scan::result(&r).expect("result"),
        (
            u64::MAX,
            0x0101_0101_0101_0101u64
                .wrapping_mul(4)
                .wrapping_add(u64::MAX)
        )
    );
    bad_args(scan.run(&mem, 0, &scan_state(u64::MAX - 3, 0)), "scan");

    // khop at the deepest level a u8 allows: `depth + 1` must not overflow.
    let khop = builtin(KHop::NAME);
    let zeros = vec![0u8; 256];
    for flow in [Flow::Ship, Flow::Pull] {
        let state = ArgWriter::default()
            .u64(0)
            .u64(128)
            .u32(4)
            .u8(u8::MAX)
            .u8(u8::MAX - 1)
            .u32(0)
            .u32(1)
            .u32(0)
            .u32(1)
            .u32(0)
            .u32(0)
            .u8(flow as u8)
            .u8(u8::MAX)
            .finish();
        let r = done(khop.run(&all_local(&zeros), 0, &state));
        assert_eq!(KHop::result(&r).expect("result"), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the arguments and memory, a built-in answers; it never panics (overflow
    /// included: this runs with overflow checks) and never reads past its budget.
    #[test]
    fn builtins_never_panic_on_hostile_args(
        which in 0usize..5,
        args in proptest::collection::vec(any::<u8>(), 0..160),
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        addr in any::<u64>(),
    ) {
        let name = [Gather::NAME, Aggregate::NAME, Chase::NAME, Scan::NAME, KHop::NAME][which];
        let mem = all_local(&bytes).with_limit(10_000);
        let _ = builtin(name).run(&mem, addr, &args);
        prop_assert!(mem.steps().used() <= 10_000);
        prop_assert_eq!(mem.step_limit(), 10_000);
    }
}

/// A loop of `n` iterations; each reads `len` bytes at the invocation address into
/// guest memory when `len` is not 0. Args: n u32, len u32.
const READER: &str = r#"(module
  (import "farcache" "read" (func $read (param i64 i32 i32) (result i32)))
  (import "farcache" "output" (func $output (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 65000))
  (func (export "run") (param $addr i64) (param $args i32) (param $alen i32) (result i32)
    (local $n i32) (local $len i32) (local $i i32)
    (local.set $n (i32.load (local.get $args)))
    (local.set $len (i32.load offset=4 (local.get $args)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (if (local.get $len)
          (then (drop (call $read (local.get $addr) (local.get $len) (i32.const 0)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (call $output (i32.const 0) (i32.const 0))
    (i32.const 0)))"#;

fn reader_args(n: u32, len: u32) -> Vec<u8> {
    ArgWriter::default().u32(n).u32(len).finish()
}

fn reader(fuel: u64) -> (WasmRuntime, farcache_sproc::wasm::WasmProcedure) {
    let rt = WasmRuntime::new(Limits {
        fuel,
        memory: 4 << 20,
    })
    .expect("runtime");
    let p = rt.compile("reader", READER.as_bytes()).expect("compile");
    (rt, p)
}

/// 8 KiB per read costs about 1 + 8192/8 units of fuel: 10 000 such reads need ~10 M,
/// far past a 1 M limit, while the same loop without reads needs ~100 k.
#[test]
fn wasm_reads_pay_fuel_for_their_bytes() {
    let (_rt, p) = reader(1_000_000);
    let bytes = vec![3u8; 8192];
    let mem = all_local(&bytes);
    assert_eq!(
        p.run(&mem, 0, &reader_args(10_000, 0)),
        Ok(Outcome::Done(Vec::new())),
        "the loop alone fits the fuel"
    );
    assert_eq!(
        p.run(&mem, 0, &reader_args(100, 8192)),
        Ok(Outcome::Done(Vec::new())),
        "a few large reads fit too"
    );
    match p.run(&mem, 0, &reader_args(10_000, 8192)) {
        Err(e @ SprocError::Trapped { .. }) => {
            assert!(e.to_string().contains("exceeded its time limit"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // Small reads cost little more than the call.
    assert_eq!(
        p.run(&mem, 0, &reader_args(10_000, 8)),
        Ok(Outcome::Done(Vec::new()))
    );
    // A single read longer than the fuel allows ends the call before copying anything.
    match p.run(&mem, 0, &reader_args(1, u32::MAX)) {
        Err(e) => assert!(e.to_string().contains("exceeded its time limit"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn wasm_reads_count_against_the_step_budget() {
    let (_rt, p) = reader(50_000_000);
    let bytes = vec![3u8; 64];
    let mem = all_local(&bytes).with_limit(100);
    let e = p
        .run(&mem, 0, &reader_args(1000, 8))
        .expect_err("1000 reads, budget 100");
    assert_eq!(
        e,
        SprocError::Budget {
            proc: "reader".into(),
            limit: 100
        }
    );
    assert!(e.to_string().contains("step budget of 100 reads"), "{e}");
    assert_eq!(mem.steps().used(), 100);
    // The next run has its own budget.
    let mem = all_local(&bytes).with_limit(100);
    assert_eq!(
        p.run(&mem, 0, &reader_args(100, 8)),
        Ok(Outcome::Done(Vec::new()))
    );
}
