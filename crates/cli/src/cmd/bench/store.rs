//! `farcache bench store`, `store-large`, `store-hot`, `store-evict`: the keyed
//! store against Redis and memcached.

use super::*;

#[derive(clap::Args)]
pub struct StoreLargeArgs {
    /// Object sizes, 1 MiB to 512 MiB (default 1MiB,10MiB,100MiB; 1MiB,10MiB with
    /// --quick).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<String>,
    /// Objects per size, put once each into the store and into Redis (default 16, 8
    /// with --quick).
    #[arg(long)]
    objects: Option<u64>,
    /// Seconds of each GET run, at least --min-gets calls (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Fewest calls of each GET run (default 8, 4 with --quick).
    #[arg(long, value_parser = parse_count)]
    min_gets: Option<usize>,
    /// Op timeout (ms) of the client reading while a server is stopped: how long a
    /// read waiting for all chunks waits for the stopped server's chunk.
    #[arg(long, default_value_t = 500)]
    op_timeout_ms: u64,
    /// Ops per request frame of the store clients (the client's default: 64).
    #[arg(short = 'b', long, value_parser = parse_count)]
    batch: Option<usize>,
    /// Request frames in flight per connection of the store clients (default 4).
    #[arg(short = 'q', long, value_parser = parse_count)]
    queue_depth: Option<usize>,
    /// Smaller sizes, fewer objects, shorter runs.
    #[arg(long)]
    quick: bool,
    /// Skip Redis (no ratios).
    #[arg(long)]
    no_baselines: bool,
    /// Write the JSON results here, the chart beside it (default:
    /// `store-large-<unix seconds>.json`/`.png` and `store-large-latest.*` in
    /// bench-results/).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also copy the chart here (skipped when its directory does not exist).
    #[arg(long, default_value = "docs/bench-store-large.png")]
    chart: PathBuf,
}

#[derive(clap::Args)]
pub struct StoreHotArgs {
    /// Server processes (one worker thread each); a list runs one cluster per count.
    #[arg(long, value_delimiter = ',', default_value = "6", value_parser = parse_count)]
    servers: Vec<usize>,
    /// Keys loaded (default 1000000, 100000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Zipf exponent of the keys read.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Value size (1 byte to 64 KiB).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    value_size: u64,
    /// Keys per mget.
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// Mgets in flight per client thread.
    #[arg(short = 'q', long, default_value = "4", value_parser = parse_count)]
    queue_depth: usize,
    /// Client threads.
    #[arg(short = 'c', long, default_value = "2", value_parser = parse_count)]
    threads: usize,
    /// Measured seconds of each run (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Seconds the hot-key controller runs before the window opens (default 1.5, 1
    /// with --quick).
    #[arg(long)]
    hot_warmup: Option<f64>,
    /// Most keys with a second copy at once (HotOptions::max_keys).
    #[arg(long, default_value = "64", value_parser = parse_count)]
    hot_keys: usize,
    /// Fewer keys, shorter runs.
    #[arg(long)]
    quick: bool,
    /// Write the JSON results here, the chart beside it (default:
    /// `store-hot-<unix seconds>.json`/`.png` in bench-results/).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also copy the chart here (skipped when its directory does not exist).
    #[arg(long, default_value = "docs/bench-store-hot.png")]
    chart: PathBuf,
}

#[derive(clap::Args)]
pub struct StoreEvictArgs {
    /// Distinct keys of the trace (default 1000000, 100000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Requests of the trace, warm-up included (default 6 x keys).
    #[arg(long)]
    requests: Option<u64>,
    /// Requests before hits are counted (default 2 x keys).
    #[arg(long)]
    warmup: Option<u64>,
    /// Zipf exponent of the trace.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Value size (1 byte to 64 KiB).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    value_size: u64,
    /// Share of the distinct keys' items the store holds.
    #[arg(long, default_value_t = 0.10)]
    cache_fraction: f64,
    /// Requests per mget (its misses go in one mput).
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// 100000 keys.
    #[arg(long)]
    quick: bool,
    /// Write the JSON results here (default: `store-evict-<unix seconds>.json` and
    /// `store-evict-latest.json` in bench-results/).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct StoreArgs {
    /// Value sizes (16, 64, 1KiB …), 1 byte to 64 KiB.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256,1024")]
    sizes: Vec<String>,
    /// Keys per size (default 1000000, 100000 with --quick).
    #[arg(long)]
    keys: Option<u64>,
    /// Keys per mget/mput and per Redis batch.
    #[arg(short = 'b', long, default_value = "64", value_parser = parse_count)]
    batch: usize,
    /// Batches in flight: farcache threads sharing one connection, Redis batches per
    /// connection.
    #[arg(short = 'q', long, default_value = "4", value_parser = parse_count)]
    queue_depth: usize,
    /// Seconds per timed run (default 3, 1 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Fewer keys, shorter runs, fewer latency samples.
    #[arg(long)]
    quick: bool,
    /// Skip Redis (no ratios).
    #[arg(long)]
    no_baselines: bool,
    /// Write the JSON results here (default: `store-<unix seconds>.json` and
    /// `store-latest.json` in bench-results/, as `bench io`).
    #[arg(long)]
    json: Option<PathBuf>,
}

pub(super) fn store(a: StoreArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreBenchOptions::new(bin, a.quick);
    o.sizes = a
        .sizes
        .iter()
        .map(|s| {
            parse_size(s)
                .map(|v| v as usize)
                .map_err(anyhow::Error::msg)
        })
        .collect::<Result<_>>()?;
    if let Some(k) = a.keys {
        o.keys = k;
    }
    o.batch = a.batch;
    o.depth = a.queue_depth;
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    o.baselines = !a.no_baselines;
    let report = run_store_bench(&o)?;
    out!("{}", format_store_table(&report))?;
    let path = match &a.json {
        Some(p) => {
            write_store_json_to(&report, p)?;
            p.clone()
        }
        None => write_store_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", path.display())?;
    match report.all_targets_met() {
        Some(true) => outln!("all targets met")?,
        Some(false) => outln!("some targets NOT met (see the target column)")?,
        None => {}
    }
    Ok(())
}

pub(super) fn store_large(a: StoreLargeArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreLargeOptions::new(bin, a.quick);
    if !a.sizes.is_empty() {
        o.sizes = a
            .sizes
            .iter()
            .map(|s| parse_size(s).map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?;
    }
    if let Some(n) = a.objects {
        o.objects = n;
    }
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    if let Some(n) = a.min_gets {
        o.min_gets = n as u64;
    }
    o.op_timeout = Duration::from_millis(a.op_timeout_ms);
    if let Some(b) = a.batch {
        o.client_batch = b;
    }
    if let Some(q) = a.queue_depth {
        o.client_depth = q;
    }
    o.baselines = !a.no_baselines;
    let report = run_store_large_bench(&o)?;
    out!("{}", format_store_large_table(&report))?;
    let (json, png) = match &a.json {
        Some(p) => {
            write_store_large_json_to(&report, p)?;
            (p.clone(), p.with_extension("png"))
        }
        None => {
            let dir = Path::new(DEFAULT_RESULTS_DIR);
            let json = write_store_large_json(&report, dir)?;
            (json.clone(), json.with_extension("png"))
        }
    };
    outln!("results: {}", json.display())?;
    if let Err(e) = write_store_large_chart(&report, &png) {
        eprintln!("chart not written: {e}");
        return Ok(());
    }
    outln!("chart:   {}", png.display())?;
    if a.json.is_none() {
        let latest = png.with_file_name("store-large-latest.png");
        std::fs::copy(&png, &latest)
            .with_context(|| format!("copying the chart to {}", latest.display()))?;
    }
    let dir = a.chart.parent().filter(|d| !d.as_os_str().is_empty());
    if dir.is_some_and(|d| !d.is_dir()) {
        eprintln!(
            "chart not copied to {}: no such directory",
            a.chart.display()
        );
    } else {
        std::fs::copy(&png, &a.chart)
            .with_context(|| format!("copying the chart to {}", a.chart.display()))?;
        outln!("chart:   {}", a.chart.display())?;
    }
    Ok(())
}

pub(super) fn store_hot(a: StoreHotArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreHotOptions::new(bin, a.quick);
    o.servers = a.servers;
    if let Some(k) = a.keys {
        o.keys = k;
    }
    o.theta = a.zipf;
    o.value_size = usize::try_from(a.value_size).unwrap_or(usize::MAX);
    o.batch = a.batch;
    o.depth = a.queue_depth;
    o.threads = a.threads;
    if let Some(d) = seconds(a.seconds)? {
        o.duration = d;
    }
    if let Some(w) = a.hot_warmup {
        o.hot_warmup = Duration::try_from_secs_f64(w)
            .ok()
            .filter(|d| !d.is_zero())
            .context("--hot-warmup must be a positive number of seconds")?;
    }
    o.hot.max_keys = a.hot_keys;
    let report = run_store_hot_bench(&o)?;
    out!("{}", format_store_hot_table(&report))?;
    let json = match &a.json {
        Some(p) => {
            write_store_hot_json_to(&report, p)?;
            p.clone()
        }
        None => write_store_hot_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", json.display())?;
    let png = json.with_extension("png");
    match write_store_hot_chart(&report, &png) {
        Ok(()) => {
            outln!("chart:   {}", png.display())?;
            let dir = a.chart.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) {
                eprintln!(
                    "chart not copied to {}: no such directory",
                    a.chart.display()
                );
            } else {
                std::fs::copy(&png, &a.chart)
                    .with_context(|| format!("copying the chart to {}", a.chart.display()))?;
                outln!("chart:   {}", a.chart.display())?;
            }
        }
        Err(e) => eprintln!("chart not written: {e}"),
    }
    match report.all_targets_met() {
        Some(true) => outln!("all targets met")?,
        Some(false) => outln!("some targets NOT met (see the target column)")?,
        None => {}
    }
    Ok(())
}

pub(super) fn store_evict(a: StoreEvictArgs) -> Result<()> {
    let bin = std::env::current_exe().context("locating the farcache binary")?;
    let mut o = StoreEvictOptions::new(bin, a.quick);
    if let Some(k) = a.keys {
        o.keys = k;
        o.requests = k.saturating_mul(6);
        o.warmup = k.saturating_mul(2);
    }
    if let Some(r) = a.requests {
        o.requests = r;
    }
    if let Some(w) = a.warmup {
        o.warmup = w;
    }
    o.theta = a.zipf;
    o.value_size = usize::try_from(a.value_size).unwrap_or(usize::MAX);
    o.cache_fraction = a.cache_fraction;
    o.batch = a.batch;
    let report = run_store_evict_bench(&o)?;
    out!("{}", format_store_evict_table(&report))?;
    let json = match &a.json {
        Some(p) => {
            write_store_evict_json_to(&report, p)?;
            p.clone()
        }
        None => write_store_evict_json(&report, Path::new(DEFAULT_RESULTS_DIR))?,
    };
    outln!("results: {}", json.display())?;
    Ok(())
}
