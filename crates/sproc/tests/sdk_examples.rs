//! The procedures of `crates/sproc-examples`, written with `farcache-sproc-sdk`: built
//! for wasm32 by this test, run in the same runtime as the servers, and checked
//! against the built-ins (step by step: the same continuations with the same states)
//! or a direct computation, over random data spread across three servers.
//!
//! Needs the `wasm32-unknown-unknown` target (`scripts/env.sh` installs it); without
//! it the test fails and says so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use farcache_sproc::builtin::{AggFn, Aggregate, Chase, Cmp, NULL, Scan};
use farcache_sproc::memory::VecMemory;
use farcache_sproc::wasm::{Limits, WasmProcedure, WasmRuntime};
use farcache_sproc::{Outcome, Procedure, SprocError};

/// A multiple of the manager's region alignment, so rows and chunks never straddle.
const REGION: u64 = 4096;
const SERVERS: u64 = 3;

/// Builds the examples once per test process and returns where the modules are.
fn examples_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let sproc = Path::new(env!("CARGO_MANIFEST_DIR"));
        let repo = sproc.parent().and_then(Path::parent).expect("crates/sproc");
        let manifest = repo.join("crates/sproc-examples/Cargo.toml");
        // A target dir of its own: the outer `cargo test` holds the lock on the other.
        let target = repo.join("target/sproc-examples");
        let out = Command::new(env!("CARGO"))
            .args(["build", "--release", "--locked"])
            .args(["--target", "wasm32-unknown-unknown", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", &target)
            // Host flags (coverage, target-cpu) do not apply to wasm32.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET")
            .output()
            .expect("run cargo to build crates/sproc-examples");
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let missing = stderr.contains("target may not be installed")
                || stderr.contains("can't find crate for `core`")
                || stderr.contains("E0463");
            let hint = if missing {
                "the wasm32-unknown-unknown target is not installed: run \
                 `rustup target add wasm32-unknown-unknown` (scripts/env.sh does)"
            } else {
                "(if the wasm32-unknown-unknown target is missing, run \
                 `rustup target add wasm32-unknown-unknown`)"
            };
            panic!(
                "building {} for wasm32 failed: {hint}\n{stderr}",
                manifest.display()
            );
        }
        target.join("wasm32-unknown-unknown/release")
    })
}

fn runtime() -> WasmRuntime {
    WasmRuntime::new(Limits {
        fuel: 50_000_000,
        memory: 4 << 20,
    })
    .expect("runtime")
}

fn load(rt: &WasmRuntime, name: &str) -> WasmProcedure {
    let path = examples_dir().join(format!("{name}.wasm"));
    let code = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    rt.compile(name, &code).expect("compile")
}

/// splitmix64: reproducible data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A cache of `regions` regions, each held by one of three servers.
struct World {
    bytes: Vec<u8>,
    owners: Vec<u64>,
}

/// A finished invocation: its result and every continuation it went through.
type Run = (Vec<u8>, Vec<(u64, Vec<u8>)>);

impl World {
    fn new(rng: &mut Rng, regions: usize) -> Self {
        let bytes = rng.bytes(regions * REGION as usize);
        // Neighbouring regions on different servers, so every crossing is a hop.
        let mut owners = vec![rng.below(SERVERS)];
        for _ in 1..regions {
            let prev = owners[owners.len() - 1];
            owners.push((prev + 1 + rng.below(SERVERS - 1)) % SERVERS);
        }
        Self { bytes, owners }
    }

    fn put_u64(&mut self, at: u64, v: u64) {
        self.bytes[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
    }

    fn u64_at(&self, at: u64) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.bytes[at as usize..at as usize + 8]);
        u64::from_le_bytes(v)
    }

    /// Runs `p` at `addr` the way the client library does: on the server holding
    /// `addr`, then at each continuation's address with its state.
    fn drive(&self, p: &dyn Procedure, addr: u64, args: Vec<u8>) -> Result<Run, SprocError> {
        let (mut addr, mut args, mut trace) = (addr, args, Vec::new());
        loop {
            let server = self.owners.get((addr / REGION) as usize).copied();
            let local: Vec<bool> = self.owners.iter().map(|&o| Some(o) == server).collect();
            let mem = VecMemory {
                bytes: &self.bytes,
                region_size: REGION,
                local: &local,
            };
            match p.run(&mem, addr, &args)? {
                Outcome::Done(r) => return Ok((r, trace)),
                Outcome::Continue { addr: at, state } => {
                    let next = self.owners.get((at / REGION) as usize).copied();
                    assert_ne!(next, server, "{}: continued on the same server", p.name());
                    assert!(
                        trace.len() < farcache_proto::reply::MAX_HOPS as usize,
                        "{}: too many hops",
                        p.name()
                    );
                    trace.push((at, state.clone()));
                    (addr, args) = (at, state);
                }
                // Neither the SDK examples nor the built-ins they mirror pull.
                Outcome::Pull { .. } => panic!("{}: unexpected pull", p.name()),
            }
        }
    }
}

/// Runs the wasm procedure and its reference through the same hops and requires the
/// same continuations and result.
fn same_steps(
    w: &World,
    wasm: &dyn Procedure,
    reference: &dyn Procedure,
    addr: u64,
    args: &[u8],
) -> Run {
    let got = w.drive(wasm, addr, args.to_vec()).expect("wasm");
    let want = w.drive(reference, addr, args.to_vec()).expect("reference");
    assert_eq!(got, want, "{} at {addr}", wasm.name());
    got
}

fn expect_failure(r: Result<Run, SprocError>, needle: &str) {
    match r {
        Err(e @ SprocError::Trapped { .. }) => {
            assert!(e.to_string().contains(needle), "{e}, expected {needle:?}")
        }
        other => panic!("expected a failure with {needle:?}, got {other:?}"),
    }
}

fn sum_args(base: u64, n: u32) -> Vec<u8> {
    let mut a = base.to_le_bytes().to_vec();
    a.extend_from_slice(&n.to_le_bytes());
    a.extend_from_slice(&[0u8; 12]);
    a
}

#[test]
fn sum_matches_sum_wat_and_a_direct_sum() {
    let rt = runtime();
    let sum = load(&rt, "sum");
    let wat = rt
        .compile("sum.wat", include_bytes!("../procs/sum.wat"))
        .expect("compile sum.wat");
    let mut rng = Rng(1);
    let mut hops = 0;
    for _ in 0..20 {
        let w = World::new(&mut rng, 8);
        let size = w.bytes.len() as u64;
        let base = rng.below(size / 8) * 8;
        let n = rng.below((size - base) / 8 + 1) as u32;
        let want = (0..u64::from(n)).fold(0u64, |a, i| a.wrapping_add(w.u64_at(base + 8 * i)));
        let (r, trace) = same_steps(&w, &sum, &wat, base, &sum_args(base, n));
        assert_eq!(r, want.to_le_bytes(), "base {base} n {n}");
        let agg = w
            .drive(&Aggregate, base, Aggregate::args(AggFn::Sum, base, n, 8))
            .expect("aggregate");
        assert_eq!(agg.0, r);
        hops += trace.len();
    }
    assert!(hops >= 20, "the data should make sum hop, got {hops} hops");
}

#[test]
fn chase_matches_the_builtin() {
    const NODE: u64 = 32;
    let rt = runtime();
    let chase = load(&rt, "chase");
    let mut rng = Rng(2);
    let mut hops = 0;
    for round in 0..20 {
        let mut w = World::new(&mut rng, 6);
        let slots = w.bytes.len() as u64 / NODE;
        let next_off = rng.below(NODE / 8) as u32 * 8;
        // A chain through random distinct slots.
        let mut order: Vec<u64> = (0..slots).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let len = 1 + rng.below(300) as usize;
        let chain = &order[..len];
        for (i, &slot) in chain.iter().enumerate() {
            let next = chain.get(i + 1).map_or(NULL, |&s| s * NODE);
            w.put_u64(slot * NODE + u64::from(next_off), next);
        }
        let head = chain[0] * NODE;
        // Sometimes the hop budget runs out first, sometimes the chain ends.
        let budget = rng.below(len as u64 + 20) as u32;
        let args = Chase::args(head, next_off, budget);
        let (r, trace) = same_steps(&w, &chase, &Chase, head, &args);
        let (node, followed) = Chase::result(&r).expect("chase result");
        let expect_followed = budget.min(len as u32);
        assert_eq!(followed, expect_followed, "round {round}");
        let expect_node = chain
            .get(expect_followed as usize)
            .map_or(NULL, |&s| s * NODE);
        assert_eq!(node, expect_node, "round {round}");
        hops += trace.len();

        // A pointer out of the cache fails both, not only one of them.
        w.put_u64(chain[len - 1] * NODE + u64::from(next_off), 1 << 40);
        let args = Chase::args(head, next_off, len as u32 + 1);
        assert!(w.drive(&Chase, head, args.clone()).is_err());
        expect_failure(w.drive(&chase, head, args), "outside the cache");
    }
    assert!(hops >= 20, "the chains should hop, got {hops} hops");
}

#[test]
fn scan_matches_the_builtin() {
    let rt = runtime();
    let scan = load(&rt, "scan");
    let mut rng = Rng(3);
    let mut hops = 0;
    let cmps = [Cmp::Lt, Cmp::Le, Cmp::Eq, Cmp::Ge, Cmp::Gt, Cmp::Ne];
    for round in 0..24 {
        let mut w = World::new(&mut rng, 6);
        let width = [16u32, 32, 64][rng.below(3) as usize];
        let total = w.bytes.len() as u64 / u64::from(width);
        let start = rng.below(total);
        let rows = rng.below(total - start + 1) as u32;
        let base = start * u64::from(width);
        // Small values in the filter column so every comparison selects some rows.
        let filter_off = rng.below(u64::from(width) / 8) as u32 * 8;
        let agg_off = rng.below(u64::from(width) / 8) as u32 * 8;
        for r in 0..u64::from(rows) {
            let v = rng.below(10);
            w.put_u64(base + r * u64::from(width) + u64::from(filter_off), v);
        }
        let cmp = cmps[round % cmps.len()];
        let constant = rng.below(10);
        let args = Scan::args(base, rows, width, filter_off, cmp, constant, agg_off);
        let (r, trace) = same_steps(&w, &scan, &Scan, base, &args);
        let (count, sum) = Scan::result(&r).expect("scan result");
        let (mut c, mut s) = (0u64, 0u64);
        for i in 0..u64::from(rows) {
            let row = base + i * u64::from(width);
            if cmp.test(w.u64_at(row + u64::from(filter_off)), constant) {
                c += 1;
                s = s.wrapping_add(w.u64_at(row + u64::from(agg_off)));
            }
        }
        assert_eq!((count, sum), (c, s), "round {round} {cmp:?}");
        hops += trace.len();
    }
    assert!(hops >= 20, "the scans should hop, got {hops} hops");
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn verify_checks_records_across_servers() {
    let rt = runtime();
    let verify = load(&rt, "verify");
    let mut rng = Rng(4);
    let mut w = World::new(&mut rng, 16);
    let size = w.bytes.len() as u64;
    // Records one after another with random gaps; a header never straddles regions.
    let mut records = Vec::new();
    let mut at = rng.below(64);
    loop {
        if at % REGION > REGION - 12 {
            at = at.next_multiple_of(REGION);
        }
        let len = rng.below(6000);
        if at + 12 + len > size {
            break;
        }
        let payload = (at + 12) as usize..(at + 12 + len) as usize;
        let hash = fnv1a(&w.bytes[payload.clone()]);
        // One record in four is corrupt: a bad checksum or a flipped payload byte.
        let corrupt = rng.below(4) == 0;
        let stored = if corrupt && (len == 0 || rng.below(2) == 0) {
            hash ^ 1
        } else {
            if corrupt {
                w.bytes[payload.start + rng.below(len) as usize] ^= 0x20;
            }
            hash
        };
        w.bytes[at as usize..at as usize + 4].copy_from_slice(&(len as u32).to_le_bytes());
        w.put_u64(at + 4, stored);
        records.push((at, len, !corrupt));
        at += 12 + len + rng.below(100);
    }
    assert!(records.len() >= 10, "{} records", records.len());
    let (mut hops, mut bad) = (0, 0);
    for &(at, len, valid) in &records {
        let (r, trace) = w
            .drive(&verify, at, at.to_le_bytes().to_vec())
            .expect("verify");
        let payload = &w.bytes[(at + 12) as usize..(at + 12 + len) as usize];
        let mut want = vec![u8::from(valid)];
        want.extend_from_slice(&(len as u32).to_le_bytes());
        want.extend_from_slice(&fnv1a(payload).to_le_bytes());
        assert_eq!(r, want, "record at {at}, {len} bytes");
        // One hop per region boundary the payload crosses into another server.
        let crossings = (at + 12 + len).saturating_sub(1) / REGION - at / REGION;
        assert_eq!(trace.len() as u64, crossings, "record at {at}, {len} bytes");
        hops += trace.len();
        bad += usize::from(!valid);
    }
    assert!(hops >= 5 && bad >= 1, "{hops} hops, {bad} corrupt records");
}

#[test]
fn failures_end_only_the_invocation() {
    let rt = runtime();
    let (sum, scan, verify) = (load(&rt, "sum"), load(&rt, "scan"), load(&rt, "verify"));
    let mut rng = Rng(5);
    let w = World::new(&mut rng, 4);
    let good = |w: &World| {
        let (r, _) = w.drive(&sum, 8, sum_args(8, 1000)).expect("sum");
        let want = (0..1000).fold(0u64, |a, i| a.wrapping_add(w.u64_at(8 + 8 * i)));
        assert_eq!(r, want.to_le_bytes());
    };
    good(&w);
    // Arguments of the wrong length: Error::Args, return code 2.
    expect_failure(
        w.drive(&sum, 8, sum_args(8, 1)[..20].to_vec()),
        "returned 2",
    );
    good(&w);
    // Arguments larger than the first buffer (alloc grows it, the instance is reused).
    let mut big = sum_args(8, 1);
    big.resize(300 << 10, 0);
    expect_failure(w.drive(&sum, 8, big), "returned 2");
    good(&w);
    // Arguments beyond the memory limit: the grow traps, the next call gets a new
    // instance.
    expect_failure(w.drive(&sum, 8, vec![0; 8 << 20]), "memory");
    good(&w);
    // Address arithmetic that overflows: Error::Overflow, code 4 (the built-in calls
    // it out of range).
    let chase = load(&rt, "chase");
    let forged = Chase::args(u64::MAX - 1, 8, 1);
    expect_failure(w.drive(&chase, 0, forged.clone()), "returned 4");
    assert!(matches!(
        w.drive(&Chase, 0, forged),
        Err(SprocError::OutOfRange { .. })
    ));
    // An unknown comparison: Error::Args, like the built-in's bad arguments.
    let mut args = Scan::args(0, 4, 16, 0, Cmp::Eq, 0, 8);
    args[20] = 9;
    expect_failure(w.drive(&scan, 0, args.clone()), "returned 2");
    assert!(matches!(
        w.drive(&Scan, 0, args),
        Err(SprocError::BadArgs { .. })
    ));
    // A record outside the cache: the host ends the call.
    expect_failure(
        w.drive(&verify, 0, (1u64 << 40).to_le_bytes().to_vec()),
        "outside the cache",
    );
    // A forged resume state.
    expect_failure(w.drive(&verify, 0, vec![0; 36]), "returned 2");
    good(&w);
}
