//! `farcache graph`: put a graph into a cache (generated, or from an edge-list file)
//! and run k-hop traversals on it.

use std::io::BufReader;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use farcache_client::Client;
use farcache_graph::{Csr, GraphCache, LoadOptions, kronecker_edges, read_graph};
use indicatif::{ProgressBar, ProgressStyle};

use super::Credentials;

#[derive(clap::Subcommand)]
pub enum GraphCommand {
    /// Generate a Graph500 Kronecker graph and write it into a new cache.
    Generate(GenerateArgs),
    /// Read a graph file into a new cache: a text edge list (SNAP style: `u v` per
    /// line, `#` comments) or graph-tool's `.gt`, either gzipped or not.
    Load(LoadArgs),
    /// Count the vertices within k hops of each source, next to the data.
    Khop(KhopArgs),
}

#[derive(clap::Args)]
pub struct Target {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// The cache holding the graph.
    #[arg(long)]
    cache: String,
    #[command(flatten)]
    creds: Credentials,
}

#[derive(clap::Args)]
pub struct Placement {
    /// Bytes per region (one partition of vertices and their edges per region).
    #[arg(long, default_value = "16m", value_parser = crate::size::parse_size)]
    region_size: u64,
    /// At least this many partitions (default: twice the servers).
    #[arg(long)]
    partitions: Option<usize>,
    /// Copies of every region (2 or more: traversals survive a server's death).
    #[arg(long, default_value_t = 1)]
    replicas: u32,
}

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    placement: Placement,
    /// 2^scale vertices.
    #[arg(long, default_value_t = 20)]
    scale: u32,
    /// Edges per vertex (Graph500: 16).
    #[arg(long, default_value_t = 16)]
    edge_factor: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    #[command(flatten)]
    target: Target,
    #[command(flatten)]
    placement: Placement,
    /// The graph file (`.txt`, `.gt`, `.gz` of either).
    file: PathBuf,
    /// Keep edges one way (default: both ways, unless a `.gt` file says directed).
    #[arg(long)]
    directed: bool,
}

#[derive(clap::Args)]
pub struct KhopArgs {
    #[command(flatten)]
    target: Target,
    /// Source vertices (all searched together, sharing rounds).
    #[arg(long, required = true, num_args = 1..)]
    source: Vec<u32>,
    #[arg(long, default_value_t = 3)]
    k: u8,
    /// Also run the search by plain reads at the client, and compare.
    #[arg(long)]
    compare: bool,
    /// Run each search this many times and report the median time.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
}

/// Runs `f` `n` times (at least once); the last result and the median time.
fn timed<T>(n: u32, mut f: impl FnMut() -> Result<T>) -> Result<(T, std::time::Duration)> {
    let mut times = Vec::new();
    let mut last = f_once(&mut f, &mut times)?;
    for _ in 1..n {
        last = f_once(&mut f, &mut times)?;
    }
    times.sort_unstable();
    Ok((last, times[times.len() / 2]))
}

fn f_once<T>(f: &mut impl FnMut() -> Result<T>, times: &mut Vec<std::time::Duration>) -> Result<T> {
    let t0 = Instant::now();
    let r = f()?;
    times.push(t0.elapsed());
    Ok(r)
}

pub fn run(c: GraphCommand) -> Result<()> {
    match c {
        GraphCommand::Generate(a) => {
            let t0 = Instant::now();
            let spin = spinner(format!("generating Kronecker scale {}", a.scale));
            let edges = kronecker_edges(a.scale, a.edge_factor, a.seed)?;
            spin.set_message("building adjacency lists");
            let g = Csr::from_edges(1 << a.scale, &edges, true)?;
            drop(edges);
            spin.finish_and_clear();
            outln!(
                "generated Kronecker scale {} edge factor {}: {} vertices, {} stored edges in {:.1} s",
                a.scale,
                a.edge_factor,
                g.vertices(),
                g.edges(),
                t0.elapsed().as_secs_f64()
            )?;
            store(&a.target, &a.placement, &g, true)
        }
        GraphCommand::Load(a) => {
            let f = std::fs::File::open(&a.file)
                .with_context(|| format!("cannot open {}", a.file.display()))?;
            let pb = bar(f.metadata()?.len(), "reading");
            let counted = Counting {
                inner: f,
                pb: pb.clone(),
                read: 0,
            };
            let read = read_graph(BufReader::new(counted), |_| {})
                .with_context(|| format!("reading {}", a.file.display()))?;
            pb.finish_and_clear();
            let list = read.list;
            if list.vertices == 0 {
                bail!("{} holds no edges", a.file.display());
            }
            let directed = a.directed || read.directed == Some(true);
            let g = Csr::from_edges(list.vertices, &list.edges, !directed)?;
            outln!(
                "read {}: {} vertices, {} edges ({} stored {})",
                a.file.display(),
                g.vertices(),
                list.edges.len(),
                g.edges(),
                if directed { "one way" } else { "both ways" }
            )?;
            store(&a.target, &a.placement, &g, !directed)
        }
        GraphCommand::Khop(a) => khop(a),
    }
}

fn client(t: &Target) -> Result<Client> {
    Ok(Client::with_config(t.creds.config(&t.manager)?)?)
}

fn store(t: &Target, p: &Placement, g: &Csr, undirected: bool) -> Result<()> {
    t.creds.require_secret("creating a cache")?;
    let client = client(t)?;
    let servers = client.status()?.servers.len().max(1);
    let opts = LoadOptions {
        region_size: p.region_size,
        min_parts: p.partitions.unwrap_or(2 * servers),
        undirected,
        replicas: p.replicas,
    };
    let t0 = Instant::now();
    let pb = bar(0, "writing");
    let gc = GraphCache::create(&client, &t.cache, g, &opts, |done, total| {
        pb.set_length(total);
        pb.set_position(done);
    })
    .with_context(|| format!("writing the graph into cache '{}'", t.cache))?;
    pb.finish_and_clear();
    let mut owners = gc.owners();
    owners.sort_unstable();
    owners.dedup();
    outln!(
        "cache '{}': {} partitions of up to {} B over {} server(s), written in {:.1} s",
        t.cache,
        gc.layout.parts.len(),
        p.region_size,
        owners.len(),
        t0.elapsed().as_secs_f64()
    )?;
    Ok(())
}

fn khop(a: KhopArgs) -> Result<()> {
    let client = client(&a.target)?;
    let gc = GraphCache::open(client.open(&a.target.cache)?)?;
    gc.warm()?;
    let (t, took) = timed(a.repeat, || Ok(gc.traverse(&a.source, a.k)?))?;
    for (q, s) in a.source.iter().enumerate() {
        outln!(
            "source {s}: {} vertices within {} hops (per level: {:?})",
            t.reached(q),
            a.k,
            t.levels[q]
        )?;
    }
    let s = t.stats;
    outln!(
        "traversal: {:.2} ms, {} rounds, {} expand calls, {} B sent, {} B returned, {} edges read by the servers",
        took.as_secs_f64() * 1e3,
        s.rounds,
        s.calls,
        s.bytes_out,
        s.bytes_in,
        s.edges
    )?;
    if a.compare {
        let (r, took_r) = timed(a.repeat, || Ok(gc.traverse_by_reads(&a.source, a.k)?))?;
        if r.levels != t.levels {
            bail!("the client-side search found other counts: {:?}", r.levels);
        }
        outln!(
            "client-side reads: {:.2} ms, {} rounds, {} reads, {} B moved (same counts); traversal {:.2}x faster, {:.1}x fewer bytes",
            took_r.as_secs_f64() * 1e3,
            r.stats.rounds,
            r.stats.calls,
            r.stats.bytes(),
            took_r.as_secs_f64() / took.as_secs_f64().max(1e-9),
            r.stats.bytes() as f64 / s.bytes().max(1) as f64
        )?;
    }
    Ok(())
}

/// A reader that moves a progress bar by the file bytes read (before any gunzip).
struct Counting<R> {
    inner: R,
    pb: ProgressBar,
    read: u64,
}

impl<R: std::io::Read> std::io::Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        self.pb.set_position(self.read);
        Ok(n)
    }
}

fn bar(len: u64, msg: &'static str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>8} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}")
    {
        pb.set_style(style);
    }
    pb.set_message(msg);
    pb
}

fn spinner(msg: String) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb.set_message(msg);
    pb
}
