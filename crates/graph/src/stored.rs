//! A graph written into a cache of its own, and opened again from it.

use std::collections::VecDeque;

use farcache_client::{Cache, Client, Ticket};

use crate::error::{GraphError, Result};
use crate::{Csr, Layout};

/// How a graph is laid out when loaded.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Bytes per region, and so at most per partition.
    pub region_size: u64,
    /// At least this many partitions, and about a multiple of it (give a multiple of
    /// the servers, so partitions spread evenly).
    pub min_parts: usize,
    pub undirected: bool,
    /// Copies of every region (2 or more: a traversal survives a server's death).
    pub replicas: u32,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            region_size: 16 << 20,
            min_parts: 6,
            undirected: true,
            replicas: 1,
        }
    }
}

/// A graph held in a cache: its cache and its layout.
pub struct GraphCache {
    pub cache: Cache,
    pub layout: Layout,
}

impl GraphCache {
    /// Creates cache `name` and writes `g` into it; `progress(written, total)` follows
    /// the bytes.
    pub fn create(
        client: &Client,
        name: &str,
        g: &Csr,
        opts: &LoadOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Self> {
        let layout = Layout::plan(g, opts.undirected, opts.region_size, opts.min_parts)?;
        let cache = client.create_with(
            name,
            layout.capacity(),
            &farcache_client::CreateOptions {
                region_size: Some(opts.region_size),
                replicas: opts.replicas,
                ..Default::default()
            },
        )?;
        let total = layout.vertices as u64 * farcache_sproc::builtin::GRAPH_ENTRY + 4 * g.edges();
        let mut w = Writer::new(&cache);
        w.put(0, &layout.header())?;
        let mut done = 0;
        for (i, p) in layout.parts.iter().enumerate() {
            let bytes = layout.part_bytes(g, i);
            for (j, c) in bytes.chunks(Writer::CHUNK).enumerate() {
                w.put(p.base + (j * Writer::CHUNK) as u64, c)?;
                done += c.len() as u64;
                progress(done, total);
            }
        }
        w.finish()?;
        Ok(Self { cache, layout })
    }

    /// Reads the layout of the graph in `cache`.
    pub fn open(cache: Cache) -> Result<Self> {
        let not = |reason: String| GraphError::NotAGraph {
            cache: cache.name(),
            reason,
        };
        let info = cache.info();
        let fixed = cache.read(0, 32).map_err(|e| not(e.to_string()))?;
        let fixed = Layout::read_fixed(&fixed).map_err(not)?;
        let len = Layout::table_len(fixed.1);
        if 32 + len > info.region_size {
            return Err(not("the partition table runs past the first region".into()));
        }
        let table = cache.read(32, len).map_err(|e| not(e.to_string()))?;
        let layout =
            Layout::from_header(fixed, &table, info.region_size, info.capacity).map_err(not)?;
        Ok(Self { cache, layout })
    }

    /// The server holding each partition, from the client's current region table.
    pub fn owners(&self) -> Vec<u32> {
        let info = self.cache.info();
        self.layout
            .parts
            .iter()
            .map(|p| {
                info.regions
                    .get((p.base / info.region_size) as usize)
                    .copied()
                    .unwrap_or(u32::MAX)
            })
            .collect()
    }

    /// Opens a connection to every server holding a partition (one tiny read each), so
    /// the first traversal does not pay for connecting.
    pub fn warm(&self) -> Result<()> {
        let mut b = self.cache.batch();
        for p in &self.layout.parts {
            b.read(p.base, 1);
        }
        match b.run().first_error() {
            Some(e) => Err(e.clone().into()),
            None => Ok(()),
        }
    }

    /// Address of vertex `v`'s entry.
    pub fn entry(&self, v: u32) -> u64 {
        let p = self.layout.parts[self.layout.part_of(v)];
        p.base + u64::from(v - p.lo) * farcache_sproc::builtin::GRAPH_ENTRY
    }
}

/// Writes in 1 MiB ops, 16 per batch, 4 batches in flight.
struct Writer<'a> {
    cache: &'a Cache,
    batch: farcache_client::Batch,
    pending: VecDeque<Ticket>,
}

impl<'a> Writer<'a> {
    const CHUNK: usize = 1 << 20;

    fn new(cache: &'a Cache) -> Self {
        Self {
            cache,
            batch: cache.batch(),
            pending: VecDeque::new(),
        }
    }

    fn put(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.batch.write(addr, data);
        if self.batch.len() == 16 {
            let b = std::mem::replace(&mut self.batch, self.cache.batch());
            self.pending.push_back(b.submit());
        }
        if self.pending.len() >= 4
            && let Some(t) = self.pending.pop_front()
        {
            check(t)?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        if !self.batch.is_empty() {
            let b = std::mem::replace(&mut self.batch, self.cache.batch());
            self.pending.push_back(b.submit());
        }
        self.pending.into_iter().try_for_each(check)
    }
}

fn check(t: Ticket) -> Result<()> {
    match t.wait().first_error() {
        Some(e) => Err(e.clone().into()),
        None => Ok(()),
    }
}
