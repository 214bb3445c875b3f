//! Every built-in against the same computation done directly, on a byte array whose
//! regions are spread over 3 "servers": the invocation hops between them through its
//! continuations, exactly as a client drives it.

use farcache_sproc::builtin::{AggFn, Aggregate, Chase, Cmp, Gather, KHop, NULL, Scan};
use farcache_sproc::memory::VecMemory;
use farcache_sproc::{Outcome, Registry, SprocError};
use proptest::prelude::*;

const REGION: u64 = 256;

/// Runs `name` from `addr`, hopping to the owner of every continuation address and,
/// for a pull, making the pulled ranges' regions readable where it runs (as a server's
/// DFlow does).
fn drive(
    bytes: &[u8],
    owners: &[u8],
    name: &str,
    mut addr: u64,
    mut args: Vec<u8>,
) -> Result<(Vec<u8>, usize), SprocError> {
    let reg = Registry::with_builtins();
    let p = reg.get(name).expect("builtin");
    let mut pulled: Vec<bool> = vec![false; owners.len()];
    for hops in 0..10_000 {
        let server = owners[(addr / REGION) as usize];
        let local: Vec<bool> = owners
            .iter()
            .zip(&pulled)
            .map(|(&o, &p)| o == server || p)
            .collect();
        let mem = VecMemory {
            bytes,
            region_size: REGION,
            local: &local,
        };
        match p.run(&mem, addr, &args)? {
            Outcome::Done(r) => return Ok((r, hops)),
            Outcome::Continue { addr: a, state } => {
                assert_ne!(
                    owners[(a / REGION) as usize],
                    server,
                    "continuation must leave the server"
                );
                addr = a;
                args = state;
                pulled.fill(false);
            }
            Outcome::Pull { ranges, state } => {
                assert!(!ranges.is_empty(), "a pull names what it needs");
                for (a, l) in ranges {
                    let (first, last) = (a / REGION, (a + u64::from(l).max(1) - 1) / REGION);
                    assert!(
                        (first..=last).any(|r| !local[r as usize]),
                        "{name} pulled [{a}, +{l}) which it can read"
                    );
                    for r in first..=last {
                        pulled[r as usize] = true;
                    }
                }
                args = state;
            }
        }
    }
    panic!("no progress");
}

fn u64_at(b: &[u8], a: usize) -> u64 {
    u64::from_le_bytes(b[a..a + 8].try_into().expect("8 bytes"))
}

/// What `aggregate` must answer, computed the plain way.
fn aggregate_model(bytes: &[u8], f: AggFn, base: u64, n: u32, stride: u32) -> u64 {
    let vals: Vec<u64> = (0..n)
        .map(|i| u64_at(bytes, (base + u64::from(i * stride)) as usize))
        .collect();
    match f {
        AggFn::Sum => vals.iter().fold(0u64, |a, v| a.wrapping_add(*v)),
        AggFn::Min => vals.iter().copied().min().unwrap_or(u64::MAX),
        AggFn::Max => vals.iter().copied().max().unwrap_or(0),
        AggFn::Count => vals.iter().filter(|v| **v != 0).count() as u64,
    }
}

fn layout() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    (8usize..24).prop_flat_map(|regions| {
        (
            proptest::collection::vec(any::<u8>(), regions * REGION as usize),
            proptest::collection::vec(0u8..3, regions),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn aggregate_matches(
        (bytes, owners) in layout(),
        start in 0usize..512, n in 0u32..200, stride_words in 1u32..4, f in 0u8..4,
    ) {
        let stride = stride_words * 8;
        let base = (start / 8 * 8) as u64;
        let n = n.min(((bytes.len() as u64 - base - 8) / u64::from(stride)) as u32);
        let f = [AggFn::Sum, AggFn::Min, AggFn::Max, AggFn::Count][f as usize];
        let want = aggregate_model(&bytes, f, base, n, stride);
        let (r, _) = drive(&bytes, &owners, Aggregate::NAME, base, Aggregate::args(f, base, n, stride)).expect("run");
        prop_assert_eq!(Aggregate::result(&r).expect("result"), want);
        // The short form, with the base taken from the address, across servers too.
        let (r, _) = drive(&bytes, &owners, Aggregate::NAME, base, Aggregate::call(f, n, stride).to_vec()).expect("run short");
        prop_assert_eq!(Aggregate::result(&r).expect("result"), want);
    }

    /// Short calls over a few records take `read_u64s` when every record is held
    /// where the call runs, and the word-by-word road otherwise: both must agree.
    #[test]
    fn short_aggregates_match(
        (bytes, owners) in layout(),
        start in 0usize..4096, n in 0u32..=9, stride_words in 0u32..40, f in 0u8..4,
    ) {
        let stride = stride_words * 8;
        let base = (start % (bytes.len() - 8) / 8 * 8) as u64;
        let n = if stride == 0 { n.min(1) } else {
            n.min(((bytes.len() as u64 - base - 8) / u64::from(stride)) as u32)
        };
        let f = [AggFn::Sum, AggFn::Min, AggFn::Max, AggFn::Count][f as usize];
        let want = aggregate_model(&bytes, f, base, n, stride);
        let (r, _) = drive(&bytes, &owners, Aggregate::NAME, base, Aggregate::call(f, n, stride).to_vec()).expect("run short");
        prop_assert_eq!(Aggregate::result(&r).expect("result"), want);
    }

    #[test]
    fn gather_matches((bytes, owners) in layout(), picks in proptest::collection::vec((0usize..4000, 0u32..40), 1..20)) {
        let ranges: Vec<(u64, u32)> = picks.iter().map(|&(a, l)| {
            let a = a % (bytes.len() - 40);
            // Ranges stay inside one region (the harness pulls whole regions).
            let l = l.min((REGION - a as u64 % REGION) as u32);
            (a as u64, l)
        }).collect();
        let want: Vec<u8> = ranges.iter().flat_map(|&(a, l)| bytes[a as usize..a as usize + l as usize].to_vec()).collect();
        let (r, _) = drive(&bytes, &owners, Gather::NAME, ranges[0].0, Gather::args(&ranges)).expect("run");
        prop_assert_eq!(r, want);
    }

    #[test]
    fn chase_matches((mut bytes, owners) in layout(), order in proptest::collection::vec(any::<u16>(), 2..60), hops in 0u32..80) {
        // Nodes of 16 bytes (value, next) at distinct slots, linked in `order`.
        let slots = bytes.len() / 16;
        let mut nodes: Vec<usize> = order.iter().map(|&o| o as usize % slots).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let rot = order[0] as usize % nodes.len();
        nodes.rotate_left(rot);
        for (i, &s) in nodes.iter().enumerate() {
            let next = nodes.get(i + 1).map_or(NULL, |&n| (n * 16) as u64);
            bytes[s * 16 + 8..s * 16 + 16].copy_from_slice(&next.to_le_bytes());
        }
        let head = (nodes[0] * 16) as u64;
        let followed = (hops as usize).min(nodes.len() - 1);
        let want_node = if (hops as usize) < nodes.len() { (nodes[hops as usize] * 16) as u64 } else { NULL };
        let want_followed = if (hops as usize) < nodes.len() { hops } else { nodes.len() as u32 };
        let (r, _) = drive(&bytes, &owners, Chase::NAME, head, Chase::args(head, 8, hops)).expect("run");
        let (node, n) = Chase::result(&r).expect("result");
        prop_assert_eq!(node, want_node);
        prop_assert_eq!(n, want_followed);
        prop_assert!(followed as u32 <= n);
    }

    #[test]
    fn scan_matches((bytes, owners) in layout(), rows in 0u32..100, c in 0u8..6, constant in any::<u64>()) {
        let width = 32u32;
        let rows = rows.min(bytes.len() as u32 / width);
        let cmp = [Cmp::Lt, Cmp::Le, Cmp::Eq, Cmp::Ge, Cmp::Gt, Cmp::Ne][c as usize];
        let constant = if c == 2 { u64_at(&bytes, 8) } else { constant };
        let (mut count, mut sum) = (0u64, 0u64);
        for i in 0..rows as usize {
            let row = &bytes[i * 32..i * 32 + 32];
            if cmp.test(u64_at(row, 8), constant) {
                count += 1;
                sum = sum.wrapping_add(u64_at(row, 24));
            }
        }
        let (r, _) = drive(&bytes, &owners, Scan::NAME, 0, Scan::args(0, rows, width, 8, cmp, constant, 24)).expect("run");
        prop_assert_eq!(Scan::result(&r).expect("result"), (count, sum));
    }

    #[test]
    fn khop_matches(edges in proptest::collection::vec((0u32..40, 0u32..40), 0..150), src in 0u32..40, k in 0u8..4, owners in proptest::collection::vec(0u8..3, 8)) {
        let n = 40u32;
        let mut adj = vec![Vec::new(); n as usize];
        for &(a, b) in &edges { adj[a as usize].push(b); }
        // CSR: vertex table at 0 (16 B each), edges after it.
        let vbase = 0u64;
        let ebase = 16 * u64::from(n);
        let mut bytes = vec![0u8; (REGION as usize) * owners.len()];
        let mut e = 0u64;
        for (v, list) in adj.iter().enumerate() {
            bytes[v * 16..v * 16 + 8].copy_from_slice(&e.to_le_bytes());
            bytes[v * 16 + 8..v * 16 + 12].copy_from_slice(&(list.len() as u32).to_le_bytes());
            for &u in list {
                let at = (ebase + 4 * e) as usize;
                bytes[at..at + 4].copy_from_slice(&u.to_le_bytes());
                e += 1;
            }
        }
        let mut seen = std::collections::HashSet::from([src]);
        let mut frontier = vec![src];
        for _ in 0..k {
            let mut next = Vec::new();
            for v in frontier { for &u in &adj[v as usize] { if seen.insert(u) { next.push(u); } } }
            frontier = next;
        }
        let (r, _) = drive(&bytes, &owners, KHop::NAME, vbase + 16 * u64::from(src), KHop::args(vbase, ebase, n, src, k)).expect("run");
        prop_assert_eq!(KHop::result(&r).expect("result"), seen.len() as u64 - 1);
    }
}

#[test]
fn bad_args_are_clear_errors() {
    let reg = Registry::with_builtins();
    let bytes = vec![0u8; 1024];
    let local = vec![true; 4];
    let mem = VecMemory {
        bytes: &bytes,
        region_size: REGION,
        local: &local,
    };
    for name in ["gather", "aggregate", "chase", "scan", "khop"] {
        let p = reg.get(name).expect("builtin");
        let e = p.run(&mem, 0, &[1, 2, 3]).expect_err("short args");
        assert!(e.to_string().contains(name), "{e}");
        // Hostile sizes never panic.
        for junk in [
            vec![0xFF; 64],
            vec![0u8; 64],
            (0..200u8).collect::<Vec<_>>(),
        ] {
            let _ = p.run(&mem, 0, &junk);
        }
    }
    let e = reg
        .get("aggregate")
        .expect("builtin")
        .run(&mem, 0, &Aggregate::args(AggFn::Sum, 1016, 4, 8))
        .expect_err("past the end");
    assert!(matches!(e, SprocError::OutOfRange { .. }), "{e}");
}
