//! `khop`: how many distinct vertices lie within `k` hops of a source, over a graph in
//! CSR layout: vertex `v`'s entry at `vbase + 16 v` is (`first edge index` u64,
//! `degree` u32, padding u32); the edge list at `ebase` is u32 vertex ids.
//!
//! The breadth-first search keeps its whole state (visited set, frontier, positions in
//! the adjacency lists being walked) in the continuation. With [`Flow::Ship`] it does
//! every part of the level this server can read (entries and edge lists in any order),
//! and only then moves to a server holding something still missing; with [`Flow::Pull`] it
//! stays where it started and, once per level, pulls every remote vertex entry and then
//! every remote edge list of the frontier in one request per phase, which the server
//! batches per destination.

use std::collections::HashSet;

use super::Flow;
use crate::args::{ArgReader, ArgWriter};
use crate::memory::Miss;
use crate::procedure::MAX_OUTPUT;
use crate::{Memory, Outcome, Procedure, SprocError};

const NAME: &str = "khop";
pub const VERTEX_ENTRY: u64 = 16;

pub struct KHop;

#[derive(Debug, Clone, Default)]
struct Bfs {
    vbase: u64,
    ebase: u64,
    vertices: u32,
    k: u8,
    depth: u8,
    /// Adjacency lists being walked: (vertex, first edge, degree, next edge).
    adj: Vec<(u32, u64, u32, u32)>,
    visited: Vec<u32>,
    frontier: Vec<u32>,
    next: Vec<u32>,
    flow: Flow,
    /// DFlow: 1 + the level whose bytes are all readable here (0: none yet).
    ready: u8,
}

impl KHop {
    pub const NAME: &'static str = NAME;

    /// Invoke at `vbase + 16 * source`.
    pub fn args(vbase: u64, ebase: u64, vertices: u32, source: u32, k: u8) -> Vec<u8> {
        Self::args_with(vbase, ebase, vertices, source, k, Flow::Ship)
    }

    /// Like [`KHop::args`] with a choice of flow ([`Flow::Return`] is treated as ship).
    pub fn args_with(
        vbase: u64,
        ebase: u64,
        vertices: u32,
        source: u32,
        k: u8,
        flow: Flow,
    ) -> Vec<u8> {
        Bfs {
            flow,
            vbase,
            ebase,
            vertices,
            k,
            visited: vec![source],
            frontier: vec![source],
            ..Bfs::default()
        }
        .encode()
    }

    /// The result: vertices within `k` hops, the source excluded.
    pub fn result(bytes: &[u8]) -> Result<u64, SprocError> {
        let mut r = ArgReader::new(NAME, bytes);
        let v = r.u64("count")?;
        r.end()?;
        Ok(v)
    }
}

fn list(w: ArgWriter, v: &[u32]) -> ArgWriter {
    v.iter().fold(w.u32(v.len() as u32), |w, &x| w.u32(x))
}

fn read_list(r: &mut ArgReader<'_>, what: &str, limit: u32) -> Result<Vec<u32>, SprocError> {
    let n = r.u32(what)?;
    if n as usize > MAX_OUTPUT / 4 {
        return Err(SprocError::bad(NAME, format!("{what} list too long")));
    }
    (0..n)
        .map(|_| {
            let v = r.u32(what)?;
            if v >= limit {
                return Err(SprocError::bad(NAME, format!("vertex {v} ≥ {limit}")));
            }
            Ok(v)
        })
        .collect()
}

impl Bfs {
    fn encode(&self) -> Vec<u8> {
        let w = ArgWriter::default()
            .u64(self.vbase)
            .u64(self.ebase)
            .u32(self.vertices)
            .u8(self.k)
            .u8(self.depth)
            .u32(self.adj.len() as u32);
        let w = self
            .adj
            .iter()
            .fold(w, |w, &(v, s, d, j)| w.u32(v).u64(s).u32(d).u32(j));
        let w = list(w, &self.visited);
        let w = list(w, &self.frontier);
        list(w, &self.next)
            .u8(self.flow as u8)
            .u8(self.ready)
            .finish()
    }

    /// DFlow: the ranges of the current frontier not readable here, vertex entries
    /// first, then (once those are all here) edge lists.
    fn missing(&self, mem: &dyn Memory) -> Result<Vec<(u64, u32)>, SprocError> {
        let mut want = Vec::new();
        let mut entries = Vec::with_capacity(self.frontier.len());
        for &v in &self.frontier {
            let at = super::element(NAME, self.vbase, v.into(), VERTEX_ENTRY)?;
            let mut e = [0u8; 12];
            match mem.read(at, &mut e) {
                Ok(()) => entries.push(e),
                Err(Miss::Remote) => want.push((at, 12)),
                Err(Miss::Budget) => return Err(super::budget(NAME, mem)),
                Err(Miss::Lost) => {
                    return Err(SprocError::Lost {
                        proc: NAME,
                        addr: at,
                        len: 12,
                    });
                }
                Err(Miss::OutOfRange) => {
                    return Err(SprocError::OutOfRange {
                        proc: NAME,
                        addr: at,
                        len: 12,
                    });
                }
            }
        }
        if !want.is_empty() {
            return Ok(want);
        }
        let mut scratch = Vec::new();
        for e in entries {
            let first = u64::from_le_bytes(e[..8].try_into().unwrap_or_default());
            let degree = u32::from_le_bytes(e[8..].try_into().unwrap_or_default());
            if degree == 0 {
                continue;
            }
            let at = super::element(NAME, self.ebase, first, 4)?;
            let len = u64::from(degree) * 4;
            if len > MAX_OUTPUT as u64 {
                continue; // walked edge by edge instead (ships if remote)
            }
            scratch.resize(len as usize, 0);
            match mem.read(at, &mut scratch) {
                Ok(()) => {}
                Err(Miss::Remote) => want.push((at, len as u32)),
                Err(Miss::Budget) => return Err(super::budget(NAME, mem)),
                Err(Miss::Lost) => {
                    return Err(SprocError::Lost {
                        proc: NAME,
                        addr: at,
                        len,
                    });
                }
                Err(Miss::OutOfRange) => {
                    return Err(SprocError::OutOfRange {
                        proc: NAME,
                        addr: at,
                        len,
                    });
                }
            }
        }
        Ok(want)
    }

    fn decode(args: &[u8]) -> Result<Self, SprocError> {
        let mut r = ArgReader::new(NAME, args);
        let vbase = r.u64("vbase")?;
        let ebase = r.u64("ebase")?;
        let vertices = r.u32("vertices")?;
        let k = r.u8("k")?;
        let depth = r.u8("depth")?;
        let walks = r.u32("walks")?;
        if walks as usize > MAX_OUTPUT / 20 {
            return Err(SprocError::bad(NAME, "too many adjacency walks"));
        }
        let adj = (0..walks)
            .map(|_| {
                Ok((
                    r.u32("vertex")?,
                    r.u64("first edge")?,
                    r.u32("degree")?,
                    r.u32("edge")?,
                ))
            })
            .collect::<Result<Vec<_>, SprocError>>()?;
        let mut b = Bfs {
            vbase,
            ebase,
            vertices,
            k,
            depth,
            adj,
            visited: read_list(&mut r, "visited", vertices)?,
            frontier: read_list(&mut r, "frontier", vertices)?,
            next: read_list(&mut r, "next", vertices)?,
            flow: Flow::Ship,
            ready: 0,
        };
        if !r.is_empty() {
            b.flow = Flow::from_u8(NAME, r.u8("flow")?)?;
            b.ready = r.u8("ready level")?;
        }
        r.end()?;
        Ok(b)
    }
}

impl Procedure for KHop {
    fn name(&self) -> &str {
        NAME
    }

    fn run(&self, mem: &dyn Memory, _addr: u64, args: &[u8]) -> Result<Outcome, SprocError> {
        let mut b = Bfs::decode(args)?;
        let mut seen: HashSet<u32> = b.visited.iter().copied().collect();
        // `depth < k ≤ u8::MAX` inside the loop, so `depth + 1` fits.
        while b.depth < b.k {
            // Starting a level's walk: under DFlow bring its bytes here first.
            if b.flow == Flow::Pull && b.ready != b.depth + 1 {
                let want = b.missing(mem)?;
                if !want.is_empty() {
                    return Ok(Outcome::Pull {
                        ranges: want,
                        state: b.encode(),
                    });
                }
                b.ready = b.depth + 1;
            }
            // Everything of this level readable here, until a pass gets nowhere.
            let blocked = loop {
                let (progress, blocked) = b.pass(mem, &mut seen)?;
                if !progress {
                    break blocked;
                }
            };
            if let Some((at, len)) = blocked {
                // The rest lives elsewhere: continue where the first of it is.
                return super::on_miss(NAME, mem, Miss::Remote, at, len, || b.encode());
            }
            if b.next.is_empty() {
                break;
            }
            b.frontier = std::mem::take(&mut b.next);
            b.depth += 1;
        }
        let within = b.visited.len().saturating_sub(1) as u64;
        Ok(Outcome::Done(within.to_le_bytes().to_vec()))
    }
}

impl Bfs {
    /// Walks the adjacency lists and reads the frontier's vertex entries as far as this
    /// server can. Returns whether anything moved, and the first range it could not read.
    fn pass(
        &mut self,
        mem: &dyn Memory,
        seen: &mut HashSet<u32>,
    ) -> Result<(bool, Option<(u64, u64)>), SprocError> {
        let (mut progress, mut blocked) = (false, None);
        let remote = |m: Miss, at: u64, len: u64| match m {
            Miss::Remote => Ok((at, len)),
            Miss::OutOfRange => Err(SprocError::OutOfRange {
                proc: NAME,
                addr: at,
                len,
            }),
            Miss::Budget => Err(super::budget(NAME, mem)),
            Miss::Lost => Err(SprocError::Lost {
                proc: NAME,
                addr: at,
                len,
            }),
        };
        let mut i = 0;
        while i < self.adj.len() {
            let (v, first, degree, mut j) = self.adj[i];
            let mut stuck = false;
            while j < degree {
                let idx = first.checked_add(j.into()).ok_or_else(|| {
                    SprocError::bad(NAME, format!("edge index overflow at vertex {v}"))
                })?;
                let at = super::element(NAME, self.ebase, idx, 4)?;
                match mem.read_u32(at) {
                    Ok(u) if u >= self.vertices => {
                        return Err(SprocError::bad(NAME, format!("edge to vertex {u}")));
                    }
                    Ok(u) => {
                        if seen.insert(u) {
                            self.visited.push(u);
                            self.next.push(u);
                        }
                    }
                    Err(m) => {
                        blocked.get_or_insert(remote(m, at, 4)?);
                        stuck = true;
                        break;
                    }
                }
                j += 1;
                progress = true;
            }
            if stuck {
                self.adj[i].3 = j;
                i += 1;
            } else {
                self.adj.swap_remove(i);
            }
        }
        let mut i = 0;
        while i < self.frontier.len() {
            let v = self.frontier[i];
            let at = super::element(NAME, self.vbase, v.into(), VERTEX_ENTRY)?;
            let mut e = [0u8; 12];
            if let Err(m) = mem.read(at, &mut e) {
                blocked.get_or_insert(remote(m, at, 12)?);
                i += 1;
                continue;
            }
            self.frontier.swap_remove(i);
            let (mut f, mut d) = ([0u8; 8], [0u8; 4]);
            f.copy_from_slice(&e[..8]);
            d.copy_from_slice(&e[8..]);
            self.adj
                .push((v, u64::from_le_bytes(f), u32::from_le_bytes(d), 0));
            progress = true;
        }
        if self.visited.len().saturating_mul(4) > MAX_OUTPUT {
            return Err(SprocError::TooLarge {
                proc: NAME,
                limit: MAX_OUTPUT,
            });
        }
        Ok((progress, blocked))
    }
}
