//! `expand`: one server's share of a level-synchronous graph traversal. Given the
//! frontier vertices it holds (for many queries at once), it reads their entries and
//! adjacency lists from local memory and returns, per query, the distinct neighbours.
//!
//! The graph is partitioned by vertex ranges; each partition's vertex entries (`edge
//! list address` u64, `degree` u32, pad u32) and its edge lists (u32 vertex ids) sit in
//! one region, so a vertex and its edges are always on the same server. The caller
//! names the partitions this call may touch and keeps the visited sets: the procedure
//! is stateless, so a region that moved mid-traversal costs a retry, never a wrong
//! answer.
//!
//! When the output would pass [`MAX_OUTPUT`], or an entry is not held here, it stops
//! and says where; the caller sends the rest again (routed afresh).

use crate::args::{ArgReader, ArgWriter};
use crate::memory::Miss;
use crate::procedure::{MAX_OUTPUT, run_by_into};
use crate::{Memory, Outcome, Procedure, SprocError};

const NAME: &str = "expand";
/// Bytes per vertex entry.
pub const ENTRY: u64 = 16;
/// Largest vertex count a call may name: the per-thread bitmap is sized by it and kept,
/// so a caller must not make a worker hold more than 32 MiB.
const MAX_VERTICES: u32 = 1 << 28;
/// Neighbours one call may return (with room for the group headers).
const MAX_NEIGHBOURS: usize = MAX_OUTPUT / 4 - (64 << 10);

pub struct Expand;

/// One partition: vertices `lo .. lo + count`, entries from `base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub lo: u32,
    pub count: u32,
    pub base: u64,
}

/// Why a call stopped before the end of its frontier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Every frontier vertex was expanded.
    Done,
    /// The output is full: send the rest again.
    Full,
    /// The entry or edges of the next vertex are not held by this server.
    NotHere,
}

/// A decoded reply (neighbour lists still in the reply's bytes: see [`Expanded::ids`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded<'a> {
    pub stop: Stop,
    /// Where the rest starts: query index in the call, vertex index in its list.
    pub next: (u32, u32),
    /// Edges read.
    pub edges: u64,
    /// `(query tag, distinct neighbours as little-endian u32s)`, in the order found.
    pub groups: Vec<(u32, &'a [u8])>,
}

impl Expanded<'_> {
    /// The vertex ids of a group's neighbour bytes.
    pub fn ids(raw: &[u8]) -> impl Iterator<Item = u32> + '_ {
        raw.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// Every group with its ids collected (tests, small replies).
    pub fn lists(&self) -> Vec<(u32, Vec<u32>)> {
        self.groups
            .iter()
            .map(|&(t, raw)| (t, Self::ids(raw).collect()))
            .collect()
    }
}

impl Expand {
    pub const NAME: &'static str = NAME;

    /// Args for `queries` (`(tag, frontier vertices)`) over partitions `parts` of a
    /// graph with `vertices` vertices, starting at `next`. Invoke at `parts[0].base`.
    pub fn args(
        parts: &[Part],
        vertices: u32,
        queries: &[(u32, &[u32])],
        next: (u32, u32),
    ) -> Vec<u8> {
        let mut w = ArgWriter::default().u32(vertices).u32(parts.len() as u32);
        for p in parts {
            w = w.u32(p.lo).u32(p.count).u64(p.base);
        }
        w = w.u32(queries.len() as u32);
        for (tag, list) in queries {
            w = w.u32(*tag).u32(list.len() as u32);
            for &v in *list {
                w = w.u32(v);
            }
        }
        w.u32(next.0).u32(next.1).finish()
    }

    /// Bytes of args for the given counts (to split calls under the op size limit).
    pub fn args_len(parts: usize, queries: usize, vertices: usize) -> usize {
        8 + 16 * parts + 4 + 8 * queries + 4 * vertices + 8
    }

    pub fn result(bytes: &[u8]) -> Result<Expanded<'_>, SprocError> {
        let mut r = ArgReader::new(NAME, bytes);
        let stop = match r.u8("stop")? {
            0 => Stop::Done,
            1 => Stop::Full,
            2 => Stop::NotHere,
            s => return Err(SprocError::bad(NAME, format!("unknown stop {s}"))),
        };
        let next = (r.u32("next query")?, r.u32("next vertex")?);
        let edges = r.u64("edges")?;
        let n = r.u32("groups")?;
        let mut groups = Vec::with_capacity(n.min(1 << 16) as usize);
        for _ in 0..n {
            let tag = r.u32("tag")?;
            let len = r.u32("neighbours")? as usize;
            groups.push((tag, r.bytes(len.saturating_mul(4), "neighbours")?));
        }
        r.end()?;
        Ok(Expanded {
            stop,
            next,
            edges,
            groups,
        })
    }
}

struct Call<'a> {
    vertices: u32,
    parts: Vec<Part>,
    /// `(tag, vertices as little-endian bytes)`.
    queries: Vec<(u32, &'a [u8])>,
    next: (u32, u32),
}

fn decode(args: &[u8]) -> Result<Call<'_>, SprocError> {
    let mut r = ArgReader::new(NAME, args);
    let vertices = r.u32("vertices")?;
    if vertices > MAX_VERTICES {
        return Err(SprocError::bad(
            NAME,
            format!("{vertices} vertices; at most {MAX_VERTICES}"),
        ));
    }
    let np = r.u32("partitions")? as usize;
    if np.saturating_mul(16) > args.len() {
        return Err(SprocError::bad(NAME, "partition list longer than the args"));
    }
    let mut parts = Vec::with_capacity(np);
    for _ in 0..np {
        let p = Part {
            lo: r.u32("partition start")?,
            count: r.u32("partition size")?,
            base: r.u64("partition base")?,
        };
        if u64::from(p.lo) + u64::from(p.count) > u64::from(vertices) {
            return Err(SprocError::bad(NAME, "partition past the last vertex"));
        }
        parts.push(p);
    }
    parts.sort_by_key(|p| p.lo);
    let nq = r.u32("queries")? as usize;
    if nq.saturating_mul(8) > args.len() {
        return Err(SprocError::bad(NAME, "query list longer than the args"));
    }
    let mut queries = Vec::with_capacity(nq);
    for _ in 0..nq {
        let tag = r.u32("tag")?;
        let n = r.u32("frontier")? as usize;
        queries.push((tag, r.bytes(n.saturating_mul(4), "frontier")?));
    }
    let next = (r.u32("next query")?, r.u32("next vertex")?);
    r.end()?;
    Ok(Call {
        vertices,
        parts,
        queries,
        next,
    })
}

impl Call<'_> {
    fn entry(&self, v: u32) -> Result<u64, SprocError> {
        let i = self.parts.partition_point(|p| p.lo <= v);
        let p = i
            .checked_sub(1)
            .map(|i| self.parts[i])
            .filter(|p| v - p.lo < p.count)
            .ok_or_else(|| SprocError::bad(NAME, format!("vertex {v} is in no partition given")))?;
        super::element(NAME, p.base, u64::from(v - p.lo), ENTRY)
    }
}

/// Bytes before the first group: stop u8, next (u32, u32), edges u64, groups u32.
const HEAD: usize = 21;

fn write_head(out: &mut [u8], stop: Stop, next: (u32, u32), edges: u64, groups: u32) {
    out[0] = stop as u8;
    out[1..5].copy_from_slice(&next.0.to_le_bytes());
    out[5..9].copy_from_slice(&next.1.to_le_bytes());
    out[9..17].copy_from_slice(&edges.to_le_bytes());
    out[17..21].copy_from_slice(&groups.to_le_bytes());
}

#[inline]
fn id_at(b: &[u8], at: usize) -> u32 {
    b[at..]
        .first_chunk::<4>()
        .map_or(0, |c| u32::from_le_bytes(*c))
}

thread_local! {
    /// One bit per vertex, all clear between calls: a query's neighbours are deduped
    /// here and the bits they set cleared again before the call returns.
    static SEEN: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Clears the bits of the little-endian ids in `ids` in `seen` (every bit set is
/// one of them).
fn forget(seen: &mut [u64], ids: &[u8]) {
    // Past one id per 16 words, zeroing every word is the cheaper pass.
    if ids.len() / 4 >= seen.len() / 16 {
        seen.fill(0);
        return;
    }
    for c in ids.chunks_exact(4) {
        let u = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        seen[(u / 64) as usize] &= !(1u64 << (u % 64));
    }
}

impl Procedure for Expand {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&self, mem: &dyn Memory, addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        run_by_into(self, mem, addr, args)
    }

    /// Writes the reply straight into the server's response (no copy of the lists).
    fn run_into(
        &self,
        mem: &dyn Memory,
        _addr: u64,
        args: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Outcome>, SprocError> {
        let call = decode(args)?;
        SEEN.with(|seen| {
            let mut seen = seen.borrow_mut();
            let words = (call.vertices as usize).div_ceil(64);
            if seen.len() < words {
                seen.resize(words, 0);
            }
            // Every id is below `vertices`: its bit is in the first `words` words.
            let seen = &mut seen[..words];
            let base = out.len();
            out.resize(base + HEAD, 0);
            let mut reply = Reply {
                out,
                groups: 0,
                open: None,
                held: 0,
            };
            let r = expand(mem, &call, seen, &mut reply);
            // A query that stopped midway still has its bits set.
            reply.close(seen);
            let (stop, next, edges) = r?;
            let groups = reply.groups;
            write_head(&mut out[base..], stop, next, edges, groups);
            Ok(None)
        })
    }
}

/// The reply, built in place: edge lists are read straight into it and deduped there,
/// so each neighbour is copied once out of region memory and never again.
struct Reply<'a> {
    out: &'a mut Vec<u8>,
    groups: u32,
    /// Where the open group's header starts.
    open: Option<usize>,
    /// Neighbours in closed groups.
    held: usize,
}

impl Reply<'_> {
    fn open(&mut self, tag: u32) {
        self.open = Some(self.out.len());
        self.out.extend_from_slice(&tag.to_le_bytes());
        self.out.extend_from_slice(&0u32.to_le_bytes());
    }

    /// Neighbours in the open group.
    fn open_len(&self) -> usize {
        self.open.map_or(0, |at| (self.out.len() - at - 8) / 4)
    }

    /// Ends the open group: clears its bits, writes its length, drops it if empty.
    fn close(&mut self, seen: &mut [u64]) {
        let Some(at) = self.open.take() else {
            return;
        };
        forget(seen, &self.out[at + 8..]);
        let n = (self.out.len() - at - 8) / 4;
        if n == 0 {
            self.out.truncate(at);
        } else {
            self.out[at + 4..at + 8].copy_from_slice(&(n as u32).to_le_bytes());
            self.groups += 1;
            self.held += n;
        }
    }
}

/// Expands the call's frontier into `reply`, deduping each query's neighbours in
/// `seen`; a query's bits are cleared when its group closes (the caller closes the
/// last one, also when the call stops midway).
fn expand(
    mem: &dyn Memory,
    call: &Call<'_>,
    seen: &mut [u64],
    reply: &mut Reply<'_>,
) -> Result<(Stop, (u32, u32), u64), SprocError> {
    let mut edges = 0u64;
    let (q0, v0) = call.next;
    for (qi, &(tag, list)) in call.queries.iter().enumerate().skip(q0 as usize) {
        reply.close(seen);
        let first = if qi == q0 as usize { v0 as usize } else { 0 };
        reply.open(tag);
        for (vi, c) in list.chunks_exact(4).enumerate().skip(first) {
            let v = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let here = (qi as u32, vi as u32);
            let at = call.entry(v)?;
            let mut e = [0u8; 12];
            match mem.read(at, &mut e) {
                Ok(()) => {}
                Err(Miss::Remote) => return Ok((Stop::NotHere, here, edges)),
                Err(m) => return Err(miss(mem, m, at, 12)),
            }
            let list_at = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
            let degree = u32::from_le_bytes([e[8], e[9], e[10], e[11]]) as usize;
            if degree > MAX_NEIGHBOURS {
                return Err(SprocError::bad(
                    NAME,
                    format!(
                        "vertex {v} has {degree} edges; at most {MAX_NEIGHBOURS} fit one reply"
                    ),
                ));
            }
            if reply.held + reply.open_len() + degree > MAX_NEIGHBOURS {
                return Ok((Stop::Full, here, edges));
            }
            let from = reply.out.len();
            reply.out.resize(from + degree * 4, 0);
            match mem.read(list_at, &mut reply.out[from..]) {
                Ok(()) => {}
                Err(m) => {
                    reply.out.truncate(from);
                    return match m {
                        Miss::Remote => Ok((Stop::NotHere, here, edges)),
                        m => Err(miss(mem, m, list_at, degree as u64 * 4)),
                    };
                }
            }
            edges += degree as u64;
            // In place, branch-free: every neighbour is moved down, and kept only if its
            // bit was clear (which neighbours repeat is unpredictable, and a branch per
            // edge cost more).
            let tail = &mut reply.out[from..];
            let mut n = 0usize;
            for i in 0..degree {
                let u = id_at(tail, 4 * i);
                if u >= call.vertices {
                    reply.out.truncate(from + 4 * n);
                    return Err(SprocError::bad(
                        NAME,
                        format!("edge from {v} to vertex {u}"),
                    ));
                }
                let (w, b) = ((u / 64) as usize, 1u64 << (u % 64));
                let fresh = seen[w] & b == 0;
                seen[w] |= b;
                tail[4 * n..4 * n + 4].copy_from_slice(&u.to_le_bytes());
                n += usize::from(fresh);
            }
            reply.out.truncate(from + 4 * n);
        }
    }
    Ok((Stop::Done, (call.queries.len() as u32, 0), edges))
}

/// The error for a read that failed other than by being held elsewhere.
fn miss(mem: &dyn Memory, m: Miss, addr: u64, len: u64) -> SprocError {
    match super::on_miss(NAME, mem, m, addr, len, Vec::new) {
        Err(e) => e,
        Ok(_) => SprocError::bad(NAME, format!("[{addr}, +{len}) is not readable")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;

    const REGION: u64 = 256;

    /// Vertices 0..4 in region 0 and 4..8 in region 1; vertex v has edges to v+1, v+2
    /// and 0 (mod 8).
    fn graph() -> (Vec<u8>, [Part; 2]) {
        let mut bytes = vec![0u8; 2 * REGION as usize];
        let parts = [
            Part {
                lo: 0,
                count: 4,
                base: 0,
            },
            Part {
                lo: 4,
                count: 4,
                base: REGION,
            },
        ];
        for p in parts {
            let edges_at = p.base + 4 * ENTRY;
            for i in 0..p.count {
                let v = p.lo + i;
                let at = (p.base + u64::from(i) * ENTRY) as usize;
                let list = edges_at + 12 * u64::from(i);
                bytes[at..at + 8].copy_from_slice(&list.to_le_bytes());
                bytes[at + 8..at + 12].copy_from_slice(&3u32.to_le_bytes());
                for (j, u) in [(v + 1) % 8, (v + 2) % 8, 0].into_iter().enumerate() {
                    let e = (list + 4 * j as u64) as usize;
                    bytes[e..e + 4].copy_from_slice(&u.to_le_bytes());
                }
            }
        }
        (bytes, parts)
    }

    /// The reply's stop, where to go on, edges read and groups.
    type Reply = (Stop, (u32, u32), u64, Vec<(u32, Vec<u32>)>);

    fn run(bytes: &[u8], local: &[bool], args: &[u8]) -> Result<Reply, SprocError> {
        let mem = VecMemory {
            bytes,
            region_size: REGION,
            local,
        };
        match Expand.run(&mem, 0, args)? {
            Outcome::Done(r) => {
                let e = Expand::result(&r)?;
                Ok((e.stop, e.next, e.edges, e.lists()))
            }
            other => panic!("expand returns, never moves: {other:?}"),
        }
    }

    #[test]
    fn neighbours_are_distinct_per_query() {
        let (bytes, parts) = graph();
        let args = Expand::args(&parts, 8, &[(7, &[1, 2]), (9, &[5])], (0, 0));
        let e = run(&bytes, &[true, true], &args).expect("expand");
        assert_eq!(e.0, Stop::Done);
        assert_eq!(e.2, 9);
        assert_eq!(e.3, vec![(7, vec![2, 3, 0, 4]), (9, vec![6, 7, 0])]);
        // The bits are cleared between calls: the same call answers the same.
        assert_eq!(run(&bytes, &[true, true], &args).expect("again"), e);
    }

    #[test]
    fn corrupt_edges_are_refused_and_leave_no_marks() {
        let (bytes, parts) = graph();
        let local = [true, true];
        let mut bad = bytes.clone();
        // Vertex 1's second edge names a vertex past the graph.
        let list = u64::from_le_bytes(bad[16..24].try_into().expect("8 bytes")) as usize;
        bad[list + 4..list + 8].copy_from_slice(&99u32.to_le_bytes());
        assert!(run(&bad, &local, &Expand::args(&parts, 8, &[(0, &[1])], (0, 0))).is_err());
        // The id kept before the bad one was unmarked: a good call answers in full.
        let args = Expand::args(&parts, 8, &[(7, &[1, 2])], (0, 0));
        let e = run(&bytes, &local, &args).expect("expand");
        assert_eq!(e.3, vec![(7, vec![2, 3, 0, 4])]);
    }

    #[test]
    fn a_vertex_not_held_here_stops_the_call_where_it_is() {
        let (bytes, parts) = graph();
        let args = Expand::args(&parts, 8, &[(0, &[1, 5, 2])], (0, 0));
        let e = run(&bytes, &[true, false], &args).expect("expand");
        assert_eq!((e.0, e.1), (Stop::NotHere, (0, 1)));
        assert_eq!(e.3, vec![(0, vec![2, 3, 0])]);
        let rest = Expand::args(&parts, 8, &[(0, &[1, 5, 2])], e.1);
        let e = run(&bytes, &[false, true], &rest).expect("rest");
        assert_eq!((e.0, e.1), (Stop::NotHere, (0, 2)));
        assert_eq!(e.3, vec![(0, vec![6, 7, 0])]);
    }

    #[test]
    fn hostile_args_are_refused() {
        let (bytes, parts) = graph();
        let local = [true, true];
        let outside = Expand::args(&parts, 8, &[(0, &[9])], (0, 0));
        assert!(run(&bytes, &local, &outside).is_err());
        let truncated = &Expand::args(&parts, 8, &[(0, &[1])], (0, 0))[..20];
        assert!(run(&bytes, &local, truncated).is_err());
        let mut bad = bytes.clone();
        bad[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(run(&bad, &local, &Expand::args(&parts, 8, &[(0, &[0])], (0, 0))).is_err());
        let past = [Part {
            lo: 6,
            count: 4,
            base: 0,
        }];
        assert!(
            run(
                &bytes,
                &local,
                &Expand::args(&past, 8, &[(0, &[6])], (0, 0))
            )
            .is_err()
        );
    }
}
