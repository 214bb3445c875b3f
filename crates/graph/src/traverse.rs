//! Level-synchronous traversal (k-hop counts, BFS levels, many sources at once).
//!
//! The client coordinates and keeps one visited set per query; each round it sends
//! every server one `expand` call (more only past the op size limit) naming the
//! frontier vertices that server holds, for every query. The servers read entries and
//! edge lists in their own memory and return each query's distinct neighbours, so
//! per round one message goes each way per server, whatever the number of queries,
//! and edge lists never cross the network.

use std::collections::HashMap;

use farcache_sproc::builtin::{Expand, Expanded, Part, Stop};

use crate::GraphCache;
use crate::error::{GraphError, Result};

/// Payload bytes of one `expand` call's args (under the 1 MiB op limit).
const MAX_CALL_ARGS: usize = 960 << 10;
/// Frontier vertices per `expand` call. Larger calls dedup more (fewer bytes back);
/// smaller ones seldom fill the 2 MiB reply, which costs a second round for the rest.
/// At Graph500's mean degree (32) this size measured best at k = 3.
const MAX_CALL_VERTICES: usize = 64 << 10;
/// Edges per batch of the client-side search's edge-list reads.
const READ_CHUNK: usize = 16 << 10;
/// Round trips a round may need for calls stopped by moved regions before giving up.
const MAX_RETRIES: u32 = 16;

/// What one traversal found and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Traversal {
    /// Per query: vertices first reached at each level 1, 2, … (the k-hop count is
    /// their sum; BFS levels stop early when nothing new is reached).
    pub levels: Vec<Vec<u64>>,
    pub stats: TraversalStats,
}

impl Traversal {
    /// Vertices within k hops of query `q`'s source, the source excluded.
    pub fn reached(&self, q: usize) -> u64 {
        self.levels.get(q).map_or(0, |l| l.iter().sum())
    }
}

/// Costs of a traversal (or of a client-side search, for comparison).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraversalStats {
    /// Dependent round trips (batches waited for).
    pub rounds: u32,
    /// Ops sent (`expand` calls, or reads).
    pub calls: u64,
    /// Payload bytes sent to servers (args, or read requests at 12 B each).
    pub bytes_out: u64,
    /// Payload bytes returned (neighbour lists, or the bytes read).
    pub bytes_in: u64,
    /// Edges read by the servers (or by the client).
    pub edges: u64,
    /// Calls sent again because a partition they named had moved to another server.
    pub resent: u64,
}

impl TraversalStats {
    pub fn bytes(&self) -> u64 {
        self.bytes_out + self.bytes_in
    }
}

/// One bit per vertex.
struct Visited(Vec<u64>);

impl Visited {
    fn new(n: u32) -> Self {
        Self(vec![0; (n as usize).div_ceil(64)])
    }

    /// Appends to `next` those of `ids` (`n` of them) not marked yet, marking them;
    /// branch-free, as which ids repeat is unpredictable.
    fn keep_fresh(
        &mut self,
        ids: impl Iterator<Item = u32>,
        n: usize,
        next: &mut Vec<u32>,
    ) -> Result<()> {
        let mut at = next.len();
        next.resize(at + n, 0);
        for u in ids {
            let (w, b) = ((u / 64) as usize, 1u64 << (u % 64));
            let Some(word) = self.0.get_mut(w) else {
                next.truncate(at);
                return Err(GraphError::Procedure(format!(
                    "reply names vertex {u}, past the graph"
                )));
            };
            let fresh = *word & b == 0;
            *word |= b;
            next[at] = u;
            at += usize::from(fresh);
        }
        next.truncate(at);
        Ok(())
    }

    /// Marks `v`; true if it was not marked before.
    fn insert(&mut self, v: u32) -> bool {
        let (w, b) = ((v / 64) as usize, 1u64 << (v % 64));
        let fresh = self.0[w] & b == 0;
        self.0[w] |= b;
        fresh
    }
}

/// What one server gets in a level: the partitions it holds, and per query tag the
/// frontier vertices among them.
type ServerShare = (Vec<Part>, HashMap<u32, Vec<u32>>);

/// One `expand` call: the partitions its server holds, per query the frontier part.
struct Call {
    parts: Vec<Part>,
    queries: Vec<(u32, Vec<u32>)>,
    next: (u32, u32),
}

impl Call {
    fn args(&self, vertices: u32) -> Vec<u8> {
        let q: Vec<(u32, &[u32])> = self
            .queries
            .iter()
            .map(|(t, l)| (*t, l.as_slice()))
            .collect();
        Expand::args(&self.parts, vertices, &q, self.next)
    }

    /// The frontier vertices from `next` on, per query.
    fn rest(self) -> Vec<(u32, Vec<u32>)> {
        let (q0, v0) = (self.next.0 as usize, self.next.1 as usize);
        self.queries
            .into_iter()
            .skip(q0)
            .enumerate()
            .map(|(i, (t, l))| {
                (
                    t,
                    if i == 0 {
                        l[v0.min(l.len())..].to_vec()
                    } else {
                        l
                    },
                )
            })
            .collect()
    }
}

impl GraphCache {
    fn check_sources(&self, sources: &[u32]) -> Result<()> {
        match sources.iter().find(|&&s| s >= self.layout.vertices) {
            Some(s) => Err(GraphError::InvalidArgument(format!(
                "source {s} ≥ {} vertices",
                self.layout.vertices
            ))),
            None => Ok(()),
        }
    }

    /// Groups each query's frontier by the server holding it, into calls under the op
    /// size limit.
    fn plan_calls(&self, frontiers: &[(u32, Vec<u32>)]) -> Vec<Call> {
        let owners = self.owners();
        let mut by_server: HashMap<u32, ServerShare> = HashMap::new();
        for (i, &o) in owners.iter().enumerate() {
            by_server.entry(o).or_default().0.push(self.layout.parts[i]);
        }
        for (tag, list) in frontiers {
            for &v in list {
                let o = owners[self.layout.part_of(v)];
                if let Some((_, q)) = by_server.get_mut(&o) {
                    q.entry(*tag).or_default().push(v);
                }
            }
        }
        let mut calls = Vec::new();
        for (_, (parts, queries)) in by_server {
            let mut queries: Vec<(u32, Vec<u32>)> = queries.into_iter().collect();
            queries.sort_unstable_by_key(|q| q.0);
            let mut call = Call {
                parts: parts.clone(),
                queries: Vec::new(),
                next: (0, 0),
            };
            let mut room = MAX_CALL_ARGS - Expand::args_len(parts.len(), 0, 0);
            let mut held = 0usize;
            for (tag, list) in queries {
                let mut list = list.as_slice();
                while !list.is_empty() {
                    if room < 64 || held >= MAX_CALL_VERTICES {
                        held = 0;
                        calls.push(std::mem::replace(
                            &mut call,
                            Call {
                                parts: parts.clone(),
                                queries: Vec::new(),
                                next: (0, 0),
                            },
                        ));
                        room = MAX_CALL_ARGS - Expand::args_len(parts.len(), 0, 0);
                    }
                    let take = list.len().min((room - 8) / 4).min(MAX_CALL_VERTICES - held);
                    held += take;
                    call.queries.push((tag, list[..take].to_vec()));
                    room -= 8 + 4 * take;
                    list = &list[take..];
                }
            }
            if !call.queries.is_empty() {
                calls.push(call);
            }
        }
        calls
    }

    /// k-hop search from every source at once (the sources may repeat).
    pub fn traverse(&self, sources: &[u32], k: u8) -> Result<Traversal> {
        self.check_sources(sources)?;
        let n = self.layout.vertices;
        let mut visited: Vec<Visited> = sources.iter().map(|_| Visited::new(n)).collect();
        let mut frontiers: Vec<(u32, Vec<u32>)> = Vec::with_capacity(sources.len());
        for (q, &s) in sources.iter().enumerate() {
            visited[q].insert(s);
            frontiers.push((q as u32, vec![s]));
        }
        let mut out = Traversal {
            levels: vec![Vec::new(); sources.len()],
            stats: TraversalStats::default(),
        };
        for _ in 0..k {
            if frontiers.is_empty() {
                break;
            }
            let mut next: Vec<Vec<u32>> = vec![Vec::new(); sources.len()];
            let mut calls = self.plan_calls(&frontiers);
            let mut retries = 0;
            while !calls.is_empty() {
                // One batch per call, all in flight at once: the client merges each
                // reply while the servers still work on the others.
                let tickets: Vec<_> = calls
                    .iter()
                    .map(|c| {
                        let args = c.args(n);
                        out.stats.bytes_out += args.len() as u64;
                        let mut b = self.cache.batch();
                        b.execute(Expand::NAME, c.parts[0].base, &args);
                        b.submit()
                    })
                    .collect();
                out.stats.calls += calls.len() as u64;
                out.stats.rounds += 1;
                let mut again = Vec::new();
                let mut moved = Vec::new();
                let mut pending: Vec<_> = calls.into_iter().zip(tickets).collect();
                while !pending.is_empty() {
                    // Merge whichever reply is in; block on the oldest only when none is.
                    let ready = pending
                        .iter_mut()
                        .enumerate()
                        .find_map(|(i, (_, t))| t.try_take().map(|r| (i, r)));
                    let (mut c, r) = match ready {
                        Some((i, r)) => (pending.remove(i).0, r),
                        None => {
                            let (c, t) = pending.remove(0);
                            (c, t.wait())
                        }
                    };
                    let bytes = r.data(0)?;
                    out.stats.bytes_in += bytes.len() as u64;
                    let e =
                        Expand::result(bytes).map_err(|e| GraphError::Procedure(e.to_string()))?;
                    out.stats.edges += e.edges;
                    for &(tag, raw) in &e.groups {
                        let q = tag as usize;
                        let (Some(seen), Some(next)) = (visited.get_mut(q), next.get_mut(q)) else {
                            return Err(GraphError::Procedure(format!(
                                "reply for unknown query {tag}"
                            )));
                        };
                        seen.keep_fresh(Expanded::ids(raw), raw.len() / 4, next)?;
                    }
                    c.next = e.next;
                    match e.stop {
                        Stop::Done => {}
                        Stop::Full => again.push(c),
                        Stop::NotHere => moved.extend(c.rest()),
                    }
                }
                if !moved.is_empty() {
                    out.stats.resent += 1;
                    retries += 1;
                    if retries > MAX_RETRIES {
                        return Err(GraphError::NoProgress(MAX_RETRIES));
                    }
                    self.cache.refresh()?;
                    again.extend(self.plan_calls(&moved));
                }
                calls = again;
            }
            frontiers.clear();
            for (q, list) in next.into_iter().enumerate() {
                if !list.is_empty() {
                    out.levels[q].push(list.len() as u64);
                    frontiers.push((q as u32, list));
                }
            }
        }
        Ok(out)
    }

    /// The same search done by a client without procedures, at its best: per level one
    /// batch reading every frontier vertex's entry (for all queries), then one batch
    /// reading their edge lists; the client dedups.
    pub fn traverse_by_reads(&self, sources: &[u32], k: u8) -> Result<Traversal> {
        self.check_sources(sources)?;
        let n = self.layout.vertices;
        let mut visited: Vec<Visited> = sources.iter().map(|_| Visited::new(n)).collect();
        let mut frontiers: Vec<Vec<u32>> = Vec::with_capacity(sources.len());
        for (q, &s) in sources.iter().enumerate() {
            visited[q].insert(s);
            frontiers.push(vec![s]);
        }
        let mut out = Traversal {
            levels: vec![Vec::new(); sources.len()],
            stats: TraversalStats::default(),
        };
        for _ in 0..k {
            let total: usize = frontiers.iter().map(Vec::len).sum();
            if total == 0 {
                break;
            }
            let mut b = self.cache.batch().with_capacity(total);
            for &v in frontiers.iter().flatten() {
                b.read(self.entry(v), 12);
            }
            let r = b.run();
            out.stats.rounds += 1;
            out.stats.calls += total as u64;
            out.stats.bytes_out += 12 * total as u64;
            out.stats.bytes_in += 12 * total as u64;
            // Edge lists in batches of about `READ_CHUNK` edges, all in flight at once,
            // merged as each completes (the client's best form: its merging overlaps
            // the servers' sending, as the traversal's does).
            let mut lists: Vec<(farcache_client::Batch, Vec<usize>)> = Vec::new();
            let mut edges_in_last = usize::MAX;
            for (i, q) in frontiers
                .iter()
                .enumerate()
                .flat_map(|(q, f)| f.iter().map(move |_| q))
                .enumerate()
            {
                let e = r.data(i)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(&e[..8]);
                let degree = u32::from_le_bytes([e[8], e[9], e[10], e[11]]);
                if degree > 0 {
                    if edges_in_last >= READ_CHUNK {
                        lists.push((self.cache.batch(), Vec::new()));
                        edges_in_last = 0;
                    }
                    if let Some((b, owner)) = lists.last_mut() {
                        b.read(u64::from_le_bytes(a), 4 * u64::from(degree));
                        owner.push(q);
                    }
                    edges_in_last += degree as usize;
                }
            }
            let mut next: Vec<Vec<u32>> = vec![Vec::new(); sources.len()];
            if !lists.is_empty() {
                out.stats.rounds += 1;
                let pending: Vec<_> = lists
                    .into_iter()
                    .map(|(b, owner)| {
                        out.stats.calls += owner.len() as u64;
                        out.stats.bytes_out += 12 * owner.len() as u64;
                        (b.submit(), owner)
                    })
                    .collect();
                for (t, owner) in pending {
                    let r = t.wait();
                    for (i, &q) in owner.iter().enumerate() {
                        let d = r.data(i)?;
                        out.stats.bytes_in += d.len() as u64;
                        out.stats.edges += d.len() as u64 / 4;
                        visited[q].keep_fresh(Expanded::ids(d), d.len() / 4, &mut next[q])?;
                    }
                }
            }
            for (q, list) in next.iter().enumerate() {
                if !list.is_empty() {
                    out.levels[q].push(list.len() as u64);
                }
            }
            frontiers = next;
        }
        Ok(out)
    }
}
