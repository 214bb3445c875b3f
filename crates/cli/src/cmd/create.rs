//! `farcache create` and `farcache delete`: a cache by name, from the command line.

use anyhow::{Context, Result, bail};
use farcache_client::{Client, CreateOptions};
use farcache_proto::slo::{Percentile, Slo};

use super::Credentials;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    /// The new cache's name.
    name: String,
    /// Bytes (suffixes k, m, g: powers of 1024). With --from-file, defaults to the
    /// file's length.
    #[arg(long, value_parser = crate::size::parse_size)]
    capacity: Option<u64>,
    /// Bytes per region (defaults to the manager's).
    #[arg(long, value_parser = crate::size::parse_size)]
    region_size: Option<u64>,
    /// Copies of every region on distinct servers: with N copies, acknowledged
    /// writes survive N-1 servers dying at once.
    #[arg(long, default_value_t = 1)]
    replicas: u32,
    /// Load the cache from this file (read-only; regions lost with a server are
    /// reloaded from it). The servers read the file: give a path they can see.
    #[arg(long)]
    from_file: Option<std::path::PathBuf>,
    /// Create the cache from an SLO: this many ops/s (suffixes k, m: 10^3, 10^6)...
    #[arg(long, value_parser = parse_rate, requires = "slo_latency_us")]
    slo_throughput: Option<f64>,
    /// ...within this latency (microseconds) at --slo-percentile.
    #[arg(long, requires = "slo_throughput")]
    slo_latency_us: Option<f64>,
    #[arg(long, default_value = "p50")]
    slo_percentile: Percentile,
    /// Bytes per read or write.
    #[arg(long, default_value_t = 8)]
    slo_record_size: u32,
    /// Share of ops that are reads.
    #[arg(long, default_value_t = 1.0)]
    slo_read_fraction: f64,
    #[command(flatten)]
    creds: Credentials,
}

/// `2.5m` → 2.5e6 ops/s.
fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mul) = match t.strip_suffix('m') {
        Some(n) => (n, 1e6),
        None => match t.strip_suffix('k') {
            Some(n) => (n, 1e3),
            None => (t.as_str(), 1.0),
        },
    };
    num.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| v * mul)
        .ok_or_else(|| format!("'{s}' is not a positive rate (e.g. 500k, 2.5m)"))
}

pub fn run(a: Args) -> Result<()> {
    a.creds.require_secret("creating a cache")?;
    let from_file = match &a.from_file {
        Some(p) => {
            Some(std::fs::canonicalize(p).with_context(|| format!("cannot find {}", p.display()))?)
        }
        None => None,
    };
    let capacity = match (a.capacity, &from_file) {
        (Some(c), _) => c,
        (None, Some(p)) => std::fs::metadata(p)
            .with_context(|| format!("cannot read {}", p.display()))?
            .len(),
        (None, None) => bail!("give --capacity (or --from-file)"),
    };
    let client = Client::with_config(a.creds.config(&a.manager)?)?;
    let cache = match (a.slo_throughput, a.slo_latency_us) {
        (Some(throughput), Some(latency_us)) => {
            if a.from_file.is_some() || a.region_size.is_some() {
                bail!("--from-file and --region-size do not combine with an SLO");
            }
            let slo = Slo {
                record_size: a.slo_record_size,
                read_fraction: a.slo_read_fraction,
                throughput,
                latency_us,
                percentile: a.slo_percentile,
                replicas: a.replicas,
                duration_s: None,
            };
            client
                .create_with_slo(&a.name, capacity, &slo)
                .with_context(|| format!("creating cache '{}' for SLO {slo}", a.name))?
        }
        _ => {
            let opts = CreateOptions {
                region_size: a.region_size,
                replicas: a.replicas,
                from_file: from_file.map(|p| p.to_string_lossy().into_owned()),
            };
            client
                .create_with(&a.name, capacity, &opts)
                .with_context(|| format!("creating cache '{}'", a.name))?
        }
    };
    let info = cache.info();
    outln!(
        "created cache '{}' (id {}): {} bytes in {} region(s), {} cop{} of each, epoch {}{}",
        info.name,
        info.id,
        info.capacity,
        info.regions.len(),
        info.replicas,
        if info.replicas == 1 { "y" } else { "ies" },
        info.epoch,
        info.from_file
            .as_deref()
            .map_or_else(String::new, |f| format!(", read-only from {f}"))
    )?;
    if let Some(c) = &info.slo {
        outln!(
            "SLO {}: chose {} (predicted {:.1} us {}, {:.3} Mops/s), ${:.4}/hour; search took {:.0} us",
            c.slo,
            c.transport,
            c.predicted_latency_us,
            c.slo.percentile,
            c.predicted_throughput / 1e6,
            c.dollars_per_hour,
            c.search_us
        )?;
    }
    if let Some(t) = cache.tokens() {
        outln!("read-write token: {}", t.read_write)?;
        outln!("read-only token:  {}", t.read_only)?;
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct DeleteArgs {
    #[arg(long, default_value = "127.0.0.1:7400")]
    manager: String,
    name: String,
    #[command(flatten)]
    creds: Credentials,
}

pub fn delete(a: DeleteArgs) -> Result<()> {
    let client = Client::with_config(a.creds.config(&a.manager)?)?;
    client
        .delete(&a.name)
        .with_context(|| format!("deleting cache '{}'", a.name))?;
    outln!("deleted cache '{}'", a.name)?;
    Ok(())
}
