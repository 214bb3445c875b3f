//! `farcache create` and `farcache delete`: a cache by name, from the command line.

use anyhow::{Context, Result, bail};
use farcache_client::{Client, CreateOptions};

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
    #[command(flatten)]
    creds: Credentials,
}

pub fn run(a: Args) -> Result<()> {
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
    let opts = CreateOptions {
        region_size: a.region_size,
        replicas: a.replicas,
        from_file: from_file.map(|p| p.to_string_lossy().into_owned()),
    };
    let cache = client
        .create_with(&a.name, capacity, &opts)
        .with_context(|| format!("creating cache '{}'", a.name))?;
    let info = cache.info();
    println!(
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
    );
    if let Some(t) = cache.tokens() {
        println!("read-write token: {}", t.read_write);
        println!("read-only token:  {}", t.read_only);
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
    println!("deleted cache '{}'", a.name);
    Ok(())
}
