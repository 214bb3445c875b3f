//! WebAssembly procedures: results, continuations across servers, and the sandbox
//! (time limit, traps, memory limit, out-of-range reads, bad modules).

use farcache_sproc::memory::VecMemory;
use farcache_sproc::wasm::{Limits, WasmRuntime};
use farcache_sproc::{Outcome, Procedure, SprocError};

const SUM: &str = include_str!("../procs/sum.wat");
const MISBEHAVE: &str = include_str!("../procs/misbehave.wat");
const REGION: u64 = 256;

fn sum_args(base: u64, n: u32) -> Vec<u8> {
    let mut a = base.to_le_bytes().to_vec();
    a.extend_from_slice(&n.to_le_bytes());
    a.extend_from_slice(&0u32.to_le_bytes());
    a.extend_from_slice(&0u64.to_le_bytes());
    a
}

fn runtime() -> WasmRuntime {
    WasmRuntime::new(Limits {
        fuel: 5_000_000,
        memory: 4 << 20,
    })
    .expect("runtime")
}

#[test]
fn sum_hops_between_servers_and_matches() {
    let rt = runtime();
    let p = rt.compile("sum", SUM.as_bytes()).expect("compile");
    let bytes: Vec<u8> = (0..(REGION * 6) as usize)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let owners = [0u8, 1, 2, 0, 1, 2];
    let (base, n) = (40u64, 150u32);
    let want = (0..u64::from(n)).fold(0u64, |a, i| {
        let at = (base + 8 * i) as usize;
        a.wrapping_add(u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8")))
    });
    let (mut addr, mut args, mut hops) = (base, sum_args(base, n), 0);
    let result = loop {
        let server = owners[(addr / REGION) as usize];
        let local: Vec<bool> = owners.iter().map(|&o| o == server).collect();
        let mem = VecMemory {
            bytes: &bytes,
            region_size: REGION,
            local: &local,
        };
        match p.run(&mem, addr, &args).expect("run") {
            Outcome::Done(r) => break r,
            Outcome::Continue { addr: a, state } => {
                assert_ne!(owners[(a / REGION) as usize], server);
                addr = a;
                args = state;
                hops += 1;
            }
            Outcome::Pull { .. } => panic!("sum ships, it never pulls"),
        }
    };
    assert_eq!(result, want.to_le_bytes());
    assert!(hops >= 4, "the range spans 5 regions, got {hops} hops");
}

#[test]
fn the_sandbox_ends_only_the_bad_invocation() {
    let rt = runtime();
    let bad = rt
        .compile("misbehave", MISBEHAVE.as_bytes())
        .expect("compile");
    let good = rt.compile("sum", SUM.as_bytes()).expect("compile");
    let bytes = vec![1u8; 1024];
    let local = vec![true; 4];
    let mem = VecMemory {
        bytes: &bytes,
        region_size: REGION,
        local: &local,
    };
    let expect = |mode: u8, needle: &str| {
        let t = std::time::Instant::now();
        match bad.run(&mem, 0, &[mode]) {
            Err(e @ SprocError::Trapped { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("misbehave") && m.contains(needle),
                    "mode {mode}: {m}"
                );
            }
            other => panic!("mode {mode}: {other:?}"),
        }
        assert!(
            t.elapsed().as_secs() < 10,
            "mode {mode} took {:?}",
            t.elapsed()
        );
        // The next invocation, of the same or another procedure, is unaffected.
        let r = good.run(&mem, 0, &sum_args(0, 2)).expect("good after bad");
        assert_eq!(
            r,
            Outcome::Done(
                0x0101_0101_0101_0101u64
                    .wrapping_mul(2)
                    .to_le_bytes()
                    .to_vec()
            )
        );
    };
    expect(0, "time limit");
    expect(1, "unreachable");
    expect(2, "memory");
    expect(3, "outside the cache");
    expect(4, "returned 7");
}

#[test]
fn bad_code_is_refused_at_registration() {
    let rt = runtime();
    for (code, needle) in [
        (&b"not wasm at all"[..], "misc"),
        (b"\0asm\x01\0\0\0garbage", "misc"),
        (b"(module)", "does not export"),
        (b"(module (memory (export \"memory\") 1) (func (export \"alloc\") (param i32) (result i32) (i32.const 0)))", "run"),
        (b"(module (import \"farcache\" \"nope\" (func)) (memory (export \"memory\") 1))", "misc"),
    ] {
        match rt.compile("misc", code) {
            Err(e @ SprocError::Compile(_)) => assert!(e.to_string().contains(needle), "{e}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("{:?} accepted", String::from_utf8_lossy(code)),
        }
    }
}

const SUM_PULL: &str = include_str!("../procs/sum_pull.wat");

/// DFlow from WebAssembly: the module asks for the remaining records with `pull` and
/// returns 6; run again where it started with those bytes readable, it finishes.
#[test]
fn sum_pull_asks_for_the_remote_records_once() {
    let rt = runtime();
    let p = rt
        .compile("sum_pull", SUM_PULL.as_bytes())
        .expect("compile");
    let bytes: Vec<u8> = (0..(REGION * 6) as usize)
        .map(|i| (i * 13 % 251) as u8)
        .collect();
    let (base, n) = (40u64, 150u32);
    let want = (0..u64::from(n)).fold(0u64, |a, i| {
        let at = (base + 8 * i) as usize;
        a.wrapping_add(u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8")))
    });
    // Only region 0 is local at first.
    let mut local = vec![true, false, false, false, false, false];
    let mut args = sum_args(base, n);
    let mut pulls = 0;
    let result = loop {
        let mem = VecMemory {
            bytes: &bytes,
            region_size: REGION,
            local: &local,
        };
        match p.run(&mem, base, &args).expect("run") {
            Outcome::Done(r) => break r,
            Outcome::Pull { ranges, state } => {
                pulls += 1;
                assert_eq!(ranges.len(), 1, "one range for the rest");
                let (a, l) = ranges[0];
                assert_eq!(a + u64::from(l), base + 8 * u64::from(n), "up to the end");
                for r in a / REGION..=(a + u64::from(l) - 1) / REGION {
                    local[r as usize] = true;
                }
                args = state;
            }
            Outcome::Continue { .. } => panic!("sum_pull never ships"),
        }
    };
    assert_eq!(result, want.to_le_bytes());
    assert_eq!(pulls, 1);
    // Returning 6 without naming a range is the guest's bug, reported as such.
    let bad = rt
        .compile(
            "bad_pull",
            br#"(module
                (memory (export "memory") 1)
                (func (export "alloc") (param i32) (result i32) (i32.const 0))
                (func (export "run") (param i64 i32 i32) (result i32) (i32.const 6)))"#,
        )
        .expect("compile");
    let mem = VecMemory {
        bytes: &bytes,
        region_size: REGION,
        local: &local,
    };
    let e = bad.run(&mem, 0, b"").expect_err("no pull named");
    assert!(e.to_string().contains("without calling pull"), "{e}");
}

/// A thread keeps an instance per procedure it ran; when the procedure is dropped
/// (re-registered, or its cache dropped), the thread lets go of the instance too.
#[test]
fn instances_of_dropped_procedures_are_released() {
    let rt = runtime();
    let bytes = vec![1u8; 64];
    let local = [true];
    let mem = VecMemory {
        bytes: &bytes,
        region_size: 64,
        local: &local,
    };
    let before = farcache_sproc::wasm::warm_instances();
    let (a, b) = (
        rt.compile("a", SUM.as_bytes()).expect("compile a"),
        rt.compile("b", SUM.as_bytes()).expect("compile b"),
    );
    for p in [&a, &b] {
        assert!(matches!(
            p.run(&mem, 0, &sum_args(0, 2)),
            Ok(Outcome::Done(_))
        ));
    }
    assert_eq!(farcache_sproc::wasm::warm_instances(), before + 2);
    drop(a);
    assert_eq!(farcache_sproc::wasm::warm_instances(), before + 1);
    assert!(
        matches!(b.run(&mem, 0, &sum_args(0, 2)), Ok(Outcome::Done(_))),
        "the other procedure keeps its instance and works"
    );
    drop(b);
    assert_eq!(farcache_sproc::wasm::warm_instances(), before);
}
